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
    grants it. Read-only; run it before any change.
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard.agents import AgentError, check as check_agents
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.boundary import load_boundary
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import schema


def main():
    module = AnsibleModule(
        argument_spec=dict(agents=dict(type="list", elements="dict", required=True),
                           boundary=dict(type="path", required=True)),
        supports_check_mode=True,
    )
    try:
        boundary = load_boundary(module.params["boundary"])
        agents = check_agents(module.params["agents"], boundary.allowed_agents())
    except schema.SchemaError as err:
        module.fail_json(msg="Access boundary %s is invalid: %s" % (module.params["boundary"], err))
    except AgentError as err:
        module.fail_json(msg="Refusing agents (boundary %s): %s" % (module.params["boundary"], err))
    module.exit_json(changed=False, agents=agents)


if __name__ == "__main__":
    main()
