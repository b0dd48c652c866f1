# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The page beside a ledger entry of the approvals ledger (``<records>/approvals/<change_id>.html``):
which change, who approved and who ran it, on which targets, when it was first used and where it
was carried out. The ledger entry stays the record the approval checks read (approval.py); the
page is written after each write of the entry and again when it is missing or stale."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import files, record_page


def render(entry, json_name):
    done = entry.get("done") or {}
    summary = [("What", "approvals ledger: the first use of a change id"), ("Change id", entry.get("change_id")),
               ("Approved by", entry.get("approver")), ("Executed by", entry.get("executor")),
               ("Action", entry.get("action")), ("Playbook", entry.get("playbook")),
               ("Targets", entry.get("targets") or "none"), ("Member", entry.get("member")),
               ("First used at", entry.get("first_used_at")),
               ("Carried out on", ["%s at %s" % (t, (done[t] or {}).get("at")) for t in sorted(done)] or "none yet")]
    return record_page.render("Change %s" % entry.get("change_id"), summary, entry, json_name)


def refresh(path):
    """Write the page of the ledger entry at ``path`` when it is missing or stale; returns
    whether it did. The entry itself is never touched, and a page that cannot be written is
    left for the next write of the entry: the approval checks read the entry only."""
    if record_page.page_current(path, render):
        return False
    try:
        entry = _load(path)
        files.write(record_page.html_path(path), render(entry, os.path.basename(path)), mode=0o600)
    except (OSError, ValueError):
        return False
    return True


def _load(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)
