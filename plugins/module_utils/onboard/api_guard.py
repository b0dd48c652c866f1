# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API guard: an nft table of the collection's own on a host in front of the Kubernetes API.

The table (default ``inet hybridgpu_api_guard``) holds a set ``members`` (IPv4 addresses) and
an input chain with policy accept and one rule: traffic to the guarded TCP ports from the
managed sources whose address is not a member is dropped. Nothing else on the host is
touched. Members change one element at a time (``nft add element`` / ``nft delete element``,
never a flush); the table, the chain and the rule are written in one ``nft -f`` transaction
that leaves the set's elements as they are.
"""

from __future__ import annotations

import ipaddress
import json
import os

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import nft

RULE_COMMENT = "hybridgpu-api-guard"


class GuardError(Exception):
    """Bad input or a failed command; the message names the option or the command."""


def addresses(values, field):
    """IPv4 addresses, sorted and without duplicates; GuardError names ``field[i]`` for a bad one."""
    found = set()
    for i, value in enumerate(values or []):
        try:
            addr = ipaddress.ip_address(str(value).strip())
        except ValueError:
            raise GuardError("%s[%d]: %r is not an IP address" % (field, i, value))
        if addr.version != 4:
            raise GuardError("%s[%d]: %s is IPv6; the guard covers IPv4 only" % (field, i, addr))
        found.add(addr)
    return [str(a) for a in sorted(found)]


def networks(values, field):
    """IPv4 networks (host bits must be zero), merged where they overlap."""
    nets = []
    for i, value in enumerate(values or []):
        try:
            net = ipaddress.ip_network(str(value).strip())
        except ValueError as err:
            raise GuardError("%s[%d]: %r is not a network (%s)" % (field, i, value, err))
        if net.version != 4:
            raise GuardError("%s[%d]: %s is IPv6; the guard covers IPv4 only" % (field, i, net))
        if net.prefixlen == 0:
            raise GuardError("%s[%d]: %s would guard every address" % (field, i, net))
        nets.append(net)
    return [str(n) for n in ipaddress.collapse_addresses(nets)]


def ports(values, field="ports"):
    found = set()
    if not values:
        raise GuardError("%s: at least one port is required" % field)
    for i, value in enumerate(values):
        try:
            port = int(value)
        except (TypeError, ValueError):
            raise GuardError("%s[%d]: %r is not a port number" % (field, i, value))
        if not 1 <= port <= 65535:
            raise GuardError("%s[%d]: %d is outside 1-65535" % (field, i, port))
        found.add(port)
    return sorted(found)


def table_name(value):
    if not value or not nft.NAME_RE.match(value) or len(value) > 64:
        raise GuardError("table: %r is not a valid nftables table name" % (value,))
    return value


def render(table, sources, guarded_ports):
    """nft -f input that creates the table, the set and the chain, and writes the one rule again.

    `add` leaves an existing table and set as they are (elements kept); only the chain's rules
    are flushed and written, in the same transaction."""
    return "\n".join([
        "# Managed by hybridgpu.fleet (api_guard).",
        "table inet %s {}" % table,
        "add set inet %s members { type ipv4_addr; }" % table,
        "add chain inet %s input { type filter hook input priority -5; policy accept; }" % table,
        "flush chain inet %s input" % table,
        'add rule inet %s input ip saddr { %s } ip saddr != @members tcp dport { %s } counter drop comment "%s"'
        % (table, ", ".join(sources), ", ".join(str(p) for p in guarded_ports), RULE_COMMENT),
    ]) + "\n"


def _right_values(right):
    """The values on the right of a JSON match: a set, a prefix or one value."""
    items = right["set"] if isinstance(right, dict) and "set" in right else [right]
    out = []
    for item in items:
        if isinstance(item, dict) and "prefix" in item:
            out.append("%s/%d" % (item["prefix"]["addr"], item["prefix"]["len"]))
        elif isinstance(item, dict) and "range" in item:
            out.append("%s-%s" % tuple(item["range"]))
        else:
            out.append(item)
    return out


def parse_rule(expr):
    """(sources, ports) of our rule from its JSON expression, or None when it is not that rule."""
    sources = guarded = None
    member_check = dropped = False
    for part in expr:
        match = part.get("match") if isinstance(part, dict) else None
        if match:
            left = match.get("left", {}).get("payload", {})
            field = (left.get("protocol"), left.get("field"))
            if field == ("ip", "saddr") and match.get("op") == "!=" and match.get("right") == "@members":
                member_check = True
            elif field == ("ip", "saddr") and match.get("op") in ("==", "in"):
                sources = [str(ipaddress.ip_network(v)) for v in _right_values(match["right"])]
            elif field == ("tcp", "dport") and match.get("op") in ("==", "in"):
                guarded = sorted(int(v) for v in _right_values(match["right"]))
        elif isinstance(part, dict) and "drop" in part:
            dropped = True
    if sources is None or guarded is None or not member_check or not dropped:
        return None
    return [str(n) for n in ipaddress.collapse_addresses(ipaddress.ip_network(s) for s in sources)], guarded


class Guard(object):
    """One guard table on this host. ``run(args, data=None)`` returns (rc, stdout, stderr)."""

    def __init__(self, run, table, nft_binary, state_dir, unit_dir):
        self.run = run
        self.table = table_name(table)
        self.nft = nft_binary
        self.boot = nft.BootCopy(run, self.table, nft_binary,
                                 os.path.join(state_dir, "%s.boot.nft" % self.table), unit_dir, what="the API guard")

    def _nft(self, args, data=None, ok_missing=False):
        argv = [self.nft] + args
        rc, out, err = self.run(argv, data)
        if rc != 0:
            if ok_missing and "No such file or directory" in (err or ""):
                return None
            raise GuardError("%s failed (rc %d): %s" % (" ".join(argv), rc, (err or out).strip()))
        return out

    def _objects(self, args):
        out = self._nft(["-j"] + args, ok_missing=True)
        if out is None:
            return None
        try:
            return [item for item in json.loads(out).get("nftables", []) if "metainfo" not in item]
        except ValueError:
            raise GuardError("nft -j %s: output is not JSON" % " ".join(args))

    def read(self):
        """{"members": [...], "rule": (sources, ports) or None} or None when the table is absent."""
        sets = self._objects(["list", "set", "inet", self.table, "members"])
        if sets is None:
            return None
        elems = [e for item in sets if "set" in item for e in item["set"].get("elem", [])]
        members = addresses([e if isinstance(e, str) else e.get("elem", {}).get("val", e) for e in elems], "members (live)")
        chain = self._objects(["list", "chain", "inet", self.table, "input"]) or []
        rules = [parse_rule(item["rule"].get("expr", [])) for item in chain if "rule" in item]
        rule = rules[0] if len(rules) == 1 else None
        return {"members": members, "rule": rule}

    def listing(self):
        return self._nft(["list", "table", "inet", self.table])

    def check(self, text):
        self._nft(["-c", "-f", "-"], data=text)

    def apply(self, text):
        self._nft(["-f", "-"], data=text)

    def elements(self, verb, members):
        if members:
            self._nft([verb, "element", "inet", self.table, "members", "{ %s }" % ", ".join(members)])

    def delete_table(self):
        self._nft(["delete", "table", "inet", self.table])


def _text(members):
    return "".join("%s\n" % m for m in members)


def present(guard, params, check_mode):
    """Create the table if needed, keep its rule as declared and add the members."""
    members = addresses(params.get("members"), "members")
    seed = addresses(params.get("seed"), "seed")
    guarded = ports(params.get("ports"))
    sources = networks(params.get("managed_sources"), "managed_sources")
    live = guard.read()
    if live is None and not sources:
        raise GuardError("managed_sources: required to create table inet %s" % guard.table)
    if live is not None and not sources:
        sources = live["rule"][0] if live["rule"] else []
        if not sources:
            raise GuardError("managed_sources: table inet %s has no guard rule to keep; name the sources" % guard.table)
    before = live["members"] if live else []
    wanted = sorted(set(before) | set(members) | (set(seed) if live is None else set()), key=ipaddress.ip_address)
    adding = [m for m in wanted if m not in before]
    rule_stale = live is None or live["rule"] != (sources, guarded)
    text = render(guard.table, sources, guarded)
    if rule_stale:
        guard.check(text)
    changed = rule_stale or bool(adding)
    if not check_mode:
        if rule_stale:
            guard.apply(text)
        guard.elements("add", adding)
    result = {"changed": changed, "created": live is None, "added": adding, "removed": [],
              "members": wanted, "managed_sources": sources, "ports": guarded, "ruleset": text}
    result["diff"] = {"before": _text(before) if live else "", "after": _text(wanted),
                      "before_header": "inet %s members" % guard.table, "after_header": "inet %s members" % guard.table}
    return result


def absent(guard, params, check_mode):
    """Delete the members that are in the set; a missing table has no members to delete."""
    members = addresses(params.get("members"), "members")
    live = guard.read()
    before = live["members"] if live else []
    removing = [m for m in members if m in before]
    after = [m for m in before if m not in removing]
    if removing and not check_mode:
        guard.elements("delete", removing)
    return {"changed": bool(removing), "created": False, "added": [], "removed": removing, "members": after,
            "diff": {"before": _text(before), "after": _text(after)}}


def removed(guard, check_mode):
    """Delete the whole table (and, with the boot unit, its boot copy)."""
    live = guard.read()
    before = live["members"] if live else []
    if live is not None and not check_mode:
        guard.delete_table()
    return {"changed": live is not None, "created": False, "added": [], "removed": before, "members": [],
            "diff": {"before": _text(before), "after": ""}}


def run(guard, params, check_mode):
    """Bring the guard to ``params["state"]`` and keep its boot copy in step (``boot``)."""
    state = params.get("state") or "present"
    if state == "present":
        result = present(guard, params, check_mode)
    elif state == "absent":
        result = absent(guard, params, check_mode)
    else:
        result = removed(guard, check_mode)
    boot = params.get("boot", True)
    result["boot_unit"] = guard.boot.unit if boot else None
    try:
        if state == "removed" or not boot:
            result["changed"] = guard.boot.remove(check_mode) or result["changed"]
        elif check_mode and result["changed"]:
            pass  # the copy follows the table, which changes
        else:
            text = nft.boot_text(guard.table, guard.listing())
            result["changed"] = guard.boot.write(text, check_mode) or result["changed"]
    except nft.BootError as err:
        raise GuardError(str(err))
    return result
