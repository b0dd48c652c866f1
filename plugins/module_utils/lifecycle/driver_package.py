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

PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
VERSION = re.compile(r"^[A-Za-z0-9.+~:-]+$")
PATTERN = re.compile(r"^[a-z0-9][a-z0-9+.*-]+$")
INSTALLED = ("ii", "hi")
APT_GET = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-y", "-q",
           "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold"]


class DriverError(Exception):
    """A refused input or a failed step; the message names the field or the step."""


def check_inputs(package, version, pattern):
    """Refuse names that are not Debian package names, versions or dpkg patterns."""
    if not PACKAGE.match(package or ""):
        raise DriverError("package: %r is not a Debian package name" % (package,))
    if version and not VERSION.match(version):
        raise DriverError("version: %r is not a Debian version" % (version,))
    if not PATTERN.match(pattern or ""):
        raise DriverError("package_pattern: %r is not a dpkg-query name pattern" % (pattern,))


def read_state(run, pattern):
    """{"installed": {package: version}, "held": [package]} for packages matching ``pattern``."""
    res = run(["dpkg-query", "-W", "-f=${Package} ${Version} ${db:Status-Abbrev}\n", pattern], ok=(0, 1))
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


def plan(state, package, version, hold):
    """What a change would do: {"install": bool, "unhold": [...], "hold": bool}."""
    install = not present(state, package, version)
    unhold = sorted(p for p in state["held"] if p in state["installed"] or p == package) if install else []
    return {"install": install, "unhold": unhold,
            "hold": bool(hold) and (install or package not in state["held"])}


def apply(run, todo, package, version):
    """Carry out ``plan``'s answer: unhold, one apt-get install, hold."""
    if todo["unhold"]:
        run(["apt-mark", "unhold"] + todo["unhold"])
    if todo["install"]:
        run(APT_GET + ["update"])
        run(APT_GET + ["install", package + ("=" + version if version else "")])
    if todo["hold"]:
        run(["apt-mark", "hold", package])
