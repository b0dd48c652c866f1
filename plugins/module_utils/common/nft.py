# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Render and check the host firewall table the collection owns, and keep owned tables loading at boot.

The table lives in its own `inet` table, so it never edits anyone else's rules, and it is
loaded in one `nft -f` transaction: `table X {}` + `delete table X` + the full definition.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import files, fwrule

NAME_RE = fwrule.NAME_RE

# ICMP that path-MTU discovery and diagnostics rely on: never drop frag-needed / too-big.
ICMP_TYPES = "destination-unreachable, time-exceeded, parameter-problem, echo-request, echo-reply"
ICMPV6_TYPES = ("destination-unreachable, packet-too-big, time-exceeded, parameter-problem, "
                "echo-request, echo-reply, nd-router-solicit, nd-router-advert, nd-neighbor-solicit, "
                "nd-neighbor-advert")


# Bad firewall input; the message names the field.
RulesetError = fwrule.RuleError


def _net(value, field):
    return fwrule.network(value, field)


def _port_expr(ports):
    items = fwrule.port_text(ports)
    return items[0] if len(items) == 1 else "{ %s }" % ", ".join(items)


def _addr_expr(nets):
    items = [str(n) for n in nets]
    return items[0] if len(items) == 1 else "{ %s }" % ", ".join(items)


def _split(nets):
    v4 = sorted((n for n in nets if n.version == 4), key=lambda n: (int(n.network_address), n.prefixlen))
    v6 = sorted((n for n in nets if n.version == 6), key=lambda n: (int(n.network_address), n.prefixlen))
    return v4, v6


def covers(nets, addr):
    """True when one of `nets` contains the address `addr`."""
    ip = ipaddress.ip_address(addr)
    return any(ip.version == n.version and ip in n for n in nets)


def normalize(spec):
    """Validate the structured ruleset and return a canonical form.

    spec keys: table, management_sources, ssh_port, inbound (list), egress {enforce, allow}.
    Raises RulesetError naming the field on anything wrong.
    """
    allowed = {"table", "management_sources", "ssh_port", "inbound", "egress", "control_address"}
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise RulesetError("unknown key(s): %s" % ", ".join(unknown))
    table = spec.get("table") or "hybridgpu"
    if not NAME_RE.match(table):
        raise RulesetError("table: %r is not a valid nftables table name" % table)
    mgmt = [_net(s, "management_sources[%d]" % i) for i, s in enumerate(spec.get("management_sources") or [])]
    if not mgmt:
        raise RulesetError("management_sources: empty; the control host's SSH would be cut off")
    ssh_port = int(spec.get("ssh_port") or 22)
    if not 1 <= ssh_port <= 65535:
        raise RulesetError("ssh_port: %r is outside 1-65535" % ssh_port)
    control = spec.get("control_address")
    if control:
        _net(control, "control_address")
        if not covers(mgmt, control):
            raise RulesetError(
                "management_sources: the control host connects from %s, which none of %s covers; "
                "applying this would cut the management path" % (control, ", ".join(map(str, mgmt))))
    inbound = []
    names = set()
    for i, rule in enumerate(spec.get("inbound") or []):
        field = "inbound[%d]" % i
        parsed = fwrule.parse(rule, field, "sources", names)
        if not parsed["sources"]:
            raise RulesetError("%s.sources: a narrowest source is required; 'any' is not allowed" % field)
        wide = fwrule.open_to_all(parsed["sources"])
        if wide:
            raise RulesetError("%s.sources: %s opens the port to every address" % (field, wide))
        inbound.append(parsed)
    egress = spec.get("egress") or {}
    extra = sorted(set(egress) - {"enforce", "allow"})
    if extra:
        raise RulesetError("egress: unknown key(s): %s" % ", ".join(extra))
    allow = []
    for i, rule in enumerate(egress.get("allow") or []):
        field = "egress.allow[%d]" % i
        if isinstance(rule, dict) and rule.get("dest") is None:
            raise RulesetError("%s.dest: required" % field)
        allow.append(fwrule.parse(rule, field, "dest", default_name="egress-%d" % i))
    return {"table": table, "management_sources": mgmt, "ssh_port": ssh_port, "inbound": inbound,
            "egress": {"enforce": bool(egress.get("enforce", False)), "allow": allow}}


