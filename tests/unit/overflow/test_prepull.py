"""Images pinned by the on-prem digest and pre-pulled on the cloud pool before a class moves, against
two in-process API emulators. The test plays both kubelets: the on-prem Node reports its images
(status.images), and a thread writes the pre-pull pod's status on the cloud side (imageID and the
container's start) the way a kubelet that pulled the image would."""
import json
import threading
import time

import pytest
import yaml

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import k8s
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import dispatch_run, prepull, trigger
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import jobclass, k8s_backend
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.protocol import cloud_job_name
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.tracker import Tracker

from k8s_world import K8sWorld, register_node
from ledger_pass import NullStager

ONPREM_IMG = "registry.site.example/ml/train:2"
CLOUD_REPO = "registry.cloud.example/site/ml/train"
GOOD = "sha256:" + "a1" * 32
OTHER = "sha256:" + "b2" * 32
PULL_S = 7
TPL = {"node_selector": {"pool": "overflow"}, "staged_claims": ["inputs"], "outputs": ["output"],
       "registry_map": {"registry.site.example/": "registry.cloud.example/site/"},
       "upload": {"host": "st.cloud", "ssh_key": "/etc/ovf/key", "root": "/srv/cs", "known_hosts": "/etc/ovf/kh"}}
CLASS = {"input_size": "1MB", "output_size": "1kB", "image_size": "10GB", "typical_runtime": "1h",
         "data_may_leave_site": True, "gpu_type": "NVIDIA A100-SXM4-80GB", "gpus": 1, "queue_wait_threshold": "0s",
         "image_cached": False, "kubernetes": {"queue": "train"}}


class CloudKubelet(object):
    """Answers pre-pull pods on the cloud side: the registry it pulls from holds `registry`
    (repo -> digest). A pod whose image digest the registry does not hold gets ErrImagePull;
    `any_digest` makes the runtime report the registry's digest whatever was asked (a mirror that
    serves other content under the reference)."""

    def __init__(self, kube, registry, any_digest=False):
        self.kube = kube
        self.registry = registry
        self.any_digest = any_digest
        self.seen = []
        self.errors = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        beat = 0.0
        while not self.stop.is_set():
            if time.time() - beat > 0.5:
                beat = time.time()
                self.heartbeat()
            for pod in self.kube.list_pods(label_selector=prepull.PREPULL_LABEL):
                if not pod["spec"].get("nodeName") or (pod.get("status") or {}).get("containerStatuses") \
                        or pod["metadata"].get("deletionTimestamp"):
                    continue
                try:
                    self.answer(pod)
                except k8s.K8sError as exc:
                    self.errors.append(str(exc))
            time.sleep(0.05)

    def heartbeat(self):
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.kube.call("heartbeat", self.kube.core.patch_node_status, "cloud-h200-1", {"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now}]}})

    def answer(self, pod):
        c = pod["spec"]["containers"][0]
        self.seen.append(c["image"])
        repo, dummy, digest = prepull.split_ref(c["image"])
        scheduled = [x for x in pod["status"]["conditions"] if x["type"] == "PodScheduled"][0]["lastTransitionTime"]
        t0 = prepull._ts(scheduled)   # pylint: disable=protected-access
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0 + PULL_S))
        have = self.registry.get(repo)
        if have is None or (digest and digest != have and not self.any_digest):
            status = {"phase": "Pending", "containerStatuses": [{
                "name": c["name"], "image": c["image"], "imageID": "", "ready": False, "restartCount": 0,
                "state": {"waiting": {"reason": "ErrImagePull", "message": "manifest unknown"}}}]}
        else:
            status = {"phase": "Succeeded", "startTime": scheduled, "containerStatuses": [{
                "name": c["name"], "image": c["image"], "imageID": "docker-pullable://%s@%s" % (repo, have),
                "ready": False, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started,
                                         "finishedAt": started}}}]}
        self.kube.call("kubelet status", self.kube.core.patch_namespaced_pod_status, pod["metadata"]["name"],
                       pod["metadata"]["namespace"], {"status": status})


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = K8sWorld(tmp_path_factory.mktemp("k8s"))
    register_node(w.kube("cloud-direct"), "cloud-h200-1", {"pool": "overflow"})
    onprem = w.kube("onprem")
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "owned-a100-1", "labels": {}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "images": [{"names": ["registry.site.example/ml/train@" + GOOD, ONPREM_IMG], "sizeBytes": 1}]}}
    onprem.call("create node", onprem.core.create_node, node)
    yield w
    w.stop()


