#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: cidr_overlap
short_description: List every overlapping pair between on-prem and cloud address ranges
version_added: "0.1.0"
description:
  - Compares on-prem ranges (node, pod, service, management) with cloud VPC and subnet ranges,
    IPv4 and IPv6, and returns every overlapping pair with its relation (equal, contains,
    contained_by, partial). Adjacent ranges do not overlap.
  - Uses a sort-and-sweep over the ranges (C(O(n log n + k))), so 10,000 ranges stay fast.
  - Pure computation; it changes nothing.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.attributes.read_only
options:
  onprem:
    description: On-prem ranges, each C({name, cidr, kind}); C(kind) is free text such as V(node), V(pod), V(service), V(management).
    type: list
    elements: dict
    required: true
  cloud:
    description: Cloud ranges, each C({name, cidr, kind}) with C(kind) such as V(vpc) or V(subnet).
    type: list
    elements: dict
    required: true
  within_side:
    description: Also report overlaps between ranges of the same side.
    type: bool
    default: false
  fail_on_overlap:
    description: Fail the task when any pair overlaps.
    type: bool
    default: false
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Compare the on-prem ranges with the cloud default VPC
  hybridgpu.fleet.cidr_overlap:
    onprem:
      - {name: nodes, cidr: 10.40.1.0/24, kind: node}
      - {name: pods, cidr: 10.244.0.0/16, kind: pod}
    cloud:
      - {name: default-vpc, cidr: 10.0.0.0/8, kind: vpc}
    fail_on_overlap: true
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
overlaps:
  description: Overlapping pairs, on-prem side first.
  returned: success
  type: list
  elements: dict
  sample:
    - a: {side: onprem, name: nodes, cidr: 10.40.1.0/24, kind: node}
      b: {side: cloud, name: default-vpc, cidr: 10.0.0.0/8, kind: vpc}
      relation: contained_by
      ip_version: 4
      overlap: 10.40.1.0-10.40.1.255
count:
  description: Number of overlapping pairs.
  returned: success
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import cidr


def run(params):
    pairs = cidr.overlaps(params["onprem"], params["cloud"], params.get("within_side", False))
    failure = None
    if params.get("fail_on_overlap") and pairs:
        failure = "%d overlapping range pair(s): %s" % (len(pairs), "; ".join(
            "%s %s overlaps %s %s" % (p["a"]["name"], p["a"]["cidr"], p["b"]["name"], p["b"]["cidr"])
            for p in pairs[:20]))
    return {"overlaps": pairs, "count": len(pairs)}, failure


def main():
    module = AnsibleModule(
        argument_spec=dict(
            onprem=dict(type="list", elements="dict", required=True),
            cloud=dict(type="list", elements="dict", required=True),
            within_side=dict(type="bool", default=False),
            fail_on_overlap=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    try:
        result, failure = run(module.params)
    except cidr.CidrError as exc:
        module.fail_json(msg="cidr_overlap: %s" % exc)
    if failure:
        module.fail_json(msg=failure, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
