# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What installing a node's agents takes, in the order it must happen: dedicated system users,
the packages in one apt transaction, then each unit's files and state (unit file when the agent
ships as a binary, hardening drop-in, one daemon-reload, enable, start or restart).

The functions take ``run(argv, ok=(0,))``, which returns ``cmd.Result`` and raises
``cmd.CommandError``, so the modules (agent_install, agent_unit) and the tests share them.
Every name that reaches a command line or a path is checked first (``check_names``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import pwd
import re
import time

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import files
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import node_state

UNIT_RE = re.compile(r"^[A-Za-z0-9:_.@-]+\.service$")
DROPIN_RE = re.compile(r"^[A-Za-z0-9:_.@-]+\.conf$")
USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")

SYSTEM_SHELL = "/usr/sbin/nologin"
SYSTEM_HOME = "/nonexistent"

# When the package lists were last refreshed: apt's success stamp where the periodic job or
# APT::Update::Post-Invoke-Success writes it, else the lists folder itself.
APT_STAMPS = ("/var/lib/apt/periodic/update-success-stamp", "/var/lib/apt/lists")

ENABLED = ("enabled", "enabled-runtime", "static", "alias", "indirect", "generated")


class InstallError(Exception):
    """A name that must not reach a command or path, or a step that failed; the message says which."""


def check_names(users=(), packages=(), units=(), dropin_name="hybridgpu-hardening.conf"):
    """Refuse, before anything runs, a name that is not what its field must be."""
    for name in users:
        if not USER_RE.match(name or ""):
            raise InstallError("users: %r is not a user name (lower case letters, digits, _ and -, "
                               "at most 32, not starting with a digit or -)" % (name,))
    for name in packages:
        if not node_state.PACKAGE_NAME.match(name or ""):
            raise InstallError("packages: %r is not a Debian package name" % (name,))
    for unit in units:
        if not UNIT_RE.match(unit.get("name") or ""):
            raise InstallError("units: name %r is not a systemd service unit name (letters, digits, "
                               ":_.@- and .service)" % (unit.get("name"),))
    if not DROPIN_RE.match(dropin_name or ""):
        raise InstallError("dropin_name %r is not a drop-in file name (letters, digits, :_.@- and .conf)"
                           % (dropin_name,))
    seen = set()
    for unit in units:
        if unit["name"] in seen:
            raise InstallError("units: %s is given twice" % unit["name"])
        seen.add(unit["name"])


def user_steps(users, getpwnam=pwd.getpwnam):
    """[(user, argv)] that make each user a system account with no login shell and no home:
    useradd for a missing one, usermod for one whose shell or home differ; nothing otherwise."""
    steps = []
    for name in dict.fromkeys(users):
        try:
            entry = getpwnam(name)
        except KeyError:
            steps.append((name, ["useradd", "--system", "--shell", SYSTEM_SHELL, "--no-create-home",
                                 "--home-dir", SYSTEM_HOME, name]))
            continue
        if entry.pw_shell != SYSTEM_SHELL or entry.pw_dir != SYSTEM_HOME:
            steps.append((name, ["usermod", "--shell", SYSTEM_SHELL, "--home", SYSTEM_HOME, name]))
    return steps


def missing_packages(run, packages):
    """The packages of ``packages`` dpkg does not have installed (held ones count as installed),
    in the order given."""
    packages = list(dict.fromkeys(packages))
    if not packages:
        return []
    # One dpkg-query for all; it exits 1 when one is unknown and still prints the others.
    res = run(["dpkg-query", "-W", "-f=" + node_state.DPKG_QUERY_FORMAT] + packages, ok=(0, 1))
    found = node_state.dpkg_status(res.out)
    return [p for p in packages if not node_state.configured(found.get(p, ("", None))[0])]


def lists_age(now=None, stamps=APT_STAMPS):
    """Seconds since the package lists were refreshed; None when no stamp exists."""
    now = time.time() if now is None else now
    for path in stamps:
        try:
            return max(0.0, now - os.stat(path).st_mtime)
        except OSError:
            continue
    return None


def install_packages(run, names, cache_valid_time, age):
    """Refresh the package lists when older than ``cache_valid_time`` s, then install ``names``
    in one apt-get transaction. Returns whether the lists were refreshed."""
    refreshed = age is None or age > cache_valid_time
    if refreshed:
        run(cmd.APT_GET + ["update"])
    run(cmd.APT_GET + ["install"] + list(names))
    return refreshed


def unit_files(unit, systemd_dir, dropin_name):
    """[(kind, path, text)] the unit needs on disk: the unit file when given, and the drop-in."""
    wanted = []
    if unit.get("unit_content") is not None:
        wanted.append(("unit", os.path.join(systemd_dir, unit["name"]), unit["unit_content"]))
    wanted.append(("dropin", os.path.join(systemd_dir, unit["name"] + ".d", dropin_name), unit["dropin_content"]))
    return wanted


def apply_units(run, systemctl, units, systemd_dir, dropin_name, check_mode):
    """Write each unit's files, reload systemd once when any changed, then enable, start or restart
    each unit. Returns ({unit: result}, diffs); a result has unit_changed, dropin_changed,
    enabled_now, started, restarted and changed."""
    results, diffs, changed_files = {}, [], False
    for unit in units:
        res = dict(unit_changed=False, dropin_changed=False, enabled_now=False, started=False, restarted=False)
        for kind, path, text in unit_files(unit, systemd_dir, dropin_name):
            try:
                before = files.read_text(path)
                if before != text:
                    res[kind + "_changed"] = True
                    diffs.append(dict(before=before or "", after=text, before_header=path, after_header=path))
                    if not check_mode:
                        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                        files.write(path, text, 0o644)
            except (OSError, UnicodeDecodeError) as exc:
                raise InstallError("cannot read or write %s: %s" % (path, exc))
        changed_files = changed_files or res["unit_changed"] or res["dropin_changed"]
        results[unit["name"]] = res
    if changed_files and not check_mode:
        run([systemctl, "daemon-reload"])

    for unit in units:
        name, res = unit["name"], results[unit["name"]]
        if unit.get("unit_content") is None and not check_mode:
            state = run([systemctl, "show", "--property=LoadState", "--value", name], ok=cmd.ANY_STATUS)
            if state.out.strip() != "loaded":
                raise InstallError("unit %s is not loaded (%s): is the package that ships it installed?"
                                   % (name, state.out.strip() or "rc %d" % state.rc))
        enabled = run([systemctl, "is-enabled", name], ok=cmd.ANY_STATUS).out.strip()
        if enabled not in ENABLED:
            res["enabled_now"] = True
            if not check_mode:
                run([systemctl, "enable", name])
        active = run([systemctl, "is-active", "--quiet", name], ok=cmd.ANY_STATUS)
        if active.rc != 0:
            res["started"] = True
            if not check_mode:
                run([systemctl, "start", name])
        elif res["unit_changed"] or res["dropin_changed"] or unit.get("restart"):
            res["restarted"] = True
            if not check_mode:
                run([systemctl, "restart", name])
        res["changed"] = any(res[k] for k in ("unit_changed", "dropin_changed", "enabled_now", "started", "restarted"))
    return results, diffs
