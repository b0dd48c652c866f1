#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: k8s_node_info
short_description: List the Nodes of a cluster with their GPU capacity and readiness
version_added: "0.1.0"
description:
  - Reads Nodes through the Kubernetes API with one list call and returns, per Node, its
    readiness, schedulability, labels, taints, GPU capacity, versions and the GPU facts the
    NVIDIA GPU feature discovery labels carry (product, count, memory, MIG, driver and CUDA).
  - Read-only; runs the same in check mode.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.attributes.read_only
  - hybridgpu.fleet.k8s_auth
options:
  name:
    description:
      - Only this Node. Returns an empty list when it does not exist.
    type: str
  label_selector:
    description:
      - Label selector, for example C(hybridgpu.io/side=owned).
    type: str
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Nodes of the on-prem cluster
  hybridgpu.fleet.k8s_node_info:
    kubeconfig: /etc/hybridgpu/kubeconfig
    context: onprem
  register: onprem_nodes

- name: Owned GPU nodes only
  hybridgpu.fleet.k8s_node_info:
    context: onprem
    label_selector: hybridgpu.io/side=owned
"""

RETURN = r"""
nodes:
  description: One entry per Node, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Node name.
      type: str
    ready:
      description: Status of the Ready condition, C(True), C(False) or C(Unknown).
      type: str
    unschedulable:
      description: Whether the Node is cordoned.
      type: bool
    internal_ips:
      description: The Node's C(InternalIP) addresses (C(status.addresses)).
      type: list
      elements: str
    labels:
      description: Node labels.
      type: dict
    taints:
      description: Node taints.
      type: list
      elements: dict
    gpu_capacity:
      description: C(nvidia.com/gpu) capacity, 0 when absent.
      type: int
    gpu_allocatable:
      description: C(nvidia.com/gpu) allocatable, 0 when absent.
      type: int
    gpu:
      description:
        - GPU facts from the NVIDIA GPU feature discovery / GPU operator labels (C(nvidia.com/gpu.*),
          C(nvidia.com/mig.*), C(nvidia.com/cuda.*)).
        - When the Node carries no such labels, C(product), C(count) and the versions are null and C(mig_profiles) is empty.
      type: dict
      contains:
        product:
          description: C(nvidia.com/gpu.product), for example C(NVIDIA-A100-SXM4-80GB); ends in C(-SHARED)
            under time-slicing and in C(-MIG-<profile>) under the single MIG strategy.
          type: str
        count:
          description: C(nvidia.com/gpu.count) (under the single MIG strategy, the number of MIG devices).
          type: int
        memory_mib:
          description: C(nvidia.com/gpu.memory) as published (MiB).
          type: int
        memory_suspect:
          description: Whether C(memory_mib) is too large to be MiB (some publishers put bytes there).
          type: bool
        replicas:
          description: C(nvidia.com/gpu.replicas) (time-slicing replicas per GPU).
          type: int
        sharing_strategy:
          description: C(nvidia.com/gpu.sharing-strategy).
          type: str
        shared:
          description: Whether the GPUs are time-sliced (product ends in C(-SHARED) or replicas above 1).
          type: bool
        mig_capable:
          description: C(nvidia.com/mig.capable).
          type: bool
        mig_strategy:
          description: C(nvidia.com/mig.strategy), C(none), C(single) or C(mixed).
          type: str
        mig_config:
          description: C(nvidia.com/mig.config), the MIG manager's configuration name.
          type: str
        mig_config_state:
          description: C(nvidia.com/mig.config.state), for example C(success).
          type: str
        mig_profiles:
          description: Per MIG profile (C(1g.10gb)...), C({count, memory_mib, product}) from the
            C(nvidia.com/mig-<profile>.*) labels.
          type: dict
        driver_version:
          description: Driver version, C(major.minor.rev).
          type: str
        cuda_runtime:
          description: CUDA runtime version, C(major.minor).
          type: str
        compute_cap:
          description: Compute capability, C(major.minor).
          type: str
        family:
          description: C(nvidia.com/gpu.family), for example C(ampere).
          type: str
        machine:
          description: C(nvidia.com/gpu.machine).
          type: str
        present:
          description: C(nvidia.com/gpu.present).
          type: bool
    kubelet_version:
      description: Kubelet (or agent) version the Node reports.
      type: str
    os_image:
      description: OS image the Node reports.
      type: str
    kernel_version:
      description: Kernel the Node reports.
      type: str
server_version:
  description: The API server's C(gitVersion).
  returned: always
  type: str
  sample: v1.30.4
"""

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError, node_summary
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8sModule


ARGUMENT_SPEC = dict(name=dict(type="str"), label_selector=dict(type="str"))


def run(module):
    """List the Nodes (module: K8sModule, or K8sTask in the action plugin)."""
    try:
        kube = module.client()
        field = "metadata.name=%s" % module.params["name"] if module.params["name"] else None
        nodes = kube.list_nodes(label_selector=module.params["label_selector"], field_selector=field)
        version = kube.server_version().get("gitVersion")
    except K8sError as err:
        if module.params["name"]:
            module.fail_api(err, "Cannot read", "Node", module.params["name"])
        module.fail_api(err, "Cannot list", "Nodes")
    result = sorted((node_summary(n) for n in nodes), key=lambda n: n["name"] or "")
    module.exit_json(changed=False, nodes=result, server_version=version)


def main():
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
