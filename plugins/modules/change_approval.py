#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: change_approval
short_description: Verify a signed change record before a destructive playbook changes anything
version_added: "0.1.0"
description:
  - Reads a change record (YAML with C(change_id), C(action), C(targets), C(window) with
    C(start) and C(end), C(requester), C(reason)) and its C(ssh-keygen -Y sign) signature made
    under the namespace C(hybridgpu.fleet-change).
  - First verifies the access boundary itself, the trust root of every approver key in it. The
    boundary file must carry a detached signature C(<boundary>.sig) made with C(ssh-keygen -Y sign)
    under the namespace C(hybridgpu.fleet-boundary) over its exact bytes by its security owner,
    whose key is pinned in C(hgpu_boundary_signers) (inventory group_vars) or in
    C(/etc/hybridgpu/boundary_signers) (execution environment). The action plugin passes the pinned
    signers; it refuses a run where C(hgpu_boundary_signers) comes from an extra var. The
    boundary's declared status must be signed by the security owner and unexpired.
  - Verifies the record's signature with C(ssh-keygen -Y verify) against an allowed_signers file
    derived from the verified boundary (approvers in C(change_rights) with keys under
    C(people[].ssh_keys)).
  - Checks that the signer may approve the record's action, that the action and the playbook
    match what this run does (one action per playbook), that the targets of this run are a subset
    of the approved hosts, that a revocation names this member, that the window has a timezone, is
    at most O(max_window_hours) long and is open, that the requester is not the approver when the
    boundary asks for four eyes, and (when C(executor) is given) that the executor may perform
    the action.
  - Under AWX the executor is the AWX user who launched the job (C(awx_user_name), which AWX
    injects), mapped to a person by C(people[].id) or C(people[].awx_user); a different
    O(executor) is refused.
  - The change id is recorded in the ledger C(<hgpu_records_dir>/approvals/<change_id>.json); a
    later run with the same change id is refused unless it is the same run again (same
    playbook, action, targets, member and executor), which resumes an interrupted run.
  - Fails with every missing piece named; run it before the first change of a playbook.
  - The record and signature may be files (CLI) or inline text (AWX extra vars). Nothing prompts.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  boundary:
    description:
      - Path of the access boundary YAML (see M(hybridgpu.fleet.access_boundary)); its signature
        is read from the same path with C(.sig) appended.
    type: path
    required: true
  boundary_signers:
    description:
      - Set by the action plugin from the pinned signers; a task may not set it.
    type: str
  playbook:
    description: File name of the playbook this run is (e.g. C(remove.yml)); must be the record's C(playbook).
    type: str
    required: true
  member:
    description: The member a C(revoke_member) run revokes; must be the record's C(member).
    type: str
  ledger_dir:
    description:
      - Set by the action plugin to C(<hgpu_records_dir>/approvals); a task may not set it. The
        change id is recorded there (used once).
    type: path
  checkpoint_key:
    description:
      - Set by the action plugin from the pinned audit checkpoint key (C(hgpu_audit_checkpoint_key), else
        C(/etc/hybridgpu/audit_checkpoint_key) when it exists); a task may not set it. The claim's entry in
        the audit log is signed with it as a checkpoint.
    type: path
  max_window_hours:
    description: The longest window a record may approve.
    type: int
    default: 24
  awx_user:
    description:
      - Set by the action plugin from the AWX job's C(awx_user_name); a task may not set it.
    type: str
  record_path:
    description: Path of the change record file.
    type: path
  record_text:
    description: The change record as text, byte for byte as it was signed (AWX extra vars).
    type: str
  signature_path:
    description: Path of the signature; defaults to C(record_path) with C(.sig) appended.
    type: path
  signature:
    description: The armoured signature text (C(-----BEGIN SSH SIGNATURE-----)).
    type: str
  action:
    description: The action this run performs; must equal the record's action.
    type: str
    required: true
  targets:
    description: Hosts this run changes; each must be in the record's targets.
    type: list
    elements: str
    required: true
  executor:
    description: Person id running the change; checked against the boundary's performers.
    type: str
  now:
    description: Time to judge the window against (ISO 8601); defaults to the current UTC time.
    type: str
attributes:
  check_mode:
    support: full
    details: Reads only; the same checks run in check mode.
  diff_mode:
    support: none
requirements:
  - ssh-keygen (OpenSSH 8.2 or later) on the host the module runs on
notes:
  - The signature covers exact bytes. Inline record text that lost only its final newline is
    accepted; any other change fails the signature.
  - The pinned boundary signers come from C(/etc/hybridgpu/boundary_signers) when that file exists
    (owned by root, not writable by group or others), else from the inventory variable
    C(hgpu_boundary_signers); a value given as an extra var stops the run.
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Stop unless the change is approved
  hybridgpu.fleet.change_approval:
    boundary: "{{ hgpu_boundary_path }}"
    record_path: "{{ hgpu_change_record }}"
    action: driver_upgrade
    playbook: upgrade_rehearsal.yml
    targets: "{{ ansible_play_hosts }}"
    executor: ops-oncall
  delegate_to: localhost
  run_once: true
  register: approval

- name: The same record from AWX extra vars
  hybridgpu.fleet.change_approval:
    boundary: /etc/hybridgpu/boundary.yml
    record_text: "{{ change_record }}"
    signature: "{{ change_signature }}"
    action: remove
    playbook: remove.yml
    targets: [dh1-a100-02]
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
approval:
  description: What was approved and by whom.
  returned: success
  type: dict
  sample:
    approved: true
    change_id: CHG-2025-0042
    action: driver_upgrade
    playbook: upgrade_rehearsal.yml
    approver: sec-owner
    requester: ops-oncall
    executor: ops-oncall
    targets: [dh1-a100-02]
    approved_targets: [dh1-a100-02]
    window: {start: "2025-06-01T08:00:00Z", end: "2025-06-01T12:00:00Z"}
    four_eyes: true
problems:
  description: Every reason the change is not approved (on failure).
  returned: failure
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import schema


def run(params):
    now = None
    if params.get("now"):
        now = schema.parse_timestamp(params["now"])
        if now is None:
            raise approval.ApprovalError(["now: %r is not an ISO 8601 time" % params["now"]])
    return approval.gate(params, now=now)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            boundary=dict(type="path", required=True),
            record_path=dict(type="path"),
            record_text=dict(type="str"),
            signature_path=dict(type="path"),
            signature=dict(type="str"),
            action=dict(type="str", required=True),
            targets=dict(type="list", elements="str", required=True),
            executor=dict(type="str"),
            now=dict(type="str"),
            boundary_signers=dict(type="str"),
            playbook=dict(type="str", required=True),
            member=dict(type="str"),
            ledger_dir=dict(type="path"),
            max_window_hours=dict(type="int", default=24),
            awx_user=dict(type="str"),
            checkpoint_key=dict(type="path", no_log=False),
        ),
        required_one_of=[("record_path", "record_text")],
        mutually_exclusive=[("record_path", "record_text"), ("signature_path", "signature")],
        supports_check_mode=True,
    )
    params = dict(module.params)
    if module.check_mode:
        params["ledger_dir"] = None  # check mode leaves the ledger as it is
    try:
        result = run(params)
    except approval.ApprovalError as exc:
        module.fail_json(msg="%s. Nothing was changed." % exc, problems=exc.problems,
                         change_id=exc.change_id)
    except schema.SchemaError as exc:
        module.fail_json(msg="boundary %s is invalid: %s" % (module.params["boundary"], exc),
                         problems=exc.errors)
    module.exit_json(changed=False, approval=result)


if __name__ == "__main__":
    main()
