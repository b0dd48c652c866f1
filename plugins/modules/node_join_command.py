#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_join_command
short_description: Join a node with a vendor's installer (the command join method), once
version_added: "0.1.0"
description:
  - Runs on the node. Checks every input first (package and unit names, commands as argument
    lists, plain absolute file paths, the secret kept off the command line) and fails naming
    each field at fault before anything runs.
  - Runs the vendor's installer command once - only when a package is not installed, a unit
    is not active, or the Node is not Ready (O(node_ready)=false). A joined node is left alone.
  - The activation secret reaches the installer only through the environment variable
    O(secret_env); it is never part of the command, the logged arguments or the result.
  - Packages come from the node's configured repositories. With O(install_packages=true) the
    module installs the missing ones itself, in one apt transaction before it decides on the
    installer, so a command join takes one SSH round trip per node.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  packages:
    description: The vendor's packages (Debian names); the join needs them installed.
    type: list
    elements: str
    default: []
  install_packages:
    description:
      - Install the packages of O(packages) that are missing, in one apt-get transaction, before
        deciding whether the installer runs. The package lists are refreshed first when they are
        older than O(cache_valid_time).
      - When false, the caller installs them; missing packages then only count as a reason to run the installer.
    type: bool
    default: false
  cache_valid_time:
    description: Refresh the package lists before installing when they are older than this many seconds.
    type: int
    default: 3600
  installer:
    description: The installer command as a list (program, then arguments); run without a shell.
    type: list
    elements: str
    default: []
  secret:
    description: Activation secret (token) the installer reads from O(secret_env).
    type: str
    default: ""
  secret_env:
    description: Name of the environment variable that carries O(secret).
    type: str
    default: JOIN_TOKEN
  env:
    description: Further environment variables of the installer (not secret; they are shown).
    type: dict
    default: {}
  units:
    description: The systemd units the installer starts.
    type: list
    elements: str
    required: true
  files:
    description: Plain absolute paths the installer writes (checked, reported, recorded by the role).
    type: list
    elements: path
    default: []
  uninstall:
    description: The vendor's uninstall command as a list (only checked here; removal runs it).
    type: list
    elements: str
    required: true
  node_name:
    description: Node name the installer registers in the cluster (only checked here).
    type: str
    default: ""
  node_ready:
    description:
      - Whether that Node is Ready, as read through the API from the control host. Omit when
        registration is not confirmed; V(false) makes the installer run again.
    type: bool
  cluster:
    description: Cluster name, for the returned RV(artefacts) and RV(facts).
    type: str
    default: ""
  server:
    description: API URL the node reaches, for RV(facts).
    type: str
    default: ""
  manifest_copy:
    description:
      - Path of the manifest copy on the node, listed in RV(artefacts).
      - Its SHA-256 and mode come back in RV(manifest_copy_state), so that the caller can tell whether
        the copy must be written again without another round trip.
    type: path
    default: ""
  validate_only:
    description: Only check the inputs (runs anywhere, reads nothing on the node).
    type: bool
    default: false
  timeout:
    description: Seconds the installer may run.
    type: int
    default: 600
  settle:
    description: Seconds the units may take to become active after the installer; then the task fails naming those that are not.
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    details: Reads the node and reports whether, and why, the installer would run (RV(would_run)).
  diff_mode:
    support: none
    details: The installer's changes cannot be read beforehand; RV(state_before) and RV(state_after) show the units and files.
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Join with the vendor's installer (runs once)
  hybridgpu.fleet.node_join_command:
    packages: [acme-node-agent]
    installer: [/usr/bin/acme-node, activate, --endpoint, "https://203.0.113.10:6443", --node-name, gpu-07]
    secret: "{{ acme_activation_token }}"
    secret_env: ACME_ACTIVATION_TOKEN
    units: [acme-node-agent.service]
    files: [/etc/acme-node/credentials.json]
    uninstall: [/usr/bin/acme-node, deactivate, --purge]
    node_name: gpu-07
    node_ready: false
"""

RETURN = r"""
ran:
  description: Whether the installer ran (in check mode, whether it would).
  returned: always
  type: bool
would_run:
  description: The installer command as a shell-quoted line when it runs or would run, else empty.
  returned: always
  type: str
why:
  description: Why it runs (missing packages, inactive units, Node not Ready); empty when joined.
  returned: always
  type: list
  elements: str
packages_installed:
  description: Packages this run installed (or would install) with O(install_packages=true).
  returned: always
  type: list
  elements: str
state_before:
  description: C(packages) (installed), C(units) (active), C(files) (present) before the installer, after the packages this run installed.
  returned: always
  type: dict
state_after:
  description: The same after the installer ran (equal to RV(state_before) when it did not).
  returned: always
  type: dict
artefacts:
  description: What the manifest's join section records (packages, units, files, the Node, the manifest copy).
  returned: always
  type: list
  elements: dict
manifest_copy_state:
  description: SHA-256 and mode of the file O(manifest_copy); V(null) when it does not exist.
  returned: when O(manifest_copy) is given, except with O(validate_only)
  type: dict
  sample: {sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08, mode: "0640"}
facts:
  description: The join section's facts (method C(command), the uninstall and installer commands, units, packages, files).
  returned: always
  type: dict
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import files
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import node_checks
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import agent_install
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import command_join
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import node_state


