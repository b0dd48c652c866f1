"""Object lifecycles as a control plane runs them: graceful pod deletion, finalizers, deletion
propagation, node health from Leases, PodDisruptionBudget status, DaemonSets, and the
collection's drain and overflow code against Terminating pods."""
import datetime
import time

import pytest
from kubernetes import client

from conftest import HOLD_LABEL, HOLD_TERMINATION_LABEL, emulator_only

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import Kube
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle.drain import Drainer, classify
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends, k8s_backend
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.protocol import cloud_job_name, job_labels

HOLD = {HOLD_TERMINATION_LABEL: "true"}


def _gone(fn, *args):
    try:
        fn(*args)
    except client.ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def _release(h, pod_name):
    """Let the (fake) kubelet stop the pod's containers and confirm its deletion."""
    h.core.patch_namespaced_pod(pod_name, h.ns, {"metadata": {"labels": {HOLD_TERMINATION_LABEL: None}}})


def _running_pod(h, pool, prefix, labels=None, **spec):
    name = h.uniq(prefix)
    h.core.create_namespaced_pod(h.ns, h.pod_body(name, pool, hold=True, labels=labels, **spec))
    h.wait(lambda: h.core.read_namespaced_pod(name, h.ns).status.phase == "Running", what="%s Running" % name)
    return name


def _job(h, pool, prefix, parallelism=1):
    name = h.uniq(prefix)
    template = h.pod_body("unused", pool, hold=True, labels=HOLD)
    h.batch.create_namespaced_job(h.ns, {"metadata": {"name": name}, "spec": {
        "parallelism": parallelism, "completions": parallelism, "backoffLimit": 0,
        "template": {"metadata": {"labels": template["metadata"]["labels"]}, "spec": template["spec"]}}})
    sel = "job-name=%s" % name
    h.wait(lambda: len([p for p in h.core.list_namespaced_pod(h.ns, label_selector=sel).items
                        if p.status.phase == "Running"]) == parallelism, what="%s pods Running" % name)
    return name, sel


def _pods(h, sel):
    return h.core.list_namespaced_pod(h.ns, label_selector=sel).items


def test_bound_pod_stays_terminating_until_its_kubelet_confirms(api):
    dummy, h = api
    pool = h.uniq("grace")
    h.make_node(h.uniq("n-grace"), pool)
    name = _running_pod(h, pool, "term", labels=HOLD, terminationGracePeriodSeconds=45)
    deleted = h.core.delete_namespaced_pod(name, h.ns)
    assert deleted.metadata.deletion_timestamp is not None
    assert deleted.metadata.deletion_grace_period_seconds == 45
    pod = h.core.read_namespaced_pod(name, h.ns)
    assert pod.metadata.deletion_timestamp is not None and pod.status.phase == "Running"
    # A second delete may only shorten the grace.
    again = h.core.delete_namespaced_pod(name, h.ns, grace_period_seconds=10)
    assert again.metadata.deletion_grace_period_seconds == 10
    assert h.core.delete_namespaced_pod(name, h.ns, grace_period_seconds=20).metadata.deletion_grace_period_seconds == 10
    _release(h, name)
    h.wait(lambda: _gone(h.core.read_namespaced_pod, name, h.ns), what="pod gone after the kubelet confirmed")
    # An unbound pod goes at once.
    pending = h.uniq("unbound")
    h.core.create_namespaced_pod(h.ns, h.pod_body(pending, h.uniq("no-such-pool")))
    h.core.delete_namespaced_pod(pending, h.ns)
    assert _gone(h.core.read_namespaced_pod, pending, h.ns)


def test_finalizer_holds_an_object_until_the_last_one_is_removed(api):
    dummy, h = api
    name = h.uniq("fin")
    h.core.create_namespaced_config_map(h.ns, {"metadata": {"name": name, "finalizers": ["hybridgpu.io/test"]}})
    h.core.delete_namespaced_config_map(name, h.ns)
    held = h.core.read_namespaced_config_map(name, h.ns)
    assert held.metadata.deletion_timestamp is not None and held.metadata.finalizers == ["hybridgpu.io/test"]
    with pytest.raises(client.ApiException) as exc:
        h.core.patch_namespaced_config_map(name, h.ns, {"metadata": {"finalizers": ["hybridgpu.io/test", "x.io/new"]}},
                                           _content_type="application/merge-patch+json")
    assert exc.value.status == 422 and "no new finalizers can be added" in exc.value.body
    h.core.patch_namespaced_config_map(name, h.ns, {"metadata": {"finalizers": None}},
                                       _content_type="application/merge-patch+json")
    assert _gone(h.core.read_namespaced_config_map, name, h.ns)


