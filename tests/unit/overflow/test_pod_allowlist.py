"""The cloud pod spec is built from an allowlist of the queued Job's fields: a Job asking for the
host (network, PID, a privileged container, SYS_ADMIN, a node, control-plane affinity, a system
priority, a runtime class, host aliases, ephemeral containers) is refused with each field named,
before anything is held or sent; a Job exactly as a v1.30 API server returns it (every default
the server adds) is carried."""
import copy
import os
import types

import pytest
import yaml

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import carry, dispatch_run, jobclass, k8s_backend, podspec
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.tracker import Tracker

from k8s_world import K8sWorld
from ledger_pass import NullStager

HERE = os.path.dirname(os.path.abspath(__file__))
CLASSES = os.path.join(HERE, "..", "..", "lab", "overflow", "job_classes.yml")
TPL = {"node_selector": {"pool": "overflow"}, "staged_claims": ["inputs"], "outputs": ["output"],
       "registry_map": {"registry.site.example/": "registry.cloud.example/site/"},
       "upload": {"host": "st.cloud", "ssh_key": "/etc/ovf/key", "root": "/srv/cs", "known_hosts": "/etc/ovf/known_hosts"}}
POD = "spec.template.spec"


def v1_30_job():
    with open(os.path.join(HERE, "job_v1_30.yaml")) as fh:
        return yaml.safe_load(fh)


class ServerKube(object):
    """The on-prem API as far as the queue reads it, answering with the stored Job as the server returns it."""

    core = types.SimpleNamespace(read_namespaced_persistent_volume_claim=None)

    def __init__(self, job):
        self.job = job
        self.writes = []

    def get_job(self, namespace, name):
        return copy.deepcopy(self.job) if name == self.job["metadata"]["name"] else None

    def list_jobs(self, namespace=None, label_selector=None):
        return [copy.deepcopy(self.job)]

    def list_pods(self, namespace=None, label_selector=None):
        return []

    def list_nodes(self, label_selector=None):
        return []

    def call_or_none(self, action, fn, *args):
        return {"spec": {"storageClassName": "ceph-rbd"}}

    def patch_job(self, *args, **kwargs):
        self.writes.append(args)
        raise AssertionError("the queue wrote to the Job")


def queue_of(job):
    return k8s_backend.K8sLocalQueue(ServerKube(job), namespace=job["metadata"]["namespace"],
                                     classes=jobclass.load(CLASSES))


def test_a_job_as_a_v1_30_server_returns_it_is_carried():
    job = v1_30_job()
    local = queue_of(job)
    (entry,) = local.snapshot(total_gpus={"NVIDIA A100-SXM4-80GB": 8}).jobs
    assert (entry.job_class, entry.state, entry.restricted_placement) == ("small-input", "pending", None)
    spec = dispatch_run.cloud_spec("train-130", {"gpus": 1}, TPL, [], local)
    pod = spec["pod_spec"]
    body = k8s_backend.K8sCloudCluster(kube=None, namespace="overflow").body("ovf-train-130", "train-130", "a1", spec)
    assert sorted(body["spec"]["template"]["spec"]) == sorted(pod)        # the cloud Job carries the built spec
    (c,) = pod["containers"]
    assert c["image"] == "registry.cloud.example/site/ml/train:2" and c["imagePullPolicy"] == "IfNotPresent"
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}} in c["env"]
    assert c["command"][-5:] == ["--", "python3", "train.py", "--out", "output"]
    assert pod["volumes"] == [{"name": "data", "emptyDir": {}}, {"name": "scratch", "emptyDir": {}}]
    assert pod["restartPolicy"] == "Never" and pod["terminationGracePeriodSeconds"] == 30


