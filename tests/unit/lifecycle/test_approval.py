"""Change approval: real ssh-keygen signatures against a boundary-derived allowed_signers."""
import datetime
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lifecycle_support as ls  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.boundary import load_boundary  # noqa: E402


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    return ls.make_approvers(str(tmp_path_factory.mktemp("approvers")))


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
    res = subprocess.run([sys.executable, ls.SIGN, "verify", path, "--boundary", people["boundary"],
                          "--executor", "ops-oncall"], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["approver"] == "sec-owner"
    res = subprocess.run([sys.executable, ls.SIGN, "verify", path, "--boundary", people["boundary"],
                          "--target", "owned-l40s-1"], capture_output=True, text=True, check=False)
    assert res.returncode == 1 and "owned-l40s-1 not in the approved targets" in res.stderr
