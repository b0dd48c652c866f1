"""The unsafe overflow drills (they cut links, stop cloud nodes, hold the quota) are a destructive
action: on a disposable estate they run only under a change record signed by an approver of
overflow_drill whose targets list them, verified by the overflow_drill task itself. Driven through
playbooks/overflow_drill.yml with ansible-playbook on localhost (and the module through `ansible`);
the estate's drill script is a stand-in that records each run, so "the drill did not run" is
"the script was never started". No safe drill is chosen, so no cloud API is needed."""
import json
import os
import subprocess
import sys

import pytest
import yaml

from hgpu_testenv import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "lifecycle"))
import lifecycle_support as ls  # noqa: E402

UNSAFE = ["cloud_rejects_quota", "cloud_node_lost"]          # in the order the module runs them
MODULE_TASK = "Run the safe drills in the test namespace, and the unsafe ones under a verified change record"
SCRIPT = """#!/usr/bin/env python3
import json, os, sys
out = sys.argv[sys.argv.index("--out") + 1]
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "estate-script-ran"), "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
with open(os.path.join(out, "drill.json"), "w") as fh:
    json.dump({"pass": True, "scenarios": []}, fh)
"""
CLASSES = """defaults:
  link_bps: 100Mbps
classes:
  drill-test:
    input_size: 1kB
    output_size: 1kB
    image_size: 10MB
    typical_runtime: 10s
    data_may_leave_site: true
    gpu_type: NVIDIA A100-SXM4-80GB
    queue_wait_threshold: 0s
"""


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    return ls.make_approvers(str(tmp_path_factory.mktemp("approvers")))


@pytest.fixture
def estate(people, tmp_path):
    script = tmp_path / "estate_drill.py"
    script.write_text(SCRIPT)
    (tmp_path / "classes.yml").write_text(CLASSES)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {"hgpu_boundary_signers": people["signers"], "hgpu_boundary_path": people["boundary"],
                 "hgpu_records_dir": str(tmp_path / "records"),
                 "hgpu_overflow_drill_estate": "disposable", "hgpu_overflow_drill_script": str(script),
                 "hgpu_overflow_drill_namespace": "overflow-drill-test", "hgpu_overflow_drill_class": "drill-test",
                 "hgpu_overflow_job_classes": str(tmp_path / "classes.yml"),
                 "hgpu_overflow_cloud": {"kubeconfig": "/nonexistent/kubeconfig", "namespace": "overflow"},
                 "hgpu_overflow_storage": {"host": "storage.invalid", "ssh_key": "/nonexistent/key"},
                 "hgpu_overflow_job_template": {"image": "registry.example.internal/ml/runner:1",
                                                "upload": {"host": "storage.invalid", "ssh_key": "/k",
                                                           "root": "/srv/cs", "known_hosts": "/kh"}}}}}))
    return {"inventory": str(inventory), "out": tmp_path / "drill", "tmp": tmp_path, "script": str(script)}


def record(people, estate, targets=None, signer="sec-owner", change_id="CHG-DRILL-1", **kw):
    text = ls.record_text(change_id=change_id, action="overflow_drill", playbook="overflow_drill.yml",
                          targets=tuple(UNSAFE if targets is None else targets), requester="ops-lead", reason="drill on the disposable estate", **kw)
    return ls.write_record(str(estate["tmp"]), "%s.yml" % change_id, text, people["keys"].get(signer))


def play(estate, extra, *args):
    ev = {"overflow_drill_out": str(estate["out"]), "overflow_drill_failures": UNSAFE}
    ev.update(extra)
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", estate["inventory"],
           "playbooks/overflow_drill.yml", "-e", json.dumps(ev)] + list(args)
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    doc = json.loads(out.stdout)
    tasks = dict((t["task"]["name"], t["hosts"]["localhost"]) for t in doc["plays"][0]["tasks"]) if doc["plays"] else {}
    return out, tasks


def script_ran(estate):
    return (estate["out"] / "estate-script-ran").exists()


def test_without_a_record_the_unsafe_drills_are_refused_and_the_script_never_starts(estate):
    out, tasks = play(estate, {})
    assert not script_ran(estate)
    assert out.returncode == 0, out.stdout[-3000:]
    got = tasks[MODULE_TASK]
    assert [r["drill"] for r in got["refused"]] == UNSAFE and "estate_drill" not in got
    assert all("no verified change record approves it" in r["reason"] for r in got["refused"])


