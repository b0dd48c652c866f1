"""Change approval: real ssh-keygen signatures against a boundary-derived allowed_signers."""
import datetime
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from ansible.errors import AnsibleActionFail

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lifecycle_support as ls  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.boundary import load_boundary  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.modules import change_approval  # noqa: E402


MEMBER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJxu1Y2IhVgC4b2cJ1CvBy5l4mXl5Y1w6eX0b3e8m1Zq test-member"
MEMBER_ACCESS = {"ssh_keys": [MEMBER_KEY],
                 "kubernetes": [{"context": "onprem", "kind": "ServiceAccount", "namespace": "team-a", "name": "test-member"},
                                {"context": "cloud", "kind": "BootstrapToken", "name": "abcdef"}]}


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    return ls.make_approvers(str(tmp_path_factory.mktemp("approvers")), members={"test-member": MEMBER_ACCESS})


@pytest.fixture
def boundary(people):
    return load_boundary(people["boundary"])


def signed(people, tmp_path, signer="sec-owner", **kw):
    path = ls.write_record(str(tmp_path), "chg.yml", ls.record_text(**kw),
                           people["keys"][signer] if signer else None)
    text = open(path).read()
    sig = open(path + ".sig").read() if signer else ""
    return path, text, sig


def problems(exc_info):
    return " | ".join(exc_info.value.problems)


def test_allowed_signers_derived_from_change_rights(boundary):
    text = approval.allowed_signers_text(boundary)
    principals = sorted(line.split()[0] for line in text.splitlines())
    # provider-sre has a key but approves nothing: not a signer.
    assert principals == ["ops-lead", "sec-owner"]
    assert all('namespaces="hybridgpu.fleet-change"' in line for line in text.splitlines())
    assert [line.split()[0] for line in approval.allowed_signers_text(boundary, "remove").splitlines()] \
        == ["sec-owner"]


def test_valid_record_is_approved(people, boundary, tmp_path):
    _path, text, sig = signed(people, tmp_path)
    res = approval.check(boundary, text, sig, "driver_upgrade", ["owned-a100-2"], executor="ops-oncall")
    assert res["approved"] and res["approver"] == "sec-owner" and res["requester"] == "ops-oncall"
    assert res["four_eyes"] is True and res["change_id"] == "CHG-TEST-1"


def test_unsigned_record_is_refused(people, boundary, tmp_path):
    _path, text, dummy = signed(people, tmp_path, signer=None)
    with pytest.raises(approval.ApprovalError) as err:
        approval.check(boundary, text, "", "driver_upgrade", ["owned-a100-2"])
    assert "unsigned: no signature" in problems(err)


def test_tampered_record_fails_signature(people, boundary, tmp_path):
    _path, text, sig = signed(people, tmp_path)
    bad = text.replace("owned-a100-2", "owned-a100-1")
    with pytest.raises(approval.ApprovalError) as err:
        approval.check(boundary, bad, sig, "driver_upgrade", ["owned-a100-1"])
    assert "does not match the record" in problems(err)


def test_signer_without_the_right_is_refused(people, boundary, tmp_path):
    # ops-lead may approve driver_upgrade but not remove (only sec-owner may).
    _path, text, sig = signed(people, tmp_path, signer="ops-lead", action="remove", requester="ops-lead")
    with pytest.raises(approval.ApprovalError) as err:
        approval.check(boundary, text, sig, "remove", ["owned-a100-2"])
    msg = problems(err)
    assert "ops-lead may not approve remove" in msg


def test_key_not_in_boundary_is_refused(people, boundary, tmp_path):
    # provider-sre has a key in people but no approver right: find-principals finds nobody.
    _path, text, sig = signed(people, tmp_path, signer="provider-sre")
    with pytest.raises(approval.ApprovalError) as err:
        approval.check(boundary, text, sig, "driver_upgrade", ["owned-a100-2"])
    assert "not an approver's key" in problems(err)


