#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: k8s_workload_snapshot
short_description: Snapshot Pods and Jobs of a cluster, and compare with an earlier snapshot
version_added: "0.1.0"
description:
  - Lists every Pod (node, uid, phase) and Job (active, succeeded, failed, conditions).
  - With O(before), also reports what changed for workloads outside O(exclude_nodes), that is pods on
    other nodes that vanished, were replaced or failed, and Jobs that gained failures.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.attributes.read_only
  - hybridgpu.fleet.k8s_auth
options:
  namespace:
    description: Only this namespace (all when omitted).
    type: str
  before:
    description: An earlier C(snapshot) result to compare against.
    type: dict
  exclude_nodes:
    description: Nodes whose pods are expected to change (the node under maintenance).
    type: list
    elements: str
    default: []
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Workloads before the upgrade
  hybridgpu.fleet.k8s_workload_snapshot:
    context: onprem
  delegate_to: localhost
  register: before

- name: Were other nodes' jobs affected?
  hybridgpu.fleet.k8s_workload_snapshot:
    context: onprem
    before: "{{ before.snapshot }}"
    exclude_nodes: [dh1-a100-02]
  delegate_to: localhost
  register: after
"""

RETURN = r"""
snapshot:
  description: C(pods) and C(jobs) keyed by namespace/name.
  returned: always
  type: dict
comparison:
  description: C(affected), C(pods), C(jobs), C(checked_pods), C(checked_jobs).
  returned: when before is given
  type: dict
"""

from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import workloads
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8sModule


ARGUMENT_SPEC = dict(namespace=dict(type="str"), before=dict(type="dict"),
                     exclude_nodes=dict(type="list", elements="str", default=[]))


def run(module):
    """The module's work (module: K8sModule, or K8sTask in the action plugin)."""
    try:
        kube = module.client()
        snap = workloads.snapshot(kube, module.params["namespace"])
    except K8sError as err:
        module.fail_api(err, "cannot list", "Pods and Jobs", namespace=module.params["namespace"])
    result = {"changed": False, "snapshot": snap}
    if module.params["before"] is not None:
        result["comparison"] = workloads.compare(module.params["before"], snap, module.params["exclude_nodes"])
    module.exit_json(**result)


def main():
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
