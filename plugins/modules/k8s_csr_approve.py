#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: k8s_csr_approve
short_description: Approve only the kubelet client CSR a node's kubeadm join made with its bootstrap token
version_added: "0.2.0"
description:
  - Waits up to O(timeout) seconds for the CertificateSigningRequest that C(kubeadm join) sends
    with the bootstrap token O(token_id), and approves it only when it is exactly the one
    expected - signer C(kubernetes.io/kube-apiserver-client-kubelet), requested by
    C(system:bootstrap:<token_id>) with the groups O(groups), kubelet client usages, subject
    C(CN=system:node:<node>), C(O=system:nodes) and nothing else, an C(expirationSeconds) not
    above O(max_expiration_seconds) when that is set.
  - A CSR from that requester that differs in anything is not approved, and the task fails
    naming every difference. CSRs of other requesters are not looked at.
  - Then waits until the signer has issued the certificate.
  - Runs on the control host with the admin credential; record the returned RV(approved) in the
    audit trail.
requirements:
  - cryptography (the control host's ansible-core depends on it)
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.k8s_auth
options:
  node:
    description: Node name the certificate is for.
    type: str
    required: true
  token_id:
    description: Id of the bootstrap token the join uses (M(hybridgpu.fleet.k8s_bootstrap_token)).
    type: str
    required: true
  groups:
    description: Groups the requester must have (the token's groups).
    type: list
    elements: str
    default: ["system:bootstrappers"]
  max_expiration_seconds:
    description: Refuse a CSR asking for a longer certificate (0 = no limit).
    type: int
    default: 0
  timeout:
    description: Seconds to wait for the CSR, and again for the certificate.
    type: int
    default: 120
attributes:
  check_mode:
    support: full
    details: Reports whether an expected pending CSR would be approved; approves nothing.
  diff_mode:
    support: none
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Approve the node's CSR (only the expected one)
  hybridgpu.fleet.k8s_csr_approve:
    context: onprem
    node: "{{ inventory_hostname }}"
    token_id: "{{ join_token.token_id }}"
    groups: "{{ join_token.groups }}"
  delegate_to: localhost
  register: approved
"""

RETURN = r"""
approved:
  description: The CSRs this run approved (name, uid, requester, groups, signer, usages, subject).
  returned: always
  type: list
  elements: dict
csrs:
  description: Names of every CSR of this join (approved now or before).
  returned: always
  type: list
  elements: str
"""

import time

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8sModule
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import join


def wait_issued(kube, names, deadline):
    left = list(names)
    while left and time.time() < deadline:
        left = [n for n in left if not ((kube.get_csr(n) or {}).get("status") or {}).get("certificate")]
        if left:
            time.sleep(1)
    return left


ARGUMENT_SPEC = dict(
    node=dict(type="str", required=True),
    token_id=dict(type="str", required=True),
    groups=dict(type="list", elements="str", default=["system:bootstrappers"]),
    max_expiration_seconds=dict(type="int", default=0),
    timeout=dict(type="int", default=120),
)


def run(module):
    """The module's work (module: K8sModule, or K8sTask in the action plugin)."""
    p = module.params
    deadline = time.time() + p["timeout"]
    approved, done = [], []
    try:
        kube = module.client()
        while True:
            pending, before, unexpected = join.sort_csrs(kube.list_csrs(), p["node"], p["token_id"], p["groups"],
                                                         p["max_expiration_seconds"] or None)
            if unexpected:
                module.fail_json(msg="Node %s: not approved, the CSRs requested with bootstrap token %s are not "
                                 "the expected ones: %s" % (p["node"], p["token_id"], "; ".join(
                                     "%s: %s" % (c["metadata"]["name"], ", ".join(why)) for c, why in unexpected)),
                                 unexpected=[c["metadata"]["name"] for c, why in unexpected])
            done = [c["metadata"]["name"] for c in before]
            if pending or before or time.time() >= deadline:
                break
            time.sleep(1)
        if not pending and not before:
            module.fail_json(msg="Node %s: no CSR requested with bootstrap token %s within %ds; is kubeadm join "
                             "running on the node?" % (p["node"], p["token_id"], p["timeout"]))
        for csr in pending:
            approved.append(join.describe_csr(csr))
            if not module.check_mode:
                kube.approve_csr(csr, "HybridgpuJoinApproved", "node %s, bootstrap token %s, checked by "
                                 "hybridgpu.fleet.k8s_csr_approve" % (p["node"], p["token_id"]))
        names = done + [a["name"] for a in approved]
        left = [] if module.check_mode else wait_issued(kube, names, time.time() + p["timeout"])
        if left:
            module.fail_json(msg="Node %s: CSR %s approved but no certificate issued within %ds; is the "
                             "cluster's CSR signer running?" % (p["node"], ", ".join(left), p["timeout"]),
                             approved=approved)
    except join.JoinError as err:
        module.fail_json(msg="Node %s: %s" % (p["node"], err), approved=approved)
    except K8sError as err:
        module.fail_api(err, "Approving the join CSR of node %s:" % p["node"], "CertificateSigningRequest",
                        approved=approved)
    module.exit_json(changed=bool(approved), approved=approved, csrs=names)


def main():
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
