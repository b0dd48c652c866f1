"""A user's Kubernetes Job carried to the cloud through the dispatch pass, against two emulators:
the cloud Job is the queued Job with the listed rewrites; a job that needs something on-prem is
refused before any hold. A Slurm job is read in one round trip per batch."""
import json
import os
import subprocess

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends, carry, dispatch_run, jobclass
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import k8s_backend, slurm_backend
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.tracker import Tracker

from k8s_world import K8sWorld

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
CLASSES = os.path.join(ROOT, "tests", "lab", "overflow", "job_classes.yml")
TPL = {"node_selector": {"pool": "overflow"}, "staged_claims": ["inputs"], "outputs": ["output"],
       "registry_map": {"registry.site.example/": "registry.cloud.example/site/"},
       "upload": {"host": "st.cloud", "ssh_key": "/etc/ovf/key", "root": "/srv/cs", "known_hosts": "/etc/ovf/known_hosts"}}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = K8sWorld(tmp_path_factory.mktemp("k8s"))
    yield w
    w.stop()


def user_job(name, volumes=None):
    """A Job as its user writes it: own image, command, env, resources, volumes, security context."""
    pod = {"restartPolicy": "Never", "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
           "nodeSelector": {"rack": "r1"},
           "containers": [{"name": "train", "image": "registry.site.example/ml/train:2",
                           "command": ["python3", "train.py"], "args": ["--out", "output"],
                           "env": [{"name": "SEED", "value": "7"}],
                           "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
                           "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
           "volumes": volumes or [{"name": "data", "persistentVolumeClaim": {"claimName": "inputs"}}]}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {jobclass.QUEUE_LABEL: "cloud-small"}},
            "spec": {"backoffLimit": 0, "template": {"metadata": {}, "spec": pod}}}


def params(world, tmp_path, ns, job):
    return {"path": "operator", "tracker_db": str(tmp_path / "t.db"), "job_classes": CLASSES, "jobs": [job],
            "local_queue": {"kind": "kubernetes", "kubeconfig": world.kubeconfig, "context": "onprem", "namespace": ns},
            "cloud": {"kubeconfig": world.kubeconfig, "context": "cloud-direct", "namespace": ns + "-c"},
            "storage": {"host": "127.0.0.1", "ssh_key": "/nonexistent", "onprem_root": str(tmp_path / "r")},
            "job_template": TPL, "total_gpus": {"NVIDIA A100-SXM4-80GB": 8}}


