"""Kubernetes overflow backends against two real emulators (official client, HTTPS) on loopback."""
import os
import time

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import jobclass, k8s_backend
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.protocol import (
    Dispatcher, J_BACK_LOCAL, J_CLOUD, J_HELD_UNKNOWN, cloud_job_name, job_labels)
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.tracker import Tracker

from k8s_world import K8sWorld, register_node

A100 = "NVIDIA A100-SXM4-80GB"
POOL = {"hybridgpu.io/overflow-lab-pool": "local"}
TOL = [{"key": "hybridgpu.io/overflow-lab", "operator": "Exists", "effect": "NoSchedule"}]
CLASSES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lab", "overflow", "job_classes.yml")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = K8sWorld(tmp_path_factory.mktemp("k8s"))
    yield w
    w.stop()


@pytest.fixture
def local(world, request):
    q = k8s_backend.K8sLocalQueue(world.kube("onprem"), namespace="lq-%d" % (abs(hash(request.node.name)) % 10 ** 8),
                                  node_selector=POOL, tolerations=TOL, classes=jobclass.load(CLASSES))
    q.ensure_namespace()
    return q


@pytest.fixture
def cloud(world, request):
    world.proxy.set_mode("pass")
    c = k8s_backend.K8sCloudCluster(world.kube("cloud"), namespace="c-%d" % (abs(hash(request.node.name)) % 10 ** 8))
    c.ensure_namespace()
    yield c
    world.proxy.set_mode("pass")


def spec(job_id, attempt="att-1"):
    s = {"command": ["python3", "-c", "print(1)"], "gpus": 1}
    s.update(job_labels(job_id, attempt, "operator"))
    return s


def test_hold_release_withdraw_keep_the_job_id(local):
    local.enqueue("train-1", "small-input", ["true"], gpus=1, gpu_type=A100)
    assert local.state("train-1") == backends.Q_QUEUED
    assert local.hold("train-1") == backends.HELD
    job = local.kube.get_job(local.ns, "train-1")
    assert job["spec"]["suspend"] is True and k8s_backend.HOLD_ANNOTATION in job["metadata"]["annotations"]
    assert local.state("train-1") == backends.Q_HELD
    assert local.hold("train-1") == backends.HELD          # idempotent
    assert local.release("train-1") is True
    assert local.state("train-1") == backends.Q_QUEUED
    assert local.kube.get_job(local.ns, "train-1")["spec"]["suspend"] is False
    assert local.hold("train-1") == backends.HELD
    assert local.withdraw("train-1") is True
    assert local.state("train-1") == backends.Q_WITHDRAWN
    assert local.hold("train-1") == backends.GONE
    assert local.hold("no-such-job") == backends.GONE and local.state("no-such-job") == backends.Q_GONE


def test_started_locally_when_gpus_free_up_is_not_held(world, local):
    local.enqueue("eval-1", "small-input", ["true"], gpus=1, gpu_type=A100)
    node = "ovf-local-%s" % local.ns
    labels = dict(POOL, **{k8s_backend.GPU_PRODUCT: k8s_backend.product_label(A100)})
    register_node(local.kube, node, labels,
                  taints=[{"key": "hybridgpu.io/overflow-lab", "value": "local", "effect": "NoSchedule"}])
    try:
        deadline = time.time() + 10
        while time.time() < deadline and local.state("eval-1") != backends.Q_RUNNING:
            time.sleep(0.1)
        assert local.state("eval-1") == backends.Q_RUNNING
        assert local.hold("eval-1") == backends.ALREADY_STARTED
        assert local.kube.get_job(local.ns, "eval-1")["spec"]["suspend"] is False
        snap = local.snapshot()
        assert snap.total_gpus == {A100: 8}
        assert [(j.job_id, j.state, j.gpus, j.gpu_type) for j in snap.jobs] == [("eval-1", "running", 1, A100)]
    finally:
        local.kube.delete_node(node)


def test_snapshot_feeds_the_trigger(local):
    local.enqueue("q-1", "small-input", ["true"], gpus=2, gpu_type=A100, deadline=2_000_000_000)
    snap = local.snapshot(now=time.time() + 3600)
    (j,) = snap.jobs
    assert (j.job_id, j.job_class, j.state, j.gpus, j.deadline) == ("q-1", "small-input", "pending", 2, 2e9)
    assert 3500 < snap.now - j.submit_time < 3700


