# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight records: one folder per wave with preflight.json and a self-contained index.html.

The JSON has three blocks: ``verdicts`` (only what decides the review, no timestamps or
timings, so a rerun with nothing changed gives identical verdicts and digest),
``details`` (full matrix, probe timing and evidence) and ``run`` (when and where). The
folder is written into a temporary sibling directory and renamed into place, so a reader
never sees a half-written folder and a failed write leaves the old records intact.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import html
import json
import os
import re

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.files import write_folder

SCHEMA_VERSION = 1
JSON_NAME = "preflight.json"
HTML_NAME = "index.html"
# The proposed wave as an Ansible YAML inventory: the group <wave> with each proposed node.
INVENTORY_NAME = "wave-inventory.yml"


class RecordError(ValueError):
    pass


def canonical(data):
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def build_record(wave, matrix, probes=None, direction=None, boundary_status=None,
                 cidr_overlaps=None, run=None):
    """Assemble the record dict from the preflight parts; raises RecordError on bad input."""
    if not isinstance(wave, str) or not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", wave):
        raise RecordError("wave: %r must be a simple name (letters, digits, . _ -)" % (wave,))
    if not isinstance(matrix, dict) or "rows" not in matrix or "wave" not in matrix:
        raise RecordError("matrix: expected the compat_matrix result (with rows and wave)")
    probes = probes or []
    for i, probe in enumerate(probes):
        if not isinstance(probe, dict) or "id" not in probe or "verdict" not in probe:
            raise RecordError("probes[%d]: expected an evaluated probe with id and verdict" % i)
    verdicts = {
        "matrix": {
            "rows": [r["id"] for r in matrix["rows"]],
            "disagreements": list(matrix.get("disagreements", [])),
            "violations": [{k: v[k] for k in ("rule", "severity", "rows", "nodes", "message")}
                           for v in matrix.get("violations", [])],
        },
        "holds": matrix.get("holds", []),
        "wave": {"nodes": matrix["wave"]["nodes"], "uncovered_rows": matrix["wave"]["uncovered_rows"]},
        "boundary": {"status": (boundary_status or {}).get("status", "missing"),
                     "reasons": (boundary_status or {}).get("reasons", ["no boundary given"])},
        "paths": {p["id"]: p["verdict"] for p in probes},
        "connection_direction": {"verdict": (direction or {}).get("verdict", "unverified"),
                                 "reasons": (direction or {}).get("reasons", [])},
        "cidr_overlaps": [{"a": o["a"], "b": o["b"], "relation": o["relation"]}
                          for o in (cidr_overlaps or [])],
    }
    record = {
        "schema_version": SCHEMA_VERSION,
        "wave": wave,
        "verdicts": verdicts,
        "verdicts_digest": hashlib.sha256(canonical(verdicts).encode("ascii")).hexdigest(),
        "details": {"matrix": matrix, "probes": probes, "boundary": boundary_status or {},
                    "connection_direction": direction or {}, "cidr_overlaps": cidr_overlaps or []},
        "run": dict(run or {}),
    }
    # Fails early (nothing written) if anything is not JSON-able.
    try:
        canonical(record)
    except (TypeError, ValueError) as exc:
        raise RecordError("record is not JSON-serialisable: %s" % exc)
    return record


# Per-probe fields that are measurements of the moment (timings, RTTs, ephemeral source
# ports in the evidence text): a rerun that only measured again is not a change.
MEASURED = ("elapsed_ms", "evidence")


def _comparable(record):
    """The record without its run block and without per-probe measurements."""
    out = dict(record)
    out.pop("run", None)
    details = dict(out.get("details") or {})
    details["probes"] = [{k: v for k, v in p.items() if k not in MEASURED} if isinstance(p, dict) else p
                         for p in details.get("probes") or []]
    out["details"] = details
    return out


def _same_content(folder, record):
    try:
        with open(os.path.join(folder, JSON_NAME), encoding="utf-8") as handle:
            old = json.load(handle)
    except (IOError, OSError, ValueError):
        return False
    return canonical(_comparable(old)) == canonical(_comparable(record))


