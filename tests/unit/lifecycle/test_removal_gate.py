"""node_removal_state verifies the signed change record itself when a removal starts, so a
run that skips the play's approval task (--start-at-task, --skip-tags) gets no removal state,
and without that state no later phase acts. Runs the module through ansible-playbook on
localhost with real signatures, the pinned signers and the ledger from the inventory."""
import json
import os
import subprocess
import sys

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lifecycle_support as ls  # noqa: E402
from test_removal import PRE  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import manifest  # noqa: E402


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    return ls.make_approvers(str(tmp_path_factory.mktemp("approvers")))


def start(people, tmp_path, record, **extra):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {"hgpu_boundary_signers": people["signers"], "hgpu_records_dir": str(tmp_path / "records"),
                 "hgpu_boundary_path": people["boundary"]}}}))
    path = manifest_file(tmp_path)
    args = dict({"root": str(tmp_path / "records" / "removals"), "node": "localhost", "action": "start",
                 "manifest_path": str(path), "record_path": record,
                 "executor": "ops-lead", "targets": ["localhost"]}, **extra)
    book = tmp_path / "book.yml"
    book.write_text(yaml.safe_dump([{"name": "p", "hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Approval", "ansible.builtin.debug": {"msg": "the play's approval task"}},
        {"name": "Start", "hybridgpu.fleet.node_removal_state": args}]}]))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_CONFIG=os.path.join(ls.REPO, "ansible.cfg"))
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), str(book),
           "--start-at-task", "Start"]
    out = subprocess.run(cmd, cwd=ls.REPO, env=env, capture_output=True, text=True, timeout=180, check=False)
    tasks = json.loads(out.stdout)["plays"][0]["tasks"]
    assert [t["task"]["name"] for t in tasks] == ["Start"]
    return tasks[0]["hosts"]["localhost"]


def manifest_file(tmp_path):
    path = tmp_path / "localhost.json"
    if not path.exists():
        path.write_text(json.dumps(manifest.merge(None, "localhost", pre_onboarding=PRE)))
    return path


def record(people, tmp_path, signer="sec-owner", **kw):
    args = dict(change_id="CHG-RMG-1", action="remove", targets=("localhost",), requester="ops-lead",
                manifests={"localhost": str(manifest_file(tmp_path))})
    args.update(kw)
    return ls.write_record(str(tmp_path), "chg.yml", ls.record_text(**args), people["keys"][signer] if signer else None)


def test_a_removal_starts_only_under_a_verified_record(people, tmp_path):
    states = tmp_path / "records" / "removals" / "localhost"
    res = start(people, tmp_path, record(people, tmp_path, signer=None))
    assert res["failed"] and "unsigned: no signature file" in res["msg"] and not states.exists()
    res = start(people, tmp_path, record(people, tmp_path, action="driver_upgrade", requester="ops-oncall"))
    assert res["failed"] and "the record approves 'driver_upgrade', this run does 'remove'" in res["msg"]
    assert not states.exists()
    res = start(people, tmp_path, record(people, tmp_path), ledger_dir="/tmp/empty-ledger")
    assert res["failed"] and "ledger_dir may not be set by a task" in res["msg"]
    ok = start(people, tmp_path, record(people, tmp_path))
    assert not ok.get("failed"), ok.get("msg")
    assert ok["approval"]["change_id"] == "CHG-RMG-1" and (states / "CHG-RMG-1.json").exists()
    assert json.loads((states / "CHG-RMG-1.json").read_text())["approval"]["approver"] == "sec-owner"
    # the same change id for another run is a replay
    res = start(people, tmp_path, record(people, tmp_path, targets=("localhost", "owned-a100-2")),
                targets=["localhost", "owned-a100-2"])
    assert res["failed"] and "CHG-RMG-1 was already used" in res["msg"]
