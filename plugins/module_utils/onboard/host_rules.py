# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Firewall rules for one node, derived from the preflight path table and access boundary.

- Host firewall (owned nodes, nft_ruleset format): SSH from the narrowest sources of the
  management paths that reach the node; every other allowed path into the node becomes an
  inbound rule with its narrowest source; the egress allowlist comes from the boundary's
  data-placement section.
- Provider firewall (cloud nodes): the same allowed paths into the node, but the source is
  the address the site's traffic really arrives from (NAT egress or routed range) when the
  path starts at the site.
"""

from __future__ import annotations


class RulesError(ValueError):
    """The inputs cannot give a safe ruleset; the message names the node and path."""


def _ports(path):
    return ["%d" % lo if lo == hi else "%d-%d" % (lo, hi) for lo, hi in path["ports"]]


def paths_into(table, node):
    """Allowed tcp/udp paths whose destination includes `node`."""
    out = []
    for path in table.paths:
        if path["expected"] != "allow" or path["protocol"] == "icmp":
            continue
        if node in table.members(path["destination"]):
            out.append(path)
    return out


def _is_ssh(path, ssh_port):
    return path["protocol"] == "tcp" and any(lo <= ssh_port <= hi for lo, hi in path["ports"])


def host_rules(table, boundary, node, ssh_port=22, extra_inbound=None, enforce_egress=True):
    """host_firewall variables for an owned node: management_sources, inbound, egress."""
    mgmt, inbound = [], []
    for path in paths_into(table, node):
        if path["management"] and _is_ssh(path, ssh_port):
            if path["narrowest_source"] not in mgmt:
                mgmt.append(path["narrowest_source"])
            continue
        inbound.append({"name": path["id"], "protocol": path["protocol"], "ports": _ports(path),
                        "sources": [path["narrowest_source"]]})
    if not mgmt:
        raise RulesError("node %s: the path table %s has no allowed management SSH path (tcp/%d) into it; "
                         "a host firewall would cut the management path" % (node, table.filename, ssh_port))
    names = set(p["id"] for p in paths_into(table, node))
    for rule in extra_inbound or []:
        if rule.get("name") in names:
            raise RulesError("node %s: extra inbound rule %r clashes with a path or rule of the same name"
                             % (node, rule.get("name")))
        names.add(rule.get("name"))
        inbound.append(dict(rule))
    allow = []
    if boundary is not None:
        for i, entry in enumerate(boundary.egress_allowlist()):
            lo, hi = entry["port_min"], entry["port_max"]
            allow.append({"name": "boundary-egress-%d" % i, "protocol": "tcp",
                          "ports": ["%d" % lo if lo == hi else "%d-%d" % (lo, hi)],
                          "dest": entry["cidr"]})
    return {"management_sources": mgmt, "inbound": inbound,
            "egress": {"enforce": bool(enforce_egress and allow), "allow": allow}}


def site_sources(table, path, site_group, arrival):
    """Sources for a cloud-side rule: the site's arrival address when the path starts at
    the site (a member of `site_group` or the control host), else the narrowest source."""
    members = set(table.members(path["source"]))
    site = set(table.doc["groups"].get(site_group, [])) | {"control"}
    if arrival and members and members <= site:
        return list(arrival)
    return [path["narrowest_source"]]


def provider_rules(table, node, arrival=None, site_group="owned", extra=None):
    """Provider firewall rules for a cloud node: [{name, protocol, ports, sources}]."""
    rules = []
    for path in paths_into(table, node):
        rules.append({"name": path["id"], "protocol": path["protocol"], "ports": _ports(path),
                      "sources": site_sources(table, path, site_group, arrival)})
    names = set(r["name"] for r in rules)
    for rule in extra or []:
        if rule.get("name") in names:
            raise RulesError("node %s: extra provider rule %r clashes with a path of the same id"
                             % (node, rule.get("name")))
        rules.append(dict(rule))
    return rules
