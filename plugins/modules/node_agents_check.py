#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_agents_check
short_description: Check agents declared as data against the access boundary
version_added: "0.1.0"
description:
  - Validates each declared agent (name, package or binary, systemd unit, user, privileges,
    capabilities, outbound endpoints, listening ports) and refuses any agent that the
    access boundary does not list, or whose outbound endpoints go beyond what the boundary
    grants it. Read-only; run it before any change. The action plugin of the same name runs it on
    the control host, in the playbook's own process.
  - Returns the normalized agents, each with the text of its least-privilege systemd
    drop-in (dedicated user, C(NoNewPrivileges), C(ProtectSystem=strict), only the listed
    capabilities in C(CapabilityBoundingSet)).
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.attributes.read_only
options:
  agents:
    description: The declared agents.
    type: list
    elements: dict
    required: true
  boundary:
    description: Access boundary file (C(inventories/<site>/preflight/boundary.yml)).
    type: path
    required: true
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Refuse agents the boundary does not list
  hybridgpu.fleet.node_agents_check:
    boundary: "{{ inventory_dir }}/preflight/boundary.yml"
    agents:
      - name: dcgm-exporter
        package: datacenter-gpu-manager-exporter
        systemd_unit: nvidia-dcgm-exporter.service
        user: nvidia-dcgm-exporter
        capabilities: []
        outbound: []
        listen: [9400]
  delegate_to: localhost
  register: agents
"""

RETURN = r"""
agents:
  description: Normalized agents with C(dropin) (drop-in text) and C(dedicated_user).
  returned: always
  type: list
  elements: dict
"""

from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import agents_task
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.controller_task import run_module


def main():
    run_module(agents_task.ARGUMENT_SPEC, agents_task.execute, supports_check_mode=True)


if __name__ == "__main__":
    main()
