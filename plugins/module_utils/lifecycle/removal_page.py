# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The removal state's page (``<root>/<node>/<change_id>.html`` beside its JSON): which node,
which change and who approved it, which phases are done and which are pending, then the
phases' details and the manifest the removal works from."""

from __future__ import annotations

import os

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import record_page

# The removal phases in order; "verify" is never skipped on a rerun.
STEPS = ("approval", "drain", "node_delete", "credentials", "agents", "firewall", "placement",
         "restore", "verify")


def render(doc, json_name):
    """The page of one removal state document."""
    steps = doc.get("steps") or {}
    approval = doc.get("approval") or {}
    finished = bool(doc.get("finished_at"))
    summary = [("What", "removal of a node, reversing its onboarding manifest"),
               ("Node", doc.get("node")), ("Change id", doc.get("change_id")),
               ("Approved by", approval.get("approver")), ("Requested by", approval.get("requester")),
               ("Executed by", approval.get("executor")), ("Window", approval.get("window")),
               ("State", record_page.verdict(finished, "finished and verified", "not finished")),
               ("Done", [s for s in STEPS if s in steps] or "none"),
               ("Pending", [s for s in STEPS if s not in steps] or "none"),
               ("Started at", doc.get("started_at")), ("Finished at", doc.get("finished_at"))]
    rows = [{"phase": s, "done at": (steps.get(s) or {}).get("done_at") or "pending",
             "details": (steps.get(s) or {}).get("details") or {}} for s in STEPS]
    return record_page.render("Removal of %s (change %s)" % (doc.get("node"), doc.get("change_id")),
                              summary, doc, json_name, sections=[("Phases", record_page.table(rows))],
                              skip=("steps",))


def write(path, doc, mode=0o640):
    """The page, then the JSON state, each atomically."""
    record_page.write_pair(path, doc, render(record_page.normal(doc), os.path.basename(path)), mode=mode)


def refresh(path, doc, check_mode=False):
    """Write page and state again when the page is missing or stale; returns whether it was (or would be)."""
    if doc is None or record_page.page_current(path, render):
        return False
    if not check_mode:
        write(path, doc)
    return True
