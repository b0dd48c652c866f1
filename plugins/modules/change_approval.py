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
  - Verifies the signature with C(ssh-keygen -Y verify) against an allowed_signers file derived
    from the access boundary (approvers in C(change_rights) with keys under C(people[].ssh_keys)).
  - Checks that the signer may approve the record's action, that the action matches what the
    playbook does, that the targets of this run are a subset of the approved hosts, that the
    window is open, that the requester is not the approver when the boundary asks for four eyes,
    and (when C(executor) is given) that the executor may perform the action.
  - Fails with every missing piece named; run it before the first change of a playbook.
  - The record and signature may be files (CLI) or inline text (AWX extra vars). Nothing prompts.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  boundary:
    description: Path of the access boundary YAML (see M(hybridgpu.fleet.access_boundary)).
    type: path
    required: true
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
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Stop unless the change is approved
  hybridgpu.fleet.change_approval:
    boundary: "{{ hgpu_boundary_path }}"
    record_path: "{{ hgpu_change_record }}"
    action: driver_upgrade
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
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.boundary import load_boundary


def _read(path, what):
    try:
        with open(path, "r", encoding="utf-8") as fh:
            return fh.read()
    except (IOError, OSError) as exc:
        raise approval.ApprovalError(["%s: cannot read %s: %s" % (what, path, exc.strerror or exc)])


def run(params):
    boundary = load_boundary(params["boundary"])
    if params.get("record_path"):
        text = _read(params["record_path"], "record")
        name = params["record_path"]
    else:
        text = params["record_text"]
        name = "record_text"
    signature = params.get("signature")
    if signature is None:
        sig_path = params.get("signature_path") or (params.get("record_path") or "") + ".sig"
        if params.get("record_path") or params.get("signature_path"):
            try:
                signature = _read(sig_path, "signature")
            except approval.ApprovalError:
                raise approval.ApprovalError(["unsigned: no signature file %s (an approver signs with "
                                              "bin/hgpu-sign-change sign RECORD --key KEY)" % sig_path])
    now = None
    if params.get("now"):
        now = schema.parse_timestamp(params["now"])
        if now is None:
            raise approval.ApprovalError(["now: %r is not an ISO 8601 time" % params["now"]])
    return approval.check(boundary, text, signature or "", params["action"], params["targets"],
                          now=now, executor=params.get("executor"), filename=name)


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
        ),
        required_one_of=[("record_path", "record_text")],
        mutually_exclusive=[("record_path", "record_text"), ("signature_path", "signature")],
        supports_check_mode=True,
    )
    try:
        result = run(module.params)
    except approval.ApprovalError as exc:
        module.fail_json(msg="%s. Nothing was changed." % exc, problems=exc.problems,
                         change_id=exc.change_id)
    except schema.SchemaError as exc:
        module.fail_json(msg="boundary %s is invalid: %s" % (module.params["boundary"], exc),
                         problems=exc.errors)
    module.exit_json(changed=False, approval=result)


if __name__ == "__main__":
    main()
