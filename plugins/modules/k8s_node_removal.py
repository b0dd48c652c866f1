#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: k8s_node_removal
short_description: The API side of a node removal - delete the Node, revoke its token, prove the token is refused
version_added: "0.1.0"
description:
  - V(node_deleted) deletes the Node, refusing one that is not cordoned (a drain that did
    not complete leaves it schedulable, kubespray #7137).
  - V(secret_revoked) keeps the node token (0600, beside the removal state) for the refusal check
    and deletes the token Secret, which revokes the token.
  - V(token_refused) tries the kept token against O(server) and succeeds only on 401.
  - V(placement_removed) removes the labels and taints the onboarding manifest recorded when the
    Node still exists.
  - V(csr_deleted) deletes a CertificateSigningRequest of the node's join (O(name)).
  - V(bootstrap_token_deleted) deletes a bootstrap token Secret C(kube-system/<name>) of the
    node's join, which revokes the token (the join deletes it already; this catches one left).
  - Every state that changes the cluster verifies the signed change record itself, at the moment
    it acts (outside check mode) - the boundary at the pinned path signed by the pinned boundary
    signers, the record signed by an approver of C(remove) for this playbook, the run's targets,
    the executor, an open window and the ledger of used change ids (the same run again resumes).
    The node must be the host the task runs for and an approved target. What it deletes must be
    in the plan computed from the manifest snapshot of the removal state
    C(<records>/removals/<node>/<change_id>.json) whose SHA-256 the record names in C(manifests)
    (in the pinned records folder); a removal state or manifest written or edited by
    anyone else fails that digest. Nothing the task passes is trusted beyond the record itself.
  - The client certificate the join issued cannot be revoked through the API; it stays valid
    until it expires. The removal records its serial and expiry as residual validity and
    removes every copy of its key from the node (C(kubeadm reset)).
extends_documentation_fragment:
  - hybridgpu.fleet.change_record
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.k8s_auth
options:
  state:
    description: What to make true.
    type: str
    required: true
    choices: [node_deleted, secret_revoked, token_refused, placement_removed, csr_deleted, bootstrap_token_deleted]
  name:
    description: Node name (or the Secret or CSR name with V(secret_revoked), V(csr_deleted), V(bootstrap_token_deleted)).
    type: str
    required: true
  namespace:
    description: Namespace of the Secret.
    type: str
    default: kube-system
  token_file:
    description:
      - Where the revoked token is kept (V(secret_revoked)) and read from (V(token_refused)). With
        V(secret_revoked) it must be the file beside the removal state, C(<change_id>.revoked-token)
        (M(hybridgpu.fleet.node_removal_state) returns it as C(token_file)); any other path is refused.
    type: path
  server:
    description: API server URL the node used (V(token_refused)).
    type: str
  server_ca:
    description: CA bundle of that server (V(token_refused)).
    type: path
  node:
    description: The node being removed; defaults to O(name). Must be the host the task runs for.
    type: str
  playbook:
    description: The playbook of this run; must be the record's C(playbook).
    type: str
    default: remove.yml
  boundary:
    description: Set by the action plugin from the pinned boundary path; a task may not set it.
    type: path
  boundary_signers:
    description: Set by the action plugin from the pinned boundary signers; a task may not set it.
    type: str
  ledger_dir:
    description: Set by the action plugin (the ledger of used change ids, in the pinned records folder); a task may not set it.
    type: path
  checkpoint_key:
    description:
      - Set by the action plugin to the pinned audit checkpoint key (C(hgpu_audit_checkpoint_key), else
        C(/etc/hybridgpu/audit_checkpoint_key) when it exists), which signs the head of the change id's claim;
        a task may not set it.
    type: path
  awx_user:
    description: Set by the action plugin from the AWX job; a task may not set it.
    type: str
  targets:
    description: Set by the action plugin to the run's hosts; a task may not set it.
    type: list
    elements: str
  task_host:
    description: Set by the action plugin to the host the task runs for; a task may not set it.
    type: str
attributes:
  check_mode:
    support: full
    details: Reports what would be deleted; V(token_refused) runs for real (read-only).
  diff_mode:
    support: none
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Delete the Node (only when cordoned, under the verified record)
  hybridgpu.fleet.k8s_node_removal:
    context: onprem
    state: node_deleted
    name: owned-l40s-1
    record_path: CHG-77.yml
    executor: ops-lead
  delegate_to: localhost

- name: The revoked node token gets 401
  hybridgpu.fleet.k8s_node_removal:
    state: token_refused
    name: owned-l40s-1
    token_file: records/removals/owned-l40s-1/CHG-77.revoked-token
    server: https://k8s-api.dh1.example.internal:6443
    server_ca: /etc/hybridgpu/ca.crt
  delegate_to: localhost
"""

RETURN = r"""
detail:
  description: What happened (for V(token_refused), the API's answer).
  returned: always
  type: str
"""

import os

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import removal as rm
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import removal_api
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8sModule
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.record_options import record_options, pinned_options


# the removal plan's list an object of each state must be in
OBJECT_LISTS = {"secret_revoked": "secrets", "bootstrap_token_deleted": "bootstrap_tokens", "csr_deleted": "csrs"}


ARGUMENT_SPEC = dict(
    state=dict(type="str", required=True,
               choices=["node_deleted", "secret_revoked", "token_refused", "placement_removed",
                        "csr_deleted", "bootstrap_token_deleted"]),
    name=dict(type="str", required=True),
    namespace=dict(type="str", default="kube-system"),
    token_file=dict(type="path"),
    server=dict(type="str"),
    server_ca=dict(type="path"),
    node=dict(type="str"),
    playbook=dict(type="str", default="remove.yml"),
)
ARGUMENT_SPEC.update(record_options())
ARGUMENT_SPEC.update(pinned_options())
SPEC_OPTIONS = dict(required_if=[("state", "secret_revoked", ("token_file",)),
                                 ("state", "token_refused", ("token_file", "server"))],
                    mutually_exclusive=[("record_path", "record_text")])


def _approved(p, check):
    """The verified approval, plan and removal state for an API change (removal.authorise), after
    checking the object is one the bound manifest recorded."""
    node = p["node"] or p["name"]
    verified, plan, dummy, state = rm.authorise(p, node, check_mode=check)
    kind = OBJECT_LISTS.get(p["state"])
    if kind:
        namespace = p["namespace"] if kind != "csrs" else ""
        if (namespace, p["name"]) not in [(o["namespace"], o["name"]) for o in plan[kind]]:
            label = {"secrets": "Secret", "bootstrap_tokens": "bootstrap token Secret"}.get(kind, "CSR")
            raise rm.RemovalError("refused: %s %s/%s is not one the onboarding manifest of %s recorded; nothing was "
                                  "changed" % (label, namespace, p["name"], node))
    elif p["state"] == "node_deleted" and p["name"] not in [n["name"] for n in plan["nodes"]]:
        raise rm.RemovalError("refused: Node %s is not one the onboarding manifest of %s recorded; nothing was "
                              "changed" % (p["name"], node))
    if p["state"] == "secret_revoked" and os.path.abspath(p["token_file"]) != state.token_file:
        raise rm.RemovalError("refused: token_file %s is not %s, beside the removal state; nothing was changed"
                              % (p["token_file"], state.token_file))
    if p["state"] == "placement_removed" and p["name"] != node:
        raise rm.RemovalError("refused: placement of Node %s under the removal of %s; nothing was changed"
                              % (p["name"], node))
    return verified, plan, state


def run(module):
    """Reach the removal state (module: K8sModule, or K8sTask in the action plugin)."""
    p = module.params
    check = module.check_mode
    try:
        if p["state"] == "token_refused":
            def factory(token):
                return module.client({"host": p["server"], "api_key": token, "ca_cert": p["server_ca"],
                                      "request_timeout": 10.0}, retries=0)
            refused, detail = removal_api.token_refused(factory, p["token_file"], p["name"])
            if not refused:
                module.fail_json(msg="the revoked token of %s is NOT refused by %s: %s"
                                 % (p["name"], p["server"], detail), detail=detail)
            module.exit_json(changed=False, detail=detail)
        plan = state = None
        # a check-mode look at whether an object is gone changes nothing and needs no record;
        # the labels and taints to strip come from the verified plan, in check mode too
        if not check or p["state"] == "placement_removed":
            dummy, plan, state = _approved(p, check)
        kube = module.client()
        if p["state"] == "node_deleted":
            changed = removal_api.delete_node(kube, p["name"], check)
            detail = "Node deleted" if changed else "Node already absent"
        elif p["state"] == "secret_revoked":
            changed = removal_api.revoke_secret(kube, p["namespace"], p["name"], p["token_file"], check)
            detail = "Secret deleted" if changed else "Secret already absent"
        elif p["state"] == "csr_deleted":
            changed = removal_api.delete_csr(kube, p["name"], check)
            detail = "CSR deleted" if changed else "CSR already absent"
        elif p["state"] == "bootstrap_token_deleted":
            changed = removal_api.delete_bootstrap_token(kube, p["name"], check)
            detail = "bootstrap token deleted" if changed else "bootstrap token already absent"
        else:
            changed = removal_api.strip_placement(kube, p["name"], plan["labels"], plan["taints"], check)
            detail = "labels/taints removed" if changed else "nothing to remove (or the Node is gone)"
    except (K8sError, rm.RemovalError, approval.ApprovalError, OSError) as err:
        module.fail_api(err, p["state"], "Node", p["name"])
    module.exit_json(changed=changed, detail=detail)


def main():
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **SPEC_OPTIONS))


if __name__ == "__main__":
    main()