def test_job_deletion_honours_propagation_policy(api):
    dummy, h = api
    pool = h.uniq("prop")
    h.make_node(h.uniq("n-prop"), pool, gpus=0)
    # Orphan: the Job goes, its pods stay without the owner reference.
    name, sel = _job(h, pool, "orphan")
    h.batch.delete_namespaced_job(name, h.ns, propagation_policy="Orphan")
    h.wait(lambda: _gone(h.batch.read_namespaced_job, name, h.ns), what="orphaning Job gone")
    pods = _pods(h, sel)
    assert len(pods) == 1 and not pods[0].metadata.owner_references and not pods[0].metadata.deletion_timestamp
    h.core.delete_namespaced_pod(pods[0].metadata.name, h.ns, grace_period_seconds=0)
    # Foreground: the Job stays (foregroundDeletion) until its pods are gone.
    name, sel = _job(h, pool, "fg")
    h.batch.delete_namespaced_job(name, h.ns, propagation_policy="Foreground")
    job = h.batch.read_namespaced_job(name, h.ns)
    assert job.metadata.deletion_timestamp is not None and "foregroundDeletion" in job.metadata.finalizers
    h.wait(lambda: all(p.metadata.deletion_timestamp for p in _pods(h, sel)), what="dependents Terminating")
    assert not _gone(h.batch.read_namespaced_job, name, h.ns)
    for p in _pods(h, sel):
        _release(h, p.metadata.name)
    h.wait(lambda: _gone(h.batch.read_namespaced_job, name, h.ns) and not _pods(h, sel), what="Job gone after its pods")
    # Background: the Job goes now, its pods are collected after it.
    name, sel = _job(h, pool, "bg")
    h.batch.delete_namespaced_job(name, h.ns, propagation_policy="Background")
    h.wait(lambda: _gone(h.batch.read_namespaced_job, name, h.ns), what="Job gone")
    h.wait(lambda: all(p.metadata.deletion_timestamp for p in _pods(h, sel)), what="pods collected (Terminating)")
    for p in _pods(h, sel):
        _release(h, p.metadata.name)
    h.wait(lambda: not _pods(h, sel), what="collected pods gone")


def _micro(offset):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=offset)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_node_health_follows_lease_renewals_on_the_server_clock(api):
    """A kubelet whose clock is an hour behind renews its Lease: the node stays Ready as long as
    the renewals keep coming, goes Unknown and tainted when they stop, and is untainted when it
    posts Ready again."""
    dummy, h = api
    coord = client.CoordinationV1Api(h.api)
    name = h.uniq("n-lease")
    h.make_node(name, h.uniq("lease"), heartbeat=False)
    lease = coord.create_namespaced_lease("kube-node-lease", {"metadata": {"name": name}, "spec": {
        "holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": _micro(-3600)}})
    try:
        end = time.monotonic() + 2.5 * h.node_grace
        while time.monotonic() < end:
            time.sleep(min(1.0, h.node_grace / 4))
            lease.spec.renew_time = _micro(-3600)
            lease = coord.replace_namespaced_lease(name, "kube-node-lease", lease)
            ready = next(c for c in h.core.read_node(name).status.conditions if c.type == "Ready")
            assert ready.status == "True", "node went %s while its Lease was renewed" % ready.status
        h.wait(lambda: next(c for c in h.core.read_node(name).status.conditions if c.type == "Ready").status == "Unknown",
               timeout=3 * h.node_grace + 10, what="Ready Unknown after the renewals stopped")
        node = h.core.read_node(name)
        ready = next(c for c in node.status.conditions if c.type == "Ready")
        assert (ready.reason, ready.message) == ("NodeStatusUnknown", "Kubelet stopped posting node status.")
        assert {(t.key, t.effect) for t in node.spec.taints or []} >= {
            ("node.kubernetes.io/unreachable", "NoSchedule"), ("node.kubernetes.io/unreachable", "NoExecute")}
        h.kubelet.add(name)
        h.wait(lambda: not [t for t in h.core.read_node(name).spec.taints or []
                            if t.key == "node.kubernetes.io/unreachable"],
               timeout=3 * h.node_grace + 10, what="unreachable taints removed once Ready again")
    finally:
        coord.delete_namespaced_lease(name, "kube-node-lease")


