"""playbooks/revoke_member.yml revokes what the signed boundary lists for the member, on the
hosts it is told, and nothing the launcher supplies. Runs the playbook on localhost with real
signatures, against the authorized_keys of a throwaway local account (home under tmp_path)."""
import os
import stat
import sys

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import revoke_support as rs  # noqa: E402

BOOK = rs.BOOK


@pytest.fixture(scope="module")
def pub(tmp_path_factory):
    return rs.keys(str(tmp_path_factory.mktemp("keys")))


@pytest.fixture(scope="module")
def people(tmp_path_factory, pub):
    return rs.people(str(tmp_path_factory.mktemp("approvers")), pub)


@pytest.fixture
def account(tmp_path, pub):
    acct = rs.Account(tmp_path, [pub["admin"], 'from="10.0.0.0/8" ' + pub["member"], pub["other"]])
    try:
        yield acct
    finally:
        acct.remove()


def test_no_host_is_a_target_unless_named(people, tmp_path):
    out, doc = rs.playbook(tmp_path, people, extra={"revoke_member": "test-member", "revoke_executor": "ops-lead"})
    assert out.returncode == 0 and doc["plays"][0]["tasks"] == []
    assert not (tmp_path / "records").exists()


def test_keys_given_by_the_launcher_are_refused(people, pub, account, tmp_path):
    out, doc = rs.playbook(tmp_path, people, extra=rs.revoke_vars(account, rs.record(tmp_path, people),
                                                                  revoke_ssh_keys=[pub["other"]]))
    assert out.returncode != 0
    failed = [t for t in doc["plays"][0]["tasks"] if t["hosts"]["localhost"].get("failed")]
    assert "are not inputs: what is revoked is what the signed boundary lists" in failed[0]["hosts"]["localhost"]["msg"]
    assert not (tmp_path / "records").exists()
    assert account.text() == account.before


def test_the_keys_revoked_are_the_boundary_s_for_the_member(people, pub, account, tmp_path):
    mode = stat.S_IMODE(os.stat(account.path).st_mode)
    owner = os.stat(account.path).st_uid
    rec = rs.record(tmp_path, people)
    out, doc = rs.playbook(tmp_path, people, extra=rs.revoke_vars(account, rec))
    assert out.returncode == 0, out.stdout[-3000:]
    tasks = rs.tasks(doc)
    removed = tasks[rs.REMOVE_TASK]
    assert removed["changed"] and removed["change_id"] == "CHG-RV-1"
    assert [r["user"] for r in removed["removed"]] == [account.name]
    approval = tasks["Verify the signed change record before any change"]["approval"]
    assert approval["member"] == "test-member" and approval["member_access"]["ssh_keys"] == [pub["member"]]
    # the member's key is gone (options before it do not save it); every other line stays as it was
    assert account.text() == pub["admin"] + "\n" + pub["other"] + "\n"
    assert stat.S_IMODE(os.stat(account.path).st_mode) == mode and os.stat(account.path).st_uid == owner
    entries = [e for e in rs.audit_entries(tmp_path) if e["action"] == "revoke_credential"]
    assert [(e["change_id"], e["target"], e["details"]["kind"]) for e in entries] == [("CHG-RV-1", "localhost", "ssh_key")]
    assert entries[0]["details"]["users"] == [account.name]

    # the same run again changes nothing and writes no second entry
    out, doc = rs.playbook(tmp_path, people, extra=rs.revoke_vars(account, rec))
    assert out.returncode == 0, out.stdout[-3000:]
    assert doc["stats"]["localhost"]["changed"] == 0
    assert not rs.tasks(doc)[rs.REMOVE_TASK]["changed"]
    assert len([e for e in rs.audit_entries(tmp_path) if e["action"] == "revoke_credential"]) == 1
    assert account.text() == pub["admin"] + "\n" + pub["other"] + "\n"


def test_check_mode_reports_and_changes_nothing(people, pub, account, tmp_path):
    out, doc = rs.playbook(tmp_path, people, extra=rs.revoke_vars(account, rs.record(tmp_path, people)),
                           options=["--check", "--diff"])
    assert out.returncode == 0, out.stdout[-3000:]
    removed = rs.tasks(doc)[rs.REMOVE_TASK]
    assert removed["changed"] and [r["user"] for r in removed["removed"]] == [account.name]
    assert account.text() == account.before
    assert not [e for e in rs.audit_entries(tmp_path) if e["action"] == "revoke_credential"]


def test_the_playbook_knows_no_lab_and_takes_nothing_to_revoke_from_variables():
    with open(BOOK) as fh:
        text = fh.read()
    assert "hgpu_lab_" not in text and "tokens.csv" not in text and "token-auth-file" not in text
    play = yaml.safe_load(text)[0]
    assert play["hosts"] == "{{ revoke_hosts | default('hgpu_no_target_given') }}"
    assert "vars" not in play
    modules = {k for t in play["tasks"] for k in t if "." in k}
    # no file edit, home folder or audit entry a variable could steer: the verifying modules do it
    for module in ("ansible.builtin.lineinfile", "ansible.builtin.getent", "ansible.builtin.set_fact",
                   "hybridgpu.fleet.audit_log", "ansible.builtin.include_role"):
        assert module not in modules
    assert {"hybridgpu.fleet.member_ssh_keys", "hybridgpu.fleet.k8s_member_access"} <= modules
    for task in play["tasks"]:
        for module in ("hybridgpu.fleet.member_ssh_keys", "hybridgpu.fleet.k8s_member_access"):
            if module in task:
                assert not {"keys", "items", "targets", "playbook"} & set(task[module])
