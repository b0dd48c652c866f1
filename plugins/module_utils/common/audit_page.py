# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit trail's page: ``audit.html`` beside ``audit.jsonl``, written again after each append.

The log stays the record (append-only, hash-chained, anchored: audit.py); the page is a view
of it, rendered under the append's lock so pages land in the order of the appends. It shows
the newest ``SHOWN`` entries, newest first, and per change id who approved it, who ran it and
on which targets, so a page stays small however long the log grows. It checks nothing: the
chain and its anchors are checked by ``bin/hgpu-audit-verify`` (or audit_log with
``state: verified``), which the page says. A page that cannot be written is a warning: the
entry is already appended and anchored.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import json
import os

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import files, record_page

SHOWN = 500


def newest(handle, count=SHOWN):
    """(entries, total lines, lines that are not JSON) of an open binary log: the newest
    ``count`` entries, oldest first."""
    handle.seek(0)
    tail = collections.deque(maxlen=count)
    total = 0
    for raw in handle:
        if raw.strip():
            total += 1
            tail.append(raw)
    entries, unreadable = [], 0
    for raw in tail:
        try:
            entry = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            unreadable += 1
            continue
        if isinstance(entry, dict):
            entries.append(entry)
        else:
            unreadable += 1
    return entries, total, unreadable


def _changes(entries):
    """One row per change id: its approvers, executors, targets, actions and results, and when."""
    rows = collections.OrderedDict()
    for entry in entries:
        row = rows.setdefault(entry.get("change_id"), {
            "change id": entry.get("change_id"), "approved by": [], "executed by": [], "targets": [],
            "actions": [], "results": [], "first": entry.get("time"), "last": entry.get("time")})
        for key, field in (("approved by", "approver"), ("executed by", "executor"), ("targets", "target"),
                           ("actions", "action"), ("results", "result")):
            if entry.get(field) not in row[key]:
                row[key].append(entry.get(field))
        row["last"] = entry.get("time")
    return list(rows.values())


def render(log_name, entries, total, unreadable):
    """The page for the newest ``entries`` of a log of ``total`` lines."""
    head = entries[-1] if entries else {}
    failed = [e for e in entries if e.get("result") in ("failed", "refused")]
    problems = ["seq %s %s %s on %s" % (e.get("seq"), e.get("action"), e.get("result"), e.get("target")) for e in failed]
    summary = [("What", "audit trail of administrative actions (append-only, hash-chained)"),
               ("Entries", total), ("Shown", "the newest %d, newest first" % len(entries)),
               ("Head", "seq %s, hash %s" % (head.get("seq"), head.get("hash")) if head else "empty log"),
               ("Last entry at", head.get("time")),
               ("Failed or refused (shown)", problems or "none"),
               ("Integrity", "this page is a view and checks nothing; bin/hgpu-audit-verify %s checks the chain "
                             "and its anchors" % log_name)]
    if unreadable:
        summary.append(("Lines that are not entries (shown range)", unreadable))
    columns = ("seq", "time", "change_id", "approver", "executor", "target", "action", "result", "details", "hash")
    rows = [dict(e, result=record_page.Raw('<span class="%s">%s</span>' % (
        "fail" if e.get("result") in ("failed", "refused") else "pass", record_page.html_text(e.get("result")))))
        for e in reversed(entries)]
    return record_page.render("Audit trail", summary, {}, log_name, sections=[
        ("Changes (shown entries)", record_page.table(_changes(entries))),
        ("Entries", record_page.table(rows, columns))])


def refresh(path, handle):
    """Write the page of the log ``path`` (open as ``handle``, under its lock); returns warnings."""
    try:
        entries, total, unreadable = newest(handle)
        files.write(record_page.html_path(path), render(os.path.basename(path), entries, total, unreadable),
                    mode=0o640)
    except (OSError, IOError, ValueError) as exc:
        return ["the audit page %s was not written: %s" % (record_page.html_path(path), exc)]
    return []
