# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node after removal, read on the node itself (by node_removal_check).

- node_leftovers(): what of the removal plan still exists on the node.
- health(): whether the node works standalone: the units, packages and nft tables it had
  before onboarding, and a working nvidia-smi.

``run(argv) -> (rc, stdout, stderr)`` runs the node's tools; tests pass a fake one.
"""

from __future__ import annotations

import grp
import os
import pwd

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import node_state


class NodeReadError(RuntimeError):
    """A tool on the node could not be run: its answer must not read as 'nothing left'."""


def _read(run, argv, allowed=(0,)):
    rc, out, err = run(argv)
    if rc not in allowed:
        raise NodeReadError("%s failed (rc=%s): %s" % (" ".join(argv), rc, (err or out).strip()[:200]))
    return out


def _run(argv):
    """(rc, stdout, stderr) of a node tool run under LANG=C (the node_state parsers read its C
    output); the callers read the exit status. 127 when it cannot be run or runs past 60 s."""
    try:
        return cmd.run(argv, timeout=60, ok=cmd.ANY_STATUS)
    except cmd.CommandError as err:
        return 127, "", str(err)


def package_status(names, run=_run):
    """{package: dpkg status abbreviation} in one dpkg-query call ('' when dpkg never heard of it)."""
    if not names:
        return {}
    # rc 1: some name is unknown to dpkg; the others are still listed.
    out = _read(run, ["dpkg-query", "-W", "-f=" + node_state.DPKG_QUERY_FORMAT] + list(names), allowed=(0, 1))
    found = node_state.dpkg_status(out)
    return dict((name, found.get(name, ("", None))[0]) for name in names)


def unit_present(name, run=_run):
    """True when systemd still knows the unit (loaded from a file, or active)."""
    rc, out, dummy = run(["systemctl", "show", "-p", "LoadState", "-p", "ActiveState", "--value", name])
    vals = out.split()
    return rc == 0 and bool(vals) and (vals[0] not in ("not-found",) or (len(vals) > 1 and vals[1] == "active"))


def nft_table_names(run=_run):
    return set(node_state.nft_tables(_read(run, node_state.LIST_NFT_TABLES)))


def _user_exists(name):
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _group_exists(name):
    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def _key_present(key):
    body = " ".join((key.get("public_key") or "").split()[:2])
    if not body:
        return False
    try:
        with open(key["path"], encoding="utf-8") as fh:
            return any(body in line for line in fh)
    except FileNotFoundError:
        return False


def node_leftovers(p, run=_run, exists=os.path.lexists, user_exists=_user_exists,
                   group_exists=_group_exists, key_present=_key_present):
    """Every manifest artefact still on the node, as 'kind name' strings."""
    left = []
    left += ["key %s in %s" % ((k.get("public_key") or "").split()[-1:] or ["?"], k["path"])
             for k in p["keys"] if key_present(k)]
    left += ["unit " + u for u in p["units"] if unit_present(u, run)]
    left += ["file " + f for f in p["files"] if exists(f)]
    packages = package_status(p["packages"], run)
    left += ["package " + n for n in p["packages"] if node_state.present(packages[n])]
    left += ["user " + n for n in p["users"] if user_exists(n)]
    left += ["group " + n for n in p["groups"] if group_exists(n)]
    left += ["directory " + d for d in p["directories"] if exists(d)]
    tables = nft_table_names(run)
    restored = set((t["family"], t["name"]) for t in p["restore"]["nft_tables"])
    left += ["nft_table %s %s" % (t["family"], t["name"]) for t in p["nft_tables"]
             if (t["family"], t["name"]) in tables and (t["family"], t["name"]) not in restored]
    return left


def on_demand_units(units, run=_run):
    """The units among ``units`` that systemd starts on demand and that are not enabled: a
    D-Bus service (systemd-timedated, -hostnamed, ...) or one a socket, timer or path unit
    triggers. Such a unit exits when idle, so finding it inactive is healthy."""
    if not units:
        return []
    rc, out, err = run(["systemctl", "show", "--property=Id,BusName,TriggeredBy,UnitFileState"] + list(units))
    if rc != 0:
        return []
    found = []
    for block in out.split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        on_demand = props.get("BusName") or props.get("TriggeredBy")
        if props.get("Id") in units and on_demand and props.get("UnitFileState") != "enabled":
            found.append(props["Id"])
    return found


def health(p, run=_run):
    """Standalone health: the units active before onboarding (but those systemd starts on
    demand), the packages it had, the tables it had, and a working nvidia-smi."""
    problems = []
    rc, out, err = run(node_state.LIST_ACTIVE_UNITS)
    active = set(node_state.active_units(out))
    inactive = [u for u in p["restore"]["units"] if u not in active]
    idle = on_demand_units(inactive, run)
    missing_units = [u for u in inactive if u not in idle]
    if missing_units:
        problems.append("units active before onboarding are not active: " + ", ".join(missing_units))
    # a later approved change (a driver upgrade) may have replaced a package: reported only
    packages = package_status(p["restore"]["packages"], run)
    missing_pkgs = [n for n in p["restore"]["packages"] if not node_state.configured(packages[n])]
    tables = nft_table_names(run)
    missing_tables = ["%s %s" % (t["family"], t["name"]) for t in p["restore"]["nft_tables"]
                      if (t["family"], t["name"]) not in tables]
    if missing_tables:
        problems.append("nft tables of the standalone node are missing: " + ", ".join(missing_tables))
    rc, out, err = run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    gpus = [line.strip() for line in out.splitlines() if line.strip()] if rc == 0 else []
    if not gpus:
        problems.append("nvidia-smi failed (rc=%s): %s" % (rc, (err or out).strip()[:200]))
    return {"ok": not problems, "problems": problems, "gpus": gpus, "missing_units": missing_units,
            "idle_on_demand_units": idle, "packages_changed_since_onboarding": missing_pkgs}
