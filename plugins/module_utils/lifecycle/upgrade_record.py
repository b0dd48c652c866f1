# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver upgrade record (``<records>/upgrades/upgrade-<node>-<change_id>.json``) and its
page beside it: which node, which change and who approved it, whether the node validated
after the upgrade (and why not), the drivers before and after and the time out of service."""

from __future__ import annotations

import json
import os

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import record_page


def _truthy(value):
    """A playbook-templated flag ("True", "false", true) as a bool."""
    return str(value).strip().lower() in ("true", "yes", "1")


def _version(driver):
    if isinstance(driver, dict):
        return driver.get("version") or driver.get("package") or json.dumps(driver, sort_keys=True)
    return driver


def render(record, json_name):
    """The page of one upgrade record."""
    validation = record.get("validation") or {}
    steps = validation.get("steps") or []
    passed = _truthy(validation.get("passed"))
    reasons = ["%s: %s" % (s.get("step"), r) for s in steps if isinstance(s, dict) for r in s.get("reasons") or []]
    summary = [("What", "driver upgrade rehearsal"), ("Node", record.get("node")),
               ("Change id", record.get("change_id")), ("Approved by", record.get("approved_by")),
               ("Requested by", record.get("requested_by")), ("Executed by", record.get("executed_by")),
               ("Window", record.get("window")),
               ("Validation after the upgrade", record_page.verdict(passed)),
               ("Reasons", record_page.lines(reasons)),
               ("Node state after", record.get("node_state_after")),
               ("Driver", "%s -> %s" % (_version(record.get("driver_before")), _version(record.get("driver_after")))),
               ("Left service at", record.get("left_service_at")),
               ("Back in service at", record.get("reentered_service_at")),
               ("Out of service (s)", record.get("out_of_service_s")),
               ("Other nodes affected", record.get("other_nodes_affected"))]
    rows = [{"step": s.get("step"), "verdict": record_page.verdict(s.get("passed")),
             "reasons": record_page.lines(s.get("reasons"))} for s in steps if isinstance(s, dict)]
    return record_page.render("Driver upgrade of %s (change %s)" % (record.get("node"), record.get("change_id")),
                              summary, record, json_name, sections=[("Validation steps", record_page.table(rows))])


def load(path):
    """The record at ``path``, or None when there is none or it is not JSON."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return None


def write(path, record, check_mode=False):
    """Write the page and the record when either differs. Returns {changed, path, html_path, before}."""
    before = load(path)
    changed = (before is None or record_page.dump(before) != record_page.dump(record)
               or not record_page.page_current(path, render))
    if changed and not check_mode:
        record_page.write_pair(path, record, render(record_page.normal(record), os.path.basename(path)))
    return {"changed": changed, "path": path, "html_path": record_page.html_path(path), "before": before}
