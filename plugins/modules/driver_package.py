#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: driver_package
short_description: Replace a node's GPU driver package in one apt transaction, under a verified change record
version_added: "0.2.0"
description:
  - Lifts the holds on the installed driver packages, installs the wanted package with one
    C(apt-get install) (the conflicting old branch is removed in the same transaction) and
    holds the new package. When the wanted package is installed already, nothing changes.
  - Before anything runs on the node, the action plugin verifies the signed change record on
    the control host (the same check as M(hybridgpu.fleet.change_approval), action
    C(driver_upgrade)) against the boundary signed by the pinned boundary signers, with the
    AWX user as executor under AWX.
  - The node must be one of O(targets), and O(targets) must be in the record's targets.
    Skipping a play-level approval task does not skip this check.
  - The change id is used once. The ledger under the records folder refuses it for any other
    run (playbook, targets, member or executor). The same interrupted run may resume; once
    the package was replaced on a node under a change id, a later run under that id that
    would change the node's driver again is refused.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.change_record
  - hybridgpu.fleet.change_record.targets
options:
  package:
    description: Driver package to install (it replaces any other driver package it conflicts with).
    type: str
    required: true
  version:
    description: Exact version to install; empty installs the repository's candidate.
    type: str
    default: ""
  package_pattern:
    description: C(dpkg-query) pattern of the driver packages whose holds are lifted.
    type: str
    default: nvidia-driver-*
  hold:
    description: Hold the new package afterwards, so unattended upgrades cannot move it.
    type: bool
    default: true
  companion_prefix:
    description:
      - Prefix of the fabric manager package (NVSwitch systems), which must run the driver's exact
        version. When a package with this prefix is installed, C(<prefix><branch>) is installed in the
        same apt transaction as the driver (at O(version) when given). Empty turns this off.
    type: str
    default: nvidia-fabricmanager-
  branch:
    description: Driver branch of O(package) (for example C(550)); names the fabric manager package that moves with it.
    type: str
    default: ""
  playbook:
    description: The playbook of this run; must be the record's C(playbook).
    type: str
    default: upgrade_rehearsal.yml
  approval:
    description: Set by the action plugin (the verified approval); a task may not set it.
    type: dict
  done_at:
    description: Set by the action plugin when the ledger shows the change done on this node; a task may not set it.
    type: str
attributes:
  check_mode:
    support: full
    details: Verifies the record (without claiming the change id) and reports what would change.
  diff_mode:
    support: full
    details: Installed driver packages and holds before and after.
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Replace the driver under the signed change record
  hybridgpu.fleet.driver_package:
    package: nvidia-driver-550
    version: 550.163.01-1
    record_path: CHG-42.yml
    executor: ops-oncall
    targets: "{{ ansible_play_hosts_all }}"
  register: driver
"""

RETURN = r"""
before:
  description: Installed driver packages (name to version) and held packages before.
  returned: always
  type: dict
after:
  description: The same after the change (in check mode, as before).
  returned: always
  type: dict
plan:
  description: What was (or would be) done, C(install), C(unhold) and C(hold).
  returned: always
  type: dict
approval:
  description: The verified approval the change ran under.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import driver_package as dp
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.record_options import record_options

ARGUMENT_SPEC = dict(
    package=dict(type="str", required=True),
    version=dict(type="str", default=""),
    package_pattern=dict(type="str", default="nvidia-driver-*"),
    hold=dict(type="bool", default=True),
    companion_prefix=dict(type="str", default="nvidia-fabricmanager-"),
    branch=dict(type="str", default=""),
    playbook=dict(type="str", default="upgrade_rehearsal.yml"),
    approval=dict(type="dict"),
    done_at=dict(type="str"),
)
ARGUMENT_SPEC.update(record_options())


def authorised(approval):
    """The approval the action plugin verified; anything else is refused."""
    return isinstance(approval, dict) and approval.get("approved") is True and \
        approval.get("action") == "driver_upgrade" and bool(approval.get("change_id"))


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, required_one_of=[("record_path", "record_text")],
                           mutually_exclusive=[("record_path", "record_text")], supports_check_mode=True)
    p = module.params
    approval = p["approval"]
    if not authorised(approval):
        module.fail_json(msg="approval: no verified driver_upgrade change record (the action plugin verifies "
                         "the record on the control host); nothing was changed")
    cid = approval["change_id"]

    def run(argv, ok=(0,)):
        return cmd.module_run(module, argv, ok=ok)

    try:
        dp.check_inputs(p["package"], p["version"], p["package_pattern"], p["companion_prefix"], p["branch"])
        before = dp.read_state(run, p["package_pattern"], p["companion_prefix"])
        todo = dp.plan(before, p["package"], p["version"], p["hold"],
                       dp.companion(before, p["companion_prefix"], p["branch"], p["version"]))
        if todo["install"] and p["done_at"]:
            module.fail_json(msg="change_id: %s already replaced the driver on this node at %s; a change record is "
                             "used once (ask for a new record); nothing was changed" % (cid, p["done_at"]),
                             before=before, plan=todo)
        changed = bool(todo["install"] or todo["unhold"] or todo["hold"])
        after = before
        if changed and not module.check_mode:
            dp.apply(run, todo, p["package"], p["version"])
            after = dp.read_state(run, p["package_pattern"], p["companion_prefix"])
            if not dp.present(after, p["package"], p["version"]):
                module.fail_json(msg="package: %s%s is not installed after apt-get install" % (
                    p["package"], "=" + p["version"] if p["version"] else ""), before=before, after=after)
    except (dp.DriverError, cmd.CommandError) as exc:
        module.fail_json(msg="driver change under %s: %s" % (cid, exc))
    module.exit_json(changed=changed, before=before, after=after, plan=todo, approval=approval,
                     diff={"before": before, "after": after})


if __name__ == "__main__":
    main()
