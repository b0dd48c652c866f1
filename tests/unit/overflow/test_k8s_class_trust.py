"""A Kubernetes Job's class comes from facts the site controls (its namespace and Kueue LocalQueue,
mapped in the job classes), never from a label its submitter sets; a Job whose placement selects
restricted data never moves, whatever its class says. Driven through the dispatch pass against
the on-prem and cloud API emulators: the Job stays, is not held, and nothing reaches the cloud."""
import copy
import time
import types

import pytest
import yaml

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import dispatch_run, jobclass, k8s_backend, trigger
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.jobbody import build_job

from k8s_world import K8sWorld
from ledger_pass import NullStager

A100 = "NVIDIA A100-SXM4-80GB"
RESTRICTED = {"node-restriction.kubernetes.io/data-class": "restricted"}
CLASS = """
defaults: {link_bps: 10Gbps, dispatch: 10s, cloud_queue_wait: 5s, startup: 5s}
restricted_placement: {labels: [site.example/data-class], taints: [site.example/regulated]}
classes:
  small-input:
    input_size: 1MB
    output_size: 1kB
    image_size: 1MB
    typical_runtime: 4h
    data_may_leave_site: true
    gpu_type: NVIDIA A100-SXM4-80GB
    gpus: 1
    queue_wait_threshold: 0s
    kubernetes: {queue: cloud-small}
  regulated:
    input_size: 1MB
    output_size: 1kB
    image_size: 1MB
    typical_runtime: 4h
    data_may_leave_site: false
    gpu_type: NVIDIA A100-SXM4-80GB
    gpus: 1
    queue_wait_threshold: 0s
    kubernetes: {queue: regulated}
  site-batch:
    input_size: 1TB
    output_size: 1kB
    image_size: 1MB
    typical_runtime: 9h
    data_may_leave_site: false
    gpu_type: NVIDIA A100-SXM4-80GB
    gpus: 1
    queue_wait_threshold: 0s
    kubernetes: {queue: gpu}
"""
TPL = {"node_selector": {"pool": "overflow"}, "outputs": ["output"],
       "upload": {"host": "st.cloud", "ssh_key": "/etc/ovf/key", "root": "/srv/cs", "known_hosts": "/etc/ovf/known_hosts"}}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = K8sWorld(tmp_path_factory.mktemp("k8s"))
    yield w
    w.stop()


@pytest.fixture(autouse=True)
def null_stager(monkeypatch):
    # staging always lands: a job the pass let through would reach the cloud
    monkeypatch.setattr(dispatch_run, "build_stager", lambda opts: NullStager())


def job(name, ns, labels, node_selector=None, tolerations=None):
    return build_job(name, ns, ["python3", "train.py"], gpus=1, gpu_type=A100, labels=labels,
                     node_selector=node_selector, tolerations=tolerations)


def site(world, tmp_path, ns, jobs):
    """A namespace whose queue is full: the site's long job first, then `jobs` ([(name, labels, nodeSelector)])."""
    onprem = world.kube("onprem")
    onprem.ensure_namespace(ns)
    onprem.create_job(ns, job("site-batch", ns, {jobclass.QUEUE_LABEL: "gpu"}))
    time.sleep(1.1)            # creationTimestamp has whole seconds: the site's job is ahead
    for name, labels, selector in jobs:
        onprem.create_job(ns, job(name, ns, labels, selector))
    classes = tmp_path / "classes.yml"
    classes.write_text(CLASS)
    return onprem, {"path": "policy", "tracker_db": str(tmp_path / "t.db"), "job_classes": str(classes),
                    "local_queue": {"kind": "kubernetes", "kubeconfig": world.kubeconfig, "context": "onprem", "namespace": ns},
                    "cloud": {"kubeconfig": world.kubeconfig, "context": "cloud-direct", "namespace": ns + "-c"},
                    "storage": {"host": "127.0.0.1", "ssh_key": "/nonexistent", "onprem_root": str(tmp_path / "r")},
                    "job_template": TPL, "total_gpus": {A100: 1}}


def untouched(onprem, ns, name):
    got = onprem.get_job(ns, name)
    return not got["spec"].get("suspend") and k8s_backend.HOLD_ANNOTATION not in (got["metadata"].get("annotations") or {})


def decision(out, job_id):
    return [d for d in out["decisions"] if d["job_id"] == job_id][0]


def test_a_movable_job_selecting_restricted_data_is_decided_stay(world, tmp_path):
    # the same Job without the restricted selector moves: the rule and the queue say move
    onprem, params = site(world, tmp_path, "trust-a", [
        ("plain", {jobclass.QUEUE_LABEL: "cloud-small"}, None),
        ("vault-read", {jobclass.QUEUE_LABEL: "cloud-small", k8s_backend.CLASS_LABEL: "small-input"}, RESTRICTED)])
    out = dispatch_run.run(dict(params, check_mode=True))
    assert decision(out, "plain")["decision"] == "move"
    got = decision(out, "vault-read")
    assert got["decision"] == "stay" and got["job_class"] == "small-input"
    assert "restricted data" in got["reason"]
    assert "spec.template.spec.nodeSelector[node-restriction.kubernetes.io/data-class]" in got["reason"]


def test_the_policy_pass_leaves_it_in_the_site_and_sends_nothing(world, tmp_path):
    onprem, params = site(world, tmp_path, "trust-b", [
        ("vault-read", {jobclass.QUEUE_LABEL: "cloud-small"}, RESTRICTED)])
    out = dispatch_run.run(params)
    assert decision(out, "vault-read")["decision"] == "stay"
    assert out["results"] == []
    assert untouched(onprem, "trust-b", "vault-read")
    assert world.kube("cloud-direct").list_jobs("trust-b-c") == []


