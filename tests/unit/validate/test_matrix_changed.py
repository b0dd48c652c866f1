"""A node is validated again when the matrix changed: roles/validate/tasks/matrix_changed.yml compares
the preflight digest in the node's newest validation record with the current preflight record's,
and record.yml writes that digest into every validation record."""
import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from hgpu_testenv import ROOT


CASES = [
    ("ab" * 32, "ab" * 32, False, "unchanged since the last validation"),
    ("ab" * 32, "cd" * 32, True, "the matrix changed since the last validation (abababababab -> cdcdcdcdcdcd)"),
    (None, "cd" * 32, True, "no validation record of this node carries a preflight digest"),
    ("", "cd" * 32, True, "no validation record of this node carries a preflight digest"),
    ("ab" * 32, None, True, "no current preflight record at"),
]


def records(root, node, last_digest, current_digest):
    """One node's records folder: the current preflight record with current_digest (None: no
    preflight record) and two validation records, the newer with last_digest (None: neither)."""
    (root / "w1").mkdir(parents=True)
    if current_digest is not None:
        (root / "w1" / "preflight.json").write_text(json.dumps({"verdicts_digest": current_digest}))
    if last_digest is not None:
        for wave, digest in (("w0", "00" * 32), ("upgrade", last_digest)):
            folder = root / "validation" / wave
            folder.mkdir(parents=True)
            (folder / ("validate-%s.json" % node)).write_text(json.dumps({"node": node, "run": {"preflight_digest": digest}}))
            time.sleep(0.05)  # the upgrade record is the newer one


@pytest.fixture(scope="module")
def decided(tmp_path_factory):
    """Every case as its own node, with its own records folder, in one ansible-playbook run of
    matrix_changed.yml; returns what the step decided for each case, by index."""
    tmp = tmp_path_factory.mktemp("matrix-changed")
    hosts = {}
    for n, (last, current, dummy, dummy2) in enumerate(CASES):
        node, root = "node-%d" % n, tmp / ("records-%d" % n)
        records(root, node, last, current)
        hosts[node] = {"hgpu_records_dir": str(root), "case_preflight_record": str(root / "w1" / "preflight.json")}
    inventory = {"all": {"hosts": hosts, "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    (tmp / "hosts.yml").write_text(yaml.safe_dump(inventory))
    play = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "hybridgpu.fleet.validate", "tasks_from": "matrix_changed"},
         "vars": {"validate_preflight_record": "{{ case_preflight_record }}"}},
        {"ansible.builtin.copy": {"dest": str(tmp) + "/out-{{ inventory_hostname }}.json", "mode": "0644",
                                  "content": "{{ {'changed': validate_matrix_changed | bool, 'why': validate_matrix_change} | to_json }}"}}]}]
    (tmp / "play.yml").write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                           str(tmp / "hosts.yml"), str(tmp / "play.yml")],
                          capture_output=True, text=True, env=env, timeout=180, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {n: json.loads((tmp / ("out-node-%d.json" % n)).read_text()) for n in range(len(CASES))}


@pytest.mark.parametrize("last, current, changed, why", CASES)
def test_the_newest_validation_record_decides(decided, last, current, changed, why):
    out = decided[CASES.index((last, current, changed, why))]
    assert out["changed"] is changed and out["why"].startswith(why), out


def test_validation_records_carry_the_preflight_digest():
    with open(os.path.join(ROOT, "roles", "validate", "tasks", "record.yml")) as fh:
        tasks = yaml.safe_load(fh)
    write = next(t for t in tasks if "hybridgpu.fleet.validation_record" in t)
    assert "verdicts_digest" in write["hybridgpu.fleet.validation_record"]["run"]["preflight_digest"]
    with open(os.path.join(ROOT, "playbooks", "upgrade_rehearsal.yml")) as fh:
        names = [t["name"] for t in yaml.safe_load(fh)[0]["tasks"]]
    first = names.index("Validate the node first (all six steps) when the matrix changed since its last validation")
    assert names.index("Has the matrix changed since the node's last validation") < first < names.index("Drain the node")


def test_no_preflight_record_and_no_declared_row_says_run_preflight_first(tmp_path):
    """The inventory step reads the node's matrix row from the preflight record; without one it
    stops before touching the node, naming the node, the path and the playbook to run."""
    missing = tmp_path / "records" / "w1" / "preflight.json"
    inventory = {"all": {"hosts": {"node-a": {}}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    play = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "hybridgpu.fleet.validate", "tasks_from": "inventory"},
         "vars": {"validate_preflight_record": str(missing)}}]}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                           str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, timeout=180, check=False, cwd=ROOT)
    assert proc.returncode != 0
    assert "node-a: no preflight record at %s" % missing in proc.stdout, proc.stdout
    assert "Run playbooks/preflight.yml" in proc.stdout and "gpu_facts" not in proc.stdout, proc.stdout
