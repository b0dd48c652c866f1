"""dryRun=All through the official client: validated and answered like the real write, and
nothing changes (no object, no resourceVersion bump, no controller side effects)."""
import json
import time

import pytest
from kubernetes import client


def _missing(read):
    try:
        read()
    except client.ApiException as err:
        return err.status == 404
    return False


def test_dry_run_create_answers_the_object_and_stores_nothing(api):
    dummy, h = api
    name = h.uniq("dry")
    node = h.core.create_node({"metadata": {"name": name}}, dry_run="All")
    assert node.metadata.name == name and node.metadata.uid
    assert _missing(lambda: h.core.read_node(name))
    pod = h.core.create_namespaced_pod(h.ns, h.pod_body(name, "nowhere"), dry_run="All")
    assert pod.spec.scheduler_name == "default-scheduler"  # defaulted, as the real write
    assert pod.spec.dns_policy == "ClusterFirst"
    assert pod.status.phase == "Pending"
    assert _missing(lambda: h.core.read_namespaced_pod(name, h.ns))
    h.make_node(name, pool=h.uniq("pool"), heartbeat=False)
    with pytest.raises(client.ApiException) as exc:  # a conflict answers as the real write
        h.core.create_node({"metadata": {"name": name}}, dry_run="All")
    assert exc.value.status == 409 and "AlreadyExists" in exc.value.body


def test_dry_run_patch_update_delete_change_nothing(api):
    dummy, h = api
    name = h.uniq("drymod")
    h.make_node(name, pool=h.uniq("pool"), heartbeat=False)
    before = h.core.read_node(name)
    patched = h.core.patch_node(name, {"metadata": {"labels": {"dry": "yes"}}}, dry_run="All")
    assert patched.metadata.labels["dry"] == "yes"
    before.metadata.labels["dry"] = "replaced"
    replaced = h.core.replace_node(name, before, dry_run="All")
    assert replaced.metadata.labels["dry"] == "replaced"
    h.core.delete_node(name, dry_run="All")
    after = h.core.read_node(name)
    assert "dry" not in (after.metadata.labels or {})
    assert after.metadata.resource_version == before.metadata.resource_version


def test_dry_run_job_creates_no_pods(api):
    dummy, h = api
    name = h.uniq("dryjob")
    job = h.batch.create_namespaced_job(h.ns, {
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "busybox", "command": ["true"]}]}}}}, dry_run="All")
    assert job.spec.completions == 1 and job.spec.backoff_limit == 6
    time.sleep(1.0)
    assert _missing(lambda: h.batch.read_namespaced_job(name, h.ns))
    pods = h.core.list_namespaced_pod(h.ns, label_selector="job-name=%s" % name)
    assert pods.items == []


def test_dry_run_eviction_keeps_the_pod_and_checks_the_budget(api):
    dummy, h = api
    pool = h.uniq("pool")
    h.make_node(h.uniq("drypdb"), pool, gpus=8)
    app = h.uniq("app")
    name = h.uniq("drypod")
    h.core.create_namespaced_pod(h.ns, h.pod_body(name, pool, hold=True, labels={"app": app}))
    h.wait(lambda: h.core.read_namespaced_pod(name, h.ns).status.phase == "Running",
           what="pod Running")
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": name, "namespace": h.ns}}
    h.core.create_namespaced_pod_eviction(name, h.ns, eviction, dry_run="All")
    h.core.create_namespaced_pod_eviction(name, h.ns, dict(
        eviction, deleteOptions={"dryRun": ["All"]}))
    h.core.delete_namespaced_pod(name, h.ns, dry_run="All")
    time.sleep(0.5)
    assert h.core.read_namespaced_pod(name, h.ns).status.phase == "Running"
    pdb = h.uniq("drypdb")
    h.policy.create_namespaced_pod_disruption_budget(h.ns, {
        "metadata": {"name": pdb},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}}})
    h.wait(lambda: h.policy.read_namespaced_pod_disruption_budget_status(
        pdb, h.ns).status.current_healthy == 1, what="PDB status observed")
    with pytest.raises(client.ApiException) as exc:
        h.core.create_namespaced_pod_eviction(name, h.ns, eviction, dry_run="All")
    assert exc.value.status == 429 and "disruption budget" in exc.value.body
    assert h.core.read_namespaced_pod(name, h.ns).status.phase == "Running"


def test_unknown_dry_run_value_is_invalid(api):
    dummy, h = api
    name = h.uniq("drybad")
    with pytest.raises(client.ApiException) as exc:
        h.core.create_node({"metadata": {"name": name}}, dry_run="Bogus")
    # kube-apiserver validates CreateOptions: 422 Invalid naming the dryRun field
    assert exc.value.status == 422
    body = json.loads(exc.value.body)
    assert body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "dryRun"
    assert _missing(lambda: h.core.read_node(name))
