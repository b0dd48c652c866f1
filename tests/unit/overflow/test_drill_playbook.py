"""playbooks/overflow_drill.yml through ansible-playbook against the in-process cloud API emulator: the
overflow_drill module runs safe drills in a test namespace with the real rsync stager (its SSH goes to a
stand-in `ssh` that runs the remote commands here) and the real SQLite ledger; unsafe drills are refused
on an estate not declared disposable, and on a disposable one without a verified change record
(test_drill_approval.py); the production overflow namespace and a missing test namespace are refused
before anything runs."""
import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from hgpu_testenv import ROOT

from drill_world import Kubelet, rsync_output
from k8s_world import K8sWorld

pytestmark = pytest.mark.skipif(not shutil.which("rsync") or not shutil.which("sha256sum"),
                                reason="needs rsync and sha256sum")

NS = "ovf-drill-pb"
FAKE_SSH = """#!/bin/sh
# drop the SSH options and the destination, run the remote command here
while [ $# -gt 0 ]; do
  case "$1" in storage|*@storage) shift; break ;; esac
  shift
done
exec sh -c "$*"
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
  restricted:
    input_size: 1kB
    output_size: 1kB
    image_size: 10MB
    typical_runtime: 10s
    data_may_leave_site: false
    gpu_type: NVIDIA A100-SXM4-80GB
    queue_wait_threshold: 0s
"""


@pytest.fixture(scope="module")
def estate(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("drill-pb")
    w = K8sWorld(tmp / "k8s")
    kube = w.kube("cloud-direct")
    kube.ensure_namespace(NS)
    remote = tmp / "remote"
    remote.mkdir()
    w.kubelet = Kubelet(kube, NS, rsync_output(str(remote)))
    bindir = tmp / "bin"
    bindir.mkdir()
    ssh = bindir / "ssh"
    ssh.write_text(FAKE_SSH)
    ssh.chmod(ssh.stat().st_mode | stat.S_IXUSR)
    (tmp / "classes.yml").write_text(CLASSES)
    w.vars = {
        "hgpu_overflow_job_classes": str(tmp / "classes.yml"),
        "hgpu_overflow_cloud": {"kubeconfig": w.kubeconfig, "context": "cloud-direct", "namespace": "overflow"},
        "hgpu_overflow_storage": {"host": "storage", "ssh_key": "/keys/id", "remote_root": str(remote)},
        "hgpu_overflow_job_template": {"image": "registry.example.internal/ml/runner:1",
                                       "upload": {"host": "storage", "ssh_key": "/k", "root": str(remote),
                                                  "known_hosts": "/kh"}},
        "overflow_drill_poll_s": 0,
    }
    w.bindir = str(bindir)
    w.kube_cloud = kube
    yield w
    w.kubelet.close()
    w.stop()


MODULE_TASK = "Run the safe drills in the test namespace, and the unsafe ones under a verified change record"


def play(estate, tmp_path, **extra):
    evars = dict(estate.vars, hgpu_records_dir=str(tmp_path / "records"), overflow_drill_out=str(tmp_path / "drill"))
    evars.update(extra)
    (tmp_path / "vars.json").write_text(json.dumps(evars))
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "playbooks/overflow_drill.yml",
           "-i", "localhost,", "-e", "ansible_python_interpreter=" + sys.executable, "-e", "@%s" % (tmp_path / "vars.json")]
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               PATH=estate.bindir + os.pathsep + os.environ["PATH"])
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400, check=False)
    return out, json.loads(out.stdout)


def task(result, name):
    for t in result["plays"][0]["tasks"]:
        if t["task"]["name"] == name:
            return t["hosts"]["localhost"]
    return None


def test_safe_drills_run_and_unsafe_are_refused(estate, tmp_path):
    out, result = play(estate, tmp_path, hgpu_overflow_drill_namespace=NS, hgpu_overflow_drill_class="drill-test",
                       overflow_drill_failures=["lost_submission_response", "lost_result_return", "link_cut_end",
                                                "cloud_node_lost", "corrupted_result"])
    assert out.returncode == 0, out.stdout[-4000:]
    rep = json.loads((tmp_path / "drill" / "safe" / "safe_drill.json").read_text())
    assert rep["pass"] is True
    assert [d["drill"] for d in rep["drills"]] == ["lost_submission_response", "lost_result_return", "link_cut_end"]
    assert all(d["final_state"] == "finished" and d["evidence"]["commit_count"] == 1 for d in rep["drills"])
    lost = rep["drills"][0]["evidence"]
    assert len(lost["creates"]) == 1 and max(c for c in lost["jobs_with_label"] if c is not None) == 1
    ret = rep["drills"][1]["evidence"]
    assert ret["fetch_outputs"] == ["failed", "verified"] and ret["landed_checksums"] == [ret["commit"]["checksum"]] * 2
    assert [r["drill"] for r in rep["refused"]] == ["cloud_node_lost", "corrupted_result"]
    assert all("not disposable" in r["reason"] for r in rep["refused"])
    assert "stops a cloud node" in rep["refused"][0]["reason"]
    assert "estate_drill" not in task(result, MODULE_TASK) and task(result, "Read the estate drill report").get("skipped")
    assert "Refused drills" in (tmp_path / "drill" / "safe" / "safe_drill.html").read_text()
    # every test Job is deleted; nothing was created in the production namespace
    left = [j for j in estate.kube_cloud.list_jobs(NS) if not j["metadata"].get("deletionTimestamp")]
    assert left == []
    assert estate.kube_cloud.list_jobs("overflow") == []


