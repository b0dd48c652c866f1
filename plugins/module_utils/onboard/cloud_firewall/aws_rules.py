# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rules to and from EC2 IpPermissions (no SDK needed here).

One IpPermission is a protocol and a port range with lists of sources: ``IpRanges`` (IPv4
CIDRs), ``Ipv6Ranges``, ``UserIdGroupPairs`` (other groups) and ``PrefixListIds``; each
source entry may carry a Description. The collection writes one entry per rule atom with
the description ``MARK + rule name``.
"""

from __future__ import annotations

import ipaddress

from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import cloud_firewall as base

MARK = "hybridgpu.fleet:"
_KINDS = (("IpRanges", "CidrIp"), ("Ipv6Ranges", "CidrIpv6"), ("UserIdGroupPairs", "GroupId"),
          ("PrefixListIds", "PrefixListId"))


def permissions(rules):
    """IpPermissions for normalized rules, one source entry per (port range, source)."""
    out = []
    for name, protocol, port, src in sorted(base.atoms(rules)):
        low, dummy, high = port.partition("-")
        net = ipaddress.ip_network(src, strict=False)
        kind, key = ("IpRanges", "CidrIp") if net.version == 4 else ("Ipv6Ranges", "CidrIpv6")
        out.append({"IpProtocol": protocol, "FromPort": int(low), "ToPort": int(high or low),
                    kind: [{key: str(net), "Description": MARK + name}]})
    return out


def _ports(perm):
    proto = str(perm.get("IpProtocol", "-1"))
    if proto in ("-1", "all"):
        return "all", []
    low, high = perm.get("FromPort"), perm.get("ToPort")
    if proto not in ("tcp", "udp", "6", "17") or low is None or low == -1:
        return proto, []
    proto = {"6": "tcp", "17": "udp"}.get(proto, proto)
    if (low, high) in ((0, 65535), (1, 65535)):
        return proto, [base.ALL_PORTS]
    return proto, ["%d" % low if low == high else "%d-%d" % (low, high)]


def entries(perm):
    """(kind, key, entry) for each source entry of a permission."""
    return [(kind, key, entry) for kind, key in _KINDS for entry in perm.get(kind) or []]


def from_permission(perm, item):
    """One source entry of a permission as (rule, ours)."""
    kind, key, entry = item
    proto, ports = _ports(perm)
    desc = entry.get("Description") or ""
    ours = desc.startswith(MARK) and kind in ("IpRanges", "Ipv6Ranges")
    rule = {"name": desc[len(MARK):] if ours else desc, "protocol": proto, "ports": ports,
            "sources": [entry[key]]}
    return rule, ours


def split(perms):
    """Ingress permissions of the owned group as (our rules, drift); a drift entry keeps the
    single-source permission that revokes it."""
    ours, drift = [], []
    for perm in perms:
        for item in entries(perm):
            rule, mine = from_permission(perm, item)
            if mine and rule["protocol"] in base.PROTOCOLS and rule["ports"]:
                ours.append(rule)
                continue
            single = dict((k, v) for k, v in perm.items() if k in ("IpProtocol", "FromPort", "ToPort"))
            entry = dict((k, v) for k, v in item[2].items() if k in (item[1], "UserId"))
            single[item[0]] = [entry]
            drift.append(dict(rule, permission=single))
    return base.group(base.atoms(ours)), sorted(drift, key=lambda d: (d["name"], d["sources"], d["ports"]))
