# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The safe drills' report (drills.py): JSON for tools and a self-contained HTML page."""
from __future__ import annotations

import json

from ..common.records import PAGE_CSS, html_text
from .drills import table


def report(records, refusals, settings):
    ran = [r for r in records if r.get("ran")]
    return {"kind": "overflow_safe_drill", "settings": settings, "drills": ran, "refused": refusals,
            "table": table(), "pass": all(r["pass"] for r in ran)}


def render(rep):
    """The drill report as a self-contained HTML page (inline CSS, every text escaped)."""
    s = rep.get("settings") or {}
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           "<title>Overflow drill on a real estate</title>", "<style>%s</style></head><body>" % PAGE_CSS,
           "<h1>Overflow drill on a real estate: %s</h1>" % ("pass" if rep["pass"] else "FAIL"),
           "<p>Test namespace %s, test class %s, estate %s.</p>" % (
               html_text(s.get("namespace")), html_text(s.get("job_class")), html_text(s.get("estate")))]
    out.append("<h2>Drills run</h2><table><tr><th>Drill</th><th>Job ID</th><th>Final state</th><th>Result</th>"
               "<th>Checks</th><th>Cleanup</th></tr>")
    for r in rep["drills"]:
        checks = "<br>".join("%s %s" % ("ok" if c["pass"] else "FAILED:", html_text(c["check"])) for c in r["checks"])
        out.append("<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>" % (
            html_text(r["drill"]), html_text(r["job_id"]), html_text(r["final_state"]),
            "pass" if r["pass"] else "FAIL", checks, html_text(json.dumps(r.get("cleanup"), sort_keys=True))))
    out.append("</table><h2>Refused drills</h2><table><tr><th>Drill</th><th>Why</th></tr>")
    for r in rep["refused"]:
        out.append("<tr><td>%s</td><td>%s</td></tr>" % (html_text(r["drill"]), html_text(r["reason"])))
    out.append("</table><h2>Which drills are safe on a real estate</h2><table><tr><th>Drill</th><th>Safe</th>"
               "<th>Why</th></tr>")
    for t in rep["table"]:
        out.append("<tr><td>%s</td><td>%s</td><td>%s</td></tr>" % (
            html_text(t["drill"]), "yes" if t["safe"] else "no", html_text(t["why"])))
    out.append("</table><h2>Evidence</h2>")
    for r in rep["drills"]:
        out.append("<h3>%s</h3><pre>%s</pre>" % (html_text(r["drill"]),
                                                 html_text(json.dumps(r["evidence"], indent=1, sort_keys=True, default=str))))
    out.append("</body></html>")
    return "\n".join(out) + "\n"
