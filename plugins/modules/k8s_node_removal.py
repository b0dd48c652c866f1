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
  - V(secret_revoked) keeps the node token (0600, O(token_file)) for the refusal check and
    deletes the token Secret, which revokes the token.
  - V(token_refused) tries the kept token against O(server) and succeeds only on 401.
  - V(placement_removed) removes the given labels and taints when the Node still exists.
  - V(csr_deleted) deletes a CertificateSigningRequest of the node's join (O(name)).
  - V(bootstrap_token_deleted) deletes a bootstrap token Secret C(kube-system/<name>) of the
    node's join, which revokes the token (the join deletes it already; this catches one left).
  - The client certificate the join issued cannot be revoked through the API; it stays valid
    until it expires. The removal records its serial and expiry as residual validity and
    removes every copy of its key from the node (C(kubeadm reset)).
extends_documentation_fragment:
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
    description: Where the revoked token is kept (V(secret_revoked)) and read from (V(token_refused)).
    type: path
  server:
    description: API server URL the node used (V(token_refused)).
    type: str
  server_ca:
    description: CA bundle of that server (V(token_refused)).
    type: path
  labels:
    description: Label keys to remove (V(placement_removed)).
    type: list
    elements: str
    default: []
  taints:
    description: Taints (C(key), C(effect)) to remove (V(placement_removed)).
    type: list
    elements: dict
    default: []
  removal_state:
    description:
      - The removal state written by M(hybridgpu.fleet.node_removal_state) after it verified the
        signed change record. Required to change anything (V(node_deleted), V(secret_revoked),
        V(placement_removed), V(csr_deleted), V(bootstrap_token_deleted) outside check mode) - the
        state must be for this node, unfinished, and its approved remove must name the node in an
        open window; a Secret or CSR must be one the onboarding manifest recorded.
    type: path
  node:
    description: The node being removed (V(secret_revoked), V(csr_deleted), V(bootstrap_token_deleted)); defaults to O(name).
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
- name: Delete the Node (only when cordoned)
  hybridgpu.fleet.k8s_node_removal:
    context: onprem
    state: node_deleted
    name: owned-l40s-1
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

from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import removal as rm
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8sModule


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
    labels=dict(type="list", elements="str", default=[]),
    taints=dict(type="list", elements="dict", default=[]),
    removal_state=dict(type="path"),
    node=dict(type="str"),
)
SPEC_OPTIONS = dict(required_if=[("state", "secret_revoked", ("token_file",)),
                                 ("state", "token_refused", ("token_file", "server"))])


def run(module):
    """Reach the removal state (module: K8sModule, or K8sTask in the action plugin)."""
    p = module.params
    check = module.check_mode
    try:
        if p["state"] == "token_refused":
            def factory(token):
                return module.client({"host": p["server"], "api_key": token, "ca_cert": p["server_ca"],
                                      "request_timeout": 10.0}, retries=0)
            refused, detail = rm.token_refused(factory, p["token_file"], p["name"])
            if not refused:
                module.fail_json(msg="the revoked token of %s is NOT refused by %s: %s"
                                 % (p["name"], p["server"], detail), detail=detail)
            module.exit_json(changed=False, detail=detail)
        if not check:
            node = p["node"] or p["name"]
            kind = OBJECT_LISTS.get(p["state"])
            secret = (p["namespace"] if kind != "csrs" else "", p["name"]) if kind else None
            if not p["removal_state"]:
                raise rm.RemovalError("refused: %s changes the cluster only under a verified removal "
                                      "(removal_state, written by node_removal_state)" % p["state"])
            rm.authorise(p["removal_state"], node, secret, kind=kind or "secrets")
        kube = module.client()
        if p["state"] == "node_deleted":
            changed = rm.delete_node(kube, p["name"], check)
            detail = "Node deleted" if changed else "Node already absent"
        elif p["state"] == "secret_revoked":
            changed = rm.revoke_secret(kube, p["namespace"], p["name"], p["token_file"], check)
            detail = "Secret deleted" if changed else "Secret already absent"
        elif p["state"] == "csr_deleted":
            changed = rm.delete_csr(kube, p["name"], check)
            detail = "CSR deleted" if changed else "CSR already absent"
        elif p["state"] == "bootstrap_token_deleted":
            changed = rm.delete_bootstrap_token(kube, p["name"], check)
            detail = "bootstrap token deleted" if changed else "bootstrap token already absent"
        else:
            changed = rm.strip_placement(kube, p["name"], p["labels"], p["taints"], check)
            detail = "labels/taints removed" if changed else "nothing to remove (or the Node is gone)"
    except (K8sError, rm.RemovalError, OSError) as err:
        module.fail_api(err, p["state"], "Node", p["name"])
    module.exit_json(changed=changed, detail=detail)


def main():
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **SPEC_OPTIONS))


if __name__ == "__main__":
    main()
