#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: k8s_node_grace_period
short_description: Read the control plane's node grace period and size a management-link cut from it
version_added: "0.1.0"
description:
  - Lists the kube-controller-manager pods in C(kube-system) (label C(component=kube-controller-manager),
    the mirror pods of a kubeadm-built control plane) and reads C(--node-monitor-grace-period) from
    their command line; a pod without the flag runs the default for the server's version
    (40 s before Kubernetes 1.32, 50 s from 1.32).
  - A managed control plane shows no such pod; the grace period is then unknown and the
    configured window is kept.
  - Returns the window a management-link cut needs so the Node is reported during it
    (the longer of O(window) and the grace period plus O(margin)).
  - Read-only; two API calls (server version, one pod list).
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.attributes.read_only
  - hybridgpu.fleet.k8s_auth
options:
  window:
    description:
      - Seconds the site configured for the cut; the result is never shorter.
    type: int
    default: 60
  margin:
    description:
      - Seconds added to the grace period, for the controller's monitor period and the
        time the observation takes.
    type: int
    default: 20
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Size the link cut from the managed cluster's grace period
  hybridgpu.fleet.k8s_node_grace_period:
    context: onprem
    window: 60
  register: grace

- name: Cut for that long
  ansible.builtin.debug:
    msg: "cut {{ grace.window }} s ({{ grace.source }})"
"""

RETURN = r"""
grace_period_s:
  description: The node grace period in seconds; null when the cluster does not show it.
  returned: always
  type: float
  sample: 40.0
source:
  description: Where the grace period came from, or why it is unknown.
  returned: always
  type: str
  sample: "kube-controller-manager-cp1: --node-monitor-grace-period=40s"
window:
  description: Seconds the cut should last.
  returned: always
  type: int
  sample: 60
server_version:
  description: The API server's gitVersion.
  returned: always
  type: str
"""

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8sModule
from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate import grace


ARGUMENT_SPEC = dict(window=dict(type="int", default=60), margin=dict(type="int", default=20))


def run(module):
    """The module's work (module: K8sModule, or K8sTask in the action plugin)."""
    window, margin = module.params["window"], module.params["margin"]
    if window < 1 or margin < 0:
        module.fail_json(msg="window must be at least 1 and margin at least 0 (got window=%s, margin=%s)" % (window, margin))
    client = module.client()
    try:
        version = (client.server_version() or {}).get("gitVersion") or ""
        pods = client.list_pods(namespace="kube-system", label_selector=grace.SELECTOR)
    except K8sError as err:
        module.fail_api(err, "Cannot read", "the kube-controller-manager pods")
    try:
        seconds, source = grace.grace_period(pods, version)
    except ValueError as exc:
        module.fail_json(msg="Cannot read the node grace period: %s" % exc)
    module.exit_json(changed=False, grace_period_s=seconds, source=source, server_version=version,
                     window=grace.link_window(window, seconds, margin))


def main():
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
