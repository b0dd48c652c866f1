#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: k8s_member_access
short_description: Revoke through the API the Kubernetes objects the access boundary lists for a member
version_added: "0.2.0"
description:
  - Deletes through the API the objects the verified boundary lists for O(member) in O(context)
    (C(people[].access.kubernetes)); no token file on the API server is edited.
  - The objects are never a task option. Before anything is read or deleted, the action plugin
    verifies the signed change record on the control host (the same check as
    M(hybridgpu.fleet.change_approval), action C(revoke_member), playbook C(revoke_member.yml),
    this O(member), the play's hosts as targets; in check mode without using the change id) against
    the boundary signed by the pinned boundary signers, and takes the objects of O(context) from
    what the verified boundary lists for the member. A run whose extra vars carry trust is refused.
  - After a revocation the action plugin appends a C(revoke_credential) entry under the verified
    change id to the audit log of the records folder (C(<hgpu_records_dir>/audit/audit.jsonl)).
  - C(ServiceAccount) deletes the account's token Secrets (type
    C(kubernetes.io/service-account-token), annotated with the account's name) and the account,
    which also invalidates the bound tokens issued for it. C(RoleBinding) and
    C(ClusterRoleBinding) delete the binding. C(BootstrapToken) deletes the Secret
    C(kube-system/bootstrap-token-<id>).
  - Every object is read first (what is gone already is reported in RV(absent), so a rerun
    changes nothing) and read again after the delete; one still there fails the task.
extends_documentation_fragment:
  - hybridgpu.fleet.change_record
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.k8s_auth
options:
  member:
    description: Person id of the member whose access is revoked; must be the record's C(member).
    type: str
    required: true
  items:
    description:
      - Set by the action plugin to the verified boundary's entries for O(member) in O(context); a task
        may not set it.
    type: list
    elements: dict
    suboptions:
      context:
        description: Kubernetes context the object lives in.
        type: str
      kind:
        description: What the member holds.
        type: str
        required: true
        choices: [ServiceAccount, RoleBinding, ClusterRoleBinding, BootstrapToken]
      namespace:
        description: Namespace (ServiceAccount and RoleBinding).
        type: str
      name:
        description: Object name (for a BootstrapToken its token id).
        type: str
        required: true
attributes:
  check_mode:
    support: full
    details: Reads every object and reports what would be revoked.
  diff_mode:
    support: none
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Revoke the member's objects in the onprem cluster
  hybridgpu.fleet.k8s_member_access:
    context: onprem
    member: test-member
    record_path: /srv/changes/CHG-90.yml
    executor: ops-lead
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
revoked:
  description: Objects deleted (in check mode, that would be deleted), as C(Kind namespace/name).
  returned: always
  type: list
  elements: str
absent:
  description: Objects already gone.
  returned: always
  type: list
  elements: str
change_id:
  description: The verified change id the revocation ran under (set by the action plugin).
  returned: success
  type: str
audit:
  description: The audit entry the action plugin wrote after a revocation (seq, hash, change id).
  returned: changed
  type: dict
revocation_steps:
  description: The verified boundary's credential revocation steps, by kind.
  returned: success
  type: dict
"""

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8sModule
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import member_access

ITEM = dict(context=dict(type="str"),
            kind=dict(type="str", required=True, choices=["ServiceAccount", "RoleBinding", "ClusterRoleBinding",
                                                          "BootstrapToken"]),
            namespace=dict(type="str"), name=dict(type="str", required=True))


ARGUMENT_SPEC = dict(member=dict(type="str", required=True),
                     record_path=dict(type="path"), record_text=dict(type="str"), signature=dict(type="str"),
                     executor=dict(type="str"),
                     items=dict(type="list", elements="dict", options=ITEM))


def run(module):
    """The module's work (module: K8sModule, or K8sTask in the action plugin)."""
    p = module.params
    if not p["items"]:
        module.fail_json(msg="items: none given; the action plugin gives what the verified boundary lists for %s "
                             "in context %s; nothing was changed" % (p["member"], p.get("context")))
    other = [i for i in p["items"] if i.get("context") and p.get("context") and i["context"] != p["context"]]
    if other:
        module.fail_json(msg="items: %d entries are for context %s, not %s; nothing was changed"
                         % (len(other), other[0]["context"], p["context"]))
    try:
        result = member_access.revoke(module.client(), p["items"], module.check_mode)
    except K8sError as err:
        module.fail_api(err, "revoke the access of", name=p["member"])
    except member_access.AccessError as err:
        module.fail_json(msg="%s: %s" % (module.where("revoke the access of", name=p["member"]), err))
    module.exit_json(changed=bool(result["revoked"]), **result)


def main():
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
