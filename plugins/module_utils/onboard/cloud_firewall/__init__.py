# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cloud-side (provider) firewall: the provider interface, the plan and the all-open check.

A provider firewall is scoped to one region or data center, holds inbound rules by
protocol, port range and source CIDR, and is attached to instances. A provider reads the
firewall the collection owns for one instance into a *state*::

    {"firewall": None or {"id", "name", "scope", "created"},
     "rules": [rules the collection added, as normalize_rules gives them],
     "drift": [rules in that firewall the collection did not add (by hand)],
     "attached": bool,              # the firewall is attached to the instance
     "shared": int,                 # other instances it is attached to
     "others": [{"id", "name", "rules"}]}  # other firewalls that apply to the instance

`plan()` and `removal_plan()` turn a state and the wanted rules into the steps
``create, add, remove, remove_drift, attach, detach, delete``; the provider's `execute()`
carries them out and `read()` reads the result back. Rules are compared as *atoms*
(name, protocol, one port range, one source), the unit every provider stores.

The provider's preset "All Open" firewall, or any rule open to 0.0.0.0/0 or ::/0 on all
ports, is flagged by `findings()` wherever it applies.
"""

from __future__ import annotations

import ipaddress

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import fwrule

PROTOCOLS = fwrule.PROTOCOLS
STEPS = ("create", "add", "remove", "remove_drift", "attach", "detach", "delete")
ALL_PORTS = "1-65535"
# The provider's preset testing firewall, as a state's `others` entry.
ALL_OPEN = {"id": "all-open", "name": "All Open (preset)",
            "rules": [{"name": "all-open", "protocol": "all", "ports": [], "sources": ["0.0.0.0/0", "::/0"]}]}


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


def atoms(rules):
    """The rules as a set of (name, protocol, port range, source) tuples."""
    return set((r["name"], r["protocol"], port, src)
               for r in rules or [] for port in r.get("ports") or [] for src in r.get("sources") or [])


def group(items):
    """Atoms back into rules, one per (name, protocol), sorted like normalize_rules."""
    rules = {}
    for name, protocol, port, src in sorted(items):
        rule = rules.setdefault((name, protocol), {"name": name, "protocol": protocol, "ports": [], "sources": []})
        if port not in rule["ports"]:
            rule["ports"].append(port)
        if src not in rule["sources"]:
            rule["sources"].append(src)
    for rule in rules.values():
        rule["ports"].sort()
        rule["sources"].sort()
    return sorted(rules.values(), key=lambda r: (r["name"], r["protocol"]))


def rule_all_open(rule):
    """True when the rule lets every address in on every port."""
    wide = any(ipaddress.ip_network(str(s), strict=False).prefixlen == 0 for s in rule.get("sources") or [])
    ports = rule.get("ports") or []
    every_port = rule.get("protocol") == "all" or not ports or any(p in (ALL_PORTS, "0-65535") for p in ports)
    return wide and every_port


def all_open(rules):
    """True when `rules` let everything in; None means no custom firewall is attached, so the
    provider's preset All Open one applies."""
    if rules is None:
        return True
    return any(rule_all_open(rule) for rule in rules)


def findings(state):
    """The all-open firewalls and rules that apply to the instance: [{firewall, rule}]."""
    found = []
    for fw in state.get("others") or []:
        for rule in fw.get("rules") or []:
            if rule_all_open(rule):
                found.append({"firewall": fw.get("name") or fw.get("id"), "id": fw.get("id"), "rule": rule})
    if state.get("firewall") and state.get("attached"):
        for rule in list(state.get("rules") or []) + list(state.get("drift") or []):
            if rule_all_open(rule):
                fw = state["firewall"]
                found.append({"firewall": fw.get("name") or fw.get("id"), "id": fw.get("id"), "rule": rule})
    return found


def empty_plan():
    return {"create": False, "add": [], "remove": [], "remove_drift": [], "attach": False, "detach": False,
            "delete": False}


def plan(state, wanted, remove_drift=False):
    """Steps that make the owned firewall hold exactly `wanted` (normalized rules) and be
    attached; hand-made rules (drift) are left unless `remove_drift`."""
    have, want = atoms(state.get("rules")), atoms(wanted)
    steps = empty_plan()
    steps.update(create=state.get("firewall") is None, add=group(want - have), remove=group(have - want),
                 attach=not state.get("attached"),
                 remove_drift=list(state.get("drift") or []) if remove_drift else [])
    return steps


def removal_plan(state, remove_drift=False):
    """Steps that take away what the collection added: the attachment to this instance and,
    when no other instance uses the firewall, its rules and (once empty) the firewall."""
    steps = empty_plan()
    if state.get("firewall") is None:
        return steps
    shared = bool(state.get("shared"))
    steps["detach"] = bool(state.get("attached"))
    if not shared:
        steps["remove"] = list(state.get("rules") or [])
        steps["remove_drift"] = list(state.get("drift") or []) if remove_drift else []
        left = [d for d in state.get("drift") or [] if d not in steps["remove_drift"]]
        steps["delete"] = bool(state["firewall"].get("created", True)) and not left
    return steps


def changed(steps):
    return any(steps[k] for k in STEPS)


def project(state, steps, wanted=None):
    """The state `steps` would leave (check mode and diff)."""
    after = dict(state)
    if steps["delete"]:
        return dict(after, firewall=None, rules=[], drift=[], attached=False)
    if steps["create"]:
        after["firewall"] = {"id": "(new)", "name": "(new)", "scope": "", "created": True}
    have = (atoms(state.get("rules")) | atoms(steps["add"])) - atoms(steps["remove"])
    after["rules"] = normalize_rules(wanted) if wanted is not None else group(have)
    after["drift"] = [d for d in state.get("drift") or [] if d not in steps["remove_drift"]]
    after["attached"] = (bool(state.get("attached")) or steps["attach"]) and not steps["detach"]
    return after


def view(state):
    """What a diff shows of a state."""
    if not state or state.get("firewall") is None:
        return {}
    return {"firewall": state["firewall"], "rules": state.get("rules") or [],
            "drift": state.get("drift") or [], "attached": bool(state.get("attached"))}


class ProviderFirewall(object):
    """Interface of a provider firewall attached to one instance (see the module docstring)."""

    name = "abstract"

    def read(self):  # pragma: no cover - interface
        """The state of the owned firewall for this instance."""
        raise NotImplementedError

    def execute(self, steps):  # pragma: no cover - interface
        """Carry out a plan (the steps of `plan()` or `removal_plan()`)."""
        raise NotImplementedError
