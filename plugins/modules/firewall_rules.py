#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: firewall_rules
short_description: Derive a node's host or provider firewall rules from the path table and boundary
version_added: "0.1.0"
description:
  - Reads the preflight path table and, for owned nodes, the access boundary, and returns
    the firewall rules for one node. Read-only; the action plugin of the same name runs it on
    the control host, in the playbook's own process.
  - C(side=owned) returns C(host_firewall) variables, SSH allowed from the narrowest
    sources of the management paths into the node, every other allowed path into the node
    with its narrowest source, and the egress allowlist of the boundary's data-placement
    section.
  - C(side=cloud) returns provider firewall rules, where a path that starts at the site
    uses the address the site's traffic really arrives from (O(site_arrival)).
  - Fails, naming the node and file, when no management SSH path reaches an owned node
    (a firewall would cut the management path).
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.attributes.read_only
options:
  node:
    description: Node name as listed in the path table's C(hosts).
    type: str
    required: true
  side:
    description: C(owned) for the host firewall, C(cloud) for the provider firewall.
    type: str
    choices: [owned, cloud]
    default: owned
  path_table:
    description: Path table file (C(inventories/<site>/preflight/paths.yml)).
    type: path
    required: true
  boundary:
    description: Access boundary file; its egress allowlist becomes the egress rules.
    type: path
  ssh_port:
    description: SSH port of the node.
    type: int
    default: 22
  extra_inbound:
    description: More host inbound rules (name, protocol, ports, sources) not yet in the path table.
    type: list
    elements: dict
    default: []
  extra_provider_rules:
    description: More provider rules (name, protocol, ports, sources).
    type: list
    elements: dict
    default: []
  enforce_egress:
    description: Turn the egress allowlist into an output chain with policy drop.
    type: bool
    default: true
  site_arrival:
    description: CIDRs the site's traffic arrives from at the provider (NAT egress or routed range).
    type: list
    elements: str
    default: []
  site_group:
    description: Path table group of the site's hosts.
    type: str
    default: owned
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Host firewall variables for an owned node
  hybridgpu.fleet.firewall_rules:
    node: "{{ inventory_hostname }}"
    path_table: "{{ inventory_dir }}/preflight/paths.yml"
    boundary: "{{ inventory_dir }}/preflight/boundary.yml"
  delegate_to: localhost
  register: fw
"""

RETURN = r"""
management_sources:
  description: CIDRs allowed to reach SSH (owned side).
  returned: side is owned
  type: list
  elements: str
inbound:
  description: Inbound rules in nft_ruleset format (owned side).
  returned: side is owned
  type: list
  elements: dict
egress:
  description: Egress allowlist in nft_ruleset format (owned side).
  returned: side is owned
  type: dict
provider_rules:
  description: Provider firewall rules (cloud side).
  returned: side is cloud
  type: list
  elements: dict
"""

from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import firewall_rules_task
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.controller_task import run_module


def main():
    run_module(firewall_rules_task.ARGUMENT_SPEC, firewall_rules_task.execute, supports_check_mode=True)


if __name__ == "__main__":
    main()
