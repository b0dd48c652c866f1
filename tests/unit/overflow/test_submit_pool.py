"""The cloud submission pool: client-side QPS limit, one confirming list per batch, a lost answer
settled by the list, 409 adopted and never created twice. Against a real emulator on loopback
(official client, HTTPS; the `cloud` context goes through the link proxy that can lose answers)."""
import threading
import time

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import k8s
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends, submit_pool
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.dispatch_batch import BatchDispatcher
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.k8s_backend import K8sCloudCluster
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.protocol import (
    J_BACK_LOCAL, J_CLOUD, J_HELD_UNKNOWN, LABEL_ATTEMPT, cloud_job_name, job_labels)
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.tracker import Tracker

from k8s_world import K8sWorld

NOWHERE = {"hybridgpu.io/test": "no-such-node"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = K8sWorld(tmp_path_factory.mktemp("pool"))
    yield w
    w.stop()


@pytest.fixture
def cloud(world, request):
    world.proxy.set_mode("pass")
    c = K8sCloudCluster(world.kube("cloud"), namespace="p-%d" % (abs(hash(request.node.name)) % 10 ** 8))
    c.ensure_namespace()
    yield c
    world.proxy.set_mode("pass")


def spec(job_id, attempt):
    s = {"command": ["true"], "gpus": 1, "node_selector": NOWHERE}
    s.update(job_labels(job_id, attempt, "policy"))
    return s


def items(prefix, n, attempt="att-1"):
    return [(cloud_job_name("%s-%d" % (prefix, i)), "%s-%d" % (prefix, i), attempt, spec("%s-%d" % (prefix, i), attempt))
            for i in range(n)]


def counted_sender(cloud, create=None):
    """Keep the sender the pool asks for (to count its requests); `create` replaces its create_job."""
    made = []
    real = cloud.sender

    def sender():
        kube = real()
        if create is not None:
            original = kube.create_job
            kube.create_job = lambda ns, body: create(original, ns, body)
        made.append(kube)
        return kube
    cloud.sender = sender
    return made


def dispatcher(cloud, tmp_path, job_ids, **kw):
    local = backends.MemoryLocalQueue()
    for job_id in job_ids:
        local.add(job_id)
    tracker = Tracker(str(tmp_path / "ledger.db"))
    return BatchDispatcher(local, cloud, backends.MemoryStager(backends.MemoryStorage()), tracker, "policy", **kw)


def test_limiter_holds_the_rate_on_a_fake_clock():
    now = [0.0]
    sleeps = []

    def sleep(s):
        sleeps.append(s)
        now[0] += s
    lim = submit_pool.RateLimiter(10, burst=3, clock=lambda: now[0], sleep=sleep)
    for dummy in range(33):
        lim.acquire()
    # three at once (the burst), then one every 0.1 s: 30 more take 3.0 s of the clock
    assert len(sleeps) == 30 and all(s == pytest.approx(0.1) for s in sleeps)
    assert now[0] == pytest.approx(3.0)
    assert submit_pool.RateLimiter(0).acquire() == 0.0   # qps 0: no limit


def test_pool_sends_no_faster_than_the_qps_limit():
    stamps = []
    lock = threading.Lock()

    class Cloud(object):
        def submit(self, name, job_id, attempt_id, spec):
            with lock:
                stamps.append(time.monotonic())
            return backends.SubmitResult(backends.CREATED)

        def find_by_job_id(self, job_id):
            return backends.CloudJob(cloud_job_name(job_id), job_id, "att-1")
    qps, burst, n = 40.0, 8, 28
    batch = submit_pool.submit_batch(Cloud(), items("q", n), workers=burst, qps=qps)
    assert len(batch.confirmed) == n and len(stamps) == n
    stamps.sort()
    # token bucket envelope: at most burst + qps * t requests in the first t seconds
    for k, t in enumerate(stamps):
        assert k + 1 <= burst + qps * (t - stamps[0]) + 1, (k, t - stamps[0])
    assert stamps[-1] - stamps[0] >= (n - burst) / qps * 0.9


def test_confirmation_is_one_list_per_hundred_jobs(cloud):
    made = counted_sender(cloud)
    before = cloud.kube.calls
    batch = submit_pool.submit_batch(cloud, items("c", 150), workers=6, qps=0)
    assert made[0].calls == 150                      # one create per job, none repeated
    assert cloud.kube.calls - before == 2 == batch.lists   # 150 jobs: two lists, no lookup per job
    assert len(batch.confirmed) == 150
    assert all(res.outcome == backends.CREATED for res in batch.answers.values())
    assert len(cloud.kube.list_jobs(cloud.ns)) == 150


def test_a_lost_answer_is_settled_by_the_list(world, cloud, tmp_path):
    ids = ["lost-%d" % i for i in range(12)]
    # one worker on the connection the namespace create opened: the first create's answer is lost
    # (with new connections the drop may hit a TLS handshake instead: then nothing lands)
    d = dispatcher(cloud, tmp_path, ids, workers=1, qps=0)
    results = [d.dispatch(job_id, "c", spec={"command": ["true"], "node_selector": NOWHERE}) for job_id in ids]
    assert all(r["outcome"] == "submitting" for r in results)
    world.proxy.set_mode("drop", 1)
    before = cloud.kube.calls
    batch = d.flush()
    assert world.proxy.dropped >= 1
    lost = [j for j, res in batch.answers.items() if isinstance(res, backends.LostResponse)]
    assert len(lost) == 1
    assert cloud.kube.calls - before == 1    # the lookup after the lost answer read the batch's list
    by_id = dict((r["job_id"], r) for r in results)
    assert by_id[lost[0]]["outcome"] == "adopted" and by_id[lost[0]]["confirmed"] is True
    assert all(r["state"] == J_CLOUD and r["confirmed"] for r in results)
    assert [e["result"] for e in d.tracker.logs(lost[0]) if e["step"] in ("submit", "lookup")] == ["lost_response", "found"]
    jobs = cloud.kube.list_jobs(cloud.ns)
    assert sorted(j["metadata"]["name"] for j in jobs) == sorted(cloud_job_name(j) for j in ids)


def test_dropped_answers_under_the_pool_leave_one_job_or_none(world, cloud, tmp_path):
    ids = ["drop-%d" % i for i in range(16)]
    d = dispatcher(cloud, tmp_path, ids, workers=4, qps=0)
    results = [d.dispatch(job_id, "c", spec={"command": ["true"], "node_selector": NOWHERE}) for job_id in ids]
    dropped = world.proxy.dropped
    world.proxy.set_mode("drop", 3)
    d.flush()
    assert world.proxy.dropped - dropped == 3
    names = [j["metadata"]["name"] for j in cloud.kube.list_jobs(cloud.ns)]
    assert len(names) == len(set(names))
    for r in results:
        there = cloud_job_name(r["job_id"]) in names
        assert (r["state"], there) in ((J_CLOUD, True), (J_BACK_LOCAL, False)), r
        assert d.local.state(r["job_id"]) == (backends.Q_HELD if there else backends.Q_QUEUED)


def test_a_lost_create_that_never_landed_is_released(cloud, tmp_path):
    def lose_one(original, ns, body):
        if body["metadata"]["name"] == cloud_job_name("gone-1"):
            raise k8s.K8sError("create job", message="Connection aborted", cause=OSError("Connection aborted"))
        return original(ns, body)
    counted_sender(cloud, lose_one)
    d = dispatcher(cloud, tmp_path, ["gone-0", "gone-1"], workers=2, qps=0)
    results = [d.dispatch(j, "c", spec={"command": ["true"], "node_selector": NOWHERE}) for j in ("gone-0", "gone-1")]
    d.flush()
    assert results[0]["outcome"] == "submitted" and results[0]["confirmed"] is True
    assert results[1]["outcome"] == "released" and results[1]["state"] == J_BACK_LOCAL
    assert d.local.state("gone-1") == backends.Q_QUEUED
    assert [j["metadata"]["name"] for j in cloud.kube.list_jobs(cloud.ns)] == [cloud_job_name("gone-0")]


def test_409_is_adopted_not_created_twice(cloud, tmp_path):
    # an earlier pass created the Job (attempt att-old) and stopped before recording it
    cloud.send(cloud_job_name("dup-1"), "dup-1", "att-old", spec("dup-1", "att-old"))
    made = counted_sender(cloud)
    d = dispatcher(cloud, tmp_path, ["dup-1", "new-1"], workers=2, qps=0)
    results = [d.dispatch(j, "c", spec={"command": ["true"], "node_selector": NOWHERE}) for j in ("dup-1", "new-1")]
    batch = d.flush()
    assert made[0].calls == 2                     # one create each; the 409 is not retried
    assert results[0]["outcome"] == "adopted" and results[0]["attempt_id"] == "att-old"
    assert results[0]["state"] == J_CLOUD and d.local.state("dup-1") == backends.Q_HELD
    assert batch.answers["dup-1"].outcome == backends.ALREADY_EXISTS
    jobs = cloud.kube.list_jobs(cloud.ns)
    assert len(jobs) == 2
    dup = [j for j in jobs if j["metadata"]["name"] == cloud_job_name("dup-1")]
    assert len(dup) == 1 and dup[0]["metadata"]["labels"][LABEL_ATTEMPT] == "att-old"


def test_a_failed_list_keeps_the_entries_held(cloud, tmp_path):
    def no_list(job_ids, chunk=100):
        raise backends.LinkDown("link down")
    cloud.find_many = no_list
    d = dispatcher(cloud, tmp_path, ["held-0"], workers=1, qps=0)
    res = d.dispatch("held-0", "c", spec={"command": ["true"], "node_selector": NOWHERE})
    d.flush()
    # the 201 answer stands; nothing was released
    assert res["outcome"] == "submitted" and res["confirmed"] is False
    assert d.local.state("held-0") == backends.Q_HELD


def test_a_lost_answer_with_no_list_stays_held(cloud, tmp_path):
    def lose(original, ns, body):
        original(ns, body)
        raise k8s.K8sError("create job", message="Connection aborted", cause=OSError("Connection aborted"))
    counted_sender(cloud, lose)

    def no_list(job_ids, chunk=100):
        raise backends.LinkDown("link down")
    cloud.find_many = no_list
    d = dispatcher(cloud, tmp_path, ["unk-0"], workers=1, qps=0)
    res = d.dispatch("unk-0", "c", spec={"command": ["true"], "node_selector": NOWHERE})
    d.flush()
    assert res["outcome"] == "held" and res["state"] == J_HELD_UNKNOWN
    assert d.local.state("unk-0") == backends.Q_HELD
