# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-node validation records and the wave record (JSON + self-contained HTML).

Layout under the records folder of a wave (``<records_dir>/<wave>/``, next to preflight's
files): ``validate-<node>.json`` per node, ``wave.json`` and ``wave.html``. Files are written
atomically (temporary file, fsync, rename: files.py), and not rewritten when
nothing but the ``run`` block changed. The HTML reuses records.py's style and escaping.
"""
from __future__ import annotations

import json
import os

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import files
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import record_page, records
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.records import PAGE_CSS, css_class, html_text
from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate.validation import record_filename

SCHEMA_VERSION = 1
WAVE_JSON = "wave.json"
WAVE_HTML = "wave.html"


def _without_run(data):
    data = dict(data)
    data.pop("run", None)
    return records.canonical(data)


def _unchanged(path, data):
    try:
        with open(path, encoding="utf-8") as handle:
            return _without_run(json.load(handle)) == _without_run(data)
    except (IOError, OSError, ValueError):
        return False


def atomic_write(path, text):
    """Create the folder if needed, then write atomically (files.write), mode 0644."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)  # every host of a batch writes its record at once
    files.write(path, text, mode=0o644)


def _dump(data):
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def render_node_html(record, json_name):
    """The node's page: its verdict and the reasons first, then every step."""
    reasons = ["%s: %s" % (s["step"], r) for s in record.get("steps", []) for r in s.get("reasons", [])]
    summary = [("What", "validation of one node"), ("Node", record["node"]), ("Side", record.get("side")),
               ("Node group", record.get("node_group")), ("Verdict", record_page.verdict(record["passed"])),
               ("Failed steps", record.get("failed_steps")), ("Reasons", record_page.lines(reasons)),
               ("Written at", (record.get("run") or {}).get("written_at"))]
    steps = [{"step": s["step"], "verdict": record_page.verdict(s.get("passed")),
              "reasons": record_page.lines(s.get("reasons")),
              "evidence": dict((k, v) for k, v in s.items() if k not in ("step", "passed", "reasons"))}
             for s in record.get("steps", [])]
    return record_page.render("Validation of %s" % record["node"], summary, record,
                              json_name, sections=[("Steps", record_page.table(steps))],
                              skip=("steps",))


def write_node_record(folder, record, check_mode=False):
    """validate-<node>.json and its page validate-<node>.html; unchanged when only ``run`` differs."""
    path = os.path.join(folder, record_filename(record["node"]))
    files_ = [path, record_page.html_path(path)]
    if _unchanged(path, record) and record_page.page_current(path, render_node_html):
        return {"changed": False, "path": path, "files": files_}
    if not check_mode:
        record_page.write_pair(path, _dump(record), render_node_html(record_page.normal(record), os.path.basename(path)))
    return {"changed": True, "path": path, "files": files_}


def build_wave_record(wave, group, node_records, stages=None, run=None):
    """node_records: the per-node records (as written). stages: {preflight|gate|onboard|validate:
    {status, detail}}. The wave passes when every stage passed and every node validated."""
    nodes = []
    for rec in sorted(node_records, key=lambda r: r["node"]):
        nodes.append({"node": rec["node"], "side": rec.get("side"), "node_group": rec.get("node_group"),
                      "passed": rec["passed"], "failed_steps": rec.get("failed_steps", []),
                      "steps": dict((s["step"], s["passed"]) for s in rec.get("steps", [])),
                      "record": record_filename(rec["node"])})
    stages = stages or {}
    failed_stages = sorted(k for k, val in stages.items() if val.get("status") != "passed")
    passed = bool(nodes) and all(n["passed"] for n in nodes) and not failed_stages
    return {"schema_version": SCHEMA_VERSION, "kind": "wave", "wave": wave, "group": group,
            "passed": passed, "failed_stages": failed_stages, "stages": stages, "nodes": nodes,
            "run": run or {}}


