#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_removal_state
short_description: Per-node removal state, so an interrupted removal reports its progress and resumes
version_added: "0.1.0"
description:
  - Keeps C(<root>/<node>/<change_id>.json) on the control host, with a self-contained HTML page
    beside it (C(<change_id>.html), with node, change, approver, phases done and pending) written with
    it from the same document; a missing or stale page is written again and reported as a change.
    V(start) snapshots the
    node's onboarding manifest into it and returns the removal plan computed from that
    snapshot, so reruns work from the same list even after the manifest moved.
  - V(done) marks one phase finished; V(report) returns which phases are done and pending;
    V(finish) moves the control-host manifest and its page next to the state (a later onboarding
    starts a fresh one).
  - A removal of the same node under another change that has not finished stops V(start),
    naming that change and its progress.
  - V(start) verifies the signed change record itself (the same check as
    M(hybridgpu.fleet.change_approval), action C(remove)) against the boundary signed by the
    pinned boundary signers, and keeps the verified approval in the state; no state, and so no
    phase, exists without it. The change id is taken from the verified record.
  - V(start) also checks that the node is the host the task runs for and an approved target,
    and that the manifest it snapshots (or, when the removal resumes, the snapshot the state
    holds) is the one whose SHA-256 the record names in C(manifests) for the node
    (C(bin/hgpu-sign-change manifest-digest)); the plan it returns is computed from that
    snapshot. The approval kept in the state is for people reading it, and every step that acts
    verifies the record again itself and trusts nothing in the state but the snapshot, whose
    digest it checks against the record again.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  root:
    description: Folder of the removal states, for example C(records/removals).
    type: path
    required: true
  node:
    description: Node being removed.
    type: str
    required: true
  change_id:
    description:
      - Change ID of the approved change record; required except with V(start), which takes it
        from the verified record (when given it must match).
    type: str
  action:
    description: What to do.
    type: str
    choices: [start, done, report, finish]
    default: report
  manifest_path:
    description: The node's onboarding manifest on the control host (needed by V(start) and V(finish)).
    type: path
  step:
    description: Phase finished (with V(done)).
    type: str
    choices: [approval, drain, node_delete, credentials, agents, firewall, placement, restore, verify]
  details:
    description: Facts of the finished phase.
    type: dict
    default: {}
  boundary:
    description: Access boundary (with C(<boundary>.sig)); needed by V(start).
    type: path
  record_path:
    description: The change record file (V(start)); its signature is C(record_path) with C(.sig) appended.
    type: path
  record_text:
    description: The change record as text, byte for byte as it was signed (V(start), AWX).
    type: str
  signature:
    description: The record's armoured signature text (with O(record_text)).
    type: str
  executor:
    description: Person id running the removal (outside AWX; under AWX the launching user).
    type: str
  targets:
    description: Every host of this removal run; each must be in the record's targets.
    type: list
    elements: str
  playbook:
    description: The playbook of this run; must be the record's C(playbook).
    type: str
    default: remove.yml
  boundary_signers:
    description: Set by the action plugin from the pinned boundary signers; a task may not set it.
    type: str
  awx_user:
    description: Set by the action plugin from the AWX job; a task may not set it.
    type: str
  ledger_dir:
    description: Set by the action plugin (the used change ids ledger); a task may not set it.
    type: path
  checkpoint_key:
    description:
      - Set by the action plugin to the pinned audit checkpoint key (C(hgpu_audit_checkpoint_key), else
        C(/etc/hybridgpu/audit_checkpoint_key) when it exists), which signs the head of the change id's claim;
        a task may not set it.
    type: path
  task_host:
    description: Set by the action plugin to the host the task runs for (V(start)); a task may not set it.
    type: str
  fail_unfinished:
    description: With V(report), fail (with the report as message) when the removal is not finished.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Computes and reports without writing the state file.
  diff_mode:
    support: none
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Start or resume the removal
  hybridgpu.fleet.node_removal_state:
    root: "{{ hgpu_records_dir }}/removals"
    node: dh2-l40s-01
    change_id: CHG-77
    action: start
    manifest_path: "{{ hgpu_records_dir }}/manifests/dh2-l40s-01.json"
  delegate_to: localhost
  register: removal

- name: Mark the drain done
  hybridgpu.fleet.node_removal_state:
    root: "{{ hgpu_records_dir }}/removals"
    node: dh2-l40s-01
    change_id: CHG-77
    action: done
    step: drain
  delegate_to: localhost
