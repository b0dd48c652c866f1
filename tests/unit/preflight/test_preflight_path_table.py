"""Path table: validation errors, derived probes, result evaluation, direction verdict."""
import pytest
import yaml

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import path_map
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.schema import SchemaError


def _doc(lab_file):
    with open(lab_file("paths.yml")) as handle:
        return yaml.safe_load(handle)


def _errors(doc):
    with pytest.raises(SchemaError) as info:
        path_map.parse_path_table(doc, "paths.yml")
    return info.value.errors


def test_lab_table_probes(lab_file):
    table = path_map.load_path_table(lab_file("paths.yml"))
    probes = {p["id"]: p for p in table.probes()}
    ssh = probes["mgmt-ssh:allow:owned-a100-1"]
    assert (ssh["source"], ssh["address"], ssh["port"], ssh["expected"]) == ("control", "10.213.77.11", 22, "allow")
    neighbour = probes["mgmt-ssh:neighbour_port:owned-a100-1"]
    assert (neighbour["source"], neighbour["port"], neighbour["expected"]) == ("control", 23, "deny")
    outsider = probes["mgmt-ssh:unlisted_source:owned-a100-1"]
    assert (outsider["source"], outsider["port"], outsider["expected"]) == ("cloud-h200-1", 22, "deny")
    # Owned agents: the outsider is the first listed host outside 10.213.77.8/29.
    assert probes["owned-agent-to-api:unlisted_source:control"]["source"] == "cloud-h200-1"
    assert probes["owned-agent-to-api:neighbour_port:control"]["port"] == 6444
    # cloud-h200-1 may reach 7443 (cloud-agent-to-api), so it is no outsider for that port.
    assert probes["cloud-agent-to-api:unlisted_source:control"]["source"] == "owned-a100-1"
    # Deny paths get no derived probes; icmp gets no neighbouring port.
    assert "inbound-ssh-from-cloud:deny:owned-l40s-1" in probes
    assert not any(i.startswith("inbound-ssh-from-cloud:neighbour") for i in probes)
    assert not any(i.startswith("mgmt-ping:neighbour") for i in probes)
    assert [p["id"] for p in table.probes()] == [p["id"] for p in table.probes()]


def test_neighbour_port_at_top_of_range():
    assert path_map._neighbour_port([[65530, 65535]]) == 65529
    assert path_map._neighbour_port([[22, 22], [8000, 8010]]) == 8011


def test_unknown_key_and_bad_values(lab_file):
    doc = _doc(lab_file)
    doc["paths"][0]["port"] = 22
    doc["paths"][1]["protocol"] = "sctp"
    doc["paths"][2]["ports"] = [70000]
    doc["hosts"]["owned-a100-1"] = "10.213.77.300"
    errors = _errors(doc)
    assert any(e.startswith("paths.yml: paths[0].port: unknown key") for e in errors)
    assert "paths.yml: paths[1].protocol: 'sctp' is not one of tcp, udp, icmp" in errors
    assert "paths.yml: paths[2].ports[0]: port 70000 is outside 1-65535" in errors
    assert "paths.yml: hosts.owned-a100-1: '10.213.77.300' is not an IP address" in errors


def test_cross_reference_errors(lab_file):
    doc = _doc(lab_file)
    doc["paths"][0]["destination"] = {"group": "owned", "host": "control"}
    doc["paths"][1]["source"] = {"host": "ghost"}
    del doc["paths"][2]["narrowest_source"]
    doc["paths"][4]["ports"] = [1]
    doc["paths"][3]["id"] = "mgmt-ssh"
    doc["paths"][0]["narrowest_source"] = "10.213.77.2/32"
    assert _errors(doc) == [
        "paths.yml: paths[0].destination: give exactly one of host, group, cidr",
        "paths.yml: paths[0].narrowest_source: 10.213.77.2/32 does not contain the source host control (10.213.77.1)",
        'paths.yml: paths[1].source.host: unknown host "ghost"',
        "paths.yml: paths[2].narrowest_source: required when expected is allow",
        "paths.yml: paths[3].id: duplicate path id 'mgmt-ssh'",
        "paths.yml: paths[4].ports: icmp has no ports",
    ]


def test_malformed_yaml(tmp_path):
    path = tmp_path / "paths.yml"
    path.write_text("schema_version: 1\npaths:\n  - id: [unclosed\n")
    with pytest.raises(SchemaError) as info:
        path_map.load_path_table(str(path))
    assert info.value.errors[0].startswith("paths.yml: line 4, column 1: malformed YAML")


def _results(table, overrides=None):
    res = {}
    for probe in table.probes():
        observed = "open" if probe["expected"] == "allow" else "closed"
        res[probe["id"]] = {"observed": observed, "elapsed_ms": 1.5, "evidence": "connect()"}
    res.update(overrides or {})
    return res


def test_evaluate_and_direction_pass(lab_file):
    table = path_map.load_path_table(lab_file("paths.yml"))
    evaluated = path_map.evaluate(table.probes(), _results(table))
    assert {p["verdict"] for p in evaluated} == {"pass"}
    verdict = path_map.direction_verdict(table, evaluated)
    assert verdict["verdict"] == "pass"
    assert "inbound-ssh-from-cloud:deny:owned-a100-1" in verdict["proven_closed"]


def test_blocked_allowed_path_and_open_port_fail(lab_file):
    table = path_map.load_path_table(lab_file("paths.yml"))
    evaluated = path_map.evaluate(table.probes(), _results(table, {
        "mgmt-ssh:allow:owned-a100-2": {"observed": "closed", "elapsed_ms": 3000, "evidence": "timeout"},
        "inbound-ssh-from-cloud:deny:owned-l40s-1": {"observed": "open", "elapsed_ms": 2, "evidence": "SYN-ACK"},
    }))
    failed = sorted(p["id"] for p in evaluated if p["verdict"] == "fail")
    assert failed == ["inbound-ssh-from-cloud:deny:owned-l40s-1", "mgmt-ssh:allow:owned-a100-2"]
    verdict = path_map.direction_verdict(table, evaluated)
    assert verdict["verdict"] == "fail"
    assert verdict["reasons"] == ["inbound management port tcp/22 on owned-l40s-1 is open "
                                  "(probe inbound-ssh-from-cloud:deny:owned-l40s-1)"]


def test_direction_declared_inbound_allow_fails_and_unprobed_is_unverified(lab_file):
    table = path_map.load_path_table(lab_file("paths.yml"))
    assert path_map.direction_verdict(table)["verdict"] == "unverified"
    doc = _doc(lab_file)
    doc["paths"][3]["expected"] = "allow"
    doc["paths"][3]["narrowest_source"] = "10.213.77.16/29"
    verdict = path_map.direction_verdict(path_map.parse_path_table(doc, "paths.yml"))
    assert verdict["verdict"] == "fail"
    assert verdict["reasons"] == ["path inbound-ssh-from-cloud allows inbound management traffic into the site"]