def test_the_operator_path_refuses_it_before_any_hold(world, tmp_path):
    onprem, params = site(world, tmp_path, "trust-c", [
        ("vault-read", {jobclass.QUEUE_LABEL: "cloud-small"}, {"site.example/data-class": "patient-imaging"})])
    out = dispatch_run.run(dict(params, path="operator", jobs=["vault-read"]))
    assert [(r["job_id"], r["outcome"]) for r in out["results"]] == [("vault-read", "refused")]
    assert "spec.template.spec.nodeSelector[site.example/data-class]" in out["results"][0]["reason"]
    assert untouched(onprem, "trust-c", "vault-read")
    assert world.kube("cloud-direct").list_jobs("trust-c-c") == []


def test_the_class_label_a_submitter_sets_is_not_read(world, tmp_path):
    onprem, params = site(world, tmp_path, "trust-d", [
        # labelled movable by its submitter, in no LocalQueue: no class
        ("label-only", {k8s_backend.CLASS_LABEL: "small-input"}, None),
        # labelled movable by its submitter, in the regulated LocalQueue: the regulated class
        ("regulated-1", {k8s_backend.CLASS_LABEL: "small-input", jobclass.QUEUE_LABEL: "regulated"}, None)])
    out = dispatch_run.run(dict(params, check_mode=True))
    assert decision(out, "label-only")["job_class"] is None and decision(out, "label-only")["decision"] == "stay"
    assert decision(out, "regulated-1")["job_class"] == "regulated"
    assert decision(out, "regulated-1")["decision"] == "stay" and "restricted class" in decision(out, "regulated-1")["reason"]
    out = dispatch_run.run(dict(params, path="operator", jobs=["label-only", "regulated-1"]))
    assert sorted((r["job_id"], r["outcome"]) for r in out["results"]) == [("label-only", "refused"), ("regulated-1", "refused")]
    assert untouched(onprem, "trust-d", "label-only") and untouched(onprem, "trust-d", "regulated-1")
    assert world.kube("cloud-direct").list_jobs("trust-d-c") == []


class ListKube(object):
    core = types.SimpleNamespace()

    def __init__(self, jobs):
        self.jobs = jobs

    def list_jobs(self, namespace=None, label_selector=None):
        return copy.deepcopy(self.jobs)

    def list_pods(self, namespace=None, label_selector=None):
        return []

    def list_nodes(self, label_selector=None):
        return []


AFFINITY = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {
    "matchExpressions": [{"key": "site.example/data-class", "operator": "In", "values": ["patient-imaging"]}]}}]}}


@pytest.mark.parametrize("pod,found", [
    ({"nodeSelector": RESTRICTED}, "nodeSelector[node-restriction.kubernetes.io/data-class]"),
    ({"affinity": AFFINITY}, "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference"
                             ".matchExpressions[site.example/data-class]"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "node-restriction.kubernetes.io/pool", "operator": "Exists"}]}]}}}},
     "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[node-restriction.kubernetes.io/pool]"),
    ({"tolerations": [{"key": "site.example/regulated", "operator": "Exists", "effect": "NoSchedule"}]},
     "tolerations[0][site.example/regulated]"),
    ({"tolerations": [{"operator": "Exists"}]}, "tolerations[0] (tolerates every taint)"),
    ({"nodeSelector": {"rack": "r1"}, "tolerations": [{"key": "gpu", "operator": "Exists"}]}, None),
])
def test_each_restricted_placement_is_found_by_the_snapshot(pod, found):
    classes = jobclass.validate(yaml.safe_load(CLASS))
    body = job("j-1", "q", {jobclass.QUEUE_LABEL: "cloud-small"})
    body["metadata"]["creationTimestamp"] = "2024-06-03T09:12:41Z"
    body["spec"]["template"]["spec"].update(pod)
    q = k8s_backend.K8sLocalQueue(ListKube([body]), namespace="q", classes=classes)
    (entry,) = q.snapshot(now=1.8e9, total_gpus={A100: 1}).jobs
    assert entry.job_class == "small-input"
    if found is None:
        assert entry.restricted_placement is None
    else:
        assert "spec.template.spec." + found in entry.restricted_placement
        (d,) = trigger.evaluate(trigger.QueueSnapshot(1.8e9, [entry], {A100: 0}, {A100: 1}), classes)
        assert d["decision"] == "stay" and "restricted data" in d["reason"]


def test_the_kubernetes_match_is_validated():
    base = yaml.safe_load(CLASS)
    bad = copy.deepcopy(base)
    bad["classes"]["small-input"]["kubernetes"] = {"queue": "cloud-small", "label": "x"}
    bad["classes"]["regulated"]["kubernetes"] = {"queue": "gpu"}
    bad["restricted_placement"] = {"labels": "site.example/data-class", "nodes": []}
    with pytest.raises(jobclass.JobClassError) as err:
        jobclass.validate(bad, source="c.yml")
    msg = str(err.value)
    assert "c.yml: classes.small-input.kubernetes: unknown key label" in msg
    assert "classes.site-batch.kubernetes: the same match as class regulated" in msg
    assert "restricted_placement.labels: must be a list" in msg and "restricted_placement.nodes: unknown key" in msg
    classes = jobclass.validate(base)
    assert classes.restricted_placement == {"labels": ["site.example/data-class"], "taints": ["site.example/regulated"]}
    assert jobclass.kubernetes_class(classes, "any", "cloud-small") == "small-input"
    assert jobclass.kubernetes_class(classes, "any", None) is None
