"""overflow_history reading the Jobs of a Kubernetes API (the in-process emulator on loopback, HTTPS, token),
run as a module through ansible: a GPU Job held suspended (as a queue does) then admitted and finished,
one still held, one without GPUs, and a GPU Job in another namespace."""
import json
import os
import subprocess
import sys
import time

import pytest

from hgpu_testenv import ROOT
from k8s_world import K8sWorld, register_node

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.history_sources import CLASS_LABEL

CLASSES_FILE = os.path.join(ROOT, "inventories", "example", "overflow", "job_classes.yml")
NS = "research"


def job(name, gpus, suspend, cls="small-input"):
    res = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {CLASS_LABEL: cls}},
            "spec": {"suspend": suspend, "backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox", "command": ["true"], "resources": res}]}}}}


def wait_for(what, fn, timeout=20.0):
    end = time.time() + timeout
    while time.time() < end:
        value = fn()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out waiting for %s" % what)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = K8sWorld(tmp_path_factory.mktemp("k8s"))
    kube = w.kube("onprem")
    register_node(kube, "gpu-a", {"kubernetes.io/hostname": "gpu-a"}, gpus=8)
    for ns in (NS, "other"):
        kube.ensure_namespace(ns)
    kube.create_job(NS, job("train", 2, True))
    kube.create_job(NS, job("held", 1, True))
    kube.create_job(NS, job("cpu-only", 0, False))
    kube.create_job("other", job("elsewhere", 4, True, cls="large-input"))
    time.sleep(2.2)      # creation and start are recorded to the second
    for ns, name in ((NS, "train"), ("other", "elsewhere")):
        kube.patch_job(ns, name, {"spec": {"suspend": False}})
        pod = wait_for("the pod of %s" % name, lambda ns=ns, name=name: kube.list_pods(ns, label_selector="job-name=" + name))[0]
        kube.core.patch_namespaced_pod_status(pod["metadata"]["name"], ns, {"status": {"phase": "Succeeded"}})
        wait_for("%s complete" % name, lambda ns=ns, name=name: (kube.get_job(ns, name).get("status") or {}).get("completionTime"))
    yield w
    w.stop()


def run_module(args):
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-c", "local",
           "-e", "ansible_python_interpreter=" + sys.executable,
           "-m", "hybridgpu.fleet.overflow_history", "-a", json.dumps(args)]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
    return json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_one_namespace(world):
    res = run_module({"source": "kubernetes", "kubeconfig": world.kubeconfig, "context": "onprem", "namespace": NS,
                      "job_classes": CLASSES_FILE})
    assert not res.get("failed"), res.get("msg")
    assert res["jobs"] == 1 and res["jobs_completed"] == 1
    assert res["jobs_skipped"] == {"not_started": 1, "running": 0, "no_gpu": 1}
    assert res["classes"]["small-input"]["jobs"] == 1
    # held suspended for about two seconds before it was admitted
    assert 2 <= res["wait"]["without_overflow"]["p50_s"] <= 10
    assert len(res["pool_by_hour"]) == 24 and res["changed"] is False


def test_every_namespace(world):
    res = run_module({"source": "kubernetes", "kubeconfig": world.kubeconfig, "context": "onprem",
                      "job_classes": CLASSES_FILE})
    assert not res.get("failed"), res.get("msg")
    assert res["jobs"] == 2 and sorted(res["classes"]) == ["large-input", "small-input"]


def test_api_error_names_what_it_was_doing(world):
    res = run_module({"source": "kubernetes", "kubeconfig": world.kubeconfig, "context": "onprem",
                      "api_key": "wrong-token", "namespace": NS, "job_classes": CLASSES_FILE})
    assert res.get("failed") and res["msg"].startswith("Cannot list Jobs in namespace research (context onprem)")
    assert res["http_status"] == 401
