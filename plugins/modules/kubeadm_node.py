#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: kubeadm_node
short_description: Read a kubeadm node's join state, and write or remove its JoinConfiguration, in one round trip
version_added: "0.3.0"
description:
  - Reads in one module run what a kubeadm join needs to know about the node - whether it has joined
    (its kubelet kubeconfig exists), whether the kubelet unit is enabled, the installed version of the
    join packages, and the serial and expiry of the kubelet's client certificate.
  - With O(state=joining) it also writes the JoinConfiguration (root only, mode C(0600), atomically,
    its folder made when missing) and starts C(kubeadm join --config) in a transient systemd unit
    (O(join_unit)) that is stopped after O(timeout) seconds; the module returns at once and later
    runs read the join's progress in RV(join). With O(state=absent) it stops that unit (or unloads
    it once ended) and removes the JoinConfiguration. The file holds the bootstrap token, so its text is never returned or
    shown in a diff.
  - Replaces a package check, a unit check, a C(stat), a C(file), a C(copy) and an C(async) task
    (about fifteen SSH round trips per node) with one module run each time, which counts on a wave
    of hundreds of nodes.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  state:
    description:
      - V(read) reads only. V(joining) also writes O(config_text) to O(config_path) and starts
        C(kubeadm join) in O(join_unit), unless that unit is already running. V(absent) also stops
        or unloads O(join_unit) and removes O(config_path).
    type: str
    choices: [read, joining, absent]
    default: read
  packages:
    description:
      - Debian packages the join needs, as given to apt (C(name) or C(name=version), where the version
        may end in C(*)). RV(packages_ready) says whether each is installed at that version.
    type: list
    elements: str
    default: []
  kubelet_unit:
    description: The kubelet's systemd unit.
    type: str
    default: kubelet.service
  enable_kubelet:
    description:
      - With O(state=joining), enable O(kubelet_unit) before the join starts when it is not
        enabled (kubeadm's prerequisites ask for it; C(kubeadm join) starts it).
    type: bool
    default: false
  kubelet_conf:
    description: The kubelet kubeconfig that C(kubeadm join) writes; it exists once the node has joined.
    type: path
    default: /etc/kubernetes/kubelet.conf
  client_certificate:
    description: The kubelet's client certificate, read for its serial and expiry.
    type: path
    default: /var/lib/kubelet/pki/kubelet-client-current.pem
  config_path:
    description: The JoinConfiguration file; required with O(state=joining) or O(state=absent).
    type: path
  config_text:
    description: The JoinConfiguration as YAML text (it holds the bootstrap token); required with O(state=joining).
    type: str
  join_unit:
    description: The transient systemd unit C(kubeadm join) runs in; its state is returned in RV(join).
    type: str
    default: hybridgpu-kubeadm-join.service
  kubeadm:
    description: The kubeadm command (a name on the node's PATH or an absolute path).
    type: str
    default: kubeadm
  manifest_copy:
    description:
      - Path of the node's copy of its manifest. When given, RV(manifest_copy_state) returns its SHA-256
        and mode, so that the caller can tell whether the copy must be written again without
        another round trip.
    type: path
  timeout:
    description: Seconds after which the join unit is stopped (systemd C(RuntimeMaxSec)).
    type: int
    default: 300
attributes:
  check_mode:
    support: full
    details: Reads as usual and reports whether the JoinConfiguration would be written or removed.
  diff_mode:
    support: none
    details: The JoinConfiguration holds a token, so no diff is shown.
requirements:
  - systemd, dpkg and openssl on the node
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Read the node's join state
  hybridgpu.fleet.kubeadm_node:
    packages: [kubeadm, kubelet]
  register: join_state

- name: Install kubeadm and kubelet when one is missing
  ansible.builtin.apt:
    name: [kubeadm, kubelet]
  when: not join_state.packages_ready

- name: Write the JoinConfiguration (root only) and start kubeadm join
  hybridgpu.fleet.kubeadm_node:
    state: joining
    config_path: /etc/kubernetes/hybridgpu-join.yaml
    config_text: "{{ token.join_configuration | to_nice_yaml(indent=2) }}"
  no_log: true
  when: not join_state.joined

- name: Wait for kubeadm join to finish
  hybridgpu.fleet.kubeadm_node:
  register: join_progress
  until: join_progress.join.finished
  retries: 150
  delay: 2
  failed_when: join_progress.join.finished and not join_progress.join.succeeded
"""

RETURN = r"""
joined:
  description: Whether the kubelet kubeconfig O(kubelet_conf) exists.
  returned: always
  type: bool
kubelet_enabled:
  description: Whether C(systemctl is-enabled) says the kubelet unit is enabled.
  returned: always
  type: bool
packages:
  description: Installed version of each package named in O(packages), V(null) when not installed.
  returned: always
  type: dict
  sample: {kubeadm: 1.30.4-1.1, kubelet: null}
manifest_copy_state:
  description: SHA-256 and mode of the file O(manifest_copy); V(null) when it does not exist.
  returned: when O(manifest_copy) is given
  type: dict
  sample: {sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08, mode: "0640"}
packages_ready:
  description: Whether every package of O(packages) is installed, at its version where one is given.
  returned: always
  type: bool
client_certificate:
  description: Serial (lower-case hex), expiry (C(YYYY-MM-DD HH:MM:SSZ)) and path of the client certificate; empty when it does not exist.
  returned: always
  type: dict
  sample: {serial: 3f2a, not_after: "2027-12-02 06:00:00Z", path: /var/lib/kubelet/pki/kubelet-client-current.pem}
config_present:
  description: Whether the JoinConfiguration exists after the run (or would, in check mode).
  returned: when O(config_path) is given
  type: bool
kubelet_enabled_now:
  description: Whether O(enable_kubelet) enabled the kubelet unit in this run (or would, in check mode).
  returned: with O(state=joining)
  type: bool
join_started:
  description: Whether O(state=joining) started C(kubeadm join) (or would, in check mode); false while one is already running.
  returned: with O(state=joining)
  type: bool
join:
  description: The join unit's state.
  returned: always
  type: dict
  contains:
    state:
      description: The unit's C(ActiveState) (C(inactive) when it was never started).
      type: str
    result:
      description: The unit's C(Result) (C(success), C(exit-code), C(timeout), ...).
      type: str
    exit_status:
      description: Exit status of C(kubeadm join), when it has exited.
      type: int
    finished:
      description: Whether the join has run and ended.
      type: bool
    succeeded:
      description: Whether it ended with exit status 0.
      type: bool
    log:
      description: The unit's last journal lines when the join failed.
      type: list
      elements: str
"""

import fnmatch
import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import files
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import node_state

PACKAGE = re.compile(r"^([a-z0-9][a-z0-9+.-]+)(?:=([A-Za-z0-9.+~:*-]+))?$")
UNIT = re.compile(r"^[A-Za-z0-9:_.@-]+$")
COMMAND = re.compile(r"^[A-Za-z0-9_./+-]+$")


def parse_packages(module, specs):
    """[(name, version pattern or None)] from apt-style names; bad input fails naming the entry."""
    parsed = []
    for spec in specs:
        m = PACKAGE.match(spec or "")
        if not m:
            module.fail_json(msg="packages: %r is not a Debian package name, optionally with =version" % spec)
        parsed.append((m.group(1), m.group(2)))
    return parsed


def package_state(module, run, parsed):
    if not parsed:
        return {}, True
    dpkg_query = module.get_bin_path("dpkg-query", required=True)
    # rc 1: some package is unknown to dpkg; the others are still listed.
    out = run([dpkg_query, "-W", "-f=" + node_state.DPKG_QUERY_FORMAT] + [name for name, _want in parsed], (0, 1))
    versions = node_state.installed_versions(out, [name for name, _want in parsed])
    ready = all(versions[n] is not None and (want is None or fnmatch.fnmatchcase(versions[n], want))
                for n, want in parsed)
    return versions, ready


def certificate(module, run, path):
    if not os.path.exists(path):
        return {}
    openssl = module.get_bin_path("openssl", required=True)
    out = run([openssl, "x509", "-noout", "-serial", "-enddate", "-dateopt", "iso_8601", "-in", path], (0,))
    serial = re.search(r"serial=([0-9A-Fa-f]+)", out)
    end = re.search(r"notAfter=(.*)", out)
    if not serial or not end:
        module.fail_json(msg="cannot read the serial and expiry of %s from openssl: %r" % (path, out[:200]))
    return {"serial": serial.group(1).lower(), "not_after": end.group(1).strip(), "path": path}


def join_status(module, run, systemctl, unit):
    """The join unit's state. RemainAfterExit keeps an ended unit loaded with its result."""
    out = run([systemctl, "show", "--property=LoadState,ActiveState,SubState,Result,ExecMainStatus,ExecMainExitTimestampMonotonic",
               unit], (0,))
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    state = props.get("ActiveState", "inactive")
    loaded = props.get("LoadState") == "loaded"
    ended = loaded and props.get("ExecMainExitTimestampMonotonic", "0") not in ("", "0")
    try:
        status = int(props.get("ExecMainStatus", "0"))
    except ValueError:
        status = None
    result = props.get("Result", "")
    finished = ended or state == "failed"
    succeeded = finished and state != "failed" and result == "success" and status == 0
    info = dict(state=state, result=result, exit_status=status if ended else None,
                finished=finished, succeeded=succeeded, log=[])
    if finished and not succeeded:
        journalctl = module.get_bin_path("journalctl")
        if journalctl:
            info["log"] = run([journalctl, "--no-pager", "-o", "cat", "-n", "30", "-u", unit], (0, 1)).splitlines()
    return info


def start_join(module, run, systemctl, p):
    """Start kubeadm join in the transient unit, after clearing an earlier, ended one."""
    run([systemctl, "stop", p["join_unit"]], (0, 1, 5))
    run([systemctl, "reset-failed", p["join_unit"]], (0, 1))
    kubeadm = module.get_bin_path(p["kubeadm"], required=True) if "/" not in p["kubeadm"] else p["kubeadm"]
    run([module.get_bin_path("systemd-run", required=True), "--unit=" + p["join_unit"],
         "--description=kubeadm join (hybridgpu.fleet)", "--property=RemainAfterExit=yes",
         "--property=RuntimeMaxSec=%d" % p["timeout"], "--quiet",
         kubeadm, "join", "--config", p["config_path"]], (0,))


def check_params(module):
    p = module.params
    for key in ("kubelet_unit", "join_unit"):
        if not UNIT.match(p[key]):
            module.fail_json(msg="%s %r is not a systemd unit name" % (key, p[key]))
    if not COMMAND.match(p["kubeadm"]):
        module.fail_json(msg="kubeadm %r is not a command name or path" % p["kubeadm"])
    if p["timeout"] < 1:
        module.fail_json(msg="timeout must be a positive number of seconds, not %d" % p["timeout"])
    return parse_packages(module, p["packages"])


def join_running(result):
    return result["join"]["state"] in ("active", "activating") and not result["join"]["finished"]


def joining(module, run, systemctl, result, host):
    """Write the JoinConfiguration and start the join, unless a join is already running."""
    p, path = module.params, module.params["config_path"]
    running = join_running(result)
    try:
        before = files.read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        module.fail_json(msg="cannot read the JoinConfiguration %s on %s: %s" % (path, host, exc))
    enable = p["enable_kubelet"] and not result["kubelet_enabled"]
    result.update(changed=not running or enable, join_started=not running, config_present=True,
                  kubelet_enabled_now=enable)
    if module.check_mode:
        return
    if enable:
        run([systemctl, "enable", p["kubelet_unit"]], (0,))
        result["kubelet_enabled"] = True
    if running:
        return
    try:
        os.makedirs(os.path.dirname(path) or "/", mode=0o755, exist_ok=True)
        if before != p["config_text"] or (os.stat(path).st_mode & 0o7777) != 0o600:
            files.write(path, p["config_text"], 0o600)
    except OSError as exc:
        module.fail_json(msg="cannot write the JoinConfiguration %s on %s: %s" % (path, host, exc))
    start_join(module, run, systemctl, p)


def cleaned(module, run, systemctl, result, host):
    """Stop a join still running, unload an ended one and remove the JoinConfiguration."""
    path, unit = module.params["config_path"], module.params["join_unit"]
    loaded = join_running(result) or result["join"]["finished"]
    result.update(changed=os.path.exists(path) or loaded, config_present=False)
    if module.check_mode:
        return
    if loaded:
        run([systemctl, "stop", unit], (0, 1, 5))
        run([systemctl, "reset-failed", unit], (0, 1))
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        module.fail_json(msg="cannot remove the JoinConfiguration %s on %s: %s" % (path, host, exc))


def copy_state(module, path):
    try:
        return files.digest(path)
    except OSError as exc:
        module.fail_json(msg="cannot read the manifest copy %s on %s: %s" % (path, os.uname().nodename, exc))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["read", "joining", "absent"], default="read"),
            packages=dict(type="list", elements="str", default=[]),
            kubelet_unit=dict(type="str", default="kubelet.service"),
            enable_kubelet=dict(type="bool", default=False),
            kubelet_conf=dict(type="path", default="/etc/kubernetes/kubelet.conf"),
            client_certificate=dict(type="path", default="/var/lib/kubelet/pki/kubelet-client-current.pem"),
            config_path=dict(type="path"),
            config_text=dict(type="str", no_log=True),
            join_unit=dict(type="str", default="hybridgpu-kubeadm-join.service"),
            kubeadm=dict(type="str", default="kubeadm"),
            timeout=dict(type="int", default=300),
            manifest_copy=dict(type="path"),
        ),
        required_if=[("state", "joining", ("config_path", "config_text")),
                     ("state", "absent", ("config_path",))],
        supports_check_mode=True,
    )
    p = module.params
    host = os.uname().nodename
    parsed = check_params(module)

    def run(argv, ok):
        try:
            return cmd.module_run(module, argv, ok=ok).out
        except cmd.CommandError as err:
            module.fail_json(msg="kubeadm_node on %s: %s" % (host, err))

    versions, ready = package_state(module, run, parsed)
    systemctl = module.get_bin_path("systemctl", required=True)
    # is-enabled exits non-zero for disabled, static and missing units; its word says which.
    enabled = run([systemctl, "is-enabled", p["kubelet_unit"]], (0, 1, 4)).strip() == "enabled"
    result = dict(changed=False, joined=os.path.exists(p["kubelet_conf"]), kubelet_enabled=enabled,
                  packages=versions, packages_ready=ready,
                  client_certificate=certificate(module, run, p["client_certificate"]),
                  join=join_status(module, run, systemctl, p["join_unit"]))
    if p["state"] == "joining":
        joining(module, run, systemctl, result, host)
    elif p["state"] == "absent":
        cleaned(module, run, systemctl, result, host)
    elif p["config_path"]:
        result["config_present"] = os.path.exists(p["config_path"])
    if p["manifest_copy"]:
        result["manifest_copy_state"] = copy_state(module, p["manifest_copy"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
