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

import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import files

UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.@-]+\.service$")
FILE_NAME = re.compile(r"^[A-Za-z0-9:_.@-]+\.conf$")


def systemctl(module, *args, check=True):
    rc, out, err = module.run_command([module.get_bin_path("systemctl", required=True)] + list(args))
    if check and rc != 0:
        module.fail_json(msg="systemctl %s failed (rc=%d): %s" % (" ".join(args), rc, (err or out).strip()),
                         rc=rc, stdout=out, stderr=err)
    return rc, out.strip()


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
    name = p["name"]
    if not UNIT_NAME.match(name):
        module.fail_json(msg="name %r is not a systemd service unit name (letters, digits, :_.@- and .service)" % name)
    if not FILE_NAME.match(p["dropin_name"]):
        module.fail_json(msg="dropin_name %r is not a drop-in file name (letters, digits, :_.@- and .conf)"
                         % p["dropin_name"])

    wanted = []
    if p["unit_content"] is not None:
        wanted.append(("unit", os.path.join(p["systemd_dir"], name), p["unit_content"]))
    wanted.append(("dropin", os.path.join(p["systemd_dir"], name + ".d", p["dropin_name"]), p["dropin_content"]))
    result = dict(changed=False, unit_changed=False, dropin_changed=False,
                  enabled_now=False, started=False, restarted=False)
    diffs = []
    for kind, path, text in wanted:
        try:
            before = files.read_text(path)
            if before != text:
                result[kind + "_changed"] = True
                diffs.append(dict(before=before or "", after=text, before_header=path, after_header=path))
                if not module.check_mode:
                    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                    files.write(path, text, 0o644)
        except (OSError, UnicodeDecodeError) as exc:
            module.fail_json(msg="cannot read or write %s: %s" % (path, exc))
    files_changed = result["unit_changed"] or result["dropin_changed"]
    if files_changed and not module.check_mode:
        systemctl(module, "daemon-reload")

    if p["unit_content"] is None and not module.check_mode:
        rc, state = systemctl(module, "show", "--property=LoadState", "--value", name, check=False)
        if state != "loaded":
            module.fail_json(msg="unit %s is not loaded (%s): is the package that ships it installed?"
                             % (name, state or "rc %d" % rc))
    rc, enabled = systemctl(module, "is-enabled", name, check=False)
    if enabled not in ("enabled", "enabled-runtime", "static", "alias", "indirect", "generated"):
        result["enabled_now"] = True
        if not module.check_mode:
            systemctl(module, "enable", name)
    rc, _active = systemctl(module, "is-active", "--quiet", name, check=False)
    if rc != 0:
        result["started"] = True
        if not module.check_mode:
            systemctl(module, "start", name)
    elif files_changed or p["restart"]:
        result["restarted"] = True
        if not module.check_mode:
            systemctl(module, "restart", name)
    result["changed"] = any(result[k] for k in ("unit_changed", "dropin_changed", "enabled_now", "started", "restarted"))
    if module._diff and diffs:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
