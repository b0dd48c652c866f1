#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: compat_matrix
short_description: Build the preflight hardware and software matrix
version_added: "0.1.0"
description:
  - Groups owned nodes into rows by their distinguishing columns (GPU model, count, memory,
    MIG mode, driver branch, highest CUDA, OS, kernel, container runtime, kubelet/agent version),
    appends the cloud side as the last row, and marks the columns that disagree.
  - Applies version rules with vendor citations, the minimum driver for the job image's CUDA
    version, kubelet vs API server skew, and OS image mismatch against the cloud row.
  - Proposes the first validation wave (one unheld node per owned row plus a rehearsal spare)
    and lists nodes held for a later wave with their reasons.
  - With O(stack_check) judges the GPU software stack of each host in O(hosts) from its gpu_facts
    C(stack), with the checks validation uses (C(stack_check)) - the NVIDIA kernel module loaded with
    the driver package's version, C(nvidia-container-toolkit), containerd's nvidia runtime, and
    C(nvidia-fabricmanager) with the driver's exact version on NVSwitch systems - and, for a host whose
    Node is among the O(k8s_node_info) Nodes of its side, C(nvidia.com/gpu) allocatable equal to its
    GPU count. A host without a Node there (not joined yet) is not judged for allocatable GPUs. Owned
    hosts are always judged; a cloud host only when its facts carry C(stack).
  - Each failed piece is a violation of severity V(error) of its rule (V(gpu-stack-driver-module),
    V(gpu-stack-container-toolkit), V(gpu-stack-containerd-runtime), V(gpu-stack-fabric-manager),
    V(gpu-stack-allocatable-gpus)) on the host's row; it names the failing nodes only, and its
    message names each node and the missing piece.
  - The NVIDIA device plugin DaemonSet is not judged here (it needs a DaemonSet list); validation
    step 1 checks it.
  - Pure computation on the control host; it changes nothing.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.attributes.read_only
options:
  nodes:
    description:
      - Per-node facts as returned by C(hybridgpu.fleet.gpu_facts), one dict per node with
        C(hostname), C(side) (V(owned) or V(cloud)), C(gpu) (C(model), C(count), C(memory_mib),
        C(mig_mode)), C(driver_version), C(cuda_version), C(kernel), C(os) (C(id), C(version_id),
        C(pretty)), C(image_id), C(container_runtime), C(agent_version).
      - Nodes given in O(hosts) are added to these.
    type: list
    elements: dict
    default: []
  hosts:
    description:
      - Hosts as gathered, each C({hostname, node_group, gpu_facts}) with C(gpu_facts) the
        C(ansible_facts.hybridgpu_gpu) of M(hybridgpu.fleet.gpu_facts) on that host. Each becomes
        a node of O(nodes); its side is V(cloud) when it is in O(cloud_hosts), else V(owned).
      - Its agent version is the kubelet version its Node reports in O(k8s_node_info), else the
        version of a kubelet binary gpu_facts found on the host.
    type: list
    elements: dict
    default: []
  cloud_hosts:
    description: Names of the hosts in O(hosts) that are cloud nodes.
    type: list
    elements: str
    default: []
  k8s_node_info:
    description:
      - The C(results) of a M(hybridgpu.fleet.k8s_node_info) loop over a dict of contexts
        (C(dict2items)), so each has C(item.key) (the side), C(nodes) and C(server_version).
      - Gives the kubelet versions of O(hosts) and the API server version per side; O(api_server_versions) overrides the latter.
    type: list
    elements: dict
    default: []
  cloud:
    description:
      - Declared cloud values, used when no cloud node facts are given and to fill what the
        facts lack. Keys C(name), C(data_centre), C(kubernetes_version), C(node_count),
        C(os_image) (default V(Ubuntu 22.04 x86_64)), C(worker_spec) (C(gpu_model) default
        V(NVIDIA H200), C(gpu_count), C(gpu_memory_mib), C(driver_version), C(cuda_version)).
    type: dict
    default: {}
  job_image_cuda:
    description: CUDA version the job image was built against, for example V(12.4).
    type: str
  api_server_versions:
    description: kube-apiserver version per side, keys V(owned) and V(cloud). Owned rows fall back to the cloud version.
    type: dict
    default: {}
  holds:
    description:
      - Hold markers per node name, each a dict of C(air_gapped), C(shared_non_ai_production)
        (true holds the node) and C(security_signoff) (false holds the node).
    type: dict
    default: {}
  boundary_status:
    description: The C(status) result of M(hybridgpu.fleet.access_boundary); unsigned holds the nodes it covers.
    type: dict
  max_generation_distance:
    description: Most GPU architecture generations an owned row may be from the cloud row before its nodes are held.
    type: int
    default: 2
  cuda_compat:
    description:
      - V(strict) needs the toolkit's own minimum driver. V(minor_compat) accepts a driver that only
        meets the CUDA minor version compatibility floor, reported as a warning.
    type: str
    choices: [strict, minor_compat]
    default: strict
  cuda_driver_table:
    description: Extra or overriding rows, C(major.minor) to minimum driver version, for example V(12.4) to V(550.54.15).
    type: dict
    default: {}
  stack_check:
    description:
      - Judge the GPU software stack of the hosts in O(hosts) (see the description). Nodes given in
        O(nodes) are never judged for it.
    type: bool
    default: true
  fabricmanager:
    description:
      - When C(nvidia-fabricmanager) is required. V(auto) - NVSwitch devices are listed on the node, or it
        has 8 or more SXM GPUs; V(always); V(never).
    type: str
    choices: [auto, always, never]
    default: auto
  fail_on_violation:
    description: Fail the task when a rule of severity error is violated (the GPU stack rules included).
    type: bool
    default: false
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Build the matrix from gathered facts
  hybridgpu.fleet.compat_matrix:
    nodes: "{{ groups['all'] | map('extract', hostvars, 'hgpu_gpu_facts') | list }}"
    cloud:
      data_centre: us-west-1
      kubernetes_version: "1.31.2"
      node_count: 2
    job_image_cuda: "12.4"
    api_server_versions: {cloud: "1.31.2"}
    boundary_status: "{{ boundary.status }}"
  delegate_to: localhost
  run_once: true
  register: matrix

