#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: agent_unit
short_description: An agent's systemd unit, hardening drop-in, enablement and state in one module run
version_added: "0.1.0"
description:
  - Writes an agent's unit file (when the collection ships the agent as a binary) and its hardening
    drop-in under C(/etc/systemd/system), reloads systemd when either changed, enables and starts the
    unit, and restarts it when it was already running and its unit, drop-in or binary changed.
  - One module run does what a folder, a copy, a template and two C(systemd_service) tasks would do in
    six to ten SSH round trips, which counts on a wave of hundreds of nodes. The package or binary that
    ships the agent is installed before, by the caller.
  - Files are written atomically (temporary sibling, then rename), root-owned, mode 0644; an unchanged
    file is left alone. A second run reports no change.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  name:
    description: The unit, for example C(prometheus-node-exporter.service).
    type: str
    required: true
  unit_content:
    description: Text of the unit file C(/etc/systemd/system/<name>); omitted for a unit a package ships.
    type: str
  dropin_name:
    description: File name of the drop-in in C(/etc/systemd/system/<name>.d/).
    type: str
    default: hybridgpu-hardening.conf
  dropin_content:
    description: Text of the drop-in.
    type: str
    required: true
  restart:
    description: Restart a running unit even when neither file changed (its binary changed).
    type: bool
    default: false
  systemd_dir:
    description: Where unit files live.
    type: path
    default: /etc/systemd/system
attributes:
  check_mode:
    support: full
    details: Reports what it would write, reload, enable, start or restart, and does none of it.
  diff_mode:
    support: full
    details: The unit file's and the drop-in's text before and after.
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Unit, hardening drop-in and state of the node exporter
  hybridgpu.fleet.agent_unit:
    name: prometheus-node-exporter.service
    dropin_content: |
      [Service]
      NoNewPrivileges=yes
      ProtectSystem=strict
"""

RETURN = r"""
unit_changed:
  description: Whether the unit file was written (or would be).
  returned: always
  type: bool
dropin_changed:
  description: Whether the drop-in was written (or would be).
  returned: always
  type: bool
enabled_now:
  description: Whether the unit was enabled by this run.
  returned: always
  type: bool
started:
  description: Whether the unit was started by this run (it was not running).
  returned: always
  type: bool
restarted:
  description: Whether the running unit was restarted (a file or its binary changed).
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import agent_install as ai


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            unit_content=dict(type="str"),
            dropin_name=dict(type="str", default="hybridgpu-hardening.conf"),
            dropin_content=dict(type="str", required=True),
            restart=dict(type="bool", default=False),
            systemd_dir=dict(type="path", default="/etc/systemd/system"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    unit = dict(name=p["name"], unit_content=p["unit_content"], dropin_content=p["dropin_content"],
                restart=p["restart"])
    try:
        if not ai.UNIT_RE.match(p["name"]):
            raise ai.InstallError("name %r is not a systemd service unit name (letters, digits, :_.@- and .service)"
                                  % p["name"])
        ai.check_names(units=[unit], dropin_name=p["dropin_name"])
        results, diffs = ai.apply_units(
            lambda argv, ok=(0,): cmd.module_run(module, argv, ok=ok),
            module.get_bin_path("systemctl", required=True), [unit], p["systemd_dir"], p["dropin_name"],
            module.check_mode)
    except (ai.InstallError, cmd.CommandError) as exc:
        module.fail_json(msg=str(exc))
    result = results[p["name"]]
    if module._diff and diffs:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
