"""Checks every cloud-firewall provider passes (docs/cloud_firewall_providers.md).

A provider's test module subclasses `ProviderKit` (the class name has no Test prefix, so it is
collected only through a subclass) and gives a `harness` fixture with:

- ``provider()``: a fresh provider object for one instance, on the same backend;
- ``hand_add(protocol, port, source)``: add an inbound rule to the collection's firewall the
  way a person would (console, CLI), not through the provider;
- ``open_all()``: make the provider's preset All Open firewall apply to the instance;
- ``backend_rules()``: the collection's firewall as read straight from the backend, a set of
  (protocol, port range, source), or None when the firewall does not exist;
- ``untouched()``: what the collection never owns (other firewalls, their rules, other
  tables), compared before and after a run;
- ``all_open_stays``: True when the preset keeps applying once the collection's firewall is
  attached (firewalls that add up, like security groups), False when it is replaced.
"""
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import cloud_firewall as cf

RULES = [
    {"name": "scrape-node-exporter", "protocol": "tcp", "ports": ["9100"], "sources": ["198.51.100.0/28"]},
    {"name": "nccl", "protocol": "tcp", "ports": ["40000-40100"], "sources": ["198.51.100.0/28", "203.0.113.5/32"]},
    {"name": "dns", "protocol": "udp", "ports": ["53"], "sources": ["2001:db8:5::/48"]},
]
CHANGED = [dict(RULES[0], ports=["9100", "9101"]), RULES[2]]


def converge(fw, rules, remove_drift=False):
    steps = cf.plan(fw.read(), cf.normalize_rules(rules), remove_drift=remove_drift)
    if cf.changed(steps):
        fw.execute(steps)
    return steps


def remove(fw, remove_drift=False):
    steps = cf.removal_plan(fw.read(), remove_drift=remove_drift)
    if cf.changed(steps):
        fw.execute(steps)
    return steps


def expected(rules):
    return set((p, port, s) for dummy, p, port, s in cf.atoms(cf.normalize_rules(rules)))


class ProviderKit(object):

    def test_plan_creates_adds_and_attaches(self, harness):
        steps = cf.plan(harness.provider().read(), cf.normalize_rules(RULES))
        assert steps["create"] and steps["attach"] and not steps["remove"] and not steps["delete"]
        assert cf.atoms(steps["add"]) == cf.atoms(cf.normalize_rules(RULES))

    def test_planning_alone_changes_nothing(self, harness):
        before, kept = harness.backend_rules(), harness.untouched()
        fw = harness.provider()
        state = fw.read()
        predicted = cf.project(state, cf.plan(state, cf.normalize_rules(RULES)), RULES)
        assert predicted["rules"] == cf.normalize_rules(RULES) and predicted["attached"]
        assert harness.backend_rules() == before and harness.untouched() == kept

    def test_apply_then_read_back(self, harness):
        kept = harness.untouched()
        converge(harness.provider(), RULES)
        state = harness.provider().read()
        assert state["rules"] == cf.normalize_rules(RULES) and state["attached"] and not state["drift"]
        assert harness.backend_rules() == expected(RULES)
        assert harness.untouched() == kept

    def test_second_run_changes_nothing(self, harness):
        converge(harness.provider(), RULES)
        assert not cf.changed(converge(harness.provider(), RULES))

    def test_changed_rules_touch_only_the_difference(self, harness):
        converge(harness.provider(), RULES)
        steps = converge(harness.provider(), CHANGED)
        assert not steps["create"] and not steps["attach"]
        assert cf.atoms(steps["add"]) == cf.atoms(cf.normalize_rules(CHANGED)) - cf.atoms(cf.normalize_rules(RULES))
        assert cf.atoms(steps["remove"]) == cf.atoms(cf.normalize_rules(RULES)) - cf.atoms(cf.normalize_rules(CHANGED))
        assert harness.provider().read()["rules"] == cf.normalize_rules(CHANGED)
        assert harness.backend_rules() == expected(CHANGED)

    def test_hand_added_rule_is_drift_and_left_unless_asked(self, harness):
        converge(harness.provider(), RULES)
        harness.hand_add("tcp", "8080", "192.0.2.77/32")
        state = harness.provider().read()
        assert [(d["protocol"], d["ports"], d["sources"]) for d in state["drift"]] == \
            [("tcp", ["8080"], ["192.0.2.77/32"])]
        assert state["rules"] == cf.normalize_rules(RULES)
        # reported, not changed: the next run leaves it
        assert not cf.changed(converge(harness.provider(), RULES))
        assert ("tcp", "8080", "192.0.2.77/32") in harness.backend_rules()
        # a change of our rules keeps it too
        converge(harness.provider(), CHANGED)
        assert harness.backend_rules() == expected(CHANGED) | {("tcp", "8080", "192.0.2.77/32")}
        # removed only when asked
        steps = converge(harness.provider(), CHANGED, remove_drift=True)
        assert steps["remove_drift"] and not steps["add"] and not steps["remove"]
        assert harness.backend_rules() == expected(CHANGED) and not harness.provider().read()["drift"]

    def test_removal_removes_exactly_what_was_added(self, harness):
        kept = harness.untouched()
        converge(harness.provider(), RULES)
        remove(harness.provider())
        assert harness.backend_rules() is None
        state = harness.provider().read()
        assert state["firewall"] is None and not state["attached"]
        assert harness.untouched() == kept
        assert not cf.changed(remove(harness.provider()))

    def test_removal_leaves_a_hand_added_rule(self, harness):
        converge(harness.provider(), RULES)
        harness.hand_add("tcp", "8080", "192.0.2.77/32")
        steps = remove(harness.provider())
        assert steps["remove"] and not steps["delete"]
        assert harness.backend_rules() == {("tcp", "8080", "192.0.2.77/32")}
        state = harness.provider().read()
        assert not state["rules"] and not state["attached"] and len(state["drift"]) == 1
        assert not cf.changed(remove(harness.provider()))
        # asked to, the removal takes the hand-made rule and then the firewall
        remove(harness.provider(), remove_drift=True)
        assert harness.backend_rules() is None

    def test_all_open_is_flagged_wherever_it_applies(self, harness):
        harness.open_all()
        found = cf.findings(harness.provider().read())
        assert found and all(cf.rule_all_open(f["rule"]) and f["firewall"] for f in found)
        converge(harness.provider(), RULES)
        after = cf.findings(harness.provider().read())
        assert bool(after) == harness.all_open_stays
        assert all(f["id"] != harness.provider().read()["firewall"]["id"] for f in after)

    def test_all_open_rule_is_refused(self, harness):
        for wide in ("0.0.0.0/0", "::/0"):
            try:
                converge(harness.provider(), [dict(RULES[0], sources=[wide])])
            except cf.ProviderError as err:
                assert "all open" in str(err)
            else:
                raise AssertionError("%s was accepted" % wide)
        assert harness.backend_rules() is None
