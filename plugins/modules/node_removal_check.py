#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_removal_check
short_description: On a removed node, list what of the onboarding manifest remains and check standalone health
version_added: "0.1.0"
description:
  - Runs on the node. Takes the removal plan (from M(hybridgpu.fleet.node_removal_state))
    and reports every manifest artefact still present (SSH keys, units, files, packages,
    users, groups, directories, nft tables).
  - Standalone health - the units active before onboarding are active (a unit systemd starts
    on demand and that is not enabled may be idle), the packages it had are installed, the nft tables it had exist, and C(nvidia-smi) lists the GPUs.
  - Fails when O(fail) is true and anything remains or the health check fails.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.attributes.read_only
options:
  plan:
    description: The removal plan.
    type: dict
    required: true
  fail:
    description: Fail on leftovers or bad health.
    type: bool
    default: true
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Nothing from the manifest remains and the node works standalone
  hybridgpu.fleet.node_removal_check:
    plan: "{{ removal.plan }}"
"""

RETURN = r"""
leftovers:
  description: Artefacts still present, as C(kind name).
  returned: always
  type: list
  elements: str
health:
  description: >-
    C(ok), C(problems), C(gpus) (nvidia-smi lines), C(missing_units), C(idle_on_demand_units) (inactive
    units that systemd starts on demand, not counted as missing).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import node_checks


def main():
    module = AnsibleModule(
        argument_spec=dict(plan=dict(type="dict", required=True), fail=dict(type="bool", default=True)),
        supports_check_mode=True,
    )
    p = module.params["plan"]
    try:
        left = node_checks.node_leftovers(p)
        health = node_checks.health(p)
    except (KeyError, TypeError) as err:
        module.fail_json(msg="plan: missing or malformed field %s; pass node_removal_state's plan" % err)
    except node_checks.NodeReadError as err:
        module.fail_json(msg="%s: cannot read the node's state, so it cannot be called clean: %s"
                         % (p.get("node"), err))
    if module.params["fail"] and (left or not health["ok"]):
        module.fail_json(msg="%s is not a clean standalone node: leftovers [%s]; health problems [%s]"
                         % (p.get("node"), ", ".join(left), "; ".join(health["problems"])),
                         leftovers=left, health=health)
    module.exit_json(changed=False, leftovers=left, health=health)


if __name__ == "__main__":
    main()