"""

RETURN = r"""
approval:
  description: The verified approval (as M(hybridgpu.fleet.change_approval) returns it).
  returned: with start
  type: dict
plan:
  description: What each phase removes and restores (from the manifest snapshot).
  returned: with start
  type: dict
report:
  description: Phases done and pending, start and finish times, the state file.
  returned: always
  type: dict
summary:
  description: The report as one line.
  returned: always
  type: str
token_file:
  description: Where the revoked node token is kept (0600) for the refusal check.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import manifest
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import removal
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.record_options import record_options, pinned_options


ARGUMENT_SPEC = dict(
    root=dict(type="path", required=True),
    node=dict(type="str", required=True),
    change_id=dict(type="str"),
    action=dict(type="str", default="report", choices=["start", "done", "report", "finish"]),
    manifest_path=dict(type="path"),
    step=dict(type="str", choices=list(removal.STEPS)),
    details=dict(type="dict", default={}),
    playbook=dict(type="str", default="remove.yml"),
    fail_unfinished=dict(type="bool", default=False),
)
ARGUMENT_SPEC.update(record_options())
ARGUMENT_SPEC.update(pinned_options())


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("action", "start", ("manifest_path", "boundary", "targets")),
                     ("action", "start", ("record_path", "record_text"), True),
                     ("action", "done", ("step", "change_id")), ("action", "report", ("change_id",)),
                     ("action", "finish", ("manifest_path", "change_id"))],
        mutually_exclusive=[("record_path", "record_text")],
        supports_check_mode=True,
    )
    p = module.params
    changed = False
    result = {}
    if p["action"] == "start":
        gate = dict(p, action="remove", ledger_dir=None if module.check_mode else p["ledger_dir"])
        try:
            verified = approval.gate(gate)
        except approval.ApprovalError as exc:
            module.fail_json(msg="%s. Nothing was changed." % exc, problems=exc.problems, change_id=exc.change_id)
        if p["change_id"] and p["change_id"] != verified["change_id"]:
            module.fail_json(msg="change_id %s is not the verified record's %s; nothing was changed"
                             % (p["change_id"], verified["change_id"]))
        p["change_id"] = verified["change_id"]
        result["approval"] = verified
    try:
        st = removal.RemovalState(p["root"], p["node"], p["change_id"])
        if p["action"] == "start":
            others = st.others_unfinished()
            if others:
                module.fail_json(msg="%s: a removal under %s is unfinished (done: %s); finish it with "
                                 "that change record first" % (p["node"], others[0]["change_id"],
                                                               ", ".join(others[0]["done"]) or "none"))
            removal.check_target(verified, p["node"], p["task_host"] or p["node"], p["targets"])
            current = manifest.load(p["manifest_path"])
            if st.load() is not None:
                removal.check_manifest(verified, p["node"], st.doc.get("manifest") or {}, st.path)
            elif current is not None:
                removal.check_manifest(verified, p["node"], current, p["manifest_path"])
            changed = st.start(current, verified, module.check_mode)
            if st.doc is None:  # check mode on a new removal
                st.doc = {"manifest": current, "steps": {}, "change_id": p["change_id"]}
            result["plan"] = removal.validate(removal.plan(st.doc["manifest"]))
        elif p["action"] == "done":
            changed = st.mark(p["step"], p["details"], module.check_mode)
        elif p["action"] == "finish":
            doc = st.load()
            if doc is None or not doc.get("finished_at"):
                module.fail_json(msg="%s: removal %s is not verified yet; the manifest stays at %s"
                                 % (p["node"], p["change_id"], p["manifest_path"]))
            current = manifest.load(p["manifest_path"])
            snap = doc["manifest"]
            # only the manifest this removal worked from; a later onboarding's stays
            if current is not None and (current.get("pre_onboarding") or {}).get("recorded_at") == \
                    (snap.get("pre_onboarding") or {}).get("recorded_at"):
                changed = True
                if not module.check_mode:
                    manifest.move(p["manifest_path"], os.path.join(st.folder, p["change_id"] + ".manifest.json"))
        report = st.report()
    except (removal.RemovalError, manifest.ManifestError, OSError) as err:
        module.fail_json(msg="removal state for %s (change %s): %s" % (p["node"], p["change_id"], err))
    result.update(report=report, summary=removal.summary(report), token_file=st.token_file)
    if p["action"] == "report" and p["fail_unfinished"] and not report["finished"]:
        module.fail_json(msg="removal not finished; " + result["summary"], **result)
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()