def read_state(module, spec):
    def run(argv):
        return module.run_command(argv, environ_update=dict(cmd.ENV))
    try:
        pkgs = node_checks.package_status(spec["packages"], run)
    except node_checks.NodeReadError as err:
        module.fail_json(msg="cannot read the node's packages: %s" % err)
    units = {}
    for unit in spec["units"]:
        rc, out, dummy = run(["systemctl", "is-active", unit])
        units[unit] = out.strip() == "active"
    return {"packages": dict((p, node_state.present(s)) for p, s in pkgs.items()), "units": units,
            "files": dict((f, os.path.lexists(f)) for f in spec["files"])}


ARGUMENT_SPEC = dict(
    packages=dict(type="list", elements="str", default=[]),
    install_packages=dict(type="bool", default=False),
    cache_valid_time=dict(type="int", default=3600),
    installer=dict(type="list", elements="str", default=[]),
    secret=dict(type="str", default="", no_log=True),
    secret_env=dict(type="str", default="JOIN_TOKEN", no_log=False),  # a variable name, not the secret
    env=dict(type="dict", default={}),
    units=dict(type="list", elements="str", required=True),
    files=dict(type="list", elements="path", default=[]),
    uninstall=dict(type="list", elements="str", required=True),
    node_name=dict(type="str", default=""),
    node_ready=dict(type="bool"),
    cluster=dict(type="str", default=""),
    server=dict(type="str", default=""),
    manifest_copy=dict(type="path", default=""),
    validate_only=dict(type="bool", default=False),
    timeout=dict(type="int", default=600),
    settle=dict(type="int", default=30),
)


def inputs(p):
    """(spec, result, problems): the join's inputs from the parameters, the result every run starts
    from, and what is wrong with the inputs (empty when nothing). The action plugin of the same
    name runs this alone, in the playbook's process, for validate_only."""
    spec = dict((k, p[k]) for k in ("packages", "installer", "secret", "secret_env", "env", "units", "files",
                                    "uninstall", "node_name"))
    problems = command_join.check(spec)
    result = dict(changed=False, ran=False, would_run="", why=[], packages_installed=[], state_before={},
                  state_after={}, artefacts=command_join.artefacts(spec, p["cluster"], p["manifest_copy"]),
                  facts=command_join.facts(spec, p["cluster"], p["server"]))
    return spec, result, problems


def problems_message(p, problems):
    return "command join inputs%s: %s; nothing was changed" % (
        " of " + p["node_name"] if p["node_name"] else "", "; ".join(problems))


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    spec, result, problems = inputs(p)
    if problems:
        module.fail_json(msg=problems_message(p, problems), problems=problems)
    if p["validate_only"]:
        module.exit_json(**result)
    if p["manifest_copy"]:
        try:
            result["manifest_copy_state"] = files.digest(p["manifest_copy"])
        except OSError as exc:
            module.fail_json(msg="cannot read the manifest copy %s: %s" % (p["manifest_copy"], exc))
    state = read_state(module, spec)
    missing = [name for name in spec["packages"] if not state["packages"].get(name)]
    if p["install_packages"] and missing:
        result.update(changed=True, packages_installed=missing)
        if module.check_mode:
            # decide as the real run would, once apt has installed them
            state["packages"].update(dict.fromkeys(missing, True))
        else:
            try:
                agent_install.install_packages(lambda argv, ok=(0,): cmd.module_run(module, argv, ok=ok),
                                               missing, p["cache_valid_time"], agent_install.lists_age())
            except cmd.CommandError as err:
                module.fail_json(msg="installing the vendor's packages %s: %s; the installer did not run"
                                 % (", ".join(missing), err), **result)
            state = read_state(module, spec)
    state["node_ready"] = p["node_ready"]
    run_it, why = command_join.decide(spec, state)
    result.update(why=why, state_before=state, state_after=state)
    if not run_it:
        module.exit_json(**result)
    result.update(changed=True, ran=True, would_run=cmd.command_text(spec["installer"]))
    if module.check_mode:
        module.exit_json(**result)
    env = dict(cmd.ENV)
    env.update(dict((str(k), str(v)) for k, v in spec["env"].items()))
    if spec["secret"]:
        env[spec["secret_env"]] = spec["secret"]
    argv = [module.get_bin_path("timeout", required=True), "--kill-after=5", str(p["timeout"])] + spec["installer"]
    rc, out, err = module.run_command(argv, environ_update=env)
    if rc != 0:
        how = "ran past %s s" % p["timeout"] if rc in cmd.TIMEOUT_CODES else "failed (rc=%s)" % rc
        tail = "\n".join((err or out).strip().splitlines()[-20:])
        module.fail_json(msg="installer %s %s: %s" % (result["would_run"], how, tail),
                         rc=rc, stdout=out, stderr=err, **result)
    deadline = time.monotonic() + p["settle"]
    while True:
        after = read_state(module, spec)
        inactive = [u for u, active in sorted(after["units"].items()) if not active]
        if not inactive or time.monotonic() >= deadline:
            break
        time.sleep(1)
    after["node_ready"] = None
    result.update(state_after=after, stdout=out)
    if inactive:
        module.fail_json(msg="installer %s ran, but after %s s these units are not active: %s"
                         % (result["would_run"], p["settle"], ", ".join(inactive)), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