def test_wrong_namespace_is_refused(people, boundary, tmp_path):
    path = ls.write_record(str(tmp_path), "chg.yml", ls.record_text())
    subprocess.run(["ssh-keygen", "-Y", "sign", "-f", people["keys"]["sec-owner"], "-n", "file", path],
                   check=True, capture_output=True)
    with pytest.raises(approval.ApprovalError) as err:
        approval.check(boundary, open(path).read(), open(path + ".sig").read(), "driver_upgrade",
                       ["owned-a100-2"])
    assert "namespace" in problems(err)


def test_expired_and_not_yet_open_windows(people, boundary, tmp_path):
    now = datetime.datetime.now(datetime.timezone.utc)
    _p, text, sig = signed(people, tmp_path, start=now - datetime.timedelta(hours=3),
                           end=now - datetime.timedelta(hours=1))
    with pytest.raises(approval.ApprovalError) as err:
        approval.check(boundary, text, sig, "driver_upgrade", ["owned-a100-2"])
    assert "window: expired at" in problems(err)
    _p, text, sig = signed(people, tmp_path, start=now + datetime.timedelta(hours=1),
                           end=now + datetime.timedelta(hours=3))
    with pytest.raises(approval.ApprovalError) as err:
        approval.check(boundary, text, sig, "driver_upgrade", ["owned-a100-2"])
    assert "window: opens at" in problems(err)


def test_wrong_targets_and_action_are_named(people, boundary, tmp_path):
    _p, text, sig = signed(people, tmp_path)
    with pytest.raises(approval.ApprovalError) as err:
        approval.check(boundary, text, sig, "remove", ["owned-a100-2", "owned-a100-1"])
    msg = problems(err)
    assert "owned-a100-1 not in the approved targets [owned-a100-2]" in msg
    assert "the record approves 'driver_upgrade', this run does 'remove'" in msg


def test_four_eyes(people, boundary, tmp_path):
    _p, text, sig = signed(people, tmp_path, signer="sec-owner", requester="sec-owner")
    with pytest.raises(approval.ApprovalError) as err:
        approval.check(boundary, text, sig, "driver_upgrade", ["owned-a100-2"])
    assert "sec-owner both requested and approved" in problems(err)
    # drain has no four eyes: the approver may also be the requester.
    _p, text, sig = signed(people, tmp_path, signer="ops-lead", requester="ops-lead", action="drain")
    assert approval.check(boundary, text, sig, "drain", ["owned-a100-2"])["approved"]


def test_executor_must_be_a_performer(people, boundary, tmp_path):
    _p, text, sig = signed(people, tmp_path)
    with pytest.raises(approval.ApprovalError) as err:
        approval.check(boundary, text, sig, "driver_upgrade", ["owned-a100-2"], executor="provider-sre")
    assert "provider-sre may not perform driver_upgrade" in problems(err)


def test_inline_text_without_final_newline_still_verifies(people, boundary, tmp_path):
    _p, text, sig = signed(people, tmp_path)
    assert approval.check(boundary, text.rstrip("\n"), sig.strip(), "driver_upgrade", ["owned-a100-2"])["approved"]


def test_bad_record_fields_are_named(boundary):
    with pytest.raises(approval.ApprovalError) as err:
        approval.check(boundary, "change_id: X\naction: explode\ntargets: []\n", "", "drain", ["a"])
    msg = problems(err)
    assert "action: 'explode' is not one of" in msg and "targets: needs at least 1" in msg
    assert "window: is required" in msg