def test_pdb_status_counts_only_ready_pods(api):
    dummy, h = api
    pool = h.uniq("pdbr")
    h.make_node(h.uniq("n-pdbr"), pool)
    app = {"app": h.uniq("ready")}
    names = [_running_pod(h, pool, "r", labels=app) for dummy in range(3)]
    # The third pod runs but reports no Ready condition: not healthy.
    h.core.patch_namespaced_pod_status(names[2], h.ns, [{"op": "remove", "path": "/status/conditions"}])
    pdb = h.uniq("pdb")
    h.policy.create_namespaced_pod_disruption_budget(h.ns, {"metadata": {"name": pdb}, "spec": {
        "minAvailable": 1, "selector": {"matchLabels": app}}})

    def status():
        st = h.policy.read_namespaced_pod_disruption_budget(pdb, h.ns).status
        return st if st and st.observed_generation == 1 and st.expected_pods == 3 else None

    st = h.wait(status, what="PDB status observed")
    assert (st.current_healthy, st.desired_healthy, st.disruptions_allowed) == (2, 1, 1)
    for n in names:
        h.core.delete_namespaced_pod(n, h.ns, grace_period_seconds=0)


def test_eviction_before_the_budget_is_processed_is_429(api):
    """The disruption controller trails a PDB change; until its status catches up (observedGeneration
    behind generation) evictions are refused. A real cluster's controller is too quick to catch in
    between, so this is asked of the emulator only."""
    dummy, h = api
    emulator_only(h, "the disruption controller updates the status before a client can evict")
    pool = h.uniq("lag")
    h.make_node(h.uniq("n-lag"), pool)
    app = {"app": h.uniq("lag")}
    names = [_running_pod(h, pool, "l", labels=app) for dummy in range(2)]
    pdb = h.uniq("pdb")
    h.policy.create_namespaced_pod_disruption_budget(h.ns, {"metadata": {"name": pdb}, "spec": {
        "maxUnavailable": 1, "selector": {"matchLabels": app}}})
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": names[0], "namespace": h.ns}}
    with pytest.raises(client.ApiException) as exc:
        h.core.create_namespaced_pod_eviction(names[0], h.ns, body)
    assert exc.value.status == 429 and "is still being processed by the server" in exc.value.body
    h.wait(lambda: (h.policy.read_namespaced_pod_disruption_budget(pdb, h.ns).status.observed_generation or 0) == 1,
           what="PDB processed")
    h.core.create_namespaced_pod_eviction(names[0], h.ns, body)
    for n in names:
        h.core.delete_namespaced_pod(n, h.ns, grace_period_seconds=0)


def test_daemonset_runs_one_pod_per_matching_node_and_drain_skips_it(api):
    api_client, h = api
    apps = client.AppsV1Api(api_client)
    pool = h.uniq("ds")
    nodes = [h.uniq("n-ds"), h.uniq("n-ds")]
    for n in nodes:
        h.make_node(n, pool)
    h.make_node(h.uniq("n-other"), h.uniq("other"))
    name = h.uniq("agent")
    labels = {"app": name}
    template = h.pod_body("unused", pool, hold=True, labels=labels)
    template["spec"]["restartPolicy"] = "Always"
    apps.create_namespaced_daemon_set(h.ns, {"metadata": {"name": name}, "spec": {
        "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": template["metadata"]["labels"]}, "spec": template["spec"]}}})
    sel = "app=%s" % name
    pods = h.wait(lambda: [p for p in _pods(h, sel) if p.status.phase == "Running"]
                  if len([p for p in _pods(h, sel) if p.status.phase == "Running"]) == 2 else None,
                  what="one daemon pod Running per node")
    assert sorted(p.spec.node_name for p in pods) == sorted(nodes)
    for p in pods:
        ref = p.metadata.owner_references[0]
        assert (ref.kind, ref.name, ref.controller) == ("DaemonSet", name, True)
    h.wait(lambda: (apps.read_namespaced_daemon_set(name, h.ns).status.number_ready or 0) == 2, what="DaemonSet status")
    st = apps.read_namespaced_daemon_set(name, h.ns).status
    assert (st.desired_number_scheduled, st.current_number_scheduled, st.number_misscheduled) == (2, 2, 0)
    evict, skipped, blockers = classify([api_client.sanitize_for_serialization(pods[0])])
    assert not evict and not blockers and skipped[0]["reason"] == "DaemonSet pod (DaemonSet %s)" % name
    apps.delete_namespaced_daemon_set(name, h.ns)
    h.wait(lambda: not _pods(h, sel), what="daemon pods collected with their DaemonSet")


