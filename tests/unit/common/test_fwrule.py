"""The one firewall rule model shared by the host firewall and the cloud-side providers."""
import ipaddress

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import fwrule, nft
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import cloud_firewall


def test_rule_parses_ports_and_networks():
    rule = fwrule.parse({"name": "nccl", "protocol": "tcp", "ports": ["40000-40100", 22, "22"],
                         "sources": ["10.0.0.5/24", "fd00::1"]}, "inbound[0]")
    assert rule["ports"] == [(22, 22), (40000, 40100)]
    assert rule["sources"] == [ipaddress.ip_network("10.0.0.0/24"), ipaddress.ip_network("fd00::1/128")]
    assert fwrule.port_text(rule["ports"]) == ["22", "40000-40100"]


def test_proto_is_another_name_for_protocol():
    assert fwrule.parse({"name": "a", "proto": "udp", "ports": [53]}, "r")["protocol"] == "udp"
    with pytest.raises(fwrule.RuleError, match="r: give protocol or proto, not both"):
        fwrule.parse({"name": "a", "proto": "udp", "protocol": "tcp", "ports": [53]}, "r")


@pytest.mark.parametrize("rule, message", [
    ({"name": "a", "ports": [0]}, "r.ports[0]: 0 is outside 1-65535"),
    ({"name": "a", "ports": ["80-22"]}, "r.ports[0]: '80-22' is outside 1-65535"),
    ({"name": "a", "ports": ["http"]}, "r.ports[0]: 'http' is not a port or port range"),
    ({"name": "a", "ports": []}, "r.ports: at least one port is required"),
    ({"name": "a", "protocol": "sctp", "ports": [1]}, "r.protocol: 'sctp' is not one of tcp, udp"),
    ({"name": "a b", "ports": [1]}, "r.name: missing or not a plain name"),
    ({"name": "a", "ports": [1], "sources": ["x"]}, "r.sources[0]: 'x' is not a CIDR or an IP address"),
    ({"name": "a", "ports": [1], "colour": "red"}, "r: unknown key(s): colour"),
    ("tcp/22", "r: expected a mapping"),
])
def test_bad_rules_name_the_field(rule, message):
    with pytest.raises(fwrule.RuleError) as err:
        fwrule.parse(rule, "r")
    assert message in str(err.value)


def test_host_and_provider_rules_accept_the_same_rule():
    rule = {"name": "scrape", "protocol": "tcp", "ports": [9400], "sources": ["10.213.77.1/32"]}
    text = nft.render({"management_sources": ["10.213.77.1/32"], "inbound": [rule]})
    assert 'ip saddr 10.213.77.1/32 tcp dport 9400 accept comment "scrape"' in text
    assert cloud_firewall.normalize_rules([rule]) == [
        {"name": "scrape", "protocol": "tcp", "ports": ["9400"], "sources": ["10.213.77.1/32"]}]


def test_open_to_all_is_refused_on_both_sides():
    rule = {"name": "wide", "protocol": "tcp", "ports": [22], "sources": ["0.0.0.0/0"]}
    with pytest.raises(nft.RulesetError, match="opens the port to every address"):
        nft.render({"management_sources": ["10.0.0.1/32"], "inbound": [rule]})
    with pytest.raises(cloud_firewall.ProviderError, match="all open"):
        cloud_firewall.normalize_rules([rule])
