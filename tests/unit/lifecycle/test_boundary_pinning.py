"""The access boundary is found at a pinned path, carries an expiry, and an older boundary than
the newest one a records folder has trusted is refused. Each attack runs through the public
entry point (the playbook or the verifying module in a play on localhost, with real
signatures) and the test asserts that nothing was used or changed."""
import json
import os
import subprocess
import sys

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lifecycle_support as ls  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval  # noqa: E402

REPO = ls.REPO


def boundary_copy(directory, **signature):
    """The lab boundary with other signature fields (None removes one), written to DIRECTORY."""
    with open(ls.LAB_BOUNDARY) as fh:
        doc = yaml.safe_load(fh)
    for key, value in signature.items():
        if value is None:
            doc["signature"].pop(key, None)
        else:
            doc["signature"][key] = value
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "source.yml")
    with open(path, "w") as fh:
        yaml.safe_dump(doc, fh, sort_keys=False)
    return path


@pytest.fixture(scope="module")
def estate(tmp_path_factory):
    """One security owner; the boundary of 2025 (ops-lead's old key) and its successor of 2026,
    which rotated every approver key out (a new key per person)."""
    base = tmp_path_factory.mktemp("estate")
    signer = ls.boundary_signer(str(base / "owner"))
    old = ls.make_approvers(str(base / "old"), signer=signer)
    new = ls.make_approvers(str(base / "new"), signer=signer,
                            boundary_src=boundary_copy(str(base / "src"), signed_at="2026-01-15T09:00:00Z"))
    return {"old": old, "new": new, "base": base}


def approval_play(tmp_path, signers, boundary, record, extra_vars=None):
    """One change_approval task as remove.yml runs it; the boundary and the records folder come
    from the inventory. Returns (task result, process)."""
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"owned-a100-2": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {"hgpu_boundary_signers": signers, "hgpu_records_dir": str(tmp_path / "records"),
                 "hgpu_boundary_path": boundary}}}))
    book = tmp_path / "book.yml"
    book.write_text(yaml.safe_dump([{"name": "p", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Verify", "hybridgpu.fleet.change_approval": {
            "record_path": record, "action": "remove", "playbook": "remove.yml",
            "targets": "{{ ansible_play_hosts_all }}", "executor": "ops-lead"}}]}]))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), str(book)]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    doc = json.loads(out.stdout)
    return doc["plays"][0]["tasks"][0]["hosts"]["owned-a100-2"], out


def record(people, tmp_path, change_id, signer):
    return ls.write_record(str(tmp_path), change_id + ".yml", ls.record_text(
        change_id=change_id, action="remove", requester="ops-lead"), people["keys"][signer])


def test_an_older_boundary_is_refused_once_a_newer_one_was_trusted(estate, tmp_path):
    new, old = estate["new"], estate["old"]
    res, _out = approval_play(tmp_path, new["signers"], new["boundary"], record(new, tmp_path, "CHG-NEW-1", "sec-owner"))
    assert not res.get("failed"), res.get("msg")
    seen = json.loads((tmp_path / "records" / "approvals" / "boundary-seen.json").read_text())
    assert seen["signed_at"] == "2026-01-15T09:00:00Z"
    # the old boundary is still validly signed by the security owner and lists sec-owner's rotated-out key
    res, _out = approval_play(tmp_path, old["signers"], old["boundary"], record(old, tmp_path, "CHG-OLD-1", "sec-owner"))
    assert res["failed"] and "before the newest boundary already trusted here" in res["msg"]
    assert not (tmp_path / "records" / "approvals" / "CHG-OLD-1.json").exists()


def test_a_boundary_given_as_an_extra_var_is_refused(estate, tmp_path):
    new, old = estate["new"], estate["old"]
    rec = record(old, tmp_path, "CHG-XV-1", "sec-owner")
    for name in ("hgpu_boundary_path", "remove_boundary", "revoke_boundary", "upgrade_boundary"):
        res, _out = approval_play(tmp_path, new["signers"], new["boundary"], rec, extra_vars={name: old["boundary"]})
        assert res["failed"] and "%s given as an extra var" % name in res["msg"], res.get("msg")
    assert not (tmp_path / "records").exists()


def test_revoke_member_refuses_a_boundary_from_the_launcher(estate, tmp_path):
    """revoke_member.yml with -e naming an older boundary that lists the member: nothing is used."""
    old = estate["old"]
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {"hgpu_boundary_signers": old["signers"], "hgpu_records_dir": str(tmp_path / "records"),
                 "hgpu_boundary_path": old["boundary"]}}}))
    rec = ls.write_record(str(tmp_path), "chg.yml", ls.record_text(
        change_id="CHG-RV-XV", action="revoke_member", member="ops-oncall", targets=("localhost",),
        requester="ops-lead"), old["keys"]["sec-owner"])
    ev = {"revoke_member": "ops-oncall", "revoke_executor": "ops-lead", "revoke_hosts": "localhost",
          "change_record_path": rec, "revoke_ssh_users": ["hgpu-no-such-account"],
          "revoke_boundary": old["boundary"]}
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory),
                          os.path.join(REPO, "playbooks", "revoke_member.yml"), "-e", json.dumps(ev)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode != 0
    assert "revoke_boundary given as an extra var" in out.stdout
    assert not (tmp_path / "records" / "approvals").exists()


def test_a_signed_boundary_without_an_expiry_is_refused(tmp_path):
    people = ls.make_approvers(str(tmp_path / "appr"), boundary_src=boundary_copy(str(tmp_path / "src"), expires=None))
    rec = record(people, tmp_path, "CHG-NOEXP-1", "sec-owner")
    params = {"boundary": people["boundary"], "boundary_signers": people["signers"], "record_path": rec,
              "action": "remove", "targets": ["owned-a100-2"], "playbook": "remove.yml", "executor": "ops-lead",
              "ledger_dir": str(tmp_path / "approvals")}
    with pytest.raises(approval.ApprovalError) as err:
        approval.gate(params)
    assert "signature.expires: is required when signed is true" in str(err.value)
    assert not (tmp_path / "approvals").exists()


def test_the_newest_boundary_record_cannot_be_read_so_nothing_is_trusted(estate, tmp_path):
    new = estate["new"]
    folder = tmp_path / "records" / "approvals"
    folder.mkdir(parents=True)
    (folder / "boundary-seen.json").write_text("{not json")
    res, _out = approval_play(tmp_path, new["signers"], new["boundary"], record(new, tmp_path, "CHG-BAD-1", "sec-owner"))
    assert res["failed"] and "cannot be read" in res["msg"]
    assert not (folder / "CHG-BAD-1.json").exists()
