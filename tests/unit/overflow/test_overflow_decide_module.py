"""overflow_decide run for real through ansible (local connection, no network)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CLASSES = os.path.join(ROOT, "inventories", "lab", "overflow", "job_classes.yml")
A100 = "NVIDIA A100-SXM4-80GB"
NOW = 1_700_000_000


def run(args):
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-c", "local",
           "-m", "hybridgpu.fleet.overflow_decide", "-a", json.dumps(args)]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    data = json.loads(out.stdout)
    return data["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_module_moves_large_and_keeps_restricted():
    snap = {"now": NOW, "free_gpus": {A100: 0, "NVIDIA L40S": 0}, "jobs": [
        {"job_id": "l-1", "job_class": "large-input", "submit_time": NOW - 7200, "state": "pending", "gpus": 8,
         "gpu_type": A100, "expected_start": NOW + 9 * 3600},
        {"job_id": "r-1", "job_class": "restricted", "submit_time": NOW - 7200, "state": "pending", "gpus": 1,
         "gpu_type": "NVIDIA L40S"}]}
    res = run({"job_classes": CLASSES, "snapshot": snap, "path": "operator"})
    assert res["changed"] is False
    assert res["move"] == ["l-1"] and res["path"] == "operator"
    r = [d for d in res["decisions"] if d["job_id"] == "r-1"][0]
    assert r["decision"] == "stay" and "restricted" in r["reason"]


def test_module_names_bad_file_field(tmp_path):
    bad = tmp_path / "c.yml"
    bad.write_text("classes:\n  x:\n    input_size: 1GB\n    colour: red\n")
    res = run({"job_classes": str(bad), "snapshot": {"now": NOW, "jobs": []}})
    assert res.get("failed") and "classes.x.colour: unknown key" in res["msg"] and str(bad) in res["msg"]
