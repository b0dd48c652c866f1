#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: preflight_inputs
short_description: Load and validate the preflight input files in one run
version_added: "0.1.0"
description:
  - Reads the matrix inputs, the declared cloud row and the on-prem and cloud address ranges,
    validates each against its schema and returns them for M(hybridgpu.fleet.compat_matrix) and
    M(hybridgpu.fleet.cidr_overlap).
  - Resolves the path-MTU targets, filling each target's C(address) from the path table's hosts
    by its C(destination), for M(hybridgpu.fleet.pmtu_probe).
  - 'Every problem of every file is reported at once as C(<file>: <field.path>: <problem>).
    Unknown keys, wrong types (a string where a mapping is expected, an unquoted version that
    YAML reads as a number), impossible values (negative counts, malformed versions, CIDRs
    with host bits set), duplicate keys and malformed YAML (with its line) are refused.'
  - The path table and the access boundary are validated by M(hybridgpu.fleet.path_table) and
    M(hybridgpu.fleet.access_boundary).
  - Reads only; it changes nothing.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.attributes.read_only
options:
  matrix:
    description:
      - Path of the matrix inputs file. Keys, each optional, C(job_image_cuda) (a quoted version
        such as V("12.4")), C(holds) (per node name a mapping of C(air_gapped),
        C(shared_non_ai_production) and C(security_signoff), each true or false), C(cuda_compat)
        (V(strict) or V(minor_compat)), C(max_generation_distance) (an integer, 0 or more) and
        C(cuda_driver_table) (C(major.minor) to a quoted minimum driver version).
      - Omitted, the file is not read and RV(matrix) is not returned.
    type: path
  cloud:
    description:
      - Path of the declared cloud row. Keys, each optional, C(name), C(data_centre),
        C(kubernetes_version) (a quoted version), C(node_count) (0 or more), C(os_image) and
        C(worker_spec) (a mapping of C(gpu_model), C(gpu_count), C(gpu_memory_mib), C(mig_mode),
        C(driver_version), C(cuda_version), C(kernel), C(container_runtime)).
      - Omitted, the file is not read and RV(cloud) is not returned.
    type: path
  onprem_ranges:
    description:
      - Path of the on-prem address ranges, a list of C({name, cidr, kind}) (C(name) and C(kind)
        optional) or a mapping of name to CIDR.
      - Omitted, the file is not read and RV(onprem_ranges) is not returned.
    type: path
  cloud_ranges:
    description: Path of the cloud address ranges, in the form of O(onprem_ranges).
    type: path
  pmtu_targets:
    description:
      - Path-MTU targets, each with C(id), C(source) (the path-table name of the host it runs
        on), C(destination) (a path-table host name) or C(address), and optional C(expected_mtu),
        C(max_mtu), C(min_mtu) (68 to 65535). Ids must be unique.
    type: list
    elements: dict
    default: []
  pmtu_targets_name:
    description: The name errors give the target list, for example the role variable that holds it.
    type: str
    default: pmtu_targets
  path_hosts:
    description: Host name to address, the C(hosts) result of M(hybridgpu.fleet.path_table).
    type: dict
    default: {}
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Validate the path table first, for its host addresses
  hybridgpu.fleet.path_table:
    path: "{{ inventory_dir }}/preflight/paths.yml"
  delegate_to: localhost
  run_once: true
  register: table

- name: Load and validate the preflight inputs
  hybridgpu.fleet.preflight_inputs:
    matrix: "{{ inventory_dir }}/preflight/matrix.yml"
    cloud: "{{ inventory_dir }}/preflight/cloud.yml"
    onprem_ranges: "{{ inventory_dir }}/preflight/onprem-ranges.yml"
    cloud_ranges: "{{ inventory_dir }}/preflight/cloud-ranges.yml"
    pmtu_targets:
      - {id: control-to-a100-01, source: control, destination: dh1-a100-01, expected_mtu: 1500}
    path_hosts: "{{ table.hosts }}"
  delegate_to: localhost
  run_once: true
  register: inputs

- name: Build the matrix from them
  hybridgpu.fleet.compat_matrix:
    nodes: []
    cloud: "{{ inputs.cloud }}"
    job_image_cuda: "{{ inputs.matrix.job_image_cuda | default(omit, true) }}"
    holds: "{{ inputs.matrix.holds }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
matrix:
  description: The matrix inputs as written, every absent key at its default.
  returned: when O(matrix) is given
  type: dict
  sample: {job_image_cuda: "12.4", holds: {}, cuda_compat: strict, max_generation_distance: 2, cuda_driver_table: {}}
cloud:
  description: The declared cloud row as written.
  returned: when O(cloud) is given
  type: dict
  sample: {name: cloud, kubernetes_version: "1.31.2", node_count: 2, worker_spec: {gpu_model: NVIDIA H200, gpu_count: 8}}
onprem_ranges:
  description: The on-prem ranges as written.
  returned: when O(onprem_ranges) is given
  type: raw
  sample: [{name: site-nodes, cidr: 192.0.2.0/24, kind: node}]
cloud_ranges:
  description: The cloud ranges as written.
  returned: when O(cloud_ranges) is given
  type: raw
  sample: [{name: default-vpc, cidr: 10.0.0.0/8, kind: vpc}]
pmtu_targets:
  description: The path-MTU targets, each with its C(address) filled in.
  returned: success
  type: list
  elements: dict
  sample: [{id: control-to-a100-01, source: control, destination: dh1-a100-01, expected_mtu: 1500, address: 192.0.2.11}]
errors:
  description: 'Every problem found, as C(<file>: <field.path>: <problem>).'
  returned: failure
  type: list
  elements: str
  sample: ["matrix.yml: job_image_cuda: expected a quoted version like \"12.4\", got number 12.4"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import inputs as pi


def run(params):
    """Module logic without Ansible: returns (result, failure_message_or_None)."""
    files = {kind: params.get(kind) for kind in ("matrix", "cloud", "onprem_ranges", "cloud_ranges")}
    result, problems = pi.load_inputs(files, params.get("pmtu_targets") or [], params.get("path_hosts") or {},
                                      params.get("pmtu_targets_name") or "pmtu_targets")
    if problems:
        return {"errors": [e for _kind, errors in problems for e in errors]}, pi.failure_message(problems)
    return result, None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            matrix=dict(type="path"),
            cloud=dict(type="path"),
            onprem_ranges=dict(type="path"),
            cloud_ranges=dict(type="path"),
            pmtu_targets=dict(type="list", elements="dict", default=[]),
            pmtu_targets_name=dict(type="str", default="pmtu_targets"),
            path_hosts=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    result, failure = run(module.params)
    if failure:
        module.fail_json(msg=failure, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
