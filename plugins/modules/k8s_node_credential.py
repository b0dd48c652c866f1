#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: k8s_node_credential
short_description: Create or revoke a node's cluster credential (a kube-system token Secret)
version_added: "0.1.0"
description:
  - With O(state=present), makes sure the Secret C(kube-system/node-<name>-token) of type
    C(kubernetes.io/service-account-token) exists, annotated for the node, waits until the
    token controller has filled C(data.token), and returns a kubeconfig for the node's agent
    (server, CA data, token). The cluster authenticates that token as
    C(system:node:<name>).
  - With O(state=absent), deletes the Secret, which revokes the token.
  - Runs on the control host; the returned kubeconfig holds a secret, so register it on a
    task with C(no_log).
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.k8s_auth
options:
  name:
    description: Node name.
    type: str
    required: true
  state:
    description: C(present) ensures the credential, C(absent) revokes it.
    type: str
    choices: [present, absent]
    default: present
  namespace:
    description: Namespace of the token Secret.
    type: str
    default: kube-system
  cluster_name:
    description: Name of the cluster in the returned kubeconfig.
    type: str
    default: cluster
  node_server:
    description: API server URL as the node reaches it. Required with O(state=present).
    type: str
  node_ca_file:
    description:
      - CA bundle (on the control host) the node uses to verify the API server; embedded
        as C(certificate-authority-data). Required with O(state=present).
    type: path
  wait_timeout:
    description: Seconds to wait for the token controller to fill the token.
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    details: Reports whether the Secret would be created or deleted; no kubeconfig when it does not exist yet.
  diff_mode:
    support: none
    details: The Secret's content is secret; no diff is shown.
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Credential for the node agent
  hybridgpu.fleet.k8s_node_credential:
    kubeconfig: "{{ hgpu_lab_kubeconfig }}"
    context: onprem
    name: "{{ inventory_hostname }}"
    cluster_name: onprem
    node_server: https://k8s-api.dh1.example.internal:6443
    node_ca_file: "{{ hgpu_lab_ca }}"
  delegate_to: localhost
  register: cred
  no_log: true

- name: Revoke it (removal)
  hybridgpu.fleet.k8s_node_credential:
    context: onprem
    name: dh1-a100-01
    state: absent
  delegate_to: localhost
"""

RETURN = r"""
secret:
  description: Namespace and name of the token Secret.
  returned: always
  type: dict
  sample: {namespace: kube-system, name: node-dh1-a100-01-token}
uid:
  description: The Secret's uid (for the manifest), when it exists.
  returned: state is present and the Secret exists
  type: str
user:
  description: The identity the token authenticates as.
  returned: always
  type: str
  sample: system:node:dh1-a100-01
kubeconfig:
  description: Kubeconfig (JSON) for the node's agent. Holds the token.
  returned: state is present and the Secret exists
  type: str
"""

import base64
import json
import time

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8sModule


def secret_name(node):
    return "node-%s-token" % node


def secret_body(node, namespace):
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": secret_name(node), "namespace": namespace, "annotations": {
            "kubernetes.io/service-account.name": "node-%s" % node,
            "hybridgpu.io/node-name": node}},
    }


def node_kubeconfig(cluster, server, ca_pem, node, token):
    """A one-context kubeconfig as JSON (JSON is YAML: every kubeconfig reader takes it)."""
    user = "system:node:%s" % node
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": cluster,
        "clusters": [{"name": cluster, "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def token_of(secret):
    tok = ((secret or {}).get("data") or {}).get("token")
    return base64.b64decode(tok).decode() if tok else None


def main():
    spec = dict(
        name=dict(type="str", required=True),
        state=dict(type="str", default="present", choices=["present", "absent"]),
        namespace=dict(type="str", default="kube-system"),
        cluster_name=dict(type="str", default="cluster"),
        node_server=dict(type="str"),
        node_ca_file=dict(type="path"),
        wait_timeout=dict(type="int", default=30),
    )
    module = K8sModule(argument_spec=spec, supports_check_mode=True,
                       required_if=[("state", "present", ["node_server", "node_ca_file"])])
    p = module.params
    node, ns = p["name"], p["namespace"]
    name = secret_name(node)
    result = dict(changed=False, secret=dict(namespace=ns, name=name), user="system:node:%s" % node)
    ca_pem = None
    if p["state"] == "present":
        try:
            with open(p["node_ca_file"], "rb") as fh:
                ca_pem = fh.read()
        except OSError as err:
            module.fail_json(msg="Credential for node %s: cannot read node_ca_file %s: %s"
                             % (node, p["node_ca_file"], err))
    try:
        kube = module.client()
        current = kube.get_secret(ns, name)
        if p["state"] == "absent":
            result["changed"] = current is not None
            if current is not None and not module.check_mode:
                kube.delete_secret(ns, name)
            module.exit_json(**result)
        if current is None:
            result["changed"] = True
            if module.check_mode:
                module.exit_json(**result)
            try:
                current = kube.create_secret(ns, secret_body(node, ns))
            except K8sError as err:
                if not err.conflict:
                    raise
                current = kube.get_secret(ns, name)
        deadline = time.time() + p["wait_timeout"]
        token = token_of(current)
        while token is None and time.time() < deadline:
            time.sleep(0.5)
            current = kube.get_secret(ns, name)
            token = token_of(current)
    except K8sError as err:
        module.fail_api(err, "Credential for node %s:" % node, "Secret", name, ns)
    if token is None:
        module.fail_json(msg="Credential for node %s: Secret %s/%s has no data.token after %ds; is the "
                         "token controller running?" % (node, ns, name, p["wait_timeout"]))
    result["uid"] = (current.get("metadata") or {}).get("uid")
    result["kubeconfig"] = node_kubeconfig(p["cluster_name"], p["node_server"], ca_pem, node, token)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