# each attack field alone, as a user adds it to the manifest, and the path the refusal names
ATTACKS = [
    (lambda p: p.update(hostNetwork=True), POD + ".hostNetwork"),
    (lambda p: p.update(hostPID=True), POD + ".hostPID"),
    (lambda p: p.update(hostIPC=True), POD + ".hostIPC"),
    (lambda p: p["containers"][0]["securityContext"].update(privileged=True), POD + ".containers[0].securityContext.privileged"),
    (lambda p: p["containers"][0]["securityContext"].update(capabilities={"add": ["SYS_ADMIN"]}),
     POD + ".containers[0].securityContext.capabilities.add"),
    (lambda p: p.update(nodeName="cp-1"), POD + ".nodeName"),
    (lambda p: p.update(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}]}}}),
     POD + ".affinity"),
    (lambda p: p.update(priorityClassName="system-node-critical"), POD + ".priorityClassName"),
    (lambda p: p.update(runtimeClassName="nvidia-privileged"), POD + ".runtimeClassName"),
    (lambda p: p.update(hostAliases=[{"ip": "10.0.0.1", "hostnames": ["vault.site"]}]), POD + ".hostAliases"),
    (lambda p: p.update(ephemeralContainers=[{"name": "debug", "image": "busybox"}]), POD + ".ephemeralContainers"),
    (lambda p: p["containers"][0].update(ports=[{"containerPort": 22, "hostPort": 22, "protocol": "TCP"}]),
     POD + ".containers[0].ports[0].hostPort"),
    (lambda p: p["containers"][0].update(volumeDevices=[{"name": "data", "devicePath": "/dev/xvda"}]),
     POD + ".containers[0].volumeDevices"),
    (lambda p: p["containers"][0]["securityContext"].update(seccompProfile={"type": "Unconfined"}),
     POD + ".containers[0].securityContext.seccompProfile.type"),
    (lambda p: p.update(dnsPolicy="None"), POD + ".dnsPolicy"),
    (lambda p: p.update(schedulerName="site-scheduler"), POD + ".schedulerName"),
    (lambda p: p.update(securityContext={"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}]}),
     POD + ".securityContext.sysctls"),
    (lambda p: p.update(imagePullSecrets=[{"name": "site-registry"}]), POD + ".imagePullSecrets"),
    (lambda p: p["volumes"].append({"name": "creds", "secret": {"secretName": "site-db", "defaultMode": 420}}),
     POD + ".volumes[2]: volume creds: secret"),
    (lambda p: p["volumes"].append({"name": "all", "projected": {"sources": [], "defaultMode": 420}}),
     POD + ".volumes[2]: volume all: projected"),
    (lambda p: p.update(initContainers=[
        {"name": "prep", "image": "busybox", "command": ["true"], "securityContext": {"privileged": True}}]),
     POD + ".initContainers[0].securityContext.privileged"),
]


@pytest.mark.parametrize("change,field", ATTACKS, ids=[f for dummy, f in ATTACKS])
def test_each_field_outside_the_allowlist_is_refused_and_named_before_any_hold(change, field):
    job = v1_30_job()
    change(job["spec"]["template"]["spec"])
    local = queue_of(job)
    with pytest.raises(carry.CarryRefused) as err:
        dispatch_run.cloud_spec("train-130", {"gpus": 1}, TPL, [], local)
    assert field in str(err.value)
    assert local.kube.writes == []


def attack_job(name):
    """The attack: a queued Job in a movable LocalQueue asking for the host, a node and its privileges."""
    job = v1_30_job()
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "namespace"):
        job["metadata"].pop(key)
    job["metadata"]["name"] = name
    job.pop("status")
    job["spec"].pop("selector")              # suspended, as Kueue queues it
    job["spec"]["template"]["metadata"] = {}
    pod = job["spec"]["template"]["spec"]
    pod.update(hostNetwork=True, hostPID=True, nodeName="cp-1", priorityClassName="system-node-critical",
               runtimeClassName="nvidia-privileged", hostAliases=[{"ip": "10.0.0.1", "hostnames": ["vault.site"]}],
               ephemeralContainers=[{"name": "debug", "image": "busybox", "command": ["sh"]}],
               affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                   {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}]}}})
    pod["containers"][0]["securityContext"] = {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}}
    return job


ATTACK_FIELDS = ["hostNetwork", "hostPID", "nodeName", "priorityClassName", "runtimeClassName", "hostAliases",
                 "ephemeralContainers", "affinity", "containers[0].securityContext.privileged",
                 "containers[0].securityContext.capabilities.add"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = K8sWorld(tmp_path_factory.mktemp("k8s"))
    yield w
    w.stop()


def test_the_attack_job_is_refused_through_the_pass_and_nothing_is_held_or_sent(world, tmp_path, monkeypatch):
    monkeypatch.setattr(dispatch_run, "build_stager", lambda opts: NullStager())     # staging would succeed
    onprem = world.kube("onprem")
    onprem.ensure_namespace("allow-a")
    onprem.create_job("allow-a", attack_job("own-the-node"))
    params = {"path": "operator", "tracker_db": str(tmp_path / "t.db"), "job_classes": CLASSES, "jobs": ["own-the-node"],
              "local_queue": {"kind": "kubernetes", "kubeconfig": world.kubeconfig, "context": "onprem",
                              "namespace": "allow-a"},
              "cloud": {"kubeconfig": world.kubeconfig, "context": "cloud-direct", "namespace": "allow-a-c"},
              "storage": {"host": "127.0.0.1", "ssh_key": "/nonexistent", "onprem_root": str(tmp_path / "r")},
              "job_template": TPL, "total_gpus": {"NVIDIA A100-SXM4-80GB": 8}}
    out = dispatch_run.run(params)
    assert [(r["job_id"], r["outcome"]) for r in out["results"]] == [("own-the-node", "refused")]
    reason = out["results"][0]["reason"]
    for field in ATTACK_FIELDS:
        assert "%s.%s" % (POD, field) in reason, field
    job = onprem.get_job("allow-a", "own-the-node")
    assert k8s_backend.HOLD_ANNOTATION not in (job["metadata"].get("annotations") or {})   # never held
    assert world.kube("cloud-direct").list_jobs("allow-a-c") == []                          # nothing sent
    t = Tracker(str(tmp_path / "t.db"))
    try:
        assert t.job("own-the-node") is None
    finally:
        t.close()


def test_the_cloud_pod_spec_holds_only_allowlisted_fields():
    pod, dummy = carry.k8s_pod_spec("train-130", v1_30_job(), TPL)
    assert set(pod) <= set(podspec.BUILT_POD) | {"restartPolicy", "nodeSelector", "tolerations"}
    for c in pod["containers"]:
        assert set(c) <= set(podspec.CONTAINER_FIELDS)
