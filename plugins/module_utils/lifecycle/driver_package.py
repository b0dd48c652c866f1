# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver package change on a node: read the installed driver packages and holds, then
replace the driver in one apt transaction (holds on driver packages lifted first, the new
package held afterwards).

``run(argv, ok=(0,))`` runs one command (an argument list) and returns ``cmd.Result``; the
module passes ``cmd.module_run``, the tests a fake."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd

PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
VERSION = re.compile(r"^[A-Za-z0-9.+~:-]+$")
PATTERN = re.compile(r"^[a-z0-9][a-z0-9+.*-]+$")
INSTALLED = ("ii", "hi")
APT_GET = cmd.APT_GET


class DriverError(Exception):
    """A refused input or a failed step; the message names the field or the step."""


def check_inputs(package, version, pattern, companion_prefix="", branch=""):
    """Refuse names that are not Debian package names, versions, dpkg patterns or branches."""
    if companion_prefix and not PACKAGE.match(companion_prefix + "0"):
        raise DriverError("companion_prefix: %r is not the start of a Debian package name" % (companion_prefix,))
    if branch and not re.match(r"^[0-9]+$", branch):
        raise DriverError("branch: %r is not a driver branch (digits, like 550)" % (branch,))
    if not PACKAGE.match(package or ""):
        raise DriverError("package: %r is not a Debian package name" % (package,))
    if version and not VERSION.match(version):
        raise DriverError("version: %r is not a Debian version" % (version,))
    if not PATTERN.match(pattern or ""):
        raise DriverError("package_pattern: %r is not a dpkg-query name pattern" % (pattern,))


def read_state(run, pattern, companion_prefix=""):
    """{"installed": {package: version}, "held": [package]} for packages matching ``pattern``
    (and ``<companion_prefix>*``, the fabric manager that moves with the driver)."""
    patterns = [pattern] + ([companion_prefix + "*"] if companion_prefix else [])
    res = run(["dpkg-query", "-W", "-f=${Package} ${Version} ${db:Status-Abbrev}\n"] + patterns, ok=(0, 1))
    installed = {}
    for line in res.out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] in INSTALLED:
            installed[parts[0]] = parts[1]
    held = [name.strip() for name in run(["apt-mark", "showhold"]).out.splitlines() if name.strip()]
    return {"installed": installed, "held": sorted(held)}


def present(state, package, version):
    """The wanted package is installed (at the wanted version, when one is given)."""
    have = state["installed"].get(package)
    return have is not None and (not version or have == version)


def companion(state, prefix, branch, version):
    """The fabric manager package of the new branch when the node runs one (NVSwitch systems need
    it at the driver's exact version), else None. ``prefix`` empty: no companion."""
    if not prefix or not any(p.startswith(prefix) for p in state["installed"]):
        return None
    if not branch:
        raise DriverError("branch: the node runs a fabric manager (%s*), which moves with the driver; give the "
                          "driver's branch so its package can be named" % prefix)
    want = prefix + branch
    return None if present(state, want, version) else want


def plan(state, package, version, hold, companion_package=None):
    """What a change would do: {"install": bool, "companion": name or None, "unhold": [...], "hold": bool}."""
    install = not present(state, package, version) or bool(companion_package)
    unhold = sorted(p for p in state["held"] if p in state["installed"] or p in (package, companion_package)) if install else []
    return {"install": install, "companion": companion_package, "unhold": unhold,
            "hold": bool(hold) and (install or package not in state["held"])}


def apply(run, todo, package, version):
    """Carry out ``plan``'s answer: unhold, one apt-get install (driver and companion), hold."""
    if todo["unhold"]:
        run(["apt-mark", "unhold"] + todo["unhold"])
    if todo["install"]:
        run(APT_GET + ["update"])
        names = [package] + ([todo["companion"]] if todo.get("companion") else [])
        run(APT_GET + ["install"] + [n + ("=" + version if version else "") for n in names])
    if todo["hold"]:
        run(["apt-mark", "hold", package])