def test_submit_adopt_find_stop(cloud):
    name = cloud_job_name("job-A")
    res = cloud.submit(name, "job-A", "att-1", spec("job-A"))
    assert res.outcome == backends.CREATED and res.job.attempt_id == "att-1"
    again = cloud.submit(name, "job-A", "att-2", spec("job-A", "att-2"))
    assert again.outcome == backends.ALREADY_EXISTS and again.job.attempt_id == "att-1"
    found = cloud.find_by_job_id("job-A")
    assert (found.name, found.job_id, found.phase) == (name, "job-A", backends.PENDING)
    assert len(cloud.kube.list_jobs(cloud.ns)) == 1
    assert cloud.stop("job-A") == "returned_to_pool"
    assert cloud.find_by_job_id("job-A") is None
    assert cloud.stop("job-A") == "returned_to_pool"    # idempotent


def test_quota_rejection(cloud):
    cloud.kube.call("create quota", cloud.kube.core.create_namespaced_resource_quota, cloud.ns, {
        "metadata": {"name": "gpu-pool"}, "spec": {"hard": {"count/jobs.batch": "0"}}})
    res = cloud.submit(cloud_job_name("job-Q"), "job-Q", "att-1", spec("job-Q"))
    assert res.outcome == backends.REJECTED and "exceeded quota: gpu-pool" in res.reason


def test_dropped_response_took_effect_and_link_down_did_not(world, cloud):
    world.proxy.set_mode("drop", 1)
    with pytest.raises(backends.LostResponse):
        cloud.submit(cloud_job_name("job-L"), "job-L", "att-1", spec("job-L"))
    assert cloud.find_by_job_id("job-L").attempt_id == "att-1"     # it was created
    world.proxy.set_mode("down")
    with pytest.raises(backends.LinkDown):
        cloud.submit(cloud_job_name("job-D"), "job-D", "att-1", spec("job-D"))
    with pytest.raises(backends.LinkDown):
        cloud.find_by_job_id("job-D")
    with pytest.raises(backends.LinkDown):
        cloud.stop("job-D")
    world.proxy.set_mode("pass")
    assert cloud.find_by_job_id("job-D") is None


def test_dispatcher_over_k8s_lost_response_then_return_to_local(world, local, cloud, tmp_path):
    storage = backends.MemoryStorage()
    tr = Tracker(str(tmp_path / "t.db"))
    d = Dispatcher(local, cloud, backends.MemoryStager(storage), tr, "operator", actor="test")
    local.enqueue("ft-1", "small-input", ["true"], gpus=1, gpu_type=A100)
    world.proxy.set_mode("drop", 1)
    out = d.dispatch("ft-1", "small-input", spec={"command": ["true"], "gpus": 1},
                     inputs=[{"name": "x", "size": 10}])
    assert out["outcome"] == "adopted" and tr.job("ft-1")["state"] == J_CLOUD
    assert local.state("ft-1") == backends.Q_HELD
    world.proxy.set_mode("down")
    out = d.return_to_local("ft-1", "operator")
    assert out["outcome"] == "held" and local.state("ft-1") == backends.Q_HELD     # cannot stop: stays held
    world.proxy.set_mode("pass")
    out = d.return_to_local("ft-1", "operator")
    assert out["outcome"] == "released" and tr.job("ft-1")["state"] == J_BACK_LOCAL
    assert cloud.find_by_job_id("ft-1") is None and local.state("ft-1") == backends.Q_QUEUED
    # link down at dispatch: nothing created, entry released after the lookup shows no Job
    world.proxy.set_mode("down")
    out = d.dispatch("ft-1", "small-input")
    assert out["outcome"] == "held" and tr.job("ft-1")["state"] == J_HELD_UNKNOWN
    world.proxy.set_mode("pass")
    out = d.step("ft-1")
    assert out["outcome"] == "released" and local.state("ft-1") == backends.Q_QUEUED
    assert tr.commit_count("ft-1") == 0
