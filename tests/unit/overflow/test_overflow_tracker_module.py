"""overflow_tracker and overflow_dispatch (check mode, errors) run for real through ansible (local, no network)."""
import json
import os
import subprocess
import sys

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.tracker import Tracker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def run(module, args, check=False):
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-c", "local",
           "-m", "hybridgpu.fleet." + module, "-a", json.dumps(args)] + (["--check"] if check else [])
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    return json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def make_db(tmp_path):
    db = str(tmp_path / "t.db")
    tr = Tracker(db)
    tr.ensure_job("j-1", "small-input", "operator", {})
    tr.start_attempt("j-1", "att-1")
    tr.start_attempt("j-1", "att-2")
    tr.set_job_state("j-1", "cloud")
    tr.close()
    return db


def test_commit_once_then_refused_and_traced(tmp_path):
    db = make_db(tmp_path)
    dry = run("overflow_tracker", {"db": db, "action": "commit", "job_id": "j-1", "attempt_id": "att-1",
                                   "checksum": "sha256:" + "a" * 64}, check=True)
    assert dry["changed"] is True and dry["commit"]["committed"] is True
    assert Tracker(db).commit_count("j-1") == 0          # check mode wrote nothing
    first = run("overflow_tracker", {"db": db, "action": "commit", "job_id": "j-1", "attempt_id": "att-1",
                                     "checksum": "sha256:" + "a" * 64})
    assert first["changed"] is True and first["commit"]["committed"] is True
    second = run("overflow_tracker", {"db": db, "action": "commit", "job_id": "j-1", "attempt_id": "att-2",
                                      "checksum": "sha256:" + "b" * 64})
    assert second["changed"] is False and second["commit"]["existing_attempt_id"] == "att-1"
    trace = run("overflow_tracker", {"db": db, "action": "trace"})["traces"]["j-1"]
    assert trace["commit_count"] == 1
    assert trace["verdict"]["notes"] == ["second attempt att-2 kept running and tried to commit (refused)"]
    q = run("overflow_tracker", {"db": db, "action": "query"})
    assert q["jobs"][0]["committed_attempt"] == "att-1" and q["jobs"][0]["attempts"] == 2


def test_missing_db_is_named(tmp_path):
    res = run("overflow_tracker", {"db": str(tmp_path / "nope.db")})
    assert res.get("failed") and "nope.db does not exist" in res["msg"]


def test_dispatch_operator_path_needs_job_ids(tmp_path):
    res = run("overflow_dispatch", {"path": "operator", "tracker_db": str(tmp_path / "t.db"),
                                    "job_classes": os.path.join(ROOT, "tests/lab/overflow/job_classes.yml"),
                                    "local_queue": {"kind": "slurm"}, "cloud": {}, "storage": {},
                                    "job_template": {"outputs": ["output"]}})
    assert res.get("failed") and "path=operator needs the job IDs" in res["msg"]


def test_dispatch_names_a_bad_queue_kind(tmp_path):
    res = run("overflow_dispatch", {"path": "policy", "tracker_db": str(tmp_path / "t.db"),
                                    "job_classes": os.path.join(ROOT, "tests/lab/overflow/job_classes.yml"),
                                    "local_queue": {"kind": "pbs"}, "cloud": {}, "storage": {},
                                    "job_template": {"outputs": ["output"]}}, check=True)
    assert res.get("failed") and "local_queue.kind must be kubernetes or slurm, not 'pbs'" in res["msg"]
