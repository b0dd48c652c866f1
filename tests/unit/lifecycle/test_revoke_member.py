"""playbooks/revoke_member.yml revokes what the signed boundary lists for the member, on the
hosts it is told, and nothing the launcher supplies. Runs the playbook on localhost (real
signatures; an account that does not exist, so no authorized_keys file is touched)."""
import json
import os
import subprocess
import sys

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lifecycle_support as ls  # noqa: E402

REPO = ls.REPO
BOOK = os.path.join(REPO, "playbooks", "revoke_member.yml")
BOUNDARY_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJxu1Y2IhVgC4b2cJ1CvBy5l4mXl5Y1w6eX0b3e8m1Zq test-member"
LAUNCHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHq8c7l0Zb6V5kP3y2m4n1x0w9v8u7t6s5r4q3p2o1nA someone-else"


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    return ls.make_approvers(str(tmp_path_factory.mktemp("approvers")),
                             members={"test-member": {"ssh_keys": [BOUNDARY_KEY]}})


def run(people, tmp_path, extra):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {"hgpu_boundary_signers": people["signers"], "hgpu_records_dir": str(tmp_path / "records"),
                 "hgpu_boundary_path": people["boundary"]}}}))
    record = ls.write_record(str(tmp_path), "chg.yml", ls.record_text(
        change_id="CHG-RV-1", action="revoke_member", member="test-member", targets=("localhost",),
        requester="ops-lead"), people["keys"]["sec-owner"])
    ev = {"revoke_member": "test-member", "revoke_executor": "ops-lead",
          "change_record_path": record, "revoke_ssh_users": ["hgpu-no-such-account"]}
    ev.update(extra)
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), BOOK,
           "-e", json.dumps(ev)]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    return out, json.loads(out.stdout)


def test_no_host_is_a_target_unless_named(people, tmp_path):
    out, doc = run(people, tmp_path, {})
    assert out.returncode == 0 and doc["plays"][0]["tasks"] == []
    assert not (tmp_path / "records").exists()


def test_keys_given_by_the_launcher_are_refused(people, tmp_path):
    out, doc = run(people, tmp_path, {"revoke_hosts": "localhost", "revoke_ssh_keys": [LAUNCHER_KEY]})
    assert out.returncode != 0
    failed = [t for t in doc["plays"][0]["tasks"] if t["hosts"]["localhost"].get("failed")]
    assert "are not inputs: what is revoked is what the signed boundary lists" in failed[0]["hosts"]["localhost"]["msg"]
    assert not (tmp_path / "records").exists()


def test_the_keys_revoked_are_the_boundary_s_for_the_member(people, tmp_path):
    out, doc = run(people, tmp_path, {"revoke_hosts": "localhost"})
    assert out.returncode == 0, out.stdout[-3000:]
    tasks = {t["task"]["name"]: t["hosts"]["localhost"] for t in doc["plays"][0]["tasks"]}
    removed = tasks["Remove the member's public keys from authorized_keys"]["results"]
    assert [r["item"][1] for r in removed] == [BOUNDARY_KEY]
    approval = tasks["Verify the signed change record before any change"]["approval"]
    assert approval["member"] == "test-member" and approval["member_access"]["ssh_keys"] == [BOUNDARY_KEY]


def test_the_playbook_knows_no_lab_and_edits_no_token_file():
    with open(BOOK) as fh:
        text = fh.read()
    assert "hgpu_lab_" not in text and "tokens.csv" not in text and "token-auth-file" not in text
    play = yaml.safe_load(text)[0]
    assert play["hosts"] == "{{ revoke_hosts | default('hgpu_no_target_given') }}"
    modules = {k for t in play["tasks"] for k in t if "." in k}
    assert "ansible.builtin.lineinfile" in modules  # authorized_keys only
    for task in play["tasks"]:
        if "ansible.builtin.lineinfile" in task:
            assert task["ansible.builtin.lineinfile"]["path"].endswith("/.ssh/authorized_keys")