def test_cli_sign_and_verify(people, tmp_path):
    path = ls.write_record(str(tmp_path), "chg.yml", ls.record_text(), people["keys"]["sec-owner"])
    res = subprocess.run([sys.executable, ls.SIGN, "verify", path, "--boundary", people["boundary"], "--signers", people["signers_file"],
                          "--executor", "ops-oncall"], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["approver"] == "sec-owner"
    res = subprocess.run([sys.executable, ls.SIGN, "verify", path, "--boundary", people["boundary"], "--signers", people["signers_file"],
                          "--target", "owned-l40s-1"], capture_output=True, text=True, check=False)
    assert res.returncode == 1 and "owned-l40s-1 not in the approved targets" in res.stderr


# --- the boundary is the trust root: signed by the pinned security owner key --------------
def gate_params(people, record, boundary=None, **kw):
    params = {"boundary": boundary or people["boundary"], "boundary_signers": people["signers"],
              "record_path": record, "action": "remove", "targets": ["owned-a100-2"],
              "playbook": "remove.yml", "executor": "ops-lead"}
    params.update(kw)
    return params


def remove_record(people, tmp_path, signer="sec-owner", name="chg.yml", **kw):
    args = dict(action="remove", requester="ops-lead", change_id="CHG-RM-1")
    args.update(kw)
    return ls.write_record(str(tmp_path), name, ls.record_text(**args), people["keys"][signer])


def forged_boundary(people, tmp_path, sign_with=None):
    """The attack: a copy of the boundary naming the attacker's key as a remove approver,
    declared `signed: true`; signed by ``sign_with`` (a key path) or not at all."""
    doc = yaml.safe_load(open(people["boundary"]))
    pub = ls.keygen(str(tmp_path / "key-mallory"), "mallory")
    doc["people"].append({"id": "mallory", "ssh_keys": [pub]})
    doc["change_rights"]["remove"]["approvers"].append("mallory")
    doc["signature"]["signed"] = True
    path = str(tmp_path / "boundary.yml")
    with open(path, "w") as fh:
        yaml.safe_dump(doc, fh, sort_keys=False)
    if sign_with:
        ls.sign_boundary(path, sign_with)
    people = dict(people, keys=dict(people["keys"], mallory=str(tmp_path / "key-mallory")))
    return path, people


def test_valid_record_passes_the_full_gate(people, tmp_path):
    record = remove_record(people, tmp_path)
    res = change_approval.run(gate_params(people, record))
    assert res["approved"] and res["approver"] == "sec-owner" and res["boundary_signer"] == "sec-owner"
    assert res["playbook"] == "remove.yml"


@pytest.mark.parametrize("how", ["unsigned", "own_key", "copied_sig"])
def test_edited_boundary_cannot_approve_its_editor(people, tmp_path, how):
    own = str(tmp_path / "key-mallory-boundary")
    ls.keygen(own, "mallory")
    path, forged = forged_boundary(people, tmp_path, sign_with=own if how == "own_key" else None)
    if how == "copied_sig":  # the real boundary's signature next to the edited file
        shutil.copyfile(people["boundary"] + ".sig", path + ".sig")
    record = remove_record(forged, tmp_path, signer="mallory")
    with pytest.raises(approval.ApprovalError) as err:
        change_approval.run(gate_params(forged, record, boundary=path))
    expect = {"unsigned": "boundary: boundary.yml is unsigned: no signature file boundary.yml.sig",
              "own_key": "not made by a pinned boundary signer",
              "copied_sig": "does not match the boundary (the boundary was changed after sec-owner signed it)"}[how]
    assert expect in problems(err)


def test_boundary_status_is_checked_after_its_signature(people, tmp_path):
    doc = yaml.safe_load(open(people["boundary"]))
    doc["signature"]["expires"] = "2025-02-01T00:00:00Z"
    path = str(tmp_path / "boundary.yml")
    with open(path, "w") as fh:
        yaml.safe_dump(doc, fh, sort_keys=False)
    ls.sign_boundary(path, people["boundary_key"])
    record = remove_record(people, tmp_path)
    with pytest.raises(approval.ApprovalError) as err:
        change_approval.run(gate_params(people, record, boundary=path))
    assert "boundary: boundary.yml is not in force: expired on 2025-02-01T00:00:00Z" in problems(err)
    doc["signature"]["signed"] = False
    with open(path, "w") as fh:
        yaml.safe_dump(doc, fh, sort_keys=False)
    ls.sign_boundary(path, people["boundary_key"])
    with pytest.raises(approval.ApprovalError) as err:
        change_approval.run(gate_params(people, record, boundary=path))
    assert "not in force: not signed" in problems(err)


def test_no_pinned_signer_trusts_nothing(people, tmp_path):
    record = remove_record(people, tmp_path)
    with pytest.raises(approval.ApprovalError) as err:
        change_approval.run(gate_params(people, record, boundary_signers=""))
    assert "no pinned boundary signer" in problems(err)


def test_pinned_signers_are_never_an_extra_var(monkeypatch):
    from ansible_collections.hybridgpu.fleet.plugins.plugin_utils import pinned
    templar = type("T", (), {"template": staticmethod(lambda v: v.replace("{{ x }}", "X"))})()
    monkeypatch.setattr(pinned, "load_extra_vars", lambda loader: {"hgpu_boundary_signers": "evil"})
    with pytest.raises(AnsibleActionFail) as err:
        pinned.boundary_signers(None, templar, {"hgpu_boundary_signers": "evil"}, pinned_file="/nonexistent")
    assert "hgpu_boundary_signers given as an extra var" in str(err.value)
    # nor through a variable the inventory's template refers to (the lab's lookup path)
    monkeypatch.setattr(pinned, "load_extra_vars", lambda loader: {"hgpu_lab_dir": "/tmp/evil"})
    task_vars = {"hgpu_boundary_signers": "{{ lookup('file', hgpu_lab_dir ~ '/approvers/s') }}",
                 "hgpu_lab_dir": "/tmp/evil"}
    with pytest.raises(AnsibleActionFail) as err:
        pinned.boundary_signers(None, templar, task_vars, pinned_file="/nonexistent")
    assert "hgpu_lab_dir given as an extra var" in str(err.value)
    # the ledger folder neither
    monkeypatch.setattr(pinned, "load_extra_vars", lambda loader: {"hgpu_records_dir": "/tmp/empty"})
    with pytest.raises(AnsibleActionFail):
        pinned.ledger_dir(None, templar, {"hgpu_records_dir": "/tmp/empty"})
    monkeypatch.setattr(pinned, "load_extra_vars", lambda loader: {})
    assert pinned.boundary_signers(None, templar, {"hgpu_boundary_signers": "a {{ x }}"},
                                   pinned_file="/nonexistent")[0] == "a X"


def test_cli_signs_and_verifies_a_boundary(people, tmp_path):
    path = str(tmp_path / "boundary.yml")
    shutil.copyfile(people["boundary"], path)
    res = subprocess.run([sys.executable, ls.SIGN, "sign-boundary", path, "--key", people["boundary_key"]],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0 and res.stdout.strip() == path + ".sig", res.stderr
    res = subprocess.run([sys.executable, ls.SIGN, "verify-boundary", path, "--signers", people["signers_file"]],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0 and json.loads(res.stdout)["status"] == "signed", res.stderr
    with open(path, "a") as fh:
        fh.write("# edited\n")
    res = subprocess.run([sys.executable, ls.SIGN, "verify-boundary", path, "--signers", people["signers_file"]],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 1 and "the boundary was changed after sec-owner signed it" in res.stderr


# --- one action per playbook: the record names the playbook, the targets and the member ---
def test_revocation_record_does_not_pass_the_removal_gate(people, tmp_path):
    record = remove_record(people, tmp_path, action="revoke_member", member="test-member")
    with pytest.raises(approval.ApprovalError) as err:
        change_approval.run(gate_params(people, record))
    msg = problems(err)
    assert "the record approves 'revoke_member', this run does 'remove'" in msg
    assert "playbook: the record approves revoke_member.yml, this run is remove.yml" in msg


def test_removal_record_does_not_pass_the_revocation_gate(people, tmp_path):
    record = remove_record(people, tmp_path)
    with pytest.raises(approval.ApprovalError) as err:
        change_approval.run(gate_params(people, record, action="revoke_member", playbook="revoke_member.yml",
                                        member="test-member"))
    msg = problems(err)
    assert "the record approves 'remove', this run does 'revoke_member'" in msg
    assert "member: the record approves revoking no member, this run revokes test-member" in msg


def test_revocation_names_its_member(people, tmp_path):
    record = remove_record(people, tmp_path, action="revoke_member", member="test-member")
    params = gate_params(people, record, action="revoke_member", playbook="revoke_member.yml")
    res = change_approval.run(dict(params, member="test-member"))
    assert res["member"] == "test-member"
    # what is revoked is what the signed boundary lists for that member, never launcher input
    assert res["member_access"] == MEMBER_ACCESS
    with pytest.raises(approval.ApprovalError) as err:
        change_approval.run(dict(params, member="ops-lead"))
    assert "member: the record approves revoking test-member, this run revokes ops-lead" in problems(err)
    text = ls.record_text(action="revoke_member", requester="ops-lead")
    with pytest.raises(approval.ApprovalError) as err:
        approval.parse_record(text)
    assert "member: is required for action revoke_member" in problems(err)


# --- replay, window and executor -----------------------------------------------------------
def test_change_id_is_used_once(people, tmp_path):
    ledger = str(tmp_path / "records" / "approvals")
    record = remove_record(people, tmp_path, targets=["owned-a100-2", "owned-a100-1"])
    first = change_approval.run(gate_params(people, record, ledger_dir=ledger))
    assert first["ledger"]["resumed"] is False
    assert os.path.exists(os.path.join(ledger, "CHG-RM-1.json"))
    # the same run again (an interrupted removal resumed) is allowed
    again = change_approval.run(gate_params(people, record, ledger_dir=ledger))
    assert again["ledger"]["resumed"] is True
    # anything else under the same change id is a replay
    with pytest.raises(approval.ApprovalError) as err:
        change_approval.run(gate_params(people, record, ledger_dir=ledger, targets=["owned-a100-1"]))
    assert "change_id: CHG-RM-1 was already used" in problems(err)
    assert "differs in targets" in problems(err)


def test_window_needs_a_timezone_and_a_bounded_length(people, tmp_path):
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    local = (now - datetime.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S")
    # the CLI refuses to sign it; an approver could still sign it with ssh-keygen directly
    record = ls.write_record(str(tmp_path), "chg.yml", ls.record_text(action="remove", requester="ops-lead",
                                                                      start=local))
    subprocess.run(["ssh-keygen", "-Y", "sign", "-f", people["keys"]["sec-owner"], "-n", approval.NAMESPACE, record],
                   check=True, capture_output=True)
    with pytest.raises(approval.ApprovalError) as err:
        change_approval.run(gate_params(people, record))
    assert "window.start: %s has no timezone" % local in problems(err)
    record = remove_record(people, tmp_path, start=now - datetime.timedelta(hours=1),
                           end=now + datetime.timedelta(days=30))
    with pytest.raises(approval.ApprovalError) as err:
        change_approval.run(gate_params(people, record))
    assert "is longer than the 24 h a record may approve" in problems(err)


def test_awx_executor_is_the_launching_user(people, tmp_path):
    record = remove_record(people, tmp_path)
    res = change_approval.run(gate_params(people, record, executor=None, awx_user="ops-lead"))
    assert res["executor"] == "ops-lead" and res["authenticated_by"] == "awx"
    with pytest.raises(approval.ApprovalError) as err:
        change_approval.run(gate_params(people, record, executor="ops-lead", awx_user="ops-oncall"))
    assert "executor: the job was launched by ops-oncall (AWX user ops-oncall), not by ops-lead" in problems(err)


def test_a_run_names_its_executor(people, tmp_path):
    record = remove_record(people, tmp_path)
    with pytest.raises(approval.ApprovalError) as err:
        change_approval.run(gate_params(people, record, executor=None))
    assert "executor: nobody is named as running the change" in problems(err)
