# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cloud-side (provider) firewall: a small interface and the lab implementation.

A provider firewall takes rules by protocol, port range and source CIDR, like the
provider's console does. `ProviderFirewall` is the interface (list / apply / delete);
`LabNftProvider` implements it on the cloud node itself with an nftables table of its own
(default ``hybridgpu_provider``), so a real provider API can be added as another subclass.

An instance whose firewall is "all open" (no custom firewall attached, or a rule open to
0.0.0.0/0 or ::/0) is flagged by `all_open()`.
"""

from __future__ import annotations

import ipaddress
import json
import os

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import files, fwrule, nft

PROTOCOLS = fwrule.PROTOCOLS


class ProviderError(ValueError):
    """Bad rules or a failed provider call; the message names the rule or the call."""


def normalize_rules(rules):
    """Validate [{name, protocol, ports, sources}] and return them sorted by name, ports and
    sources as sorted strings."""
    out, names = [], set()
    for i, rule in enumerate(rules or []):
        where = "rules[%d]" % i
        if isinstance(rule, dict) and not rule.get("ports"):
            raise ProviderError("%s.ports: the path table lists ports; 'all ports' is not allowed" % where)
        try:
            parsed = fwrule.parse(rule, where, "sources", names)
        except fwrule.RuleError as err:
            raise ProviderError(str(err))
        wide = fwrule.open_to_all(parsed["sources"])
        if wide:
            raise ProviderError("%s.sources: %s is the 'all open' testing rule; give the addresses the "
                                "site's traffic arrives from (NAT egress or routed range)" % (where, wide))
        if not parsed["sources"]:
            raise ProviderError("%s.sources: at least one source CIDR is required" % where)
        out.append({"name": parsed["name"], "protocol": parsed["protocol"],
                    "ports": sorted(set(fwrule.port_text(parsed["ports"]))),
                    "sources": sorted(set(str(net) for net in parsed["sources"]))})
    return sorted(out, key=lambda r: r["name"])


def all_open(rules):
    """True when `rules` (as listed by a provider) let everything in: None means no custom
    firewall is attached (the provider's preset All Open one applies)."""
    if rules is None:
        return True
    for rule in rules:
        for s in rule.get("sources") or []:
            if ipaddress.ip_network(str(s), strict=False).prefixlen == 0:
                return True
    return False


class ProviderFirewall(object):
    """Interface of a provider firewall attached to one instance."""

    name = "abstract"

    def list(self):  # pragma: no cover - interface
        """The custom rules attached now, or None when none is attached (all open)."""
        raise NotImplementedError

    def apply(self, rules, check_mode=False):  # pragma: no cover - interface
        """Make the attached rules exactly `rules`; returns True when something changed."""
        raise NotImplementedError

    def delete(self, check_mode=False):  # pragma: no cover - interface
        """Detach and delete the custom firewall; returns True when something changed."""
        raise NotImplementedError


class LabNftProvider(ProviderFirewall):
    """The lab's provider firewall: an inet table on the cloud node, input policy drop.

    `run(args, data=None)` runs a command on the node and returns (rc, stdout, stderr).
    The rules as given are kept in `state_dir/<table>.rules.json` next to the canonical
    listing, so list() returns rules (not nft text) and hand-made drift is seen.
    """

    name = "lab_nft"

    def __init__(self, run, management_sources, table="hybridgpu_provider", ssh_port=22,
                 control_address=None, state_dir="/var/lib/hybridgpu/provider-firewall"):
        self.run = run
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

    def render(self, rules):
        spec = {"table": self.table, "management_sources": self.management_sources,
                "ssh_port": self.ssh_port,
                "inbound": [{"name": r["name"], "protocol": r["protocol"], "ports": r["ports"],
                             "sources": r["sources"]} for r in rules]}
        if self.control_address:
            spec["control_address"] = self.control_address
        try:
            return nft.render(spec)
        except nft.RulesetError as err:
            raise ProviderError("provider firewall %s: %s" % (self.table, err))

    def list(self):
        live = self._live()
        if live is None:
            return None
        saved = self._read("rules.json")
        if saved is None or self._read("applied") != live:
            # A table we did not write (or changed by hand): report it as unknown rules.
            return [{"name": "unmanaged", "protocol": "tcp", "ports": [], "sources": [], "listing": live}]
        return json.loads(saved)

    def apply(self, rules, check_mode=False):
        rules = normalize_rules(rules)
        text = self.render(rules)
        rc, out, err = self.run(["nft", "-c", "-f", "-"], data=text)
        if rc != 0:
            raise ProviderError("nft -c rejected the provider ruleset for table %s: %s" % (self.table, err or out))
        changed = self.list() != rules
        if not changed or check_mode:
            return changed
        rc, out, err = self.run(["nft", "-f", "-"], data=text)
        if rc != 0:
            raise ProviderError("nft -f failed for table %s: %s" % (self.table, err or out))
        self._write("rules.json", json.dumps(rules, sort_keys=True))
        self._write("applied", self._live() or "")
        return True

    def delete(self, check_mode=False):
        live = self._live()
        files = [self._file(s) for s in ("rules.json", "applied") if os.path.exists(self._file(s))]
        changed = live is not None or bool(files)
        if changed and not check_mode:
            if live is not None:
                rc, out, err = self.run(["nft", "delete", "table", "inet", self.table])
                if rc != 0:
                    raise ProviderError("nft delete table inet %s failed: %s" % (self.table, err or out))
            for f in files:
                os.unlink(f)
        return changed


PROVIDERS = {"lab_nft": LabNftProvider}
