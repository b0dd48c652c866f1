# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The work of hybridgpu.fleet.node_manifest (read, record, adopt), run by its action plugin
on the control host or by the module itself (controller_task.py)."""

from __future__ import annotations

import json

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import manifest
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.controller_task import TaskFailure

ARGUMENT_SPEC = dict(
    path=dict(type="path", required=True),
    node=dict(type="str", required=True),
    section=dict(type="str"),
    artefacts=dict(type="list", elements="dict", default=[]),
    facts=dict(type="dict", default={}),
    replace=dict(type="bool", default=False),
    pre_onboarding=dict(type="dict"),
    created_only=dict(type="bool", default=False),
    read=dict(type="bool", default=False),
    adopt=dict(type="raw"),
)
SPEC_OPTIONS = dict(mutually_exclusive=[("read", "section"), ("read", "pre_onboarding"), ("adopt", "read"),
                                        ("adopt", "section"), ("adopt", "pre_onboarding")])


def adopted(doc, node):
    """The node's own copy as the manifest: its node, its standalone state and its sections checked."""
    if isinstance(doc, (str, bytes)):
        try:
            doc = json.loads(doc)
        except ValueError as exc:
            raise manifest.ManifestError("the node's copy (adopt) is not JSON: %s" % exc)
    if not isinstance(doc, dict):
        raise manifest.ManifestError("the node's copy (adopt) is a %s, not a JSON object" % type(doc).__name__)
    if not doc.get("pre_onboarding"):
        raise manifest.ManifestError("the node's copy (adopt) has no pre_onboarding block")
    out = manifest.merge({k: v for k, v in doc.items() if k != "sections"}, node)
    for name, sec in sorted((doc.get("sections") or {}).items()):
        if not isinstance(sec, dict):
            raise manifest.ManifestError("the node's copy (adopt): section %r is not a mapping" % (name,))
        out = manifest.merge(out, node, name, sec.get("artefacts") or [], sec.get("facts") or {})
    return out


def execute(p, check_mode=False, diff=False):
    """Read the manifest, or record into it; returns the task's result, raises TaskFailure."""
    had = []
    try:
        before = manifest.load(p["path"])
        if p["read"]:
            manifest.merge(before, p["node"])  # refuses a manifest of another node
            if p["created_only"]:
                manifest.baseline(before, p["path"])
            return dict(changed=False, manifest=before, text=manifest.dumps(before) if before else "",
                        baseline_recorded=bool(before and before.get("pre_onboarding")), had=[])
        if p["adopt"] is not None:
            # the control host's standalone state wins; the node's copy only fills a gap
            has_baseline = bool(before and before.get("pre_onboarding"))
            after = manifest.merge(before, p["node"]) if has_baseline else adopted(p["adopt"], p["node"])
        else:
            arts = p["artefacts"]
            if p["created_only"]:
                arts, had = manifest.created(manifest.baseline(before, p["path"]), arts)
            after = manifest.merge(before, p["node"], p["section"], arts, p["facts"],
                                   p["pre_onboarding"], p["replace"])
    except manifest.ManifestError as err:
        where = "" if p["path"] in str(err) else " " + p["path"]
        raise TaskFailure("Manifest%s for node %s: %s" % (where, p["node"], err))
    text = manifest.dumps(after)
    # the page beside the JSON counts too: a missing or stale page is written again
    changed = before is None or manifest.dumps(before) != text or not manifest.page_current(p["path"])
    if changed and not check_mode:
        try:
            manifest.write(p["path"], after)
        except OSError as err:
            raise TaskFailure("Cannot write manifest %s: %s" % (p["path"], err))
    result = dict(changed=changed, manifest=after, text=text,
                  baseline_recorded=bool(after.get("pre_onboarding")), had=had)
    if changed and diff:
        result["diff"] = dict(before=manifest.dumps(before) if before else "", after=text,
                              before_header=p["path"], after_header=p["path"])
    return result
