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
  - Makes the collection's firewall for a cloud instance hold exactly O(rules), each by
    protocol, port list and source CIDRs, and attaches it to the instance. A source of
    C(0.0.0.0/0) or C(::/0) is refused.
  - The module reads the firewall, plans (create, add, remove, attach), shows the plan and
    a diff, applies it, and reads it back. A rule in that firewall the collection did not add
    is reported in RV(drift) and left in place unless O(remove_drift=true).
  - O(state=absent) removes what the collection added, no more - the attachment to this
    instance and, when no other instance uses the firewall, its rules and the firewall
    itself (kept while hand-made rules remain in it).
  - Flags every "all open" firewall or rule (C(0.0.0.0/0) or C(::/0) on all ports, or the
    provider's preset All Open firewall) that applies to the instance, in RV(findings).
  - O(provider=nft) is for bare-metal cloud nodes the site reaches over SSH - an inet nftables
    table of its own on the node (O(firewall)) with input policy drop, SSH from
    O(management_sources), and the rules. Run it on the node.
  - O(provider=aws) is an EC2 security group per VPC, named O(firewall) and tagged as the
    collection's, attached to every network interface of O(instance_id); rules the
    collection adds carry the description C(hybridgpu.fleet:<name>). Run it where C(boto3)
    is installed (usually the control host). Credentials come from the standard boto3
    chain (environment, shared files, instance role) or O(profile), O(access_key) and
    O(secret_key).
  - Other providers are written as described in C(docs/cloud_firewall_providers.md).
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  provider:
    description: Provider implementation.
    type: str
    choices: [aws, nft]
    required: true
  state:
    description: C(present) applies the rules and attaches the firewall, C(absent) removes what the collection added.
    type: str
    choices: [present, absent]
    default: present
  rules:
    description: Rules, each C(name), C(protocol) (tcp or udp), C(ports) (list of ports or C(lo-hi) ranges) and C(sources) (CIDRs).
    type: list
    elements: dict
    default: []
  firewall:
    description:
      - Name of the collection's firewall. nft - the inet table (default C(hybridgpu_provider)).
        aws - the security group name in the instance's VPC (default C(hybridgpu-fleet)).
    type: str
    aliases: [table]
  remove_drift:
    description: Also remove rules in the collection's firewall that it did not add (reported in RV(drift)).
    type: bool
    default: false
  management_sources:
    description: (nft) CIDRs allowed to reach SSH; must cover O(control_address).
    type: list
    elements: str
    default: []
  control_address:
    description: (nft) Address the control host connects from.
    type: str
  ssh_port:
    description: (nft) SSH port.
    type: int
    default: 22
  state_dir:
    description: (nft) Where the applied rules, listing and boot copy are kept on the node.
    type: path
    default: /var/lib/hybridgpu/provider-firewall
  boot:
    description:
      - (nft) Load the table again at every boot, before the network comes up - a copy of the live table in
        O(state_dir) and a systemd unit C(hybridgpu-nft-<firewall>.service) that loads it, kept in step on every
        run and removed with the table.
    type: bool
    default: true
  instance_id:
    description: (aws) The EC2 instance; required with O(provider=aws).
    type: str
  region:
    description: (aws) AWS region; default from the boto3 chain (C(AWS_REGION), profile).
    type: str
  profile:
    description: (aws) Named profile of the shared credentials files.
    type: str
  endpoint_url:
    description: (aws) EC2 endpoint, for a VPC endpoint or a compatible API.
    type: str
  access_key:
    description: (aws) Access key id; default from the boto3 chain.
    type: str
    aliases: [aws_access_key_id]
  secret_key:
    description: (aws) Secret access key; default from the boto3 chain.
    type: str
    aliases: [aws_secret_access_key]
  session_token:
    description: (aws) Session token of temporary credentials.
    type: str
  retries:
    description: (aws) Attempts per API call while AWS throttles (exponential backoff between them).
    type: int
    default: 5
requirements:
  - boto3 (provider aws)
attributes:
  check_mode:
    support: full
    details: Reads the firewall and reports the plan and the state it would leave.
  diff_mode:
    support: full
    details: Before and after are the firewall, its rules, the drift and whether it is attached.
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Only the site's NAT egress may scrape the exporters (bare-metal node over SSH)
  hybridgpu.fleet.provider_firewall:
    provider: nft
    management_sources: [10.40.0.10/32]
    rules:
      - {name: scrape-node-exporter, protocol: tcp, ports: ["9100"], sources: [10.40.0.10/32]}

- name: The same rule as a security group on an EC2 instance
  hybridgpu.fleet.provider_firewall:
    provider: aws
    region: eu-west-1
    instance_id: i-0123456789abcdef0
    rules:
      - {name: scrape-node-exporter, protocol: tcp, ports: ["9100"], sources: [203.0.113.10/32]}
  delegate_to: localhost
"""

RETURN = r"""
rules:
  description: The rules the collection's firewall holds after the run (as it would in check mode).
  returned: always
  type: list
  elements: dict
firewall:
  description: The collection's firewall (C(id), C(name), C(scope) - the VPC or nft family), or null when there is none.
  returned: always
  type: dict
drift:
  description: Rules in the collection's firewall it did not add (left unless O(remove_drift)).
  returned: always
  type: list
  elements: dict
plan:
  description: The steps taken (or that would be) - create, add, remove, remove_drift, attach, detach, delete.
  returned: always
  type: dict
findings:
  description: All-open firewalls or rules that apply to the instance after the run, each C(firewall), C(id) and C(rule).
  returned: always
  type: list
  elements: dict
all_open_before:
  description: True when an "all open" firewall or rule applied to the instance before the run.
  returned: always
  type: bool
all_open:
  description: True when an "all open" firewall or rule still applies to the instance after the run.
  returned: always
  type: bool
"""

import json

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import cloud_firewall
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard.cloud_firewall import aws, nftables

SPEC = dict(
    provider=dict(type="str", required=True, choices=["aws", "nft"]),
    state=dict(type="str", default="present", choices=["present", "absent"]),
    rules=dict(type="list", elements="dict", default=[]),
    firewall=dict(type="str", aliases=["table"]),
    remove_drift=dict(type="bool", default=False),
    management_sources=dict(type="list", elements="str", default=[]),
    control_address=dict(type="str"),
    ssh_port=dict(type="int", default=22),
    state_dir=dict(type="path", default="/var/lib/hybridgpu/provider-firewall"),
    boot=dict(type="bool", default=True),
    instance_id=dict(type="str"),
    region=dict(type="str"),
    profile=dict(type="str"),
    endpoint_url=dict(type="str"),
    access_key=dict(type="str", no_log=True, aliases=["aws_access_key_id"]),
    secret_key=dict(type="str", no_log=True, aliases=["aws_secret_access_key"]),
    session_token=dict(type="str", no_log=True),
    retries=dict(type="int", default=5),
)


def nft_provider(module):
    p = module.params
    nft_bin = module.get_bin_path("nft", required=True)

    def run(args, data=None):
        if args and args[0] == "nft":
            args = [nft_bin] + list(args[1:])
        # nft exits 1 for every refusal (no such table, a bad ruleset): the provider reads it
        return cmd.module_run(module, args, data=data, ok=(0, 1))

    return nftables.NftProvider(run, p["management_sources"], table=p["firewall"] or "hybridgpu_provider",
                                ssh_port=p["ssh_port"], control_address=p["control_address"],
                                state_dir=p["state_dir"], boot=p["boot"], nft_binary=nft_bin)


def aws_provider(module):
    p = module.params
    if not aws.HAS_BOTO3:
        module.fail_json(msg=missing_required_lib("boto3"))
    try:
        ec2 = aws.client(region=p["region"], profile=p["profile"], endpoint_url=p["endpoint_url"],
                         access_key=p["access_key"], secret_key=p["secret_key"], session_token=p["session_token"])
    except aws.SDK_ERRORS as err:  # an unknown profile, no region
        module.fail_json(msg="Provider firewall (aws): cannot make an EC2 client: %s" % err)
    return aws.AwsProvider(ec2, p["instance_id"], group_name=p["firewall"] or "hybridgpu-fleet", retries=p["retries"])


def run_plan(module, fw):
    """Read, plan, apply and read back; returns (before, steps, after)."""
    p = module.params
    before = fw.read()
    if p["state"] == "absent":
        wanted = None
        steps = cloud_firewall.removal_plan(before, remove_drift=p["remove_drift"])
    else:
        wanted = cloud_firewall.normalize_rules(p["rules"])
        steps = cloud_firewall.plan(before, wanted, remove_drift=p["remove_drift"])
    if not cloud_firewall.changed(steps):
        return before, steps, before
    if module.check_mode:
        return before, steps, cloud_firewall.project(before, steps, wanted)
    fw.execute(steps)
    after = fw.read()
    if wanted is not None and (cloud_firewall.atoms(after["rules"]) != cloud_firewall.atoms(wanted)
                               or not after["attached"]):
        raise cloud_firewall.ProviderError("read back after applying differs: holds %s, attached %s"
                                           % (json.dumps(after["rules"]), after["attached"]))
    return before, steps, after


def main():
    module = AnsibleModule(argument_spec=SPEC, supports_check_mode=True,
                           required_if=[("provider", "aws", ["instance_id"])])
    p = module.params
    fw = aws_provider(module) if p["provider"] == "aws" else nft_provider(module)
    try:
        before, steps, after = run_plan(module, fw)
    except (cloud_firewall.ProviderError, cmd.CommandError) as err:
        # Each step is read before it is planned, so a rerun finishes a run that stopped half-way.
        module.fail_json(msg="Provider firewall (%s, firewall %s): %s; a rerun continues from what was done"
                         % (p["provider"], p["firewall"] or "default", err))
    found = cloud_firewall.findings(after)
    changed = cloud_firewall.changed(steps)
    if p["provider"] == "nft":
        try:
            changed = fw.ensure_boot(module.check_mode) or changed
        except (cloud_firewall.ProviderError, cmd.CommandError) as err:
            module.fail_json(msg="Provider firewall (nft, firewall %s): the boot copy: %s" % (p["firewall"] or "default", err))
    result = dict(changed=changed, rules=after["rules"], firewall=after["firewall"], drift=after["drift"],
                  plan=steps, findings=found, all_open_before=bool(cloud_firewall.findings(before)),
                  all_open=bool(found))
    if after["drift"]:
        module.warn("%d rule(s) in firewall %s were not added by the collection (drift, %s)"
                    % (len(after["drift"]), after["firewall"]["name"], "left" if not p["remove_drift"] else "removed"))
    if changed and module._diff:
        result["diff"] = dict(before=_text(cloud_firewall.view(before)), after=_text(cloud_firewall.view(after)))
    module.exit_json(**result)


def _text(view):
    return json.dumps(view, indent=1, sort_keys=True) + "\n" if view else ""


if __name__ == "__main__":
    main()
