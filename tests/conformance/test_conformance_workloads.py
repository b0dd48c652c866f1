"""Controllers through the official client: scheduler, Jobs, eviction/PDB, node lifecycle.

The test process acts as the kubelet (conftest.FakeKubelet): it heartbeats its test Nodes and
moves pods bound to them to Running and then Succeeded."""
import time

import pytest
from kubernetes import client

from conftest import HOLD_LABEL


def _cond(obj, ctype):
    for c in (obj.status.conditions or []):
        if c.type == ctype:
            return c
    return None


def _job_body(name, pool_expr_values, parallelism=1, completions=1, suspend=False, hold=False):
    labels = {HOLD_LABEL: "true"} if hold else {}
    return {"metadata": {"name": name},
            "spec": {"parallelism": parallelism, "completions": completions, "suspend": suspend,
                     "backoffLimit": 2,
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "restartPolicy": "Never",
                         "containers": [{"name": "main", "image": "busybox",
                                         "command": ["nvidia-smi"]}],
                         "affinity": {"nodeAffinity": {
                             "requiredDuringSchedulingIgnoredDuringExecution": {
                                 "nodeSelectorTerms": [{"matchExpressions": [
                                     {"key": "conformance.hybridgpu.io/pool",
                                      "operator": "In", "values": pool_expr_values},
                                     {"key": "gpu", "operator": "In",
                                      "values": ["a100"]}]}]}}}}}}}


def test_job_with_required_affinity_lands_on_matching_nodes_and_completes(api):
    dummy, h = api
    pool = h.uniq("pool")
    good1, good2, bad = h.uniq("aff-a"), h.uniq("aff-b"), h.uniq("aff-c")
    h.make_node(good1, pool, labels={"gpu": "a100"}, gpus=8)
    h.make_node(good2, pool, labels={"gpu": "a100"}, gpus=8)
    h.make_node(bad, pool, labels={"gpu": "l40s"}, gpus=8)
    name = h.uniq("job")
    h.batch.create_namespaced_job(h.ns, _job_body(name, [pool], parallelism=2, completions=4))

    def complete():
        job = h.batch.read_namespaced_job_status(name, h.ns)
        c = _cond(job, "Complete")
        return job if c and c.status == "True" else None

    job = h.wait(complete, timeout=20, what="Job Complete")
    assert job.status.succeeded == 4
    assert job.status.completion_time is not None
    pods = h.core.list_namespaced_pod(h.ns, label_selector="batch.kubernetes.io/job-name=%s"
                                      % name).items
    assert len(pods) == 4
    assert {p.spec.node_name for p in pods} <= {good1, good2}
    for p in pods:
        assert p.metadata.labels["job-name"] == name
        assert p.metadata.owner_references[0].kind == "Job"
        assert p.metadata.name.startswith(name + "-") and len(p.metadata.name) == len(name) + 6
        assert p.status.phase == "Succeeded"
    h.batch.delete_namespaced_job(name, h.ns, propagation_policy="Background")
    h.wait(lambda: not h.core.list_namespaced_pod(
        h.ns, label_selector="job-name=%s" % name).items, what="job pods deleted")


def test_job_suspend_holds_and_resume_runs(api):
    dummy, h = api
    pool = h.uniq("pool")
    h.make_node(h.uniq("sus"), pool, labels={"gpu": "a100"}, gpus=8)
    name = h.uniq("sjob")
    h.batch.create_namespaced_job(h.ns, _job_body(name, [pool], hold=True))
    sel = "job-name=%s" % name
    h.wait(lambda: [p for p in h.core.list_namespaced_pod(h.ns, label_selector=sel).items
                    if p.status.phase == "Running"], what="job pod Running")
    h.batch.patch_namespaced_job(name, h.ns, {"spec": {"suspend": True}})
    h.wait(lambda: not h.core.list_namespaced_pod(h.ns, label_selector=sel).items,
           what="suspended job pods deleted")

    def suspended():
        c = _cond(h.batch.read_namespaced_job_status(name, h.ns), "Suspended")
        return c is not None and c.status == "True"

    h.wait(suspended, what="Suspended=True")
    time.sleep(0.5)
    assert not h.core.list_namespaced_pod(h.ns, label_selector=sel).items
    h.batch.patch_namespaced_job(name, h.ns, {"spec": {"suspend": False}})
    h.wait(lambda: h.core.list_namespaced_pod(h.ns, label_selector=sel).items,
           what="pods again after resume")
    h.batch.delete_namespaced_job(name, h.ns, propagation_policy="Foreground")


def _unschedulable_message(h, name):
    def check():
        pod = h.core.read_namespaced_pod(name, h.ns)
        c = _cond(pod, "PodScheduled")
        if c and c.status == "False" and c.reason == "Unschedulable":
            return pod, c
        return None
    return h.wait(check, what="PodScheduled=False on %s" % name)