def test_disposable_estate_without_a_change_record_refuses_the_unsafe_drills(estate, tmp_path):
    out, result = play(estate, tmp_path, hgpu_overflow_drill_namespace=NS, hgpu_overflow_drill_class="drill-test",
                       hgpu_overflow_drill_estate="disposable", overflow_drill_failures=["retried_commit", "cloud_node_lost"])
    assert out.returncode == 0, out.stdout[-3000:]
    rep = json.loads((tmp_path / "drill" / "safe" / "safe_drill.json").read_text())
    assert rep["pass"] is True and [d["drill"] for d in rep["drills"]] == ["retried_commit"]
    assert [r["drill"] for r in rep["refused"]] == ["cloud_node_lost"]
    assert "no verified change record approves it" in rep["refused"][0]["reason"]
    assert "estate_drill" not in task(result, MODULE_TASK) and not (tmp_path / "drill" / "drill.json").exists()


@pytest.mark.parametrize("extra,message", [
    ({"hgpu_overflow_drill_class": "drill-test"}, "needs a test namespace"),
    ({"hgpu_overflow_drill_namespace": "overflow", "hgpu_overflow_drill_class": "drill-test"}, "production overflow namespace"),
    ({"hgpu_overflow_drill_namespace": NS}, "needs a test namespace"),
])
def test_refused_before_anything_runs(estate, tmp_path, extra, message):
    out, result = play(estate, tmp_path, **extra)
    assert out.returncode != 0
    msg = task(result, "The drill runs only in a test namespace with a test class the inventory names")["msg"]
    assert message in msg and "nothing was changed" in msg
    assert not (tmp_path / "drill").exists()


def test_module_refuses_a_restricted_class_and_the_production_namespace(estate, tmp_path):
    base = {"job_classes": estate.vars["hgpu_overflow_job_classes"], "cloud": estate.vars["hgpu_overflow_cloud"],
            "storage": dict(estate.vars["hgpu_overflow_storage"], onprem_root=str(tmp_path / "r")),
            "job_template": estate.vars["hgpu_overflow_job_template"], "out": str(tmp_path / "out")}
    for args, message in (({"namespace": NS, "job_class": "restricted"}, "restricted"),
                          ({"namespace": "overflow", "job_class": "drill-test"}, "production overflow namespace"),
                          ({"namespace": NS, "job_class": "drill-test", "drills": ["nope"]}, "unknown drill nope")):
        cmd = [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-c", "local",
               "-e", "ansible_python_interpreter=" + sys.executable,
               "-m", "hybridgpu.fleet.overflow_drill", "-a", json.dumps(dict(base, **args))]
        env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
        res = json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
        assert res.get("failed") and message in res["msg"] and "nothing was run" in res["msg"], res.get("msg")
    assert not (tmp_path / "out").exists()


def test_module_check_mode_runs_nothing(estate, tmp_path):
    args = {"job_classes": estate.vars["hgpu_overflow_job_classes"], "cloud": estate.vars["hgpu_overflow_cloud"],
            "storage": dict(estate.vars["hgpu_overflow_storage"], onprem_root=str(tmp_path / "r")),
            "job_template": estate.vars["hgpu_overflow_job_template"], "out": str(tmp_path / "out"),
            "namespace": NS, "job_class": "drill-test", "drills": ["retried_commit", "cloud_rejects_quota"]}
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-c", "local", "--check",
           "-e", "ansible_python_interpreter=" + sys.executable,
           "-m", "hybridgpu.fleet.overflow_drill", "-a", json.dumps(args)]
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    res = json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert not res.get("failed") and res["changed"] is False, res.get("msg")
    assert res["would_run"] == ["retried_commit"] and res["drills"] == []
    assert [r["drill"] for r in res["refused"]] == ["cloud_rejects_quota"]
    assert not (tmp_path / "out").exists()


def test_module_names_a_template_without_upload(estate, tmp_path):
    args = {"job_classes": estate.vars["hgpu_overflow_job_classes"], "cloud": estate.vars["hgpu_overflow_cloud"],
            "storage": dict(estate.vars["hgpu_overflow_storage"], onprem_root=str(tmp_path / "r")),
            "job_template": {"image": "x"}, "out": str(tmp_path / "out"), "namespace": NS, "job_class": "drill-test"}
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-c", "local",
           "-e", "ansible_python_interpreter=" + sys.executable,
           "-m", "hybridgpu.fleet.overflow_drill", "-a", json.dumps(args)]
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    res = json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert res.get("failed") and "job_template.upload needs" in res["msg"]
    assert estate.kube_cloud.list_jobs(NS) == [] or all(j["metadata"].get("deletionTimestamp")
                                                        for j in estate.kube_cloud.list_jobs(NS))
