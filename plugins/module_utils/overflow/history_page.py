# -*- coding: utf-8 -*-
"""The pool-sizing record as a self-contained HTML page (inline CSS, no scripts, all text escaped),
and the record files: <name>.json beside <name>.html, each replaced whole."""
from __future__ import annotations

import json
import os
import time

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import files
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.records import PAGE_CSS, html_text

from .timemodel import human


def _duration(seconds):
    return "&mdash;" if seconds is None else html_text(human(seconds))


def _when(epoch):
    return "&mdash;" if epoch is None else html_text(time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(epoch)))


def _table(head, rows):
    out = ["<table><tr>%s</tr>" % "".join("<th>%s</th>" % html_text(h) for h in head)]
    for row in rows:
        out.append("<tr>%s</tr>" % "".join("<td>%s</td>" % cell for cell in row))
    out.append("</table>")
    return out


def _money(value):
    return "&mdash;" if value is None else "%.2f" % value


def render(record):
    rep = record["report"]
    run = record["run"]
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           "<title>Overflow history: warm pool and queue wait</title>",
           "<style>%s</style></head><body>" % PAGE_CSS,
           "<h1>Overflow history: warm pool and queue wait</h1>",
           "<p>Source %s &middot; %d jobs analysed (%d completed) &middot; %s to %s (%d days) &middot; "
           "overflow classes: <b>%s</b></p>"
           % (html_text(run.get("source")), rep["jobs"], rep["jobs_completed"], _when(rep["span"]["first_submit"]),
              _when(rep["span"]["last_end"]), rep["span"]["days"], html_text(rep["overflow_classes"] or "none")),
           "<p><small>skipped: %s &middot; written %s</small></p>"
           % (html_text(", ".join("%s %d" % (k, v) for k, v in sorted(record["jobs_skipped"].items()))),
              html_text(run.get("written_at")))]
    wait = rep["wait"]
    out.append("<h2>Expected queue wait</h2>")
    out.extend(_table(["", "p50", "p95", "mean", "max"], [
        [html_text(label), _duration(w["p50_s"]), _duration(w["p95_s"]), _duration(w["mean_s"]), _duration(w["max_s"])]
        for label, w in (("without overflow", wait["without_overflow"]), ("with overflow", wait["with_overflow"]))]))
    out.append("<p>%d jobs would have moved.</p>" % wait["jobs_moved"])
    out.append("<h2>Recommended warm pool per hour of day</h2>")
    out.extend(_table(["hour", "GPUs", "nodes", "waiting GPUs (percentile)", "busiest window", "windows"], [
        ["%02d:00" % h["hour"], "<b>%d</b>" % h["gpus"], "%d" % h["nodes"], "%.2f" % h["percentile_waiting_gpus"],
         "%.2f" % h["peak_window_gpus"], "%d" % h["windows"]] for h in rep["pool_by_hour"]]))
    out.append("<h2>Cost per completed job by billing mode</h2>")
    if rep["cost"]:
        keys = ("gpu_running", "gpu_warm_pool", "storage", "network", "prepaid_commitment", "total")
        out.extend(_table(["billing"] + list(keys) + ["completed jobs", "per completed job"], [
            [html_text(c["billing"])] + [_money(c[k]) for k in keys]
            + ["%d" % c["jobs_completed_returned"], "<b>%s</b>" % _money(c["cost_per_completed_job"])]
            for c in rep["cost"]]))
    else:
        out.append("<p>No prices given (cost.prices in the job classes file, or prices): no cost.</p>")
    out.append("<h2>Job classes</h2>")
    out.extend(_table(["class", "jobs", "wait p50", "wait p95", "would move", "median gain", "overflow", "why"], [
        [html_text(name), "%d" % c["jobs"], _duration(c["wait"]["p50_s"]), _duration(c["wait"]["p95_s"]),
         "%.0f%%" % (100 * c["share_moved"]), _duration(c["median_gain_s"]),
         '<span class="%s">%s</span>' % ("pass" if c["recommend_overflow"] else "warn",
                                         "yes" if c["recommend_overflow"] else "no"), html_text(c["why"])]
        for name, c in sorted(rep["classes"].items())]))
    out.append("<h2>Rules</h2><ul>%s</ul>" % "".join(
        "<li><b>%s</b>: %s</li>" % (html_text(k), html_text(v)) for k, v in sorted(rep["rules"].items())))
    out.append("</body></html>\n")
    return "\n".join(out)


def json_text(record):
    return json.dumps(record, sort_keys=True, indent=2) + "\n"


def _comparable(record):
    return dict(record, run=dict(record.get("run") or {}, written_at=None))


def html_path(json_path):
    return json_path[:-len(".json")] + ".html"


def plan(json_path, record):
    """(changed, before text, after text): unchanged when the record on disk differs only in written_at."""
    try:
        with open(json_path, encoding="utf-8") as handle:
            before = handle.read()
        old = json.loads(before)
    except (OSError, ValueError):
        before, old = "", None
    same = old is not None and _comparable(old) == _comparable(json.loads(json_text(record)))
    return not (same and os.path.exists(html_path(json_path))), before, json_text(record)


def write(json_path, record):
    folder = os.path.dirname(os.path.abspath(json_path))
    os.makedirs(folder, exist_ok=True)
    files.write(html_path(json_path), render(record))
    files.write(json_path, json_text(record))
