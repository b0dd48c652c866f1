"""Attacks on the launcher side of playbooks/revoke_member.yml, each through the public entry
point (the playbook, or the module in a play, run by ansible-playbook on localhost with real
signatures) against a real authorized_keys file of a throwaway local account. Each test asserts
that the effect did not happen: the keys are still there and no audit entry names a change id
that was not verified."""
import os
import sys

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import revoke_support as rs  # noqa: E402

MADE_UP = "CHG-MADE-UP-1"


@pytest.fixture(scope="module")
def pub(tmp_path_factory):
    return rs.keys(str(tmp_path_factory.mktemp("keys")))


@pytest.fixture(scope="module")
def people(tmp_path_factory, pub):
    return rs.people(str(tmp_path_factory.mktemp("approvers")), pub)


@pytest.fixture
def account(tmp_path, pub):
    acct = rs.Account(tmp_path, [pub["admin"], pub["member"], pub["other"]])
    try:
        yield acct
    finally:
        acct.remove()


def made_up_change(pub, account):
    """A verified-looking approval the launcher writes itself, naming the administrator's key."""
    return {"change_id": MADE_UP, "approved": True, "approver": "sec-owner", "executor": "ops-lead",
            "requester": "ops-lead", "window": {}, "member": "test-member", "targets": ["localhost"],
            "member_access": {"ssh_keys": [pub["admin"]], "kubernetes": []}}


def test_starting_past_the_approval_with_a_made_up_change_removes_nothing(people, pub, account, tmp_path):
    change = made_up_change(pub, account)
    extra = rs.revoke_vars(account, revoke_change=change, revoke_approval={"approval": change},
                           revoke_keys=[pub["admin"]], revoke_home_of={account.name: account.home})
    out, doc = rs.playbook(tmp_path, people, extra=extra, options=["--start-at-task", rs.REMOVE_TASK])
    assert out.returncode != 0
    assert pub["admin"] in account.text() and account.text() == account.before
    assert not [e for e in rs.audit_entries(tmp_path) if e["change_id"] == MADE_UP]
    assert "given as an extra var" in rs.tasks(doc)[rs.REMOVE_TASK]["msg"]


def test_starting_past_the_approval_without_a_record_removes_nothing(people, account, tmp_path):
    out, doc = rs.playbook(tmp_path, people, extra=rs.revoke_vars(account), options=["--start-at-task", rs.REMOVE_TASK])
    assert out.returncode != 0
    assert account.text() == account.before and rs.audit_entries(tmp_path) == []
    assert "Nothing was changed" in rs.tasks(doc)[rs.REMOVE_TASK]["msg"]


def test_a_valid_record_with_other_keys_from_the_launcher_changes_nothing(people, pub, account, tmp_path):
    extra = rs.revoke_vars(account, rs.record(tmp_path, people), revoke_keys=[pub["other"]])
    out, doc = rs.playbook(tmp_path, people, extra=extra)
    assert pub["other"] in account.text()
    assert out.returncode != 0 and "revoke_keys given as an extra var" in out.stdout
    assert pub["member"] in account.text() and account.text() == account.before
    assert not [e for e in rs.audit_entries(tmp_path) if e["action"] == "revoke_credential"]


def direct_play(tmp_path, people, account, module_args, host="localhost"):
    """One member_ssh_keys task in a play of its own."""
    book = tmp_path / "direct.yml"
    book.write_text(yaml.safe_dump([{"name": "direct", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Direct", "hybridgpu.fleet.member_ssh_keys": dict(
            {"member": "test-member", "users": [account.name], "executor": "ops-lead"}, **module_args)}]}]))
    out, doc = rs.playbook(tmp_path, people, book=book, host=host)
    return out, doc["plays"][0]["tasks"][0]["hosts"][host]


def test_keys_given_to_the_module_are_refused(people, pub, account, tmp_path):
    out, res = direct_play(tmp_path, people, account, {"record_path": rs.record(tmp_path, people),
                                                       "keys": [pub["admin"]]})
    assert pub["admin"] in account.text() and account.text() == account.before
    assert out.returncode != 0 and res.get("failed")
    assert "keys may not be set by a task" in res["msg"]
    assert not [e for e in rs.audit_entries(tmp_path) if e["action"] == "revoke_credential"]


def test_a_host_outside_the_record_s_targets_is_refused(people, account, tmp_path):
    rec = rs.record(tmp_path, people, change_id="CHG-RV-ELSEWHERE", targets=("owned-a100-9",))
    out, res = direct_play(tmp_path, people, account, {"record_path": rec})
    assert account.text() == account.before
    assert out.returncode != 0 and res.get("failed")
    assert "not in the approved targets" in res["msg"] or "not in the record's targets" in res["msg"]
    assert not [e for e in rs.audit_entries(tmp_path) if e["action"] == "revoke_credential"]


def test_a_record_for_another_member_is_refused(people, account, tmp_path):
    rec = rs.record(tmp_path, people, change_id="CHG-RV-OTHER", member="ops-oncall")
    out, res = direct_play(tmp_path, people, account, {"record_path": rec})
    assert out.returncode != 0 and "member: the record approves revoking ops-oncall" in res["msg"]
    assert account.text() == account.before


def test_items_given_to_the_kubernetes_task_are_refused(people, tmp_path):
    book = tmp_path / "k8s.yml"
    book.write_text(yaml.safe_dump([{"name": "direct", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Direct", "hybridgpu.fleet.k8s_member_access": {
            "member": "test-member", "context": "onprem", "executor": "ops-lead",
            "record_path": rs.record(tmp_path, people),
            "items": [{"context": "onprem", "kind": "ClusterRoleBinding", "name": "cluster-admin"}]}}]}]))
    out, doc = rs.playbook(tmp_path, people, book=book)
    res = doc["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert out.returncode != 0 and "items may not be set by a task" in res["msg"]
    assert not (tmp_path / "records").exists()


def test_a_launcher_cannot_move_the_connection_to_another_machine(people, pub, account, tmp_path):
    """The record names owned-a100-9, which the inventory reaches over SSH at an address that does
    not answer; the launcher points the connection at the control host with extra vars. The keys
    on the control host stay."""
    node = "owned-a100-9"
    rec = rs.record(tmp_path, people, change_id="CHG-RV-MOVED", targets=(node,))
    hostvars = {"ansible_connection": "ssh", "ansible_host": "192.0.2.1", "ansible_python_interpreter": sys.executable}
    extra = rs.revoke_vars(account, rec, revoke_hosts=node, ansible_connection="local")
    out, doc = rs.playbook(tmp_path, people, extra=extra, host=node, hostvars=hostvars)
    assert account.text() == account.before
    res = rs.tasks(doc, node)[rs.REMOVE_TASK]
    assert out.returncode != 0 and "ansible_connection given by the launcher" in res["msg"]
    assert not [e for e in rs.audit_entries(tmp_path) if e["action"] == "revoke_credential"]
