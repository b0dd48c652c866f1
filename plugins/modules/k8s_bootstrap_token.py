#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: k8s_bootstrap_token
short_description: A short-lived kubeadm bootstrap token for one node's join, and its JoinConfiguration
version_added: "0.2.0"
description:
  - With O(state=present), creates a bootstrap token through the API, as C(kubeadm token create)
    does - the Secret C(kube-system/bootstrap-token-<id>) of type C(bootstrap.kubernetes.io/token)
    with an expiration O(ttl) seconds ahead, usages authentication and signing, and the extra
    groups O(groups) - or, with O(token), uses a token the site created (the Secret must exist).
  - Computes the discovery CA hash (C(sha256:) of the CA's SubjectPublicKeyInfo) from
    O(ca_file), and returns a C(kubeadm.k8s.io/v1beta4) JoinConfiguration for the node
    (token discovery pinned to that hash, node name, labels the node may set itself, taints,
    kubelet extra args). Labels under C(node-restriction.kubernetes.io/) and other labels the
    node may not set itself are refused here; the admin credential sets them (node_placement).
  - With O(state=absent), deletes the token Secret of O(token_id), which revokes the token.
  - Runs on the control host. The result holds the token, so register it on a task with C(no_log).
  - The groups must not be bound to the kubeadm auto-approval ClusterRoles
    (C(system:bootstrappers:kubeadm:default-node-token) is), so only
    M(hybridgpu.fleet.k8s_csr_approve) approves the node's certificate. They need
    C(system:node-bootstrapper) (create CSRs) bound to them, as C(docs/join_methods.md) says.
requirements:
  - cryptography (the control host's ansible-core depends on it)
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.k8s_auth
options:
  state:
    description: V(present) creates (or checks) the token; V(absent) deletes it.
    type: str
    choices: [present, absent]
    default: present
  node:
    description: Node name the token is for (the JoinConfiguration's node name, and the description).
    type: str
  token:
    description:
      - A bootstrap token the site created (C(<6 of [a-z0-9]>.<16 of [a-z0-9]>)). Its Secret must
        exist and not be expired. Without it a new token is made.
    type: str
  token_id:
    description: The token id to delete (V(absent)).
    type: str
  ttl:
    description: Seconds the new token is valid (the tokencleaner deletes it then).
    type: int
    default: 1800
  groups:
    description: Extra groups of the token, each C(system:bootstrappers:...).
    type: list
    elements: str
    default: ["system:bootstrappers:hybridgpu"]
  ca_file:
    description: The cluster CA certificate (PEM, on the control host) the discovery hash pins.
    type: path
  endpoint:
    description: The API server as the node reaches it, C(host:port) (discovery.bootstrapToken.apiServerEndpoint).
    type: str
  labels:
    description: Labels the kubelet registers the Node with (C(--node-labels)).
    type: dict
    default: {}
  taints:
    description: Taints the Node registers with (C(key), C(value), C(effect)).
    type: list
    elements: dict
    default: []
  kubelet_extra_args:
    description: Further kubelet flags (name without dashes, value).
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    details: Reports that a token would be created or deleted; no token or JoinConfiguration is returned then.
  diff_mode:
    support: none
    details: The token is secret.
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Token and JoinConfiguration for the node
  hybridgpu.fleet.k8s_bootstrap_token:
    context: onprem
    node: "{{ inventory_hostname }}"
    ca_file: /etc/hybridgpu/onprem-ca.crt
    endpoint: k8s-api.dh1.example.internal:6443
    taints:
      - {key: hybridgpu.io/owned, value: "true", effect: PreferNoSchedule}
  delegate_to: localhost
  register: join_token
  no_log: true

- name: Revoke it
  hybridgpu.fleet.k8s_bootstrap_token:
    context: onprem
    state: absent
    token_id: "{{ join_token.token_id }}"
  delegate_to: localhost
"""

RETURN = r"""
token_id:
  description: The token's id (public part; the requester of the node's CSR is C(system:bootstrap:<id>)).
  returned: always
  type: str
token:
  description: The whole token (secret).
  returned: state is present, not in check mode
  type: str
secret:
  description: Namespace, name and uid of the token Secret.
  returned: state is present, not in check mode
  type: dict
expiration:
  description: When the token expires (RFC 3339).
  returned: state is present, not in check mode
  type: str
groups:
  description: The token's groups (system:bootstrappers and the extra ones).
  returned: state is present
  type: list
  elements: str
ca_cert_hash:
  description: The discovery CA hash.
  returned: state is present
  type: str
join_configuration:
  description: The JoinConfiguration (holds the token).
  returned: state is present, not in check mode
  type: dict
"""

import base64

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8sModule
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import join


def read_ca(module):
    try:
        with open(module.params["ca_file"], "rb") as fh:
            return join.ca_cert_hash(fh.read())
    except OSError as err:
        module.fail_json(msg="ca_file %s cannot be read: %s" % (module.params["ca_file"], err))


def site_token(kube, token):
    """Check a site-given token's Secret; returns it."""
    token_id, token_key = join.split_token(token)
    secret = kube.get_secret("kube-system", join.secret_name(token_id))
    if secret is None or secret.get("type") != join.BOOTSTRAP_TYPE:
        raise join.JoinError("token: no bootstrap token Secret kube-system/%s" % join.secret_name(token_id))
    data = dict((k, base64.b64decode(v).decode()) for k, v in (secret.get("data") or {}).items())
    if data.get("token-secret") != token_key or data.get("usage-bootstrap-authentication") != "true":
        raise join.JoinError("token: Secret kube-system/%s does not authenticate this token"
                             % join.secret_name(token_id))
    return secret, data


ARGUMENT_SPEC = dict(
    state=dict(type="str", default="present", choices=["present", "absent"]),
    node=dict(type="str"),
    token=dict(type="str", no_log=True),
    token_id=dict(type="str"),
    ttl=dict(type="int", default=1800),
    groups=dict(type="list", elements="str", default=["system:bootstrappers:hybridgpu"]),
    ca_file=dict(type="path"),
    endpoint=dict(type="str"),
    labels=dict(type="dict", default={}),
    taints=dict(type="list", elements="dict", default=[]),
    kubelet_extra_args=dict(type="dict", default={}),
)
SPEC_OPTIONS = dict(required_if=[("state", "present", ["node", "ca_file", "endpoint"]),
                                 ("state", "absent", ["token_id"])])


def run(module):
    """The module's work (module: K8sModule, or K8sTask in the action plugin)."""
    p = module.params
    if p["state"] == "absent":
        name = join.secret_name(p["token_id"])
        try:
            kube = module.client()
            changed = kube.get_secret("kube-system", name) is not None
            if changed and not module.check_mode:
                kube.delete_secret("kube-system", name)
        except K8sError as err:
            module.fail_api(err, "Deleting the bootstrap token", "Secret", name, "kube-system")
        module.exit_json(changed=changed, token_id=p["token_id"])
    result = dict(changed=False, groups=sorted(set([join.BOOTSTRAPPERS] + p["groups"])))
    try:
        result["ca_cert_hash"] = read_ca(module)
        token = p["token"] or join.new_token()
        result["token_id"] = join.split_token(token)[0]
        body = join.token_secret(token, p["ttl"], p["groups"], "join of node %s" % p["node"])
        cfg = join.join_configuration(p["node"], p["endpoint"], token, result["ca_cert_hash"], p["labels"],
                                      p["taints"], p["kubelet_extra_args"])
        kube = module.client()
        if p["token"]:
            secret, data = site_token(kube, token)
            result["groups"] = sorted(set([join.BOOTSTRAPPERS] + [
                g for g in (data.get("auth-extra-groups") or "").split(",") if g]))
        else:
            result["changed"] = True
            if module.check_mode:
                module.exit_json(**result)
            secret = kube.create_secret("kube-system", body)
            data = {"expiration": base64.b64decode(body["data"]["expiration"]).decode()}
    except join.JoinError as err:
        module.fail_json(msg="Bootstrap token for node %s: %s" % (p["node"], err))
    except K8sError as err:
        module.fail_api(err, "Creating the bootstrap token for node %s:" % p["node"], "Secret",
                        "bootstrap-token-" + result.get("token_id", "?"), "kube-system")
    meta = secret.get("metadata") or {}
    result.update(token=token, expiration=data.get("expiration", ""), join_configuration=cfg,
                  secret=dict(namespace="kube-system", name=meta.get("name"), uid=meta.get("uid", "")))
    module.exit_json(**result)


def main():
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **SPEC_OPTIONS))


if __name__ == "__main__":
    main()
