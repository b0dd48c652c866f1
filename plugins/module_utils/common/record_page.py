# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The page a person reads first, beside each JSON record: ``<name>.html`` next to ``<name>.json``.

A page is self-contained (inline CSS, no scripts, no external links) and rendered from the
same data as the JSON: a summary table first (what, which node, the verdict and its reasons,
who approved which change, times), then every field of the record as tables. Every value is
escaped; only ``Raw`` strings built here or by a caller from escaped parts pass unescaped.

``write_pair`` writes the page and then the JSON, each atomically (files.write), so the JSON
that the idempotence checks read lands only after its page. ``page_current`` says whether the
page on disk is the one the JSON on disk renders to, so a missing or stale page counts as a
change and a rerun with the same content changes nothing.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import files
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.records import PAGE_CSS, html_text

# Nested tables deeper than this are shown as JSON text.
MAX_DEPTH = 4


class Raw(str):
    """HTML that is already escaped."""


def html_path(json_path):
    """``x.json`` -> ``x.html``; ``audit.jsonl`` -> ``audit.html``."""
    return os.path.splitext(json_path)[0] + ".html"


def dump(data):
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def normal(data):
    """``data`` as it reads back from its JSON (key order, tuples), so a page rendered before the
    write is the page rendered from the file."""
    return json.loads(dump(data))


def verdict(passed, yes="passed", no="failed"):
    """A pass/fail word as a coloured span; None reads as not run."""
    if passed is None:
        return Raw('<span class="not_run">not run</span>')
    return Raw('<span class="%s">%s</span>' % ("pass" if passed else "fail", yes if passed else no))


def lines(values):
    """Items one per line, each escaped."""
    return Raw("<br>".join(html_text(v) for v in values or []) or "&mdash;")


def cell(value, depth=0):
    """A value as table-cell HTML: scalars escaped, dicts and lists as nested tables."""
    if isinstance(value, Raw):
        return value
    if depth >= MAX_DEPTH and isinstance(value, (dict, list)):
        return Raw("<small>%s</small>" % html_text(json.dumps(value, sort_keys=True, default=str)))
    if isinstance(value, dict):
        return kv_table(value, depth + 1) if value else Raw("&mdash;")
    if isinstance(value, list):
        if value and all(isinstance(v, dict) for v in value):
            return table(value, depth=depth + 1)
        if any(isinstance(v, (dict, list)) for v in value):
            return Raw("<br>".join(cell(v, depth + 1) for v in value))
        return Raw(html_text(value))
    if isinstance(value, bool):
        return Raw(html_text("yes" if value else "no"))
    return Raw(html_text(value))


def kv_table(mapping, depth=0):
    """One row per key (sorted), the value in the second column."""
    out = ["<table>"]
    for key in sorted(mapping, key=str):
        out.append("<tr><th>%s</th><td>%s</td></tr>" % (html_text(key), cell(mapping[key], depth)))
    out.append("</table>")
    return Raw("".join(out))


def table(rows, columns=None, depth=0):
    """A list of dicts as one table; ``columns`` (default: every key, sorted)."""
    if columns is None:
        columns = sorted(set(k for row in rows for k in row), key=str)
    out = ["<table><tr>%s</tr>" % "".join("<th>%s</th>" % html_text(c) for c in columns)]
    for row in rows:
        out.append("<tr>%s</tr>" % "".join("<td>%s</td>" % cell(row.get(c), depth) for c in columns))
    if not rows:
        out.append('<tr><td colspan="%d">none</td></tr>' % max(1, len(columns)))
    out.append("</table>")
    return Raw("".join(out))


def details(data, skip=()):
    """Every field of a record: the plain ones in one table, each nested one under its own heading."""
    plain = dict((k, v) for k, v in data.items() if k not in skip and not isinstance(v, (dict, list)))
    out = ["<h2>Details</h2>", kv_table(plain)]
    for key in sorted(k for k, v in data.items() if k not in skip and isinstance(v, (dict, list))):
        out.append("<h3>%s</h3>%s" % (html_text(key), cell(data[key])))
    return Raw("\n".join(out))


def render(title, summary, data, json_name, sections=(), skip=()):
    """The whole page.

    ``summary``: (label, value) pairs shown first; ``sections``: (heading, html) pairs shown
    next; then every field of ``data`` but ``skip``; ``json_name``: the JSON file beside it."""
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           "<title>%s</title>" % html_text(title), "<style>%s</style></head><body>" % PAGE_CSS,
           "<h1>%s</h1>" % html_text(title), '<table class="summary">']
    for label, value in summary:
        out.append("<tr><th>%s</th><td>%s</td></tr>" % (html_text(label), cell(value)))
    out.append("</table>")
    for heading, body in sections:
        out.append("<h2>%s</h2>%s" % (html_text(heading), cell(body)))
    if data:
        out.append(details(data, skip))
    out.append('<p><small>The same record as JSON: <a href="%s">%s</a></small></p>'
               % (html_text(json_name), html_text(json_name)))
    out.append("</body></html>\n")
    return "\n".join(out)


def write_pair(json_path, data, page, mode=0o644):
    """Write the page (``page`` is its HTML) and then the JSON (``data``: a dict, or its text),
    each atomically."""
    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    files.write(html_path(json_path), page, mode=mode)
    files.write(json_path, data if isinstance(data, str) else dump(data), mode=mode)


def page_current(json_path, render_page):
    """Whether the page beside ``json_path`` is ``render_page(<the JSON there>, <its file name>)``."""
    try:
        with open(json_path, encoding="utf-8") as handle:
            data = json.load(handle)
        with open(html_path(json_path), encoding="utf-8") as handle:
            return handle.read() == render_page(data, os.path.basename(json_path))
    except (IOError, OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