def user_job(name, image=ONPREM_IMG):
    pod = {"restartPolicy": "Never",
           "containers": [{"name": "train", "image": image, "command": ["python3", "train.py"],
                           "resources": {"limits": {"nvidia.com/gpu": "1"}},
                           "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
           "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "inputs"}}]}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {jobclass.QUEUE_LABEL: "train"}},
            "spec": {"backoffLimit": 0, "suspend": True, "template": {"metadata": {}, "spec": pod}}}


def setup(world, tmp_path, ns, jobs, cls=None, registry=None, any_digest=False):
    classes = tmp_path / "classes.yml"
    classes.write_text(yaml.safe_dump({"defaults": {"link_bps": "1Gbps"}, "classes": {"train": dict(CLASS, **(cls or {}))}}))
    onprem = world.kube("onprem")
    onprem.ensure_namespace(ns)
    for name, image in jobs:
        onprem.create_job(ns, user_job(name, image))
    kubelet = CloudKubelet(world.kube("cloud-direct"), registry if registry is not None else {CLOUD_REPO: GOOD}, any_digest)
    params = {"path": "operator", "tracker_db": str(tmp_path / "t.db"), "job_classes": str(classes),
              "local_queue": {"kind": "kubernetes", "kubeconfig": world.kubeconfig, "context": "onprem", "namespace": ns},
              "cloud": {"kubeconfig": world.kubeconfig, "context": "cloud-direct", "namespace": ns + "-c"},
              "storage": {}, "job_template": TPL, "total_gpus": {"NVIDIA A100-SXM4-80GB": 8},
              "images": {"timeout_s": 20, "poll_s": 0.05}}
    return params, kubelet


@pytest.fixture(autouse=True)
def null_stager(monkeypatch):
    monkeypatch.setattr(dispatch_run, "build_stager", lambda opts: NullStager())


def held(world, ns, name):
    job = world.kube("onprem").get_job(ns, name)
    return k8s_backend.HOLD_ANNOTATION in (job["metadata"].get("annotations") or {})


def prepull_jobs(world, ns):
    return world.kube("cloud-direct").list_jobs(ns + "-c", label_selector=prepull.PREPULL_LABEL)


def test_matching_digest_moves_by_digest_and_records_the_measured_pull(world, tmp_path):
    params, kubelet = setup(world, tmp_path, "pp-a", [("train-1", ONPREM_IMG)])
    try:
        out = dispatch_run.run(dict(params, jobs=["train-1"]))
    finally:
        kubelet.stop.set()
    res = out["results"][0]
    assert res["outcome"] == "submitted", res
    assert kubelet.seen == ["%s@%s" % (CLOUD_REPO, GOOD)]        # pulled by digest, after the registry mapping
    assert res["images"] == [{"image": ONPREM_IMG, "ref": "%s@%s" % (CLOUD_REPO, GOOD), "digest": GOOD,
                              "source": "node status", "outcome": "pulled", "pull_s": PULL_S}]
    cloud = world.kube("cloud-direct")
    job = cloud.get_job("pp-a-c", cloud_job_name("train-1"))
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "%s@%s" % (CLOUD_REPO, GOOD)
    rewrites = json.loads(job["metadata"]["annotations"][k8s_backend.REWRITES_ANNOTATION])
    assert any(r["to"] == "%s@%s" % (CLOUD_REPO, GOOD) and "pinned" in r["why"] for r in rewrites)
    cm = cloud.call("read", cloud.core.read_namespaced_config_map, prepull.RECORD_NAME, "pp-a-c")
    rec = json.loads(cm["data"]["train"])[CLOUD_REPO]
    assert rec["digest"] == GOOD and rec["pull_s"] == PULL_S and rec["node"] == "cloud-h200-1"
    _wait_gone(world, "pp-a")                                       # the pre-pull Job is removed
    t = Tracker(params["tracker_db"])
    try:
        assert [e["step"] for e in t.logs("train-1") if e["step"] == "prepull"] == ["prepull"]
    finally:
        t.close()


def _wait_gone(world, ns):
    deadline = time.time() + 5
    while prepull_jobs(world, ns) and time.time() < deadline:
        time.sleep(0.05)
    assert prepull_jobs(world, ns) == []


def test_second_move_of_the_class_pulls_nothing_and_the_time_model_uses_the_pull(world, tmp_path):
    params, kubelet = setup(world, tmp_path, "pp-b", [("train-1", ONPREM_IMG), ("train-2", ONPREM_IMG)])
    try:
        first = dispatch_run.run(dict(params, jobs=["train-1"]))
        second = dispatch_run.run(dict(params, jobs=["train-2"]))
    finally:
        kubelet.stop.set()
    assert first["results"][0]["images"][0]["outcome"] == "pulled"
    got = [r for r in second["results"] if r["job_id"] == "train-2"][0]
    assert got["outcome"] == "submitted" and got["images"][0]["outcome"] == "recorded"
    assert len(kubelet.seen) == 1                                   # one pre-pull pod for the class
    # the decisions of the second pass priced the image by the measured pull, not image_size over the link
    dec = [d for d in second["decisions"] if d["job_id"] == "train-2"][0]
    assert dec["time_model"]["cloud"]["image_pull_s"] == PULL_S
    classes = jobclass.load(params["job_classes"])
    puller = dispatch_run.build_puller(params)
    assert dispatch_run.measured_pulls(puller, classes) == {"train": PULL_S}
    snap = trigger.QueueSnapshot(0, [trigger.QueueJob("x", "train", 0, "pending", 1, "NVIDIA A100-SXM4-80GB")],
                                 {"NVIDIA A100-SXM4-80GB": 0}, {"NVIDIA A100-SXM4-80GB": 8})
    estimate = trigger.evaluate(snap, classes)[0]["time_model"]["cloud"]["image_pull_s"]
    assert estimate == 80.0                                        # 10 GB over 1 Gbps, without the record


def test_digest_mismatch_is_refused_before_any_hold_naming_both(world, tmp_path):
    params, kubelet = setup(world, tmp_path, "pp-c", [("train-1", ONPREM_IMG)], registry={CLOUD_REPO: OTHER},
                            any_digest=True)
    try:
        out = dispatch_run.run(dict(params, jobs=["train-1"]))
    finally:
        kubelet.stop.set()
    res = out["results"][0]
    assert res["outcome"] == "refused" and GOOD in res["reason"] and OTHER in res["reason"], res
    assert "digests differ" in res["reason"]
    assert not held(world, "pp-c", "train-1")
    t = Tracker(params["tracker_db"])
    try:
        assert t.job("train-1") is None                             # nothing recorded, nothing held
    finally:
        t.close()
    cloud = world.kube("cloud-direct")
    assert [j["metadata"]["name"] for j in cloud.list_jobs("pp-c-c")
            if not j["metadata"]["name"].startswith("ovf-prepull-")] == []
    assert prepull.PrePuller(cloud, "pp-c-c").records() == {}       # a refused pull is not recorded


def test_pull_error_is_refused_before_any_hold(world, tmp_path):
    params, kubelet = setup(world, tmp_path, "pp-d", [("train-1", ONPREM_IMG)], registry={})
    try:
        out = dispatch_run.run(dict(params, jobs=["train-1"]))
    finally:
        kubelet.stop.set()
    res = out["results"][0]
    assert res["outcome"] == "refused" and "ErrImagePull" in res["reason"] and GOOD in res["reason"]
    assert not held(world, "pp-d", "train-1")


def test_no_onprem_digest_is_refused(world, tmp_path):
    unknown = "registry.site.example/ml/eval:5"
    params, kubelet = setup(world, tmp_path, "pp-e", [("eval-1", unknown)])
    try:
        out = dispatch_run.run(dict(params, jobs=["eval-1"]))
    finally:
        kubelet.stop.set()
    res = out["results"][0]
    assert res["outcome"] == "refused" and unknown in res["reason"] and "no on-prem digest" in res["reason"]
    assert not held(world, "pp-e", "eval-1") and kubelet.seen == []


def test_a_class_that_allows_unpinned_images_moves_by_tag(world, tmp_path):
    unknown = "registry.site.example/ml/eval:5"
    params, kubelet = setup(world, tmp_path, "pp-f", [("eval-2", unknown)], cls={"allow_unpinned_images": True})
    try:
        res = dispatch_run.run(dict(params, jobs=["eval-2"]))["results"][0]
    finally:
        kubelet.stop.set()
    assert res["outcome"] == "submitted" and res["images"][0]["outcome"] == "unpinned" and kubelet.seen == []
    job = world.kube("cloud-direct").get_job("pp-f-c", cloud_job_name("eval-2"))
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.cloud.example/site/ml/eval:5"


def test_a_pin_gives_the_digest_and_a_bad_pin_is_refused(world, tmp_path):
    unknown = "registry.site.example/ml/eval:5"
    params, kubelet = setup(world, tmp_path, "pp-g", [("eval-3", unknown)],
                            registry={"registry.cloud.example/site/ml/eval": OTHER})
    try:
        out = dispatch_run.run(dict(params, jobs=["eval-3"], images=dict(params["images"], pins=[
            "registry.site.example/ml/eval@" + OTHER])))
    finally:
        kubelet.stop.set()
    res = out["results"][0]
    assert res["outcome"] == "submitted" and res["images"][0]["source"] == "pin"
    with pytest.raises(dispatch_run.RunError, match="images.pins"):
        dispatch_run.run(dict(params, jobs=["eval-3"], images={"pins": ["registry.site.example/ml/eval:5"]}))


def test_onprem_digest_sources():
    nodes = [{"metadata": {"name": "n1"}, "status": {"images": [
        {"names": ["docker.io/library/busybox@" + GOOD, "docker.io/library/busybox:1.36"]}]}}]
    assert prepull.onprem_digest("busybox:1.36", nodes=nodes) == (GOOD, "node status")
    assert prepull.onprem_digest("busybox@" + OTHER, nodes=nodes) == (OTHER, "reference")
    assert prepull.onprem_digest("busybox:1.37", nodes=nodes)[0] is None
    two = nodes + [{"metadata": {"name": "n2"}, "status": {"images": [
        {"names": ["docker.io/library/busybox@" + OTHER, "docker.io/library/busybox:1.36"]}]}}]
    with pytest.raises(ValueError, match="different digests"):
        prepull.onprem_digest("busybox:1.36", nodes=two)
    assert prepull.digest_of("docker-pullable://r/x@" + GOOD) == GOOD
    assert prepull.split_ref("localhost:5000/a/b:1@" + GOOD) == ("localhost:5000/a/b", "1", GOOD)
    with pytest.raises(jobclass.JobClassError, match="image_pins"):
        jobclass.validate({"defaults": {"link_bps": "1Gbps"}, "classes": {"c": dict(CLASS, image_pins=["x:1"])}})


def test_the_lab_pins_the_digest_its_node_agents_report():
    import os
    import sys
    root = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
    sys.path.insert(0, os.path.join(root, "tests", "lab"))
    try:
        from lablib import config as labconfig
    finally:
        sys.path.pop(0)
    with open(os.path.join(root, "inventories", "lab", "group_vars", "all.yml")) as fh:
        pins = yaml.safe_load(fh)["hgpu_overflow_images"]["pins"]
    image = "localhost/overflow-job:1"
    assert prepull.onprem_digest(image, pins) == (labconfig.LAB_IMAGES[image], "pin")


def test_check_mode_refuses_an_image_without_digest_and_pulls_nothing(world, tmp_path):
    unknown = "registry.site.example/ml/eval:5"
    params, kubelet = setup(world, tmp_path, "pp-h", [("eval-4", unknown), ("train-4", ONPREM_IMG)],
                            cls={"cloud_runtime": "30min"})
    try:
        # no free GPU on-prem: the trigger moves both
        out = dispatch_run.run(dict(params, path="policy", check_mode=True, total_gpus={"NVIDIA A100-SXM4-80GB": 0}))
    finally:
        kubelet.stop.set()
    got = dict((r["job_id"], r) for r in out["results"])
    assert got["eval-4"]["outcome"] == "would_refuse" and "no on-prem digest" in got["eval-4"]["reason"]
    assert got["train-4"]["outcome"] == "would_move"
    assert kubelet.seen == [] and world.kube("cloud-direct").list_jobs("pp-h-c") == []
    assert not held(world, "pp-h", "eval-4") and not held(world, "pp-h", "train-4")


def test_an_unreadable_record_keeps_the_estimates_and_says_so(world, tmp_path):
    params, kubelet = setup(world, tmp_path, "pp-i", [("train-5", ONPREM_IMG)])
    kubelet.stop.set()
    bad_cloud = {"host": "https://127.0.0.1:1", "api_key": "t", "validate_certs": False, "api_retries": 0,
                 "request_timeout": 1, "namespace": "pp-i-c"}
    out = dispatch_run.run(dict(params, path="policy", check_mode=True, cloud=bad_cloud))
    assert "pre-pull record not read" in out["notes"][0]
    assert out["decisions"][0]["time_model"]["cloud"]["image_pull_s"] == 80.0


def test_a_cloud_that_fails_during_the_pre_pull_refuses_the_job_not_the_pass(world, tmp_path, monkeypatch):
    params, kubelet = setup(world, tmp_path, "pp-j", [("train-6", ONPREM_IMG)])
    kubelet.stop.set()

    def broken(self, namespace, body):
        raise k8s.K8sError("create job %s/%s" % (namespace, body["metadata"]["name"]), message="link down")
    monkeypatch.setattr(k8s.Kube, "create_job", broken)
    out = dispatch_run.run(dict(params, jobs=["train-6"]))
    res = out["results"][0]
    assert res["outcome"] == "refused" and "pre-pull on the cloud pool could not run" in res["reason"]
    assert not held(world, "pp-j", "train-6")
