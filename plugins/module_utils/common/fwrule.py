# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One firewall rule model for the host firewall (nftables) and the cloud-side providers.

A rule is ``{name, protocol, ports, <peers>}``: ``protocol`` is tcp or udp, ``ports`` a list of
ports or ``lo-hi`` ranges, and the peers (``sources`` for inbound rules, ``dest`` for egress
rules) a list of addresses or CIDRs. ``proto`` is accepted as another name for ``protocol``.
Every problem raises `RuleError` naming the field.
"""

from __future__ import annotations

import ipaddress
import re

PROTOCOLS = ("tcp", "udp")
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}$")
_PORT_RE = re.compile(r"^(\d+)(?:-(\d+))?$")


class RuleError(ValueError):
    """A bad firewall rule; the message names the field."""


def network(value, field):
    """An address or CIDR as an ip_network (host bits allowed)."""
    try:
        return ipaddress.ip_network(str(value), strict=False)
    except ValueError:
        raise RuleError("%s: %r is not a CIDR or an IP address" % (field, value))


def port_ranges(value, field):
    """Ports and ``lo-hi`` ranges as sorted, unique (lo, hi) pairs; at least one."""
    if isinstance(value, (int, str)):
        value = [value]
    out = []
    for index, port in enumerate(value or []):
        match = _PORT_RE.match(str(port))
        if not match:
            raise RuleError("%s[%d]: %r is not a port or port range" % (field, index, port))
        low, high = int(match.group(1)), int(match.group(2) or match.group(1))
        if not 1 <= low <= high <= 65535:
            raise RuleError("%s[%d]: %r is outside 1-65535" % (field, index, port))
        out.append((low, high))
    if not out:
        raise RuleError("%s: at least one port is required" % field)
    return sorted(set(out))


def port_text(ranges):
    """(lo, hi) pairs back as strings: "22", "40000-40100"."""
    return ["%d" % low if low == high else "%d-%d" % (low, high) for low, high in ranges]


def parse(rule, field, peers="sources", names=None, default_name=None):
    """Validate one rule and return ``{name, protocol, ports, <peers>}`` with parsed ports
    and networks. ``names`` (a set) catches a name used twice; a rule without a name takes
    ``default_name`` when one is given."""
    if not isinstance(rule, dict):
        raise RuleError("%s: expected a mapping with name, protocol, ports, %s" % (field, peers))
    extra = sorted(set(rule) - {"name", "protocol", "proto", "ports", peers, "comment"})
    if extra:
        raise RuleError("%s: unknown key(s): %s" % (field, ", ".join(extra)))
    if "protocol" in rule and "proto" in rule:
        raise RuleError("%s: give protocol or proto, not both" % field)
    name = rule.get("name") or default_name
    if not name or not NAME_RE.match(str(name)):
        raise RuleError("%s.name: missing or not a plain name" % field)
    if names is not None:
        if name in names:
            raise RuleError("%s.name: %r is used twice" % (field, name))
        names.add(name)
    key = "proto" if "proto" in rule else "protocol"
    protocol = rule.get(key, "tcp")
    if protocol not in PROTOCOLS:
        raise RuleError("%s.%s: %r is not one of %s" % (field, key, protocol, ", ".join(PROTOCOLS)))
    value = rule.get(peers)
    if value is None:
        value = []
    elif not isinstance(value, list):
        value = [value]
    return {"name": str(name), "protocol": protocol,
            "ports": port_ranges(rule.get("ports"), field + ".ports"),
            peers: [network(item, "%s.%s[%d]" % (field, peers, index)) for index, item in enumerate(value)]}


def open_to_all(nets):
    """The first network in ``nets`` that covers every address (0.0.0.0/0, ::/0), or None."""
    return next((net for net in nets if net.prefixlen == 0), None)
