# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The `command` join method: a vendor's installer joins the node (a managed service that
takes bring-your-own nodes), and the collection records what it installs.

- check(): every input, before anything runs. Commands are argument vectors, never shell
  text; the activation secret travels in an environment variable and may not appear in any
  argument (arguments end up in logs and process listings).
- decide(): whether the installer must run. A node whose packages are installed, whose units
  are active and whose Node is Ready (when confirmation is asked) has joined: nothing runs.
- artefacts() / facts(): what the manifest records, so removal can reverse it.
"""

from __future__ import annotations

import posixpath
import re

PACKAGE_RE = re.compile(r"\A[a-z0-9][a-z0-9+.-]{1,127}\Z")
UNIT_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9:_.@\\-]{0,200}\.(service|socket|timer|path|mount|target)\Z")
ENV_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
PROGRAM_RE = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}\Z")
NODE_RE = re.compile(r"\A[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?\Z")
# paths the uninstall or the removal must never be pointed at
PROTECTED = {"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt", "/proc", "/root",
             "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/usr/bin", "/usr/lib", "/usr/local",
             "/usr/sbin", "/var", "/var/lib", "/var/log", "/etc/systemd", "/etc/systemd/system",
             "/lib/systemd", "/lib/systemd/system"}


class CommandJoinError(ValueError):
    """Bad command-join input; the message names every field at fault."""


def _argv_problems(field, argv, required):
    out = []
    if not argv:
        if required:
            out.append("%s: a command is required (a list: the program, then its arguments)" % field)
        return out
    if not isinstance(argv, (list, tuple)):
        return ["%s: must be a list (the program, then its arguments), not shell text" % field]
    for i, arg in enumerate(argv):
        if not isinstance(arg, str) or not arg:
            out.append("%s[%d]: must be a non-empty string" % (field, i))
        elif "\n" in arg or "\r" in arg or "\x00" in arg:
            out.append("%s[%d]: holds a line break or NUL" % (field, i))
    prog = argv[0] if isinstance(argv[0], str) else ""
    if prog and not (posixpath.isabs(prog) and posixpath.normpath(prog) == prog) and not PROGRAM_RE.match(prog):
        out.append("%s[0]: %r is neither an absolute path nor a plain program name" % (field, prog))
    return out


def check(spec):
    """Problems with the inputs of a command join, each naming its field; [] when fine.

    spec: packages, installer, secret, secret_env, env, units, files, uninstall, node_name.
    """
    out = []
    packages = spec.get("packages") or []
    installer = spec.get("installer") or []
    if not packages and not installer:
        out.append("packages, installer: give the vendor's package(s), its installer command, or both")
    for i, name in enumerate(packages):
        if not isinstance(name, str) or not PACKAGE_RE.match(name):
            out.append("packages[%d]: %r is not a Debian package name" % (i, name))
    out += _argv_problems("installer", installer, False)
    out += _argv_problems("uninstall", spec.get("uninstall") or [], True)
    units = spec.get("units") or []
    if not units:
        out.append("units: name the unit(s) the installer starts (removal stops them and proves them gone)")
    for i, unit in enumerate(units):
        if not isinstance(unit, str) or not UNIT_RE.match(unit):
            out.append("units[%d]: %r is not a systemd unit name (name.service, .timer, ...)" % (i, unit))
    for i, path in enumerate(spec.get("files") or []):
        if not isinstance(path, str) or not posixpath.isabs(path) or posixpath.normpath(path) != path \
                or any(c in path for c in "*?[\n\x00"):
            out.append("files[%d]: %r is not a plain absolute path" % (i, path))
        elif path in PROTECTED:
            out.append("files[%d]: %s is a system folder; removal would delete it" % (i, path))
    secret_env = spec.get("secret_env") or ""
    if not ENV_RE.match(secret_env):
        out.append("secret_env: %r is not an environment variable name" % (secret_env,))
    for key, value in sorted((spec.get("env") or {}).items()):
        if not ENV_RE.match(str(key)):
            out.append("env: %r is not an environment variable name" % (key,))
        elif key == secret_env:
            out.append("env.%s: that variable carries the secret (secret_env)" % key)
        elif any(c in str(value) for c in "\n\x00"):
            out.append("env.%s: holds a line break or NUL" % key)
    secret = spec.get("secret") or ""
    if secret:
        for field in ("installer", "uninstall"):
            if any(isinstance(a, str) and secret in a for a in spec.get(field) or []):
                out.append("%s: holds the secret on the command line; pass it through %s (secret_env) instead"
                           % (field, secret_env or "the environment"))
        if any(secret in str(v) for v in (spec.get("env") or {}).values()):
            out.append("env: holds the secret; only secret_env may carry it")
    node_name = spec.get("node_name") or ""
    if node_name and not NODE_RE.match(node_name):
        out.append("node_name: %r is not a Kubernetes Node name" % (node_name,))
    return out


def decide(spec, state):
    """(run the installer?, why) from the node's state.

    state: packages {name: installed}, units {name: active}, node_ready True/False/None
    (None: registration is not confirmed through the API).
    """
    missing = [p for p in spec.get("packages") or [] if not (state.get("packages") or {}).get(p)]
    inactive = [u for u in spec.get("units") or [] if not (state.get("units") or {}).get(u)]
    why = []
    if missing:
        why.append("packages not installed: " + ", ".join(missing))
    if inactive:
        why.append("units not active: " + ", ".join(inactive))
    if state.get("node_ready") is False:
        why.append("Node %s is not Ready" % (spec.get("node_name") or "?"))
    if not spec.get("installer"):
        return False, why
    return bool(why), why


def artefacts(spec, cluster, manifest_copy):
    """Manifest artefacts of a command join (what the node had before is left out by the
    manifest module, from the node's pre_onboarding block)."""
    arts = [{"kind": "package", "name": p, "join_method": "command"} for p in spec.get("packages") or []]
    arts += [{"kind": "unit", "name": u, "join_method": "command"} for u in spec.get("units") or []]
    arts += [{"kind": "file", "path": f, "join_method": "command"} for f in spec.get("files") or []]
    if spec.get("node_name"):
        arts.append({"kind": "api_object", "cluster": cluster, "api_version": "v1", "resource": "nodes",
                     "namespace": "", "name": spec["node_name"]})
    if manifest_copy:
        arts.append({"kind": "directory", "path": posixpath.dirname(manifest_copy), "record_always": True})
        arts.append({"kind": "file", "path": manifest_copy})
    return arts


def facts(spec, cluster, server):
    """Facts of the join section: the method, and what removal runs and checks."""
    return {"method": "command", "cluster": cluster, "server": server,
            "uninstall_command": list(spec.get("uninstall") or []),
            "installer_command": list(spec.get("installer") or []),
            "secret_env": spec.get("secret_env") or "",
            "packages": list(spec.get("packages") or []), "units": list(spec.get("units") or []),
            "files": list(spec.get("files") or []), "node_name": spec.get("node_name") or ""}
