#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

# Documentation only: the action plugin of the same name (plugins/action/node_removal_step.py) runs
# the task. It declares supports_check_mode (_supports_check_mode = True) and hands the task's
# check mode to the modules it runs on the node.

DOCUMENTATION = r"""
module: node_removal_step
short_description: Run one node-side phase of a node removal, under the change record it verifies itself
version_added: "0.5.0"
description:
  - On the control host, before anything runs on the node, verifies the signed change record
    itself (the same check as M(hybridgpu.fleet.change_approval), action C(remove)) - the boundary
    at the pinned path signed by the pinned boundary signers, the record signed by an approver of
    C(remove) for this playbook, the run's hosts as targets, the executor, an open window and the
    ledger of used change ids (the same run again resumes an interrupted removal). The node is the
    host the task runs for and must be an approved target.
  - What it removes comes only from the removal state C(<records>/removals/<node>/<change_id>.json)
    in the pinned records folder, and only from the manifest snapshot in it whose SHA-256 the
    record names in C(manifests) for the node; a state or manifest written or edited by anyone
    else fails that digest. The plan is computed from that snapshot on the control host; every
    path must be absolute and normalised, every user, group, package, unit and table name must
    match its pattern, before any of it reaches the node. No plan, list or state is taken from the
    task or from variables.
  - V(stop_agent) stops the management agent (O(agent_unit)) and the join's units, when the
    manifest recorded them, so nothing registers the Node again.
  - V(credentials) reads the client certificate's serial and expiry, runs the join's recorded
    reset or uninstall command, and removes the SSH keys onboarding installed.
  - V(agents) stops and disables the units onboarding added, removes its files, purges the
    packages it installed, removes the users and groups it created, and reloads systemd.
  - V(firewall) deletes the collection's nft tables, detaches the provider firewall and removes
    the directories onboarding created (deepest first).
  - V(restore) starts the units the node ran before onboarding and loads the nft tables it had,
    when they are missing.
  - V(api_guard), delegated to a host in front of the API, deletes the node's O(address) from the
    API guard there (M(hybridgpu.fleet.api_guard), O(api_guard_table)). It runs on every run of a
    removal, also after the removal finished (the record is still verified, window included).
extends_documentation_fragment:
  - hybridgpu.fleet.change_record
  - hybridgpu.fleet.attributes
options:
  phase:
    description: The node-side phase to run.
    type: str
    required: true
    choices: [stop_agent, credentials, agents, firewall, restore, api_guard]
  node:
    description: The node being removed; must be the host the task runs for.
    type: str
  playbook:
    description: The playbook of this run; must be the record's C(playbook).
    type: str
    default: remove.yml
  agent_unit:
    description: The management agent's unit (V(stop_agent)); stopped only when the manifest recorded it.
    type: str
    default: kubelet.service
  address:
    description: The IPv4 address the node's traffic to the API comes from (V(api_guard)).
    type: str
  api_guard_table:
    description: The API guard's nft table (V(api_guard)).
    type: str
    default: hybridgpu_api_guard
  api_guard_boot:
    description: Keep the guard's boot copy in step (V(api_guard)).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: Verifies the record (without using the change id) and runs the node's modules in check mode.
  diff_mode:
    support: none
seealso:
  - module: hybridgpu.fleet.node_removal_state
  - module: hybridgpu.fleet.k8s_node_removal
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Remove the agents, units, files, packages, users and groups onboarding added
  hybridgpu.fleet.node_removal_step:
    phase: agents
    record_path: CHG-77.yml
    executor: ops-lead
  register: removed
"""

RETURN = r"""
change_id:
  description: The verified change id.
  returned: when verified
  type: str
details:
  description: What the phase did, for the audit log (for example the units stopped, the residual validity of the client certificate).
  returned: success
  type: dict
plan:
  description: The part of the verified plan the phase worked from.
  returned: success
  type: dict
"""
