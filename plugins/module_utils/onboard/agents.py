# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Agents declared as data, checked against the access boundary before anything changes,
and the least-privilege systemd drop-in each one runs under."""

from __future__ import annotations

import re

from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import node_state

UNIT_RE = re.compile(r"^[A-Za-z0-9@_.:-]+\.service$")
USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
CAP_RE = re.compile(r"^CAP_[A-Z_]+$")
KNOWN = {"name", "package", "binary", "systemd_unit", "exec_start", "user", "privileges",
         "capabilities", "outbound", "listen", "hardening", "description"}

# Sandboxing every agent gets unless its `hardening` overrides a key.
BASE_HARDENING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes",
    "ProtectControlGroups": "yes",
    "RestrictSUIDSGID": "yes",
    "RestrictRealtime": "yes",
    "LockPersonality": "yes",
    "RestrictNamespaces": "yes",
    "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
}


class AgentError(ValueError):
    """An agent the boundary does not allow, or a malformed declaration."""


def _endpoint(item):
    """'CIDR:port' text; the boundary's parsed entries carry it as `entry`."""
    if isinstance(item, dict):
        item = item.get("entry", "")
    return str(item).strip()


def check(agents, allowed):
    """Validate `agents` against the boundary's allowed agents (list of dicts with name,
    outbound...). Returns the normalized agents. Raises AgentError naming the agent."""
    by_name = dict((a["name"], a) for a in allowed)
    out, names = [], set()
    for i, agent in enumerate(agents or []):
        where = "agents[%d]" % i
        if not isinstance(agent, dict) or not agent.get("name"):
            raise AgentError("%s: expected a dict with at least name" % where)
        name = agent["name"]
        where = "agent %s" % name
        extra = sorted(set(agent) - KNOWN)
        if extra:
            raise AgentError("%s: unknown field(s) %s" % (where, ", ".join(extra)))
        if name in names:
            raise AgentError("%s: declared twice" % where)
        names.add(name)
        if name not in by_name:
            raise AgentError("%s is not in the access boundary (allowed: %s); add it to the boundary's "
                             "agents and have it signed first" % (where, ", ".join(sorted(by_name)) or "none"))
        if bool(agent.get("package")) == bool(agent.get("binary")):
            raise AgentError("%s: give exactly one of package or binary" % where)
        if agent.get("package") and not node_state.PACKAGE_NAME.match(str(agent["package"])):
            raise AgentError("%s: package %r is not a Debian package name (no version, no options)"
                             % (where, agent["package"]))
        unit = agent.get("systemd_unit") or ""
        if not UNIT_RE.match(unit):
            raise AgentError("%s: systemd_unit %r must be a .service name" % (where, unit))
        if agent.get("binary"):
            b = agent["binary"]
            if not isinstance(b, dict) or not b.get("src") or not str(b.get("dest", "")).startswith("/"):
                raise AgentError("%s: binary needs src (file) and dest (absolute path)" % where)
            if not agent.get("exec_start"):
                raise AgentError("%s: a binary agent needs exec_start for its unit" % where)
        user = agent.get("user") or "root"
        if not USER_RE.match(user):
            raise AgentError("%s: user %r is not a valid user name" % (where, user))
        caps = list(agent.get("capabilities") or [])
        for cap in caps:
            if not CAP_RE.match(str(cap)):
                raise AgentError("%s: capability %r is not CAP_*" % (where, cap))
        outbound = [_endpoint(e) for e in agent.get("outbound") or []]
        allowed_out = set(_endpoint(e) for e in by_name[name].get("outbound") or [])
        beyond = [e for e in outbound if e not in allowed_out]
        if beyond:
            raise AgentError("%s: outbound %s not granted by the access boundary (granted: %s)"
                             % (where, ", ".join(beyond), ", ".join(sorted(allowed_out)) or "none"))
        listen = [int(p) for p in agent.get("listen") or []]
        out.append({
            "name": name, "package": agent.get("package") or "", "binary": agent.get("binary") or {},
            "systemd_unit": unit, "exec_start": agent.get("exec_start") or "", "user": user,
            "privileges": list(agent.get("privileges") or []), "capabilities": caps,
            "outbound": outbound, "listen": listen, "description": agent.get("description") or name,
            "hardening": dict(agent.get("hardening") or {}),
            "dedicated_user": user not in ("root", "nobody"),
            "dropin": dropin(user, caps, agent.get("hardening")),
        })
    return out


def dropin(user, capabilities, overrides=None):
    """Text of the hardening drop-in: dedicated user, no privilege gain, read-only system,
    only the listed capabilities."""
    settings = dict(BASE_HARDENING)
    settings.update(dict((k, str(v)) for k, v in (overrides or {}).items()))
    caps = " ".join(capabilities)
    lines = ["# Managed by hybridgpu.fleet (node_agents): least-privilege settings.", "[Service]"]
    if user != "root":
        lines.append("User=%s" % user)
    # An empty CapabilityBoundingSet= drops every capability.
    lines.append("CapabilityBoundingSet=%s" % caps)
    lines.append("AmbientCapabilities=%s" % caps)
    for key in sorted(settings):
        lines.append("%s=%s" % (key, settings[key]))
    return "\n".join(lines) + "\n"
