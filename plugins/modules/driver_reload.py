#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: driver_reload
short_description: Load the installed NVIDIA driver's kernel module after a package change, or say why a reboot must
version_added: "0.3.0"
description:
  - After a driver package change the old kernel module stays loaded, and NVML (C(nvidia-smi), the
    device plugin, DCGM) fails with C(Driver/library version mismatch) or reports the old version.
  - When C(nvidia-smi) already reports O(expected_version), nothing is done.
  - Otherwise the module lists the processes that hold a O(device_glob) file open (from
    C(/proc/<pid>/fd)). Holders that run in one of O(stop_units) are released by stopping those
    units; any other holder means the module is in use, and the result asks for a reboot
    (RV(reboot_needed)) naming the holders.
  - When nothing else holds the devices and O(reload=true), the active O(stop_units) are stopped,
    C(modprobe -r) unloads O(unload), C(modprobe) loads O(load), the units are started again and
    C(nvidia-smi) must report O(expected_version). When the kernel refuses the unload, the units
    are started again and the result asks for a reboot with C(modprobe)'s message.
  - Acts only when the loaded module differs from O(expected_version), which happens after the
    package change that M(hybridgpu.fleet.driver_package) makes under a verified change record.
  - Runs only under a signed change record for action C(driver_upgrade) that names this node,
    which its action plugin verifies on the control host before the module runs.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.change_record
  - hybridgpu.fleet.change_record.targets
options:
  playbook:
    description: The playbook of this run; must be the record's C(playbook).
    type: str
    default: upgrade_rehearsal.yml
  approval:
    description: Set by the action plugin (the verified change); a task may not set it.
    type: dict
  expected_version:
    description:
      - The driver version (C(550.163.01)) or branch (C(550)) the loaded module must have.
    type: str
    required: true
  reload:
    description:
      - Unload and load the module when nothing but O(stop_units) holds the devices. With C(false)
        the module only reports whether a reboot is needed.
    type: bool
    default: true
  unload:
    description: Modules C(modprobe -r) removes, dependants first.
    type: list
    elements: str
    default: [nvidia_drm, nvidia_modeset, nvidia_uvm, nvidia]
  load:
    description: Modules C(modprobe) loads afterwards, one call each.
    type: list
    elements: str
    default: [nvidia]
  stop_units:
    description:
      - GPU daemons that keep the devices open and are stopped for the reload (only those active),
        then started again. Their processes do not count as holders.
    type: list
    elements: str
    default: [nvidia-persistenced.service, nvidia-dcgm.service, dcgm.service, nvidia-fabricmanager.service]
  device_glob:
    description: Device files whose open handles hold the module.
    type: str
    default: /dev/nvidia*
attributes:
  check_mode:
    support: full
    details: Reads the loaded version and the holders and reports whether a reload or a reboot would follow.
  diff_mode:
    support: full
    details: The loaded driver version before and after.
notes:
  - Module names and unit names are checked against a strict pattern before anything runs.
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Load the new driver's module, or learn that a reboot is needed
  hybridgpu.fleet.driver_reload:
    expected_version: "550"
    record_path: CHG-42.yml
    executor: ops-oncall
  register: reload

- name: Reboot when the module is in use (under the same record)
  hybridgpu.fleet.driver_reboot:
    record_path: CHG-42.yml
    executor: ops-oncall
  when: reload.reboot_needed
"""

RETURN = r"""
loaded_before:
  description: The driver version C(nvidia-smi) reported before, or null when it could not answer.
  returned: always
  type: str
  sample: 535.230.02
loaded_after:
  description: The version after a reload (as before when nothing was reloaded).
  returned: always
  type: str
  sample: 550.163.01
nvml_message:
  description: What C(nvidia-smi) said when it could not report a version before.
  returned: always
  type: str
  sample: "Failed to initialize NVML: Driver/library version mismatch NVML library version: 550.163"
reloaded:
  description: Whether the module was (or in check mode would be) unloaded and loaded.
  returned: always
  type: bool
reboot_needed:
  description: Whether the expected module can only be loaded by a reboot (held, refused, or O(reload=false)).
  returned: always
  type: bool
reason:
  description: Why nothing, a reload or a reboot.
  returned: always
  type: str
holders:
  description: Processes holding the devices, with C(pid), C(command), C(unit) and C(files).
  returned: always
  type: list
  elements: dict
