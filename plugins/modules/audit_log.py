#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: audit_log
short_description: Append an administrative action to the hash-chained audit log, or verify the chain
version_added: "0.1.0"
description:
  - Appends one JSON line (change ID, approver, executor, target, action, result, time, details)
    to an append-only log on the host the module runs on (the control host; delegate to
    localhost). Each line carries the hash of the line before, so an edited, removed or
    reordered line is detected.
  - With O(state=verified) checks the whole chain and fails naming the first bad entry.
  - Returns C(journal_line), the text roles send to the node's journal with
    C(logger -t hybridgpu-audit).
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  path:
    description: Audit log file (created with mode 0640 when missing).
    type: path
    required: true
  state:
    description: V(present) appends an event; V(verified) checks the chain.
    type: str
    choices: [present, verified]
    default: present
  change_id:
    description: Change ID of the approved change record.
    type: str
  approver:
    description: Person id who approved the change.
    type: str
  executor:
    description: Person id who ran it.
    type: str
  target:
    description: Node (or other object) acted on.
    type: str
  action:
    description: What was done.
    type: str
    choices: [label, unlabel, cordon, uncordon, drain, driver_upgrade, reboot, remove, delete_node,
              revoke_credential, remove_ssh_key, remove_agent, firewall, restore_standalone, validate,
              approval]
  result:
    description: Outcome of the action.
    type: str
    choices: [started, ok, changed, failed, refused, skipped]
  details:
    description: Extra facts (versions, pod names, durations).
    type: dict
    default: {}
  once:
    description: Do not append when an entry with the same change ID, target, action and result
      exists (keeps reruns of a finished change from adding lines).
    type: bool
    default: false
  head:
    description: With O(state=verified), the last hash recorded elsewhere; a log that ends
      before it fails (lines cut off the end).
    type: str
attributes:
  check_mode:
    support: full
    details: Reports the entry that would be appended without writing it.
  diff_mode:
    support: none
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Record the cordon
  hybridgpu.fleet.audit_log:
    path: "{{ hgpu_audit_log }}"
    change_id: "{{ approval.approval.change_id }}"
    approver: "{{ approval.approval.approver }}"
    executor: ops-oncall
    target: "{{ inventory_hostname }}"
    action: cordon
    result: changed
  delegate_to: localhost

- name: Check the chain
  hybridgpu.fleet.audit_log:
    path: "{{ hgpu_audit_log }}"
    state: verified
  delegate_to: localhost
"""

RETURN = r"""
entry:
  description: The appended entry (or the one that would be appended in check mode).
  returned: state=present
  type: dict
journal_line:
  description: Text for the node's journal.
  returned: state=present
  type: str
verification:
  description: C(ok), C(entries), C(head) and C(first_bad) (line, seq, problem).
  returned: state=verified
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import audit


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            state=dict(type="str", choices=["present", "verified"], default="present"),
            change_id=dict(type="str"),
            approver=dict(type="str"),
            executor=dict(type="str"),
            target=dict(type="str"),
            action=dict(type="str", choices=list(audit.ACTIONS)),
            result=dict(type="str", choices=list(audit.RESULTS)),
            details=dict(type="dict", default={}),
            once=dict(type="bool", default=False),
            head=dict(type="str"),
        ),
        required_if=[("state", "present", ("change_id", "approver", "executor", "target",
                                           "action", "result"))],
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] == "verified":
        res = audit.verify(p["path"], p.get("head"))
        if not res["ok"]:
            bad = res["first_bad"]
            module.fail_json(msg="audit log %s: first bad entry at line %d (seq %s): %s"
                             % (p["path"], bad["line"], bad["seq"], bad["problem"]), verification=res)
        module.exit_json(changed=False, verification=res)
    try:
        event = audit.make_event(p["change_id"], p["approver"], p["executor"], p["target"],
                                 p["action"], p["result"], p["details"])
        if p["once"]:
            for old in audit.read(p["path"], change_id=p["change_id"], target=p["target"]):
                if old.get("action") == p["action"] and old.get("result") == p["result"]:
                    module.exit_json(changed=False, entry=old, journal_line=audit.journal_line(old))
        if module.check_mode:
            module.exit_json(changed=True, entry=event, journal_line=audit.journal_line(event))
        entry = audit.append(p["path"], event)
    except (audit.AuditError, ValueError, OSError) as exc:
        module.fail_json(msg="audit log %s: %s" % (p["path"], exc))
    module.exit_json(changed=True, entry=entry, journal_line=audit.journal_line(entry))


if __name__ == "__main__":
    main()
