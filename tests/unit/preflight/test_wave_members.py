"""The wave runs on the nodes preflight proposed: playbooks/wave_members.yml reads the proposal from
the wave's preflight.json, names and leaves out every other node of the inventory group, and
records.wave_inventory writes the same proposal as an inventory an AWX source can read."""
import json
import os
import subprocess
import sys

import pytest
import yaml

from hgpu_testenv import ROOT
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import records

sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "lifecycle"))
import lifecycle_support as ls  # noqa: E402

PROPOSAL = [{"node": "node-a", "purpose": "row_representative", "row": "a100"},
            {"node": "node-c", "purpose": "rehearsal_spare", "row": "a100"}]
HOLDS = [{"node": "node-b", "row": "l40s", "reasons": [{"reason": "air_gapped", "detail": "no path"}]}]


def record():
    return {"wave": "w1", "verdicts_digest": "ab" * 32,
            "verdicts": {"wave": {"nodes": PROPOSAL, "uncovered_rows": [{"row": "l40s", "reason": "every node in the row is held"}]},
                         "holds": HOLDS, "matrix": {"violations": []}, "paths": {}, "cidr_overlaps": [],
                         "connection_direction": {"verdict": "pass", "reasons": []}},
            "details": {"matrix": {"rows": [{"id": "a100", "nodes": ["node-a", "node-c", "node-d"]},
                                            {"id": "l40s", "nodes": ["node-b"]}]}}}


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    return ls.make_approvers(str(tmp_path_factory.mktemp("members-approvers")))


def test_inventory_file_holds_the_proposal_and_names_the_rest():
    text = records.wave_inventory(record())
    inv = yaml.safe_load(text)
    hosts = inv["all"]["children"]["w1"]["hosts"]
    assert sorted(hosts) == ["node-a", "node-c"]
    assert hosts["node-c"] == {"hgpu_wave_purpose": "rehearsal_spare", "hgpu_matrix_row": "a100"}
    assert "# held: node-b (air_gapped)" in text and "# uncovered row: l40s" in text


def run_members(tmp_path, people, data):
    folder = tmp_path / "records" / "w1"
    folder.mkdir(parents=True)
    (folder / "preflight.json").write_text(json.dumps(data))
    inventory = {"all": {"children": {"w1": {"hosts": {n: {} for n in ("node-a", "node-b", "node-c")}}},
                         "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                  "hgpu_records_dir": str(tmp_path / "records"),
                                  "hgpu_boundary_path": people["boundary"], "hgpu_boundary_signers": people["signers"]}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    play = [{"ansible.builtin.import_playbook": os.path.join(ROOT, "playbooks", "wave_members.yml")},
            {"hosts": "hgpu_proposed_w1", "gather_facts": False, "tasks": [
                {"ansible.builtin.file": {"path": str(tmp_path) + "/ran-{{ inventory_hostname }}", "state": "touch"}}]}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                           str(tmp_path / "hosts.yml"), "-e", "wave=w1", str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, timeout=120, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_the_wave_runs_on_the_proposal_only(tmp_path, people):
    proc = run_members(tmp_path, people, record())
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == ["ran-node-a", "ran-node-c"]
    assert "node-b is not in preflight's proposal for this wave" in proc.stdout


def test_the_gate_stops_a_proposed_node_with_a_finding(tmp_path, people):
    data = record()
    data["verdicts"]["matrix"]["violations"] = [{"rule": "kubelet-apiserver-skew", "severity": "error", "rows": ["a100"],
                                                 "nodes": ["node-c"], "message": "kubelet too old"}]
    proc = run_members(tmp_path, people, data)
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == ["ran-node-a"]
    assert "STOPPED node-c (nothing changed on it): violation:kubelet-apiserver-skew:a100" in proc.stdout
