"""The credentials phase of roles/node_removal for a command join, run by ansible-playbook on
localhost under a verified removal state: it runs the uninstall command the manifest recorded
(a fake vendor uninstall here), records the phase with the join method and the command, and a
rerun after the uninstall program is gone does not run it again."""
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


def command_manifest(tmp_path):
    uninstall = tmp_path / "opt" / "acme-node-uninstall"
    uninstall.parent.mkdir()
    uninstall.write_text("#!/bin/sh\necho \"$@\" >> %s\nrm -f %s %s\n" % (tmp_path / "uninstalled", tmp_path / "acme.conf", uninstall))
    uninstall.chmod(0o755)
    (tmp_path / "acme.conf").write_text("activated\n")
    doc = manifest.merge(None, "localhost", pre_onboarding=PRE)
    return manifest.merge(doc, "localhost", "join", [
        {"kind": "unit", "name": "acme-node.service"}, {"kind": "file", "path": str(tmp_path / "acme.conf")}],
        facts={"method": "command", "cluster": "onprem", "server": "https://203.0.113.10:6443",
               "uninstall_command": [str(uninstall), "--purge"], "units": ["acme-node.service"]})


def manifest_file(tmp_path):
    path = tmp_path / "localhost.json"
    if not path.exists():
        path.write_text(json.dumps(command_manifest(tmp_path)))
    return path


def run(people, tmp_path, record):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {"hgpu_boundary_signers": people["signers"], "hgpu_records_dir": str(tmp_path / "records"),
                 "hgpu_boundary_path": people["boundary"]}}}))
    path = manifest_file(tmp_path)
    root = str(tmp_path / "records" / "removals")
    book = tmp_path / "book.yml"
    book.write_text(yaml.safe_dump([{"name": "p", "hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Start", "register": "started", "hybridgpu.fleet.node_removal_state": {
            "root": root, "node": "localhost", "action": "start", "manifest_path": str(path),
            "record_path": record, "executor": "ops-lead", "targets": ["localhost"]}},
        {"name": "Credentials phase",
         "ansible.builtin.include_role": {"name": "hybridgpu.fleet.node_removal", "tasks_from": "credentials"},
         "vars": {"node_removal_node": "localhost", "node_removal_state_root": root, "node_removal_journal": False,
                  "node_removal_change": "{{ started.approval }}", "node_removal_plan": "{{ started.plan }}",
                  "node_removal_done": "{{ started.report.done }}", "node_removal_state_file": "{{ started.report.path }}",
                  "node_removal_token_file": "{{ started.token_file }}",
                  "node_removal_record_path": record, "node_removal_executor": "ops-lead",
                  "node_removal_audit_log": str(tmp_path / "records" / "audit" / "audit.jsonl")}}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ls.REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory),
                           str(book)], cwd=ls.REPO, env=env, capture_output=True, text=True, timeout=180, check=False)


def test_the_recorded_uninstall_runs_once_and_the_record_names_the_method(people, tmp_path):
    record = ls.write_record(str(tmp_path), "chg.yml", ls.record_text(
        change_id="CHG-RMC-1", action="remove", targets=("localhost",), requester="ops-lead",
        manifests={"localhost": str(manifest_file(tmp_path))}), people["keys"]["sec-owner"])
    first = run(people, tmp_path, record)
    assert first.returncode == 0, first.stdout[-4000:]
    assert (tmp_path / "uninstalled").read_text() == "--purge\n" and not (tmp_path / "acme.conf").exists()
    events = [json.loads(x) for x in open(str(tmp_path / "records" / "audit" / "audit.jsonl"))]
    revoke = [e for e in events if e["action"] == "revoke_credential"]
    assert len(revoke) == 1 and revoke[0]["result"] == "changed"
    assert revoke[0]["details"]["join_method"] == "command"
    assert revoke[0]["details"]["uninstall"] == "%s --purge" % (tmp_path / "opt" / "acme-node-uninstall")
    state = json.load(open(str(tmp_path / "records" / "removals" / "localhost" / "CHG-RMC-1.json")))
    assert state["steps"]["credentials"]["details"]["join_method"] == "command"
    # the phase is done: a rerun skips it, and the uninstall program is gone anyway
    second = run(people, tmp_path, record)
    assert second.returncode == 0, second.stdout[-4000:]
    assert (tmp_path / "uninstalled").read_text() == "--purge\n"
