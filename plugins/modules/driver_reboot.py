#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

# Documentation only: the action plugin of the same name (plugins/action/driver_reboot.py) runs
# the task. It declares supports_check_mode (_supports_check_mode = True, as ansible.builtin.reboot
# does) and verifies the change record in check mode too.

DOCUMENTATION = r"""
module: driver_reboot
short_description: Reboot a node to load its new GPU driver, under a verified change record
version_added: "0.5.0"
description:
  - Reboots the node as M(ansible.builtin.reboot) does (the same options), after its action plugin
    has verified the signed change record for action C(driver_upgrade) that names this node.
  - Without a verified record nothing is run on the node.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.change_record
  - hybridgpu.fleet.change_record.targets
options:
  playbook:
    description: The playbook of this run; must be the record's C(playbook).
    type: str
    default: upgrade_rehearsal.yml
  reboot_timeout:
    description: Seconds to wait for the node to come back and answer the test command.
    type: int
    default: 600
  reboot_command:
    description: Command that reboots the node (default the distribution's C(shutdown -r)).
    type: str
  boot_time_command:
    description: Command whose output changes when the node has rebooted.
    type: str
    default: cat /proc/sys/kernel/random/boot_id
  msg:
    description: Message shown to logged-in users before the reboot.
    type: str
    default: Reboot initiated by Ansible
attributes:
  check_mode:
    support: full
    details: Verifies the record (without claiming the change id) and reports a reboot, without rebooting.
  diff_mode:
    support: none
    details: A reboot has no state to compare.
seealso:
  - module: ansible.builtin.reboot
  - module: hybridgpu.fleet.driver_reload
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Reboot to load the new kernel module
  hybridgpu.fleet.driver_reboot:
    record_path: CHG-42.yml
    executor: ops-oncall
    reboot_timeout: 900
"""

RETURN = r"""
rebooted:
  description: Whether the node rebooted.
  returned: always
  type: bool
elapsed:
  description: Seconds the reboot took.
  returned: when rebooted
  type: int
change_id:
  description: The change the reboot ran under.
  returned: when the record was verified
  type: str
"""