def test_the_cloud_job_is_the_users_job_with_listed_rewrites(world, tmp_path):
    onprem = world.kube("onprem")
    onprem.ensure_namespace("carry-a")
    onprem.create_job("carry-a", user_job("train-7"))
    local = k8s_backend.K8sLocalQueue(onprem, namespace="carry-a")
    spec = dispatch_run.cloud_spec("train-7", {"gpus": 1}, TPL, [], local)
    cloud = k8s_backend.K8sCloudCluster(world.kube("cloud-direct"), namespace="carry-a-c")
    cloud.ensure_namespace()
    res = cloud.submit("ovf-train-7", "train-7", "att-1", dict(spec, labels={"hybridgpu.io/overflow-job": "ovf-train-7"}))
    assert res.outcome == backends.CREATED                   # the emulator's validation accepts the body
    got = cloud.kube.get_job("carry-a-c", "ovf-train-7")
    pod = got["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["image"] == "registry.cloud.example/site/ml/train:2"
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000}
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "1"} and c["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert pod["nodeSelector"] == {"pool": "overflow"} and pod["volumes"] == [{"name": "data", "emptyDir": {}}]
    assert c["command"][-5:] == ["--", "python3", "train.py", "--out", "output"]
    env = dict((e["name"], e["value"]) for e in c["env"])
    assert env == {"SEED": "7", "OVF_JOB_ID": "train-7", "OVF_ATTEMPT_ID": "att-1"}
    listed = json.loads(got["metadata"]["annotations"][k8s_backend.REWRITES_ANNOTATION])
    fields = sorted(r["field"] for r in listed)
    assert fields == ["containers.train.command", "containers.train.image", "nodeSelector", "volumes.data"]


def test_a_job_needing_a_host_path_is_refused_before_any_hold(world, tmp_path):
    onprem = world.kube("onprem")
    onprem.ensure_namespace("carry-b")
    onprem.create_job("carry-b", user_job("train-8", volumes=[
        {"name": "data", "persistentVolumeClaim": {"claimName": "inputs"}},
        {"name": "models", "hostPath": {"path": "/mnt/models"}}]))
    out = dispatch_run.run(params(world, tmp_path, "carry-b", "train-8"))
    assert [(r["job_id"], r["outcome"]) for r in out["results"]] == [("train-8", "refused")]
    assert "hostPath /mnt/models" in out["results"][0]["reason"]
    job = onprem.get_job("carry-b", "train-8")
    assert not job["spec"].get("suspend") and k8s_backend.HOLD_ANNOTATION not in (job["metadata"].get("annotations") or {})
    t = Tracker(str(tmp_path / "t.db"))
    try:
        assert t.job("train-8") is None                      # nothing recorded, nothing held
    finally:
        t.close()
    # check mode says so too, reading only
    local = k8s_backend.K8sLocalQueue(onprem, namespace="carry-b")
    results = [{"job_id": "train-8", "path": "policy", "outcome": "would_move", "reason": "queue full"}]
    dispatch_run._check_carry(results, local, {"small-input": {"gpus": 1}}, {"train-8": "small-input"},
                              params(world, tmp_path, "carry-b", "train-8"))
    assert results[0]["outcome"] == "would_refuse" and "hostPath /mnt/models" in results[0]["reason"]
    assert not onprem.get_job("carry-b", "train-8")["spec"].get("suspend")


# scontrol show job --json of Slurm 22.05 (the fields job_request reads)
SHOW = ('{"jobs": [{"job_id": %s, "name": "user-name", "user_name": "ana", "job_state": "PENDING", "time_limit": 30, '
        '"partition": "cloud-small", "cpus": 2, "tres_req_str": "cpu=2,mem=1G,node=1", '
        '"current_working_directory": "/home/ana/w%s", "command": null}]}')


def test_slurm_jobs_are_read_in_one_round_trip(monkeypatch):
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        script = cmd[-1]
        mark = script.split("echo ")[1].split(" job ")[0].strip("'")
        out = ""
        for sid in ("11", "12"):
            # job 11's script has no newline at its end: the next mark follows on the same line
            out += "%s job %s\n%s\n%s script %s\n#!/bin/bash\n#SBATCH --container-image=img:%s\necho %s%s" % (
                mark, sid, SHOW % (sid, sid), mark, sid, sid, sid, "" if sid == "11" else "\n")
        out += "%s job 13\n%s script 13\n" % (mark, mark)        # unknown to Slurm: no record, no script
        return subprocess.CompletedProcess(cmd, 0, out, "")
    monkeypatch.setattr(slurm_backend.subprocess, "run", fake_run)
    q = slurm_backend.SlurmLocalQueue("ctl", "/k")
    got = q.read_jobs(["11", "12", "13"])
    assert len(calls) == 1 and q.round_trips == 1
    assert sorted(got) == ["11", "12"]
    assert got["12"]["request"]["workdir"] == "/home/ana/w12" and got["12"]["request"]["time_limit_s"] == 1800
    assert got["12"]["request"]["mem_mb"] == 1024 and got["11"]["script"]["container_image"] == "img:11"
    assert got["11"]["script"]["body"] == "#!/bin/bash\n#SBATCH --container-image=img:11\necho 11"
    assert got["12"]["script"]["body"].endswith("echo 12\n")
    with pytest.raises(slurm_backend.SlurmError, match="not a Slurm job ID"):
        q.read_jobs(["user-name"])


def test_slurm_cloud_spec_uses_the_class_gpus_only_when_the_job_has_none():
    read = {"request": {"job_id": "11", "gpus": 0, "gpu_type": None, "cpus": 2, "mem_mb": 1024, "time_limit_s": 60,
                        "workdir": "/w"},
            "script": {"shebang": "#!/bin/bash", "container_image": None, "body": "#!/bin/bash\ntrue\n"}}
    spec = dispatch_run.cloud_spec("11", {"gpus": 2, "gpu_type": "NVIDIA A100-SXM4-80GB"}, dict(TPL, image="i:1"),
                                   [], None, read)
    assert spec["pod_spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert {"field": "gpus", "from": 0, "to": 2, "why": "no gres/gpu in the job: the class's"} in spec["rewrites"]
    with pytest.raises(carry.CarryRefused, match="scontrol knows no job 12"):
        dispatch_run.cloud_spec("12", {"gpus": 1}, TPL, [], None, None)


def test_the_cloud_emulator_accepts_a_carried_slurm_job(world):
    read = {"request": {"job_id": "31", "gpus": 2, "gpu_type": None, "cpus": 4, "mem_mb": 2048, "time_limit_s": 900,
                        "workdir": "/home/ana/w"},
            "script": {"shebang": "#!/bin/bash", "container_image": "nvcr.io/nvidia/pytorch:24.05-py3",
                       "body": "#!/bin/bash\n#SBATCH --container-image=nvcr.io/nvidia/pytorch:24.05-py3\ntrue\n"}}
    spec = dispatch_run.cloud_spec("31", {"gpus": 1}, TPL, [], None, read)
    cloud = k8s_backend.K8sCloudCluster(world.kube("cloud-direct"), namespace="carry-s-c")
    cloud.ensure_namespace()
    assert cloud.submit("ovf-31", "31", "att-1", spec).outcome == backends.CREATED
    pod = cloud.kube.get_job("carry-s-c", "ovf-31")["spec"]["template"]["spec"]
    assert pod["activeDeadlineSeconds"] == 900 and pod["containers"][0]["image"] == "nvcr.io/nvidia/pytorch:24.05-py3"


def test_rewrites_go_in_the_record_of_the_attempt(tmp_path):
    t = Tracker(str(tmp_path / "t.db"))
    try:
        t.ensure_job("j1", "small-input", "operator", {})
        t.start_attempt("j1", "a1")
        rewrites = [{"field": "nodeSelector", "from": {"rack": "r1"}, "to": {"pool": "overflow"}, "why": "cloud pool"}]
        dispatch_run.log_rewrites(t, "j1", {"attempt_id": "a1"}, {"rewrites": rewrites}, "operator")
        entry = [e for e in t.trace("j1")["attempts"][0]["log"] if e["step"] == "carry"][0]
        assert entry["result"] == "rewritten" and json.loads(entry["detail"]) == rewrites
    finally:
        t.close()
