"""Host and provider firewall rules from the lab's path table and boundary; provider rule
checks and the all-open flag (the providers themselves: test_cloud_firewall_*.py)."""
import os

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.boundary import load_boundary
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import host_rules
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import path_map
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import cloud_firewall

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PRE = os.path.join(ROOT, "inventories", "lab", "preflight")


@pytest.fixture(scope="module")
def table():
    return path_map.load_path_table(os.path.join(PRE, "paths.yml"))


@pytest.fixture(scope="module")
def boundary():
    return load_boundary(os.path.join(PRE, "boundary.yml"))


def test_owned_node_gets_ssh_from_the_narrowest_source_and_the_boundary_egress(table, boundary):
    extra = [{"name": "scrape", "protocol": "tcp", "ports": [9400], "sources": ["10.213.77.1/32"]}]
    res = host_rules.host_rules(table, boundary, "owned-a100-1", extra_inbound=extra)
    assert res["management_sources"] == ["10.213.77.1/32"]
    # The path table's scrape paths (control host -> exporters) come first, then the extra rule.
    assert res["inbound"] == [
        {"name": "scrape-gpu-exporter", "protocol": "tcp", "ports": ["9400"], "sources": ["10.213.77.1/32"]},
        {"name": "scrape-node-exporter", "protocol": "tcp", "ports": ["9100"], "sources": ["10.213.77.1/32"]},
    ] + extra
    assert res["egress"]["enforce"] is True
    assert {(a["dest"], tuple(a["ports"])) for a in res["egress"]["allow"]} == {
        ("10.213.77.1/32", ("6443",)), ("10.213.77.1/32", ("7443",)), ("10.213.77.0/24", ("22",))}


def test_no_management_path_means_no_firewall(table, boundary):
    with pytest.raises(host_rules.RulesError, match="would cut the management path"):
        host_rules.host_rules(table, boundary, "cloud-h200-1")


def test_extra_rule_may_not_shadow_a_path(table, boundary):
    with pytest.raises(host_rules.RulesError, match="clashes"):
        host_rules.host_rules(table, boundary, "owned-a100-1", extra_inbound=[{"name": "mgmt-ssh"}])
    with pytest.raises(host_rules.RulesError, match="clashes"):
        host_rules.host_rules(table, boundary, "owned-a100-1", extra_inbound=[{"name": "scrape"}, {"name": "scrape"}])


def test_provider_rules_use_the_site_arrival_address(table):
    doc = dict(table.doc)
    doc["paths"] = list(table.paths) + [{
        "id": "site-to-cloud-ssh", "source": {"group": "owned"}, "destination": {"group": "cloud"},
        "direction": "outbound_from_site", "protocol": "tcp", "ports": [[22, 22]], "purpose": "x",
        "management": False, "expected": "allow", "narrowest_source": "10.213.77.8/29"}]
    t2 = path_map.PathTable(doc, "paths.yml")
    rules = host_rules.provider_rules(t2, "cloud-h200-1", arrival=["198.51.100.7/32"])
    assert rules == [{"name": "site-to-cloud-ssh", "protocol": "tcp", "ports": ["22"],
                      "sources": ["198.51.100.7/32"]}]
    # without a declared arrival address the narrowest source stays
    assert host_rules.provider_rules(t2, "cloud-h200-1")[0]["sources"] == ["10.213.77.8/29"]


RULES = [{"name": "scrape", "protocol": "tcp", "ports": ["9400"], "sources": ["10.213.77.1/32"]}]


@pytest.mark.parametrize("rule, needle", [
    (dict(RULES[0], sources=["0.0.0.0/0"]), "all open"),
    (dict(RULES[0], ports=[]), "'all ports' is not allowed"),
    (dict(RULES[0], protocol="sctp"), "protocol"),
    (dict(RULES[0], sources=["nope"]), "not a CIDR"),
])
def test_bad_provider_rules(rule, needle):
    with pytest.raises(cloud_firewall.ProviderError, match=needle):
        cloud_firewall.normalize_rules([rule])


def test_all_open_detection():
    assert cloud_firewall.all_open(None)
    assert cloud_firewall.all_open([{"sources": ["::/0"]}])
    assert not cloud_firewall.all_open([])
    assert cloud_firewall.all_open([{"protocol": "tcp", "ports": ["1-65535"], "sources": ["0.0.0.0/0"]}])
    assert not cloud_firewall.all_open([{"protocol": "tcp", "ports": ["443"], "sources": ["0.0.0.0/0"]}])
