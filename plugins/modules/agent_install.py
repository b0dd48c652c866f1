#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: agent_install
short_description: A node's agents in one module run (dedicated users, packages, units and their state)
version_added: "0.2.0"
description:
  - Does on the node, in this order, what installing its agents takes. It creates each dedicated
    user as a system account with no login shell and no home. It installs the missing packages in
    one apt transaction. Then, for each unit, it writes the unit file (agents shipped as a binary)
    and the hardening drop-in, runs one daemon-reload when a file changed, enables and starts the
    unit, and restarts a running unit whose files changed or whose binary the caller changed.
  - One module run replaces a C(user) task per agent, an C(apt) task and an M(hybridgpu.fleet.agent_unit)
    task per agent, which is one SSH round trip per node instead of four or more.
  - The package lists are refreshed only when a package must be installed and they are older than
    O(cache_valid_time), so a rerun on an installed node makes no network call.
  - Every name is checked before anything runs. Files are written atomically, root-owned, mode
    0644. A second run reports no change.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  users:
    description:
      - Accounts the agents run as. A missing one is created with C(useradd --system), shell
        C(/usr/sbin/nologin) and home C(/nonexistent). An existing one gets that shell and home.
    type: list
    elements: str
    default: []
  packages:
    description: Debian packages that ship agents, installed together when any is missing.
    type: list
    elements: str
    default: []
  cache_valid_time:
    description: Refresh the package lists before installing when they are older than this many seconds.
    type: int
    default: 3600
  units:
    description: The agents' systemd units, handled after the users and packages in the order given.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The unit, for example C(prometheus-node-exporter.service).
        type: str
        required: true
      unit_content:
        description: Text of the unit file C(<systemd_dir>/<name>). Omit it for a unit a package ships.
        type: str
      dropin_content:
        description: Text of the hardening drop-in.
        type: str
        required: true
      restart:
        description: Restart the unit when it is running even when neither file changed (its binary changed).
        type: bool
        default: false
  dropin_name:
    description: File name of each drop-in in C(<systemd_dir>/<name>.d/).
    type: str
    default: hybridgpu-hardening.conf
  systemd_dir:
    description: Where unit files live.
    type: path
    default: /etc/systemd/system
attributes:
  check_mode:
    support: full
    details: Reports the users, packages and units it would create, install, write, enable, start or restart, and does none of it.
  diff_mode:
    support: full
    details: The text of each unit file and drop-in, before and after.
notes:
  - Needs root on the node, C(apt-get), C(dpkg-query), C(useradd) and C(systemctl).
seealso:
  - module: hybridgpu.fleet.agent_unit
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Node exporter from its Debian package, running as its own user
  hybridgpu.fleet.agent_install:
    users: [prometheus]
    packages: [prometheus-node-exporter]
    units:
      - name: prometheus-node-exporter.service
        dropin_content: |
          [Service]
          User=prometheus
          NoNewPrivileges=yes
          ProtectSystem=strict
"""

RETURN = r"""
users_created:
  description: Users this run created (or would create).
  returned: always
  type: list
  elements: str
  sample: [prometheus]
users_modified:
  description: Existing users whose shell or home this run set (or would set).
  returned: always
  type: list
  elements: str
packages_installed:
  description: Packages this run installed (or would install).
  returned: always
  type: list
  elements: str
  sample: [prometheus-node-exporter]
cache_updated:
  description: Whether the package lists were refreshed (or would be).
  returned: always
  type: bool
units:
  description: Per unit, what this run did (or would do).
  returned: always
  type: dict
  sample:
    prometheus-node-exporter.service:
      changed: true
      unit_changed: false
      dropin_changed: true
      enabled_now: true
      started: true
      restarted: false
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import agent_install as ai


def main():
    module = AnsibleModule(
        argument_spec=dict(
            users=dict(type="list", elements="str", default=[]),
            packages=dict(type="list", elements="str", default=[]),
            cache_valid_time=dict(type="int", default=3600),
            units=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                unit_content=dict(type="str"),
                dropin_content=dict(type="str", required=True),
                restart=dict(type="bool", default=False),
            )),
            dropin_name=dict(type="str", default="hybridgpu-hardening.conf"),
            systemd_dir=dict(type="path", default="/etc/systemd/system"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["cache_valid_time"] < 0:
        module.fail_json(msg="cache_valid_time must be 0 or more seconds, not %d" % p["cache_valid_time"])

    def run(argv, ok=(0,)):
        return cmd.module_run(module, argv, ok=ok)

    result = dict(changed=False, users_created=[], users_modified=[], packages_installed=[],
                  cache_updated=False, units={})
    step = "checking the names"
    try:
        ai.check_names(p["users"], p["packages"], p["units"], p["dropin_name"])
        step = "creating the users"
        for name, argv in ai.user_steps(p["users"]):
            result["users_created" if argv[0] == "useradd" else "users_modified"].append(name)
            if not module.check_mode:
                run(argv)
        step = "installing the packages"
        missing = ai.missing_packages(run, p["packages"])
        if missing:
            result["packages_installed"] = missing
            age = ai.lists_age()
            if module.check_mode:
                result["cache_updated"] = age is None or age > p["cache_valid_time"]
            else:
                result["cache_updated"] = ai.install_packages(run, missing, p["cache_valid_time"], age)
                still = ai.missing_packages(run, missing)
                if still:
                    raise ai.InstallError("apt-get reported success but %s is not installed" % ", ".join(still))
        step = "setting up the units"
        systemctl = module.get_bin_path("systemctl", required=True) if p["units"] else "systemctl"
        result["units"], diffs = ai.apply_units(run, systemctl, p["units"], p["systemd_dir"], p["dropin_name"],
                                                module.check_mode)
    except (ai.InstallError, cmd.CommandError) as exc:
        # What was done before the failure is reported with it: a rerun picks up from there.
        module.fail_json(msg="%s: %s" % (step, exc), **result)
    result["changed"] = bool(result["users_created"] or result["users_modified"] or result["packages_installed"]
                             or any(u["changed"] for u in result["units"].values()))
    if module._diff and diffs:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