def render_wave_html(record, node_records=None):
    """Self-contained page: inline CSS, no scripts; links to the per-node pages next to it."""
    by_node = dict((r["node"], r) for r in node_records or [])
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           "<title>Wave %s: onboarding and validation</title>" % html_text(record["wave"]),
           "<style>%s</style></head><body>" % PAGE_CSS,
           "<h1>Wave %s: onboarding and validation</h1>" % html_text(record["wave"]),
           "<p>Group %s &middot; verdict <span class=\"%s\">%s</span></p>" % (
               html_text(record.get("group")), "pass" if record["passed"] else "fail",
               "passed" if record["passed"] else "failed"),
           "<p><small>run %s</small></p>" % html_text(", ".join("%s=%s" % (k, record["run"][k]) for k in sorted(record["run"]))),
           "<h2>Stages</h2><table><tr><th>Stage</th><th>Status</th><th>Detail</th></tr>"]
    for name in ("preflight", "gate", "onboard", "validate"):
        stage = record["stages"].get(name)
        if stage is None:
            continue
        out.append("<tr><td>%s</td><td class=\"%s\">%s</td><td>%s</td></tr>" % (
            html_text(name), "pass" if stage.get("status") == "passed" else "fail", html_text(stage.get("status")),
            html_text(stage.get("detail"))))
    out.append("</table><h2>Nodes</h2><table><tr><th>Node</th><th>Side</th><th>Group</th>"
               "<th>Verdict</th><th>Steps</th><th>Reasons</th><th>Record</th></tr>")
    for node in record["nodes"]:
        steps = " ".join('<span class="%s">%s</span>' % ("pass" if ok else "fail", html_text(step))
                         for step, ok in sorted(node["steps"].items()))
        reasons = []
        for step in (by_node.get(node["node"]) or {}).get("steps", []):
            reasons.extend("%s: %s" % (step["step"], r) for r in step.get("reasons", []))
        out.append("<tr><td>%s</td><td>%s</td><td>%s</td><td class=\"%s\">%s</td><td>%s</td>"
                   "<td>%s</td><td><a href=\"%s\">page</a> (<a href=\"%s\">JSON</a>)</td></tr>" % (
                       html_text(node["node"]), html_text(node["side"]), html_text(node["node_group"]),
                       "pass" if node["passed"] else "fail", "passed" if node["passed"] else "failed",
                       steps, "<br>".join(html_text(r) for r in reasons) or "&mdash;",
                       html_text(record_page.html_path(node["record"])), html_text(node["record"])))
    if not record["nodes"]:
        out.append('<tr><td colspan="7" class="fail">no node was validated</td></tr>')
    out.append("</table>")
    for node in record["nodes"]:
        node_record = by_node.get(node["node"])
        if not node_record:
            continue
        out.append("<h3 id=\"%s\">%s</h3><table><tr><th>Step</th><th>Verdict</th><th>Evidence</th></tr>"
                   % (css_class(node["node"]), html_text(node["node"])))
        for step in node_record.get("steps", []):
            keep = dict((k, val) for k, val in step.items()
                        if k not in ("step", "passed", "reasons", "owned", "cloud", "runs", "fired"))
            out.append("<tr><td>%s</td><td class=\"%s\">%s</td><td><small>%s</small></td></tr>" % (
                html_text(step["step"]), "pass" if step["passed"] else "fail",
                "passed" if step["passed"] else "failed",
                html_text(json.dumps(keep, sort_keys=True, default=str))))
        out.append("</table>")
    out.append("</body></html>\n")
    return "\n".join(out)


def write_wave_record(folder, record, node_records=None, check_mode=False):
    json_path = os.path.join(folder, WAVE_JSON)
    html_path = os.path.join(folder, WAVE_HTML)
    if _unchanged(json_path, record) and record_page.page_current(
            json_path, lambda data, _name: render_wave_html(data, node_records)):
        return {"changed": False, "path": folder, "files": [json_path, html_path]}
    if not check_mode:
        atomic_write(html_path, render_wave_html(record_page.normal(record), node_records))
        atomic_write(json_path, _dump(record))
    return {"changed": True, "path": folder, "files": [json_path, html_path]}


def load_node_records(folder, nodes):
    out = []
    for node in nodes:
        path = os.path.join(folder, record_filename(node))
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                out.append(json.load(handle))
    return out


def render_baseline_html(baseline, json_name):
    """A node group's NCCL baseline: the range later validation runs must reach, and what it was measured from."""
    summary = [("What", "NCCL all-reduce baseline of a node group, measured before onboarding"),
               ("Node group", baseline.get("node_group")), ("Metric", baseline.get("metric")),
               ("Range later runs must reach", "%s to %s" % (baseline.get("low"), baseline.get("high"))),
               ("Measured", baseline.get("measured")), ("Margin", baseline.get("margin"))]
    return record_page.render("NCCL baseline of %s" % baseline.get("node_group"), summary, baseline, json_name)


def write_baseline(folder, group, verdict, check_mode=False):
    """<folder>/<group>.json (the baseline verdict with its node group) and its page; unchanged
    when both already hold it."""
    baseline = dict(verdict, node_group=group)
    path = os.path.join(folder, "%s.json" % group)
    files_ = [path, record_page.html_path(path)]
    try:
        with open(path, encoding="utf-8") as handle:
            same = records.canonical(json.load(handle)) == records.canonical(baseline)
    except (IOError, OSError, ValueError):
        same = False
    if same and record_page.page_current(path, render_baseline_html):
        return {"changed": False, "path": path, "files": files_}
    if not check_mode:
        record_page.write_pair(path, _dump(baseline), render_baseline_html(record_page.normal(baseline),
                                                                           os.path.basename(path)))
    return {"changed": True, "path": path, "files": files_}