def test_taint_without_toleration_keeps_pod_pending(api):
    dummy, h = api
    pool = h.uniq("pool")
    node = h.uniq("taint")
    h.make_node(node, pool, gpus=8, taints=[{"key": "hybridgpu.io/maintenance",
                                             "value": "true", "effect": "NoSchedule"}])
    name = h.uniq("untol")
    h.core.create_namespaced_pod(h.ns, h.pod_body(name, pool, hold=True))
    pod, cond = _unschedulable_message(h, name)
    assert pod.status.phase == "Pending" and not pod.spec.node_name
    assert "taint" in cond.message
    tolerated = h.uniq("tol")
    h.core.create_namespaced_pod(h.ns, h.pod_body(tolerated, pool, hold=True, tolerations=[
        {"key": "hybridgpu.io/maintenance", "operator": "Exists", "effect": "NoSchedule"}]))
    h.wait(lambda: h.core.read_namespaced_pod(tolerated, h.ns).spec.node_name == node,
           what="tolerating pod bound")


def test_gpu_capacity_is_respected(api):
    dummy, h = api
    pool = h.uniq("pool")
    node = h.uniq("cap")
    h.make_node(node, pool, gpus=4)
    first, second = h.uniq("gpu3"), h.uniq("gpu2")
    h.core.create_namespaced_pod(h.ns, h.pod_body(first, pool, gpus=3, hold=True))
    h.wait(lambda: h.core.read_namespaced_pod(first, h.ns).spec.node_name == node,
           what="first GPU pod bound")
    h.core.create_namespaced_pod(h.ns, h.pod_body(second, pool, gpus=2, hold=True))
    dummy, cond = _unschedulable_message(h, second)
    assert "Insufficient nvidia.com/gpu" in cond.message
    h.core.delete_namespaced_pod(first, h.ns)
    h.wait(lambda: h.core.read_namespaced_pod(second, h.ns).spec.node_name == node,
           what="second GPU pod bound after capacity freed")


def test_eviction_respects_pod_disruption_budget(api):
    dummy, h = api
    pool = h.uniq("pool")
    h.make_node(h.uniq("pdb"), pool, gpus=8)
    app = h.uniq("app")
    names = [h.uniq("pdbpod") for dummy in range(2)]
    for n in names:
        h.core.create_namespaced_pod(h.ns, h.pod_body(n, pool, hold=True, labels={"app": app}))
    h.wait(lambda: all(h.core.read_namespaced_pod(n, h.ns).status.phase == "Running"
                       for n in names), what="pods Running")
    pdb = h.uniq("pdb")
    h.policy.create_namespaced_pod_disruption_budget(h.ns, {
        "metadata": {"name": pdb},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": app}}}})
    h.wait(lambda: h.policy.read_namespaced_pod_disruption_budget_status(
        pdb, h.ns).status.current_healthy == 2, what="PDB status observed")
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": names[0], "namespace": h.ns}}
    with pytest.raises(client.ApiException) as exc:
        h.core.create_namespaced_pod_eviction(names[0], h.ns, eviction)
    assert exc.value.status == 429
    assert "disruption budget" in exc.value.body
    assert h.core.read_namespaced_pod(names[0], h.ns).status.phase == "Running"
    h.policy.patch_namespaced_pod_disruption_budget(pdb, h.ns, {"spec": {"minAvailable": 1}})
    h.wait(lambda: h.policy.read_namespaced_pod_disruption_budget_status(
        pdb, h.ns).status.disruptions_allowed == 1, what="PDB allows one disruption")
    h.core.create_namespaced_pod_eviction(names[0], h.ns, eviction)

    def gone():
        try:
            h.core.read_namespaced_pod(names[0], h.ns)
        except client.ApiException as err:
            return err.status == 404
        return False

    h.wait(gone, what="evicted pod gone")
    with pytest.raises(client.ApiException) as exc:  # the budget is spent now
        h.core.create_namespaced_pod_eviction(names[1], h.ns, dict(
            eviction, metadata={"name": names[1], "namespace": h.ns}))
    assert exc.value.status == 429


def test_node_goes_unknown_after_grace_and_recovers(api):
    dummy, h = api
    pool = h.uniq("pool")
    node = h.uniq("hb")
    h.make_node(node, pool, gpus=8)
    h.kubelet.paused.add(node)  # heartbeats stop

    def ready_status():
        return _cond(h.core.read_node_status(node), "Ready").status

    h.wait(lambda: ready_status() == "Unknown", timeout=h.node_grace + 15,
           what="Ready=Unknown after %ss without heartbeat" % h.node_grace)
    n = h.core.read_node(node)
    assert _cond(n, "Ready").reason == "NodeStatusUnknown"
    # an unready node gets no new pods
    name = h.uniq("nr")
    h.core.create_namespaced_pod(h.ns, h.pod_body(name, pool, hold=True))
    _unschedulable_message(h, name)
    h.kubelet.paused.discard(node)  # heartbeats resume
    h.wait(lambda: ready_status() == "True", what="Ready=True again")
    h.wait(lambda: h.core.read_namespaced_pod(name, h.ns).spec.node_name == node,
           what="pod bound once the node is back", timeout=10)
