#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: api_guard
short_description: Keep the nft table that lets only member nodes reach the Kubernetes API
version_added: "0.1.0"
description:
  - Runs on a host in front of the Kubernetes API (a control-plane host or the API load
    balancer). Keeps one C(inet) table of the collection's own there, with a set C(members)
    of IPv4 addresses and an input chain (priority -5, policy accept) with one rule that drops
    traffic to the guarded TCP O(ports) from the O(managed_sources) whose address is not a member.
  - Traffic from outside the managed sources, and to any other port, is never touched, and no
    other table is edited. Node onboarding adds a node before it joins; node removal deletes it
    after its Node and credentials are gone, which closes the removed node's path to the API
    even though its client certificate stays valid until it expires.
  - Members change one element at a time (C(nft add element) / C(nft delete element)); the set
    is never flushed. The table, the set and the rule are created or corrected in one C(nft -f)
    transaction, checked first with C(nft -c), that leaves the set's elements as they are.
  - IPv4 only; IPv6 sources are not covered.
  - With O(boot=true) the table, members included, is loaded again at every boot by a systemd
    unit C(hybridgpu-nft-<table>.service) from C(<state_dir>/<table>.boot.nft), a copy kept in
    step with every change.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  state:
    description:
      - C(present) creates the table when missing and adds O(members).
      - C(absent) deletes O(members) from the set (the table stays).
      - C(removed) deletes the whole table, its boot copy and its boot unit.
    type: str
    choices: [present, absent, removed]
    default: present
  members:
    description: IPv4 addresses to add (O(state=present)) or delete (O(state=absent)).
    type: list
    elements: str
    default: []
  seed:
    description:
      - IPv4 addresses added only when the table is created, for example the InternalIPs of the
        cluster's current Nodes, so that nodes already joined are never cut off. Ignored once the
        table exists.
    type: list
    elements: str
    default: []
  managed_sources:
    description:
      - IPv4 networks whose traffic to O(ports) is dropped unless the address is a member.
        Required to create the table; left out, the sources of the existing rule are kept.
      - Keep it to the networks of the managed nodes; the control host and other clients of the
        API must not be inside it unless they are members.
    type: list
    elements: str
  ports:
    description: TCP ports guarded (the API server's).
    type: list
    elements: int
    default: [6443]
  table:
    description: Name of the C(inet) table.
    type: str
    default: hybridgpu_api_guard
  boot:
    description: Load the table again at boot (boot copy and systemd unit); C(false) removes both.
    type: bool
    default: true
  state_dir:
    description: Where the boot copy is kept.
    type: path
    default: /var/lib/hybridgpu/api-guard
  unit_dir:
    description: Where the boot unit is written.
    type: path
    default: /etc/systemd/system
attributes:
  check_mode:
    support: full
    details: Reads the table and reports the members that would be added or deleted; nothing is written.
  diff_mode:
    support: full
    details: Before and after are the set's members, one address a line.
requirements:
  - nft (nftables) on the host in front of the API; root
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Let the node reach the API before it joins
  hybridgpu.fleet.api_guard:
    members: ["10.20.0.11"]
    managed_sources: ["10.20.0.0/24"]
    seed: "{{ current_node_ips }}"
  delegate_to: api-lb-1

- name: Close the removed node's path to the API
  hybridgpu.fleet.api_guard:
    state: absent
    members: ["10.20.0.11"]
  delegate_to: api-lb-1

- name: Take the guard away
  hybridgpu.fleet.api_guard:
    state: removed
"""

RETURN = r"""
members:
  description: The set's members after the run (as they would be, in check mode).
  returned: always
  type: list
  elements: str
added:
  description: Members added by this run.
  returned: always
  type: list
  elements: str
removed:
  description: Members deleted by this run.
  returned: always
  type: list
  elements: str
created:
  description: Whether the table was (or would be) created.
  returned: always
  type: bool
managed_sources:
  description: The guarded source networks, merged.
  returned: when state is present
  type: list
  elements: str
ports:
  description: The guarded TCP ports.
  returned: when state is present
  type: list
  elements: int
ruleset:
  description: The nft -f input that creates the table and writes the rule.
  returned: when state is present
  type: str
boot_unit:
  description: Name of the unit that loads the table at boot (null with O(boot=false)).
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import api_guard


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", default="present", choices=["present", "absent", "removed"]),
            members=dict(type="list", elements="str", default=[]),
            seed=dict(type="list", elements="str", default=[]),
            managed_sources=dict(type="list", elements="str"),
            ports=dict(type="list", elements="int", default=[6443]),
            table=dict(type="str", default="hybridgpu_api_guard"),
            boot=dict(type="bool", default=True),
            state_dir=dict(type="path", default="/var/lib/hybridgpu/api-guard"),
            unit_dir=dict(type="path", default="/etc/systemd/system"),
        ),
        supports_check_mode=True,
    )
    nft_binary = module.get_bin_path("nft")
    if not nft_binary:
        module.fail_json(msg="nft is not installed on %s (the API guard needs it)" % module.params.get("table"))

    def run(args, data=None):
        return module.run_command(args, data=data, binary_data=True)

    try:
        guard = api_guard.Guard(run, module.params["table"], nft_binary, module.params["state_dir"], module.params["unit_dir"])
        result = api_guard.run(guard, module.params, module.check_mode)
    except api_guard.GuardError as err:
        module.fail_json(msg="API guard: %s" % err)
    if not module._diff:
        result.pop("diff", None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