def render(spec):
    """nft -f input that atomically replaces the table with the declared ruleset."""
    s = normalize(spec)
    t = s["table"]
    lines = [
        "# Managed by hybridgpu.fleet (host_firewall). Changes here are overwritten.",
        "table inet %s {}" % t,
        "delete table inet %s" % t,
        "table inet %s {" % t,
        "  chain input {",
        "    type filter hook input priority filter; policy drop;",
        '    iif "lo" accept',
        "    ct state established,related accept",
        "    ct state invalid drop",
        "    icmp type { %s } accept" % ICMP_TYPES,
        "    icmpv6 type { %s } accept" % ICMPV6_TYPES,
    ]
    v4, v6 = _split(s["management_sources"])
    for fam, nets in (("ip", v4), ("ip6", v6)):
        if nets:
            lines.append('    %s saddr %s tcp dport %d accept comment "management-ssh"'
                         % (fam, _addr_expr(nets), s["ssh_port"]))
    for rule in s["inbound"]:
        v4, v6 = _split(rule["sources"])
        for fam, nets in (("ip", v4), ("ip6", v6)):
            if nets:
                lines.append('    %s saddr %s %s dport %s accept comment "%s"'
                             % (fam, _addr_expr(nets), rule["protocol"], _port_expr(rule["ports"]), rule["name"]))
    lines.append('    counter comment "inbound-dropped"')
    lines.append("  }")
    if s["egress"]["enforce"]:
        lines += [
            "  chain output {",
            "    type filter hook output priority filter; policy drop;",
            '    oif "lo" accept',
            "    ct state established,related accept",
            # numbers, not names: /etc/protocols may be missing on minimal images
            "    meta l4proto { 1, 58 } accept",
        ]
        # Replies of the management SSH by port, not only by conntrack state: a session opened
        # before conntrack tracked this namespace (the first ct rule loads it) is picked up
        # mid-stream as "new", and dropping its replies would stall the very connection that
        # applies this table until the rollback timer fires.
        v4, v6 = _split(s["management_sources"])
        for fam, nets in (("ip", v4), ("ip6", v6)):
            if nets:
                lines.append('    %s daddr %s tcp sport %d accept comment "management-ssh-replies"'
                             % (fam, _addr_expr(nets), s["ssh_port"]))
        for rule in s["egress"]["allow"]:
            v4, v6 = _split(rule["dest"])
            for fam, nets in (("ip", v4), ("ip6", v6)):
                if nets:
                    lines.append('    %s daddr %s %s dport %s accept comment "%s"'
                                 % (fam, _addr_expr(nets), rule["protocol"], _port_expr(rule["ports"]), rule["name"]))
        lines.append('    counter comment "egress-dropped"')
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def digest(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_COUNTER_RE = re.compile(r"counter packets \d+ bytes \d+")


def tables_in(ruleset):
    """{(family, name): text of the table block} parsed from `nft list ruleset` output."""
    tables = {}
    lines = (ruleset or "").splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^table\s+(\S+)\s+(\S+)\s*\{\s*$", lines[i])
        if not m:
            i += 1
            continue
        depth = 0
        block = []
        while i < len(lines):
            block.append(lines[i])
            depth += lines[i].count("{") - lines[i].count("}")
            i += 1
            if depth <= 0:
                break
        tables[(m.group(1), m.group(2))] = "\n".join(block) + "\n"
    return tables


def canonical_listing(text):
    """`nft list table` output with volatile parts (counters, handles) blanked."""
    text = _COUNTER_RE.sub("counter", text)
    text = re.sub(r" # handle \d+", "", text)
    return "\n".join(line.rstrip() for line in text.strip().splitlines()) + "\n"


# Loads the boot copy of a table before the network comes up. The copy starts by deleting
# the table, so loading it again replaces whatever is there.
BOOT_UNIT = """[Unit]
Description=hybridgpu.fleet: load %(what)s nft table inet %(table)s at boot
DefaultDependencies=no
Wants=network-pre.target
Before=network-pre.target shutdown.target
Conflicts=shutdown.target
After=local-fs.target
ConditionPathExists=%(path)s

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=%(nft)s -f %(path)s

[Install]
WantedBy=sysinit.target
"""


class BootError(Exception):
    """A systemctl command for the boot unit failed; the message names it."""


def boot_text(table, listing):
    """The boot copy of a table from its `nft list table` output: loading it replaces the table."""
    return "table inet %s {}\ndelete table inet %s\n%s" % (table, table, listing)


class BootCopy(object):
    """The boot copy of one owned table and the unit `hybridgpu-nft-<table>.service` that loads it.

    ``run(args)`` runs a command and returns (rc, stdout, stderr). Counter values do not make
    the copy stale. ``copy_mode`` is the copy's mode (None: that of the copy it replaces)."""

    def __init__(self, run, table, nft_binary, copy_path, unit_dir, what="the", copy_mode=None, dir_mode=0o700):
        self.run = run
        self.table = table
        self.nft_binary = nft_binary  # absolute: systemd runs it
        self.copy_path = copy_path
        self.unit = "hybridgpu-nft-%s.service" % table
        self.unit_path = os.path.join(unit_dir, self.unit)
        self.what = what
        self.copy_mode = copy_mode
        self.dir_mode = dir_mode

    def unit_text(self):
        return BOOT_UNIT % {"what": self.what, "table": self.table, "nft": self.nft_binary, "path": self.copy_path}

    def _systemctl(self, *args):
        rc, out, err = self.run(["systemctl"] + list(args))
        if rc != 0:
            raise BootError("systemctl %s failed: %s" % (" ".join(args), (err or out).strip()))

    def current(self, text):
        """Whether the copy holds ``text`` (counters aside) and the unit is written and enabled."""
        copy = _read(self.copy_path)
        if copy is None or _COUNTER_RE.sub("counter", copy) != _COUNTER_RE.sub("counter", text):
            return False
        if _read(self.unit_path) != self.unit_text():
            return False
        return self.run(["systemctl", "is-enabled", "--quiet", self.unit])[0] == 0

    def write(self, text, check_mode=False):
        """Write the copy and the unit and enable it. Returns whether anything (would have) changed."""
        if self.current(text):
            return False
        if not check_mode:
            os.makedirs(os.path.dirname(self.copy_path), mode=self.dir_mode, exist_ok=True)
            files.write(self.copy_path, text, mode=self.copy_mode)
            if _read(self.unit_path) != self.unit_text():
                files.write(self.unit_path, self.unit_text(), mode=0o644)
                self._systemctl("daemon-reload")
            self._systemctl("enable", self.unit)
        return True

    def remove(self, check_mode=False):
        """Disable and delete the unit and the copy. Returns whether either existed."""
        present = [path for path in (self.unit_path, self.copy_path) if os.path.exists(path)]
        if present and not check_mode:
            self.run(["systemctl", "disable", self.unit])
            for path in present:
                os.unlink(path)
            self._systemctl("daemon-reload")
        return bool(present)


def _read(path):
    try:
        with open(path) as fh:
            return fh.read()
    except (IOError, OSError):
        return None