- name: Build the matrix from each host's gpu_facts and judge its GPU stack (fabric manager required everywhere)
  hybridgpu.fleet.compat_matrix:
    hosts: "{{ ansible_play_hosts | map('extract', hostvars, 'gathered_node') | list }}"
    cloud_hosts: "{{ groups['cloud'] | default([]) }}"
    k8s_node_info: "{{ k8s_nodes.results }}"
    fabricmanager: always
  delegate_to: localhost
  run_once: true
  register: matrix
"""

RETURN = r"""
matrix:
  description:
    - The matrix. Keys schema_version, columns, rows (cloud last), disagreements, inputs, checks, violations, holds, wave.
    - C(checks) holds one entry per rule and row, C({rule, row, status, message}); status V(pass), V(fail),
      V(warn) or V(not_evaluated). A GPU stack check also has C(nodes), the nodes of the row that failed it.
  returned: success
  type: dict
  sample:
    disagreements: [gpu_model, driver_branch]
    violations:
      - rule: cuda-driver-minimum
        severity: error
        rows: [a100-535]
        nodes: [dh1-a100-01, dh1-a100-02]
        message: driver 535.230.02 is older than 550.54.14 required by CUDA 12.4
        citation: {title: "NVIDIA CUDA Toolkit Release Notes ...", url: "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html"}
      - rule: gpu-stack-container-toolkit
        severity: error
        rows: [a100-535]
        nodes: [dh1-a100-02]
        message: "node dh1-a100-02: nvidia-container-toolkit not installed (no package, no nvidia-ctk)"
        citation: {title: "NVIDIA Container Toolkit, Installation Guide ...", url: "https://docs.nvidia.com/..."}
    checks:
      - {rule: gpu-stack-allocatable-gpus, row: a100-535, status: not_evaluated, nodes: [],
         message: "dh1-a100-01: no Node yet (not joined): judged after the join"}
    wave:
      nodes: [{node: dh1-a100-01, row: a100-535, purpose: row_representative}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import matrix, stack
from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight.nodes import api_server_versions, nodes_from_hosts
from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate import stack_check


def run(params):
    """Module logic without Ansible: returns (result, failure_message_or_None)."""
    node_info = params.get("k8s_node_info") or []
    nodes = list(params.get("nodes") or []) + nodes_from_hosts(params.get("hosts"), params.get("cloud_hosts"), node_info)
    api_versions = dict(api_server_versions(node_info), **(params.get("api_server_versions") or {}))
    judged = None
    if params.get("stack_check", True):
        judged = stack.judge(stack_check, params.get("hosts"), params.get("cloud_hosts"), node_info,
                             params.get("fabricmanager") or "auto")
    result = matrix.build(
        nodes, cloud=params.get("cloud") or {}, job_image_cuda=params.get("job_image_cuda"),
        api_server_versions=api_versions, holds=params.get("holds") or {},
        boundary_status=params.get("boundary_status"),
        max_generation_distance=params.get("max_generation_distance", 2),
        cuda_compat=params.get("cuda_compat", "strict"),
        cuda_driver_table=params.get("cuda_driver_table") or {}, stack=judged)
    errors = [v for v in result["violations"] if v["severity"] == "error"]
    if params.get("fail_on_violation") and errors:
        return result, "version rules violated: " + "; ".join(
            "%s on %s: %s" % (v["rule"], ",".join(v["rows"]), v["message"]) for v in errors)
    return result, None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nodes=dict(type="list", elements="dict", default=[]),
            hosts=dict(type="list", elements="dict", default=[]),
            cloud_hosts=dict(type="list", elements="str", default=[]),
            k8s_node_info=dict(type="list", elements="dict", default=[]),
            cloud=dict(type="dict", default={}),
            job_image_cuda=dict(type="str"),
            api_server_versions=dict(type="dict", default={}),
            holds=dict(type="dict", default={}),
            boundary_status=dict(type="dict"),
            max_generation_distance=dict(type="int", default=2),
            cuda_compat=dict(type="str", choices=["strict", "minor_compat"], default="strict"),
            cuda_driver_table=dict(type="dict", default={}),
            stack_check=dict(type="bool", default=True),
            fabricmanager=dict(type="str", choices=list(stack.FABRICMANAGER_MODES), default="auto"),
            fail_on_violation=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    try:
        result, failure = run(module.params)
    except matrix.MatrixError as exc:
        module.fail_json(msg="compat_matrix: bad input: %s" % exc)
    if failure:
        module.fail_json(msg=failure, matrix=result)
    module.exit_json(changed=False, matrix=result)


if __name__ == "__main__":
    main()