def test_drain_waits_for_evicted_pods_to_terminate(api):
    """An evicted pod whose containers do not stop stays on the node (Terminating): the drain
    reports it at its deadline; once the kubelet confirms, the drain completes."""
    api_client, h = api
    pool = h.uniq("drain")
    node = h.uniq("n-drain")
    h.make_node(node, pool)
    old = _running_pod(h, pool, "drained", labels=HOLD)
    kube = Kube(api_client=api_client, backoff=0.01)
    res = Drainer(kube, node, timeout=4, retry_interval=0.2, allow_unmanaged=True).drain()
    assert res["failed"] and [b["name"] for b in res["blockers"]] == [old], res
    assert res["blockers"][0]["reason"] == "evicted but still on the node at the deadline"
    assert h.core.read_namespaced_pod(old, h.ns).metadata.deletion_timestamp is not None
    _release(h, old)
    res = Drainer(kube, node, timeout=20, retry_interval=0.2, allow_unmanaged=True).drain()
    assert not res["failed"], res
    assert _gone(h.core.read_namespaced_pod, old, h.ns)
    h.core.patch_node(node, {"spec": {"unschedulable": False}})


def test_overflow_reads_the_newest_pod_while_an_older_one_terminates(api):
    """The cloud Job's first pod is cut off on a node that stopped reporting and is being deleted;
    the Job's replacement pod runs elsewhere. The Job is running, not lost."""
    api_client, h = api
    pool = h.uniq("ovf")
    first, second = h.uniq("n-ovf"), h.uniq("n-ovf")
    h.make_node(first, pool)
    cloud = k8s_backend.K8sCloudCluster(Kube(api_client=api_client, backoff=0.01), namespace=h.ns)
    labels = dict(job_labels("job-T", "att-1", "p")["labels"], **HOLD)
    labels[HOLD_LABEL] = "true"
    spec = {"command": ["sleep", "600"], "labels": labels,
            "node_selector": h.pod_body("x", pool)["spec"]["nodeSelector"]}
    cloud.submit(cloud_job_name("job-T"), "job-T", "att-1", spec)
    sel = "job-name=%s" % cloud_job_name("job-T")
    h.wait(lambda: [p for p in _pods(h, sel) if p.status.phase == "Running"], what="first pod Running")
    old = _pods(h, sel)[0].metadata.name
    h.kubelet.paused.add(first)  # the node stops reporting
    h.make_node(second, pool)
    h.wait(lambda: next(c for c in h.core.read_node(first).status.conditions if c.type == "Ready").status != "True",
           timeout=3 * h.node_grace + 10, what="first node not Ready")
    h.core.delete_namespaced_pod(old, h.ns, grace_period_seconds=600)
    h.wait(lambda: [p for p in _pods(h, sel) if p.metadata.name != old and p.status.phase == "Running"],
           what="replacement pod Running on the second node")
    assert h.core.read_namespaced_pod(old, h.ns).metadata.deletion_timestamp is not None
    found = cloud.find_by_job_id("job-T")
    assert found.phase == backends.RUNNING, found.as_dict()
    h.kubelet.paused.discard(first)
    h.batch.delete_namespaced_job(cloud_job_name("job-T"), h.ns, propagation_policy="Background")
    for p in _pods(h, sel):
        h.core.delete_namespaced_pod(p.metadata.name, h.ns, grace_period_seconds=0)