stopped_units:
  description: The units stopped for the reload and started again.
  returned: always
  type: list
  elements: str
"""

import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import driver_reload as dr
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.record_options import record_options

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
UNIT = re.compile(r"^[A-Za-z0-9@._:-]{1,128}\.(service|socket)$")
GLOB = re.compile(r"^/[A-Za-z0-9_./*?\[\]-]{1,255}$")
VERSION = re.compile(r"^[0-9]+(\.[0-9]+){0,3}$")

ARGUMENT_SPEC = dict(
    expected_version=dict(type="str", required=True),
    reload=dict(type="bool", default=True),
    unload=dict(type="list", elements="str", default=["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"]),
    load=dict(type="list", elements="str", default=["nvidia"]),
    stop_units=dict(type="list", elements="str",
                    default=["nvidia-persistenced.service", "nvidia-dcgm.service", "dcgm.service",
                             "nvidia-fabricmanager.service"]),
    device_glob=dict(type="str", default="/dev/nvidia*"),
    playbook=dict(type="str", default="upgrade_rehearsal.yml"),
    approval=dict(type="dict"),
)
ARGUMENT_SPEC.update(record_options())


def check_inputs(module, p):
    if not VERSION.match(p["expected_version"]):
        module.fail_json(msg="expected_version: %r is not a driver version or branch (550 or 550.163.01)"
                         % p["expected_version"])
    for field in ("unload", "load"):
        bad = [n for n in p[field] if not NAME.match(n)]
        if bad or not p[field]:
            module.fail_json(msg="%s: %s is not a list of kernel module names" % (field, bad or "[]"))
    bad = [u for u in p["stop_units"] if not UNIT.match(u)]
    if bad:
        module.fail_json(msg="stop_units: %s are not systemd unit names (name.service)" % bad)
    if not GLOB.match(p["device_glob"]):
        module.fail_json(msg="device_glob: %r must be an absolute path pattern (letters, digits, / . _ - * ? [ ])"
                         % p["device_glob"])


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    verified = p["approval"] or {}
    if verified.get("approved") is not True or verified.get("action") != "driver_upgrade":
        module.fail_json(msg="driver_reload runs only through its action plugin, under a verified driver_upgrade "
                         "change record for this node; nothing was changed")
    check_inputs(module, p)

    def run(argv, ok=(0,)):
        return cmd.module_run(module, argv, ok=ok)

    result = dict(changed=False, reloaded=False, reboot_needed=False, holders=[], stopped_units=[])
    try:
        before, message = dr.loaded_version(run)
        result.update(loaded_before=before, loaded_after=before, nvml_message=message)
        if dr.matches(before, p["expected_version"]):
            result["reason"] = "nvidia-smi reports %s: the expected module is loaded" % before
            module.exit_json(**result)
        found = dr.holders(p["device_glob"])
        blocking = dr.blocking(found, p["stop_units"])
        result["holders"] = found
        loaded = "driver %s loaded" % before if before else message
        if blocking:
            result.update(reboot_needed=True, reason="%s; the module is in use by %s: a reboot loads %s"
                          % (loaded, dr.describe(blocking), p["expected_version"]))
            module.exit_json(**result)
        if not p["reload"]:
            result.update(reboot_needed=True, reason="%s; reload is off: a reboot loads %s" % (loaded, p["expected_version"]))
            module.exit_json(**result)
        stop = dr.active_units(run, p["stop_units"])
        result.update(stopped_units=stop, changed=True, reloaded=True,
                      reason="%s; nothing else holds the devices: unload and load the module" % loaded)
        if module.check_mode:
            result["diff"] = {"before": {"loaded": before}, "after": {"loaded": p["expected_version"]}}
            module.exit_json(**result)
        reloaded, detail = dr.reload_module(run, p["unload"], p["load"], stop, p["expected_version"])
        if not reloaded:
            result.update(changed=bool(stop), reloaded=False, reboot_needed=True,
                          reason="%s; the kernel refused the unload (%s): a reboot loads %s"
                          % (loaded, detail, p["expected_version"]))
            module.exit_json(**result)
        after, _message = dr.loaded_version(run)
        result.update(loaded_after=after, reason="%s; %s" % (result["reason"], detail),
                      diff={"before": {"loaded": before}, "after": {"loaded": after}})
    except (dr.ReloadError, cmd.CommandError) as exc:
        module.fail_json(msg="driver module reload: %s" % exc, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
