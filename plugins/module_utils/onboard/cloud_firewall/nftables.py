# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nftables provider: for bare-metal cloud nodes the site reaches over SSH.

The firewall is an inet table of its own on the node (default ``hybridgpu_provider``),
input policy drop, SSH from the management sources, and the rules. The table is the
collection's; the rules it wrote are kept in ``state_dir/<table>.rules.json`` and the
listing it left in ``<table>.applied``, so a line someone added by hand is told apart
(drift) and carried over when the table is written again. Removal deletes the table, or,
while hand-made lines are left in it, keeps the table with those lines only (detached).
While no table exists the node is behind the preset All Open firewall.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import files, nft
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import cloud_firewall as base

_RULE_RE = re.compile(r'^(ip6?) saddr (\{ [^}]+ \}|\S+) (tcp|udp) dport (\{ [^}]+ \}|\S+) accept'
                      r'(?: comment "([^"]*)")?$')
_CLOSE = '    counter comment "inbound-dropped"'


def _items(text):
    return [t.strip() for t in text.strip("{} ").split(",")]


def parse_line(line):
    """A hand-made `saddr ... dport ... accept` line as a rule; other lines as {raw}."""
    match = _RULE_RE.match(line.strip())
    if not match:
        return {"name": "", "protocol": "", "ports": [], "sources": [], "raw": line}
    fam, srcs, proto, ports, name = match.groups()
    return {"name": name or "", "protocol": proto, "ports": [p.replace(" ", "") for p in _items(ports)],
            "sources": [str(ipaddress.ip_network(s, strict=False)) for s in _items(srcs)], "raw": line, "family": fam}


class NftProvider(base.ProviderFirewall):
    """`run(args, data=None)` runs a command on the node and returns (rc, stdout, stderr)."""

    name = "nft"

    def __init__(self, run, management_sources, table="hybridgpu_provider", ssh_port=22,
                 control_address=None, state_dir="/var/lib/hybridgpu/provider-firewall", boot=False,
                 unit_dir="/etc/systemd/system", nft_binary="/usr/sbin/nft"):
        self.run = run
        self.nft_binary = nft_binary  # absolute: the boot unit runs it
        self.boot = boot
        self.unit_dir = unit_dir
        self.table = table
        self.management_sources = list(management_sources or [])
        self.ssh_port = ssh_port
        self.control_address = control_address
        self.state_dir = state_dir

    def _file(self, suffix):
        return os.path.join(self.state_dir, "%s.%s" % (self.table, suffix))

    def _live(self):
        rc, out, dummy = self.run(["nft", "list", "table", "inet", self.table])
        return nft.canonical_listing(out) if rc == 0 else None

    def _read(self, suffix):
        try:
            with open(self._file(suffix)) as fh:
                return fh.read()
        except OSError:
            return None

    def _write(self, suffix, text):
        os.makedirs(self.state_dir, mode=0o750, exist_ok=True)
        files.write(self._file(suffix), text, mode=0o600)

    def render(self, rules, drift=()):
        spec = {"table": self.table, "management_sources": self.management_sources,
                "ssh_port": self.ssh_port,
                "inbound": [{"name": r["name"], "protocol": r["protocol"], "ports": r["ports"],
                             "sources": r["sources"]} for r in rules]}
        if self.control_address:
            spec["control_address"] = self.control_address
        try:
            text = nft.render(spec)
        except nft.RulesetError as err:
            raise base.ProviderError("provider firewall %s: %s" % (self.table, err))
        kept = "".join("    %s\n" % d["raw"].strip() for d in drift)
        return text.replace(_CLOSE + "\n", kept + _CLOSE + "\n", 1)

    def read(self):
        live = self._live()
        state = {"firewall": None, "rules": [], "drift": [], "attached": False, "shared": 0,
                 "others": [dict(base.ALL_OPEN)]}
        if live is None:
            return state
        saved, applied = self._read("rules.json"), self._read("applied")
        ours = set((applied or "").splitlines())
        lines = live.splitlines()
        saved = json.loads(saved) if saved is not None and applied is not None else None
        if isinstance(saved, list):
            saved = {"rules": saved, "attached": True}
        rules = saved["rules"] if saved else []
        # A rule of ours that lost a line by hand reads as missing, so the plan writes it again.
        missing = ours - set(lines)
        rules = [r for r in rules if not any('comment "%s"' % r["name"] in m for m in missing)]
        drift = [parse_line(line) for line in lines if line not in ours and "saddr" in line]
        state.update(firewall={"id": self.table, "name": self.table, "scope": "inet",
                               "created": saved is not None},
                     rules=rules, drift=drift, attached=saved["attached"] if saved else True, others=[])
        return state

    def _check(self, text):
        rc, out, err = self.run(["nft", "-c", "-f", "-"], data=text)
        if rc != 0:
            raise base.ProviderError("nft -c rejected the provider ruleset for table %s: %s" % (self.table, err or out))

    def execute(self, steps):
        state = self.read()
        after = base.project(state, steps)
        if steps["delete"] or (steps["detach"] and not after["drift"]):
            return self._delete(state)
        rules = after["rules"] if after["attached"] else []
        if not self.management_sources:
            raise base.ProviderError("table %s keeps %d rule(s) added by hand, and rewriting it needs management_sources "
                                     "(the SSH rule), or remove_drift=true to delete the table" % (self.table, len(after["drift"])))
        text = self.render(rules, after["drift"])
        self._check(text)
        rc, out, err = self.run(["nft", "-f", "-"], data=text)
        if rc != 0:
            raise base.ProviderError("nft -f failed for table %s: %s" % (self.table, err or out))
        kept = set(d["raw"] for d in after["drift"])
        live = self._live() or ""
        self._write("rules.json", json.dumps({"rules": rules, "attached": after["attached"]}, sort_keys=True))
        self._write("applied", "".join(line + "\n" for line in live.splitlines() if line not in kept))

    def _systemctl(self, *args):
        rc, out, err = self.run(["systemctl"] + list(args))
        if rc != 0:
            raise base.ProviderError("systemctl %s failed: %s" % (" ".join(args), (err or out).strip()))

    def ensure_boot(self, check_mode=False):
        """With ``boot``: keep the live table loading at boot (a copy of it and an enabled unit that
        loads it), or neither when there is no table. Returns whether anything (would have) changed."""
        if not self.boot:
            return False
        boot = nft.BootCopy(self.run, self.table, self.nft_binary, self._file("boot.nft"), self.unit_dir,
                            what="the provider firewall", copy_mode=0o600, dir_mode=0o750)
        rc, out, dummy = self.run(["nft", "list", "table", "inet", self.table])
        try:
            if rc != 0:
                return boot.remove(check_mode)
            return boot.write(nft.boot_text(self.table, out), check_mode)
        except nft.BootError as err:
            raise base.ProviderError(str(err))

    def _delete(self, state):
        if state["firewall"] is not None:
            rc, out, err = self.run(["nft", "delete", "table", "inet", self.table])
            if rc != 0:
                raise base.ProviderError("nft delete table inet %s failed: %s" % (self.table, err or out))
        for suffix in ("rules.json", "applied"):
            if os.path.exists(self._file(suffix)):
                os.unlink(self._file(suffix))
