#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: provider_firewall
short_description: Cloud-side firewall of an instance through a provider-firewall interface
version_added: "0.1.0"
description:
  - Makes the custom firewall attached to a cloud instance hold exactly O(rules), each by
    protocol, port list and source CIDRs, like a provider console takes them. A source of
    C(0.0.0.0/0) or C(::/0) is refused.
  - Reports RV(all_open_before) when the instance was still behind an "all open" testing
    firewall (no custom firewall attached, or a rule open to every address).
  - O(provider=lab_nft) is the lab implementation, run on the cloud node itself, as an inet
    nftables table of its own (O(table)) with input policy drop, SSH from
    O(management_sources), and the rules. Other providers can be added as subclasses of
    C(ProviderFirewall) in C(module_utils/onboard/cloud_firewall.py).
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  provider:
    description: Provider implementation.
    type: str
    choices: [lab_nft]
    default: lab_nft
  state:
    description: C(present) applies the rules, C(absent) detaches and deletes the custom firewall.
    type: str
    choices: [present, absent]
    default: present
  rules:
    description: Rules, each C(name), C(protocol) (tcp or udp), C(ports) (list) and C(sources) (CIDRs).
    type: list
    elements: dict
    default: []
  management_sources:
    description: (lab_nft) CIDRs allowed to reach SSH; must cover O(control_address).
    type: list
    elements: str
    default: []
  control_address:
    description: (lab_nft) Address the control host connects from.
    type: str
  ssh_port:
    description: (lab_nft) SSH port.
    type: int
    default: 22
  table:
    description: (lab_nft) Name of the inet table standing in for the provider firewall.
    type: str
    default: hybridgpu_provider
  state_dir:
    description: (lab_nft) Where the applied rules and listing are kept.
    type: path
    default: /var/lib/hybridgpu/provider-firewall
attributes:
  check_mode:
    support: full
    details: Checks the ruleset and reports what would change.
  diff_mode:
    support: full
    details: Before and after are the rule lists.
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Only the site's NAT egress may scrape the exporters
  hybridgpu.fleet.provider_firewall:
    management_sources: [10.40.0.10/32]
    rules:
      - {name: scrape-node-exporter, protocol: tcp, ports: ["9100"], sources: [10.40.0.10/32]}
"""

RETURN = r"""
rules:
  description: The rules attached after the run.
  returned: always
  type: list
  elements: dict
all_open_before:
  description: True when the instance was behind an "all open" firewall before the run.
  returned: always
  type: bool
all_open:
  description: True when the instance is still behind an "all open" firewall after the run.
  returned: always
  type: bool
"""

import json

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import cloud_firewall


def main():
    module = AnsibleModule(
        argument_spec=dict(
            provider=dict(type="str", default="lab_nft", choices=sorted(cloud_firewall.PROVIDERS)),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            rules=dict(type="list", elements="dict", default=[]),
            management_sources=dict(type="list", elements="str", default=[]),
            control_address=dict(type="str"),
            ssh_port=dict(type="int", default=22),
            table=dict(type="str", default="hybridgpu_provider"),
            state_dir=dict(type="path", default="/var/lib/hybridgpu/provider-firewall"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    nft_bin = module.get_bin_path("nft", required=True)

    def run(args, data=None):
        if args and args[0] == "nft":
            args = [nft_bin] + list(args[1:])
        # nft exits 1 for every refusal (no such table, a bad ruleset): the provider reads it
        return cmd.module_run(module, args, data=data, ok=(0, 1))

    fw = cloud_firewall.LabNftProvider(run, p["management_sources"], table=p["table"], ssh_port=p["ssh_port"],
                                       control_address=p["control_address"], state_dir=p["state_dir"])
    try:
        before = fw.list()
        if p["state"] == "absent":
            changed = fw.delete(check_mode=module.check_mode)
            after = None
        else:
            rules = cloud_firewall.normalize_rules(p["rules"])
            changed = fw.apply(rules, check_mode=module.check_mode)
            after = rules
    except (cloud_firewall.ProviderError, cmd.CommandError) as err:
        module.fail_json(msg="Provider firewall (%s, table %s): %s" % (p["provider"], p["table"], err))
    result = dict(changed=changed, rules=after or [], all_open_before=cloud_firewall.all_open(before),
                  all_open=cloud_firewall.all_open(after))
    if changed and module._diff:
        result["diff"] = dict(before=json.dumps(before, indent=1, sort_keys=True) + "\n" if before else "",
                              after=json.dumps(after, indent=1, sort_keys=True) + "\n" if after else "")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
