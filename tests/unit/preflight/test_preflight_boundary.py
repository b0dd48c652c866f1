"""Access boundary: schema, cross references, signature status and helpers."""
import datetime

import pytest
import yaml

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import boundary
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.schema import SchemaError

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def _doc(lab_file, name="boundary.yml"):
    with open(lab_file(name)) as handle:
        return yaml.safe_load(handle)


def _errors(doc):
    with pytest.raises(SchemaError) as info:
        boundary.parse_boundary(doc, "boundary.yml")
    return info.value.errors


def test_lab_boundary_is_valid_and_signed(lab_file):
    bnd = boundary.load_boundary(lab_file("boundary.yml"))
    st = bnd.status(now=NOW)
    assert st["status"] == "signed"
    assert st["reasons"] == []
    assert st["verification"] == "ssh_signature_pending"
    assert bnd.covers("owned-a100-1")
    assert not bnd.covers("cloud-h200-1")


def test_unsigned_variant(lab_file):
    st = boundary.load_boundary(lab_file("boundary-unsigned.yml")).status(now=NOW)
    assert st["status"] == "unsigned"
    assert st["reasons"] == ["not signed"]


def test_expired_is_unsigned(lab_file):
    doc = _doc(lab_file)
    doc["signature"]["expires"] = "2025-06-01T00:00:00Z"
    st = boundary.parse_boundary(doc, "boundary.yml").status(now=NOW)
    assert st["status"] == "unsigned"
    assert st["reasons"] == ["expired on 2025-06-01T00:00:00Z"]


def test_signed_by_someone_else_is_unsigned(lab_file):
    doc = _doc(lab_file)
    doc["signature"]["signer"] = "ops-lead"
    st = boundary.parse_boundary(doc, "boundary.yml").status(now=NOW)
    assert st["status"] == "unsigned"
    assert "not by the security owner" in st["reasons"][0]


def test_unknown_key_rejected(lab_file):
    doc = _doc(lab_file)
    doc["change_rights"]["drain"]["approver"] = ["ops-lead"]
    errors = _errors(doc)
    assert errors == ["boundary.yml: change_rights.drain.approver: unknown key "
                      "(allowed: approvers, four_eyes, needs_approval, performers)"]


def test_unknown_top_level_key_and_action(lab_file):
    doc = _doc(lab_file)
    doc["rooot_holders"] = []
    doc["change_rights"]["format_disk"] = {"performers": [], "needs_approval": True}
    errors = _errors(doc)
    assert any(e.startswith("boundary.yml: rooot_holders: unknown key") for e in errors)
    assert any(e.startswith("boundary.yml: change_rights.format_disk: unknown key") for e in errors)


def test_unknown_member_named_with_path(lab_file):
    doc = _doc(lab_file)
    doc["change_rights"]["drain"]["approvers"] = ["ops-lead", "bob"]
    assert _errors(doc) == [
        'boundary.yml: change_rights.drain.approvers[1]: unknown member "bob" (not in people)']


def test_missing_required_and_wrong_types(lab_file):
    doc = _doc(lab_file)
    del doc["audit"]["readers"]
    doc["secrets"][0]["rotation_days"] = "ninety"
    doc["agents"][0]["outbound"] = ["10.213.77.1/33:6443"]
    errors = _errors(doc)
    assert "boundary.yml: audit.readers: is required" in errors
    assert "boundary.yml: secrets[0].rotation_days: expected an integer, got string" in errors
    assert any(e.startswith("boundary.yml: agents[0].outbound[0]: '10.213.77.1/33:6443'")
               for e in errors)


def test_each_credential_kind_needs_a_revocation_step(lab_file):
    doc = _doc(lab_file)
    doc["credentials"] = [c for c in doc["credentials"] if c["kind"] != "bmc"]
    assert _errors(doc) == ["boundary.yml: credentials: no entry of kind 'bmc' "
                            "(each kind needs its own revocation step)"]


def test_needs_approval_without_approvers(lab_file):
    doc = _doc(lab_file)
    doc["change_rights"]["reboot"]["approvers"] = []
    assert _errors(doc) == ["boundary.yml: change_rights.reboot.approvers: "
                            "needs_approval is true but nobody may approve"]


def test_egress_host_bits(lab_file):
    doc = _doc(lab_file)
    doc["data_placement"]["egress_allowlist"] = ["10.213.77.5/24:443"]
    errors = _errors(doc)
    assert errors == ["boundary.yml: data_placement.egress_allowlist[0]: "
                      "'10.213.77.5/24:443': host bits set; did you mean 10.213.77.0/24?"]


def test_malformed_yaml_reports_file_and_line(tmp_path):
    path = tmp_path / "boundary.yml"
    path.write_text("schema_version: 1\nsite: lab\npeople:\n  - id: a\n   name: broken\n")
    with pytest.raises(SchemaError) as info:
        boundary.load_boundary(str(path))
    (msg,) = info.value.errors
    assert msg.startswith("boundary.yml: line 5, column 4: malformed YAML")


def test_duplicate_yaml_key_reported(tmp_path):
    path = tmp_path / "boundary.yml"
    path.write_text("site: a\nsite: b\n")
    with pytest.raises(SchemaError) as info:
        boundary.load_boundary(str(path))
    assert info.value.errors == ["boundary.yml: line 2, column 1: malformed YAML: duplicate key 'site'"]


def test_helpers(lab_file):
    bnd = boundary.load_boundary(lab_file("boundary.yml"))
    assert [a["name"] for a in bnd.allowed_agents()] == ["hybridgpu-gpu-exporter", "hybridgpu-node-agent",
                                                         "prometheus-node-exporter"]
    assert bnd.egress_allowlist()[0] == {"cidr": "10.213.77.1/32", "port_min": 6443,
                                         "port_max": 6443, "entry": "10.213.77.1/32:6443"}
    assert bnd.egress_allowed("10.213.77.1", 7443)
    assert not bnd.egress_allowed("10.213.77.1", 8080)
    assert bnd.approvers_for("drain") == ["ops-lead"]
    assert bnd.needs_approval("drain") is True
    assert bnd.needs_approval("cordon") is False
    assert bnd.four_eyes("driver_upgrade") is True
    assert bnd.four_eyes("drain") is False
    # Not listed: nobody approves, so it always needs approval.
    assert bnd.approvers_for("firmware_upgrade") == []
    assert bnd.needs_approval("firmware_upgrade") is True
    with pytest.raises(KeyError):
        bnd.needs_approval("format_disk")
    assert bnd.revocation_steps()["bmc"] == ["disable the BMC user and rotate the BMC admin password"]