def test_extra_vars_pretending_approval_past_the_checks_do_not_start_the_script(estate):
    forged = {"unsafe": UNSAFE, "refused": [], "drills": [], "pass": True, "changed": True,
              "estate_drill": {"ran": True, "drills": UNSAFE, "report": "/etc/hostname"}}
    fake = {"approved": True, "action": "overflow_drill", "change_id": "CHG-FAKE", "approved_targets": UNSAFE}
    extra = {"overflow_drill_safe": forged, "overflow_drill_run": {"rc": 0}, "approval": fake,
             "overflow_drill_approval": fake, "overflow_drill_dir": str(estate["out"]),
             "overflow_drill_executor": "ops-lead"}
    # every task a launcher may start at: the module's, each after it, and names the play may not have
    for start in (MODULE_TASK, "Read the estate drill report",
                  "The estate drill passes only if every job ended explained with at most one commit",
                  "Run the unsafe drills with the estate's drill script (disposable estate only)"):
        out, tasks = play(estate, extra, "--start-at-task", start)
        assert not script_ran(estate), (start, out.stdout[-3000:])
        if start == MODULE_TASK:
            got = tasks[MODULE_TASK]
            assert "estate_drill" not in got and [r["drill"] for r in got["refused"]] == UNSAFE


@pytest.mark.parametrize("case", ["unsigned", "signed by a non-approver", "approves one drill of two", "window closed",
                                  "another playbook"])
def test_a_record_that_does_not_verify_starts_nothing(people, estate, case):
    import datetime
    now = datetime.datetime.now(datetime.timezone.utc)
    kw = {"unsigned": {"signer": None}, "signed by a non-approver": {"signer": "ops-oncall"},
          "approves one drill of two": {"targets": UNSAFE[:1]},
          "window closed": {"start": now - datetime.timedelta(hours=3), "end": now - datetime.timedelta(hours=1)},
          "another playbook": {}}[case]
    path = record(people, estate, **kw)
    if case == "another playbook":
        with open(path) as fh:
            doc = yaml.safe_load(fh)
        doc["playbook"] = "remove.yml"
        path = ls.write_record(str(estate["tmp"]), "other.yml", yaml.safe_dump(doc, sort_keys=False),
                               people["keys"]["sec-owner"])
    out, tasks = play(estate, {"change_record_path": path, "overflow_drill_executor": "ops-lead"})
    assert out.returncode != 0
    assert "No drill was run" in tasks[MODULE_TASK]["msg"], tasks[MODULE_TASK]["msg"]
    assert not script_ran(estate)


def test_the_estate_and_its_script_may_not_be_extra_vars_when_unsafe_drills_run(people, estate, tmp_path):
    other = tmp_path / "other.py"
    other.write_text(SCRIPT)
    path = record(people, estate)
    out, tasks = play(estate, {"change_record_path": path, "overflow_drill_executor": "ops-lead",
                               "hgpu_overflow_drill_script": str(other)})
    assert out.returncode != 0 and "hgpu_overflow_drill_script given as an extra var" in out.stdout
    assert not script_ran(estate)


def test_a_task_cannot_hand_the_module_an_approval(estate):
    args = {"drills": UNSAFE, "estate": "disposable", "namespace": "overflow-drill-test", "job_class": "drill-test",
            "job_classes": str(estate["tmp"] / "classes.yml"), "cloud": {"namespace": "overflow"},
            "storage": {"host": "storage.invalid", "ssh_key": "/k"}, "script": estate["script"],
            "job_template": {"image": "x", "upload": {"host": "s", "ssh_key": "/k", "root": "/r", "known_hosts": "/kh"}},
            "out": str(estate["out"] / "safe"),
            "approval": {"approved": True, "action": "overflow_drill", "change_id": "CHG-FAKE", "approved_targets": UNSAFE}}
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-c", "local",
           "-e", "ansible_python_interpreter=" + sys.executable, "-m", "hybridgpu.fleet.overflow_drill",
           "-a", json.dumps(args)]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    res = json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert res.get("failed") and "approval may not be set by a task" in res["msg"]
    assert not script_ran(estate)


def test_a_verified_record_runs_exactly_the_approved_drills_once(people, estate):
    path = record(people, estate, change_id="CHG-DRILL-OK")
    out, tasks = play(estate, {"change_record_path": path, "overflow_drill_executor": "ops-lead"})
    assert out.returncode == 0, out.stdout[-3000:]
    got = tasks[MODULE_TASK]
    assert got["refused"] == [] and got["estate_drill"]["change_id"] == "CHG-DRILL-OK"
    runs = (estate["out"] / "estate-script-ran").read_text().splitlines()
    argv = json.loads(runs[0])
    assert len(runs) == 1 and [a for a in argv if a.startswith("--failure=")] == [
        "--failure=none", "--failure=cloud_rejects_quota", "--failure=cloud_node_lost"]
    ledger = json.loads((estate["tmp"] / "records" / "approvals" / "CHG-DRILL-OK.json").read_text())
    assert ledger["action"] == "overflow_drill" and sorted(ledger["targets"]) == sorted(UNSAFE)
    # the same change id for other drills is refused: a record is used once
    out, tasks = play(estate, {"change_record_path": path, "overflow_drill_executor": "ops-lead",
                               "overflow_drill_failures": UNSAFE[:1]})
    assert out.returncode != 0 and "already used" in tasks[MODULE_TASK]["msg"]
    assert len((estate["out"] / "estate-script-ran").read_text().splitlines()) == 1