def write_records(base_dir, record, force=False, check_mode=False):
    """Write ``base_dir/<wave>/`` atomically. Returns {'changed', 'path', 'files'}.

    Nothing is rewritten when everything but the ``run`` block and the probes' measurements
    (``MEASURED``) is unchanged (unless ``force``). With check_mode nothing is written at all.
    """
    target = os.path.join(base_dir, record["wave"])
    files = [os.path.join(target, name) for name in (JSON_NAME, HTML_NAME, INVENTORY_NAME)]
    if not force and _same_content(target, record) and os.path.exists(files[2]):
        return {"changed": False, "path": target, "files": files}
    if check_mode:
        return {"changed": True, "path": target, "files": files}
    json_text = json.dumps(record, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    html_text = render_html(record)
    os.makedirs(base_dir, exist_ok=True)  # several hosts may create it at once
    write_folder(target, {JSON_NAME: json_text, HTML_NAME: html_text, INVENTORY_NAME: wave_inventory(record)},
                 mode=0o755)
    return {"changed": True, "path": target, "files": files}


def wave_inventory(record):
    """The proposed wave as an Ansible YAML inventory (group ``<wave>``), for the wave playbook and
    an AWX inventory source. Held nodes and uncovered rows are listed as comments."""
    wave = record["verdicts"]["wave"]
    lines = ["# Wave %s as preflight proposed it (verdicts digest %s): one node per distinct matrix row"
             % (record["wave"], record["verdicts_digest"]),
             "# plus a rehearsal spare. Written by hybridgpu.fleet.preflight_record; do not edit."]
    for hold in record["verdicts"].get("holds") or []:
        lines.append("# held: %s (%s)" % (hold["node"], ", ".join(r["reason"] for r in hold["reasons"])))
    for row in wave.get("uncovered_rows") or []:
        lines.append("# uncovered row: %s (%s)" % (row["row"], row["reason"]))
    lines += ["all:", "  children:", "    %s:" % record["wave"]]
    if not wave["nodes"]:
        lines.append("      hosts: {}")
    else:
        lines.append("      hosts:")
        for node in wave["nodes"]:
            lines.append("        %s: {hgpu_wave_purpose: %s, hgpu_matrix_row: %s}"
                         % (json.dumps(node["node"]), json.dumps(node["purpose"]), json.dumps(node["row"])))
    return "\n".join(lines) + "\n"


# Style of every record page (preflight, wave, overflow drill): inline, no external links.
PAGE_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}
th,td{border:1px solid #bbb;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#eee}
td.diff{background:#ffe08a;font-weight:bold}
th.diff{background:#f5c542}
.pass{color:#17692c;font-weight:bold}.fail,.unsigned{color:#b00020;font-weight:bold}
.warn,.unverified,.not_run,.not_derivable{color:#8a5a00;font-weight:bold}
.signed{color:#17692c;font-weight:bold}
small{color:#555}
"""


def html_text(value):
    """A value as escaped HTML text: None as a dash, a list as its items joined by commas."""
    if value is None:
        return "&mdash;"
    if isinstance(value, (list, tuple)):
        return ", ".join(html_text(v) for v in value) or "&mdash;"
    return html.escape(str(value), quote=True)


def css_class(word):
    """A verdict or name as a CSS class name (lower-case letters and underscores only)."""
    return re.sub(r"[^a-z_]", "", str(word).lower())


def render_html(record):
    """A self-contained page: inline CSS, no scripts, no external links, all text escaped."""
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           "<title>Preflight records: wave %s</title>" % html_text(record["wave"]),
           "<style>%s</style></head><body>" % PAGE_CSS,
           "<h1>Preflight records: wave %s</h1>" % html_text(record["wave"]),
           "<p><small>schema %s &middot; verdicts digest <code>%s</code> &middot; run %s</small></p>"
           % (html_text(record["schema_version"]), html_text(record["verdicts_digest"]),
              html_text(", ".join("%s=%s" % (k, record["run"][k]) for k in sorted(record["run"]))))]
    out.extend(_matrix_html(record["details"]["matrix"]))
    out.extend(_wave_html(record["verdicts"]))
    out.extend(_paths_html(record["verdicts"], record["details"]["probes"]))
    out.extend(_boundary_html(record["verdicts"]["boundary"], record["details"]["boundary"]))
    out.append("</body></html>\n")
    return "\n".join(out)


def _matrix_html(matrix):
    """The hardware and software matrix and its version-rule findings."""
    out = ["<h2>Hardware and software matrix</h2>",
           "<p>Highlighted columns disagree across rows; highlighted cells differ from the cloud row.</p>",
           "<table><tr><th>Row</th><th>Side</th><th>Nodes</th>"]
    diff_cols = set(matrix.get("disagreements", []))
    for col in matrix["columns"]:
        out.append('<th class="%s">%s</th>' % ("diff" if col["id"] in diff_cols else "", html_text(col["title"])))
    out.append("</tr>")
    for row in matrix["rows"]:
        out.append("<tr><td>%s</td><td>%s</td><td>%s</td>" % (html_text(row["id"]), html_text(row["side"]),
                                                              html_text(row["nodes"] or row.get("node_count"))))
        for col in matrix["columns"]:
            cls = "diff" if col["id"] in row.get("differs_from_cloud", []) else ""
            out.append('<td class="%s">%s</td>' % (cls, html_text(row["values"].get(col["id"]))))
        out.append("</tr>")
    out.append("</table><h3>Version rules</h3><table><tr><th>Rule</th><th>Severity</th>"
               "<th>Rows</th><th>Nodes</th><th>Finding</th><th>Source</th></tr>")
    for viol in matrix.get("violations", []):
        out.append("<tr><td>%s</td><td class=\"%s\">%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s<br>"
                   "<small>%s</small></td></tr>" % (
                       html_text(viol["rule"]), "fail" if viol["severity"] == "error" else "warn",
                       html_text(viol["severity"]), html_text(viol["rows"]), html_text(viol["nodes"]),
                       html_text(viol["message"]), html_text(viol["citation"]["title"]),
                       html_text(viol["citation"]["url"])))
    if not matrix.get("violations"):
        out.append('<tr><td colspan="6" class="pass">no rule violated</td></tr>')
    out.append("</table>")
    return out


def _wave_html(verdicts):
    """The proposed first wave, its uncovered rows and the nodes held back."""
    out = ["<h2>Proposed first wave</h2><table><tr><th>Node</th><th>Row</th><th>Purpose</th></tr>"]
    for pick in verdicts["wave"]["nodes"]:
        out.append("<tr><td>%s</td><td>%s</td><td>%s</td></tr>"
                   % (html_text(pick["node"]), html_text(pick["row"]), html_text(pick["purpose"])))
    out.append("</table>")
    for unc in verdicts["wave"]["uncovered_rows"]:
        out.append("<p class=\"warn\">Row %s not covered: %s</p>" % (html_text(unc["row"]), html_text(unc["reason"])))
    out.append("<h3>Held for a later wave</h3><table><tr><th>Node</th><th>Row</th><th>Reasons</th></tr>")
    for hold in verdicts["holds"]:
        out.append("<tr><td>%s</td><td>%s</td><td>%s</td></tr>" % (
            html_text(hold["node"]), html_text(hold["row"]),
            "<br>".join("%s: %s" % (html_text(r["reason"]), html_text(r["detail"])) for r in hold["reasons"])))
    if not verdicts["holds"]:
        out.append('<tr><td colspan="3">none</td></tr>')
    out.append("</table>")
    return out


def _paths_html(verdicts, probes):
    """The connection direction, every probe and any overlapping address ranges."""
    direction = verdicts["connection_direction"]
    out = ["<h2>Network paths</h2><p>Connection direction: <span class=\"%s\">%s</span> &mdash; %s</p>"
           % (css_class(direction["verdict"]), html_text(direction["verdict"]),
              html_text("; ".join(direction["reasons"]))),
           "<table><tr><th>Probe</th><th>From</th><th>To</th><th>Proto/port</th><th>Expected</th>"
           "<th>Observed</th><th>Result</th><th>Time (ms)</th><th>Evidence</th></tr>"]
    for probe in probes:
        out.append("<tr><td>%s</td><td>%s</td><td>%s (%s)</td><td>%s/%s</td><td>%s</td><td>%s</td>"
                   "<td class=\"%s\">%s</td><td>%s</td><td>%s</td></tr>" % (
                       html_text(probe["id"]), html_text(probe.get("source")), html_text(probe.get("destination")),
                       html_text(probe.get("address")), html_text(probe.get("protocol")), html_text(probe.get("port")),
                       html_text(probe.get("expected")), html_text(probe.get("observed")), css_class(probe["verdict"]),
                       html_text(probe["verdict"]), html_text(probe.get("elapsed_ms")),
                       html_text(probe.get("evidence") or probe.get("not_derivable"))))
    out.append("</table>")
    if verdicts["cidr_overlaps"]:
        out.append("<h3>Overlapping address ranges</h3><table><tr><th>On-prem / first</th>"
                   "<th>Other</th><th>Relation</th></tr>")
        for pair in verdicts["cidr_overlaps"]:
            out.append("<tr><td>%s %s</td><td>%s %s</td><td class=\"fail\">%s</td></tr>" % (
                html_text(pair["a"]["name"]), html_text(pair["a"]["cidr"]), html_text(pair["b"]["name"]),
                html_text(pair["b"]["cidr"]), html_text(pair["relation"])))
        out.append("</table>")
    return out


def _boundary_html(boundary, details):
    """The access boundary's status and, when there is one, its signature."""
    out = ["<h2>Access boundary</h2><p>Status: <span class=\"%s\">%s</span> %s</p>"
           % (css_class(boundary["status"]), html_text(boundary["status"]), html_text("; ".join(boundary["reasons"])))]
    if details:
        out.append("<p><small>security owner %s &middot; signer %s &middot; signed %s &middot; expires %s "
                   "&middot; verification %s</small></p>" % (
                       html_text(details.get("security_owner")), html_text(details.get("signer")),
                       html_text(details.get("signed_at")), html_text(details.get("expires")),
                       html_text(details.get("verification"))))
    return out
