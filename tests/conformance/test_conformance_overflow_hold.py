"""The overflow hold against the API: a pod that starts between the hold's read and its write
is never killed by a suspend; the hold answers ALREADY_STARTED and leaves the Job running.

The hold's seam (K8sLocalQueue.between_read_and_write) starts the pod at the worst moment:
after the hold judged the Job not started, before its conditional write."""
import secrets

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import k8s
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends, k8s_backend

from conftest import HOLD_LABEL, POOL_LABEL


def _queue(api, pool, hook=None):
    api_client, h = api
    q = k8s_backend.K8sLocalQueue(k8s.Kube(api_client=api_client), namespace=h.ns,
                                  node_selector={POOL_LABEL: pool})
    if hook is not None:
        q.between_read_and_write = hook
    return q


def _enqueue(q, h, name, suspend):
    q.enqueue(name, "small-input", ["sleep", "60"], gpus=0, suspend=suspend)
    # a suspended Job's template may change: its pod then stays Running (the fake kubelet does not
    # finish it), so a killed pod would show
    q.kube.patch_job(h.ns, name, {"spec": {"template": {"metadata": {"labels": {HOLD_LABEL: "true"}}}}})


def _pods(h, name):
    return h.core.list_namespaced_pod(h.ns, label_selector="job-name=%s" % name).items


def _running_pod(h, name):
    pods = [p for p in _pods(h, name) if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    return pods[0] if pods else None


def _not_held(h, name):
    job = h.batch.read_namespaced_job(name, h.ns)
    return not job.spec.suspend and k8s_backend.HOLD_ANNOTATION not in (job.metadata.annotations or {})


def test_hold_of_a_queued_suspended_job_is_one_conditional_write(api):
    dummy, h = api
    pool = "hold-" + secrets.token_hex(3)
    q = _queue(api, pool)
    name = h.uniq("queued")
    _enqueue(q, h, name, suspend=True)
    assert q.hold(name) == backends.HELD
    job = h.batch.read_namespaced_job(name, h.ns)
    assert job.spec.suspend and k8s_backend.HOLD_ANNOTATION in job.metadata.annotations
    assert _pods(h, name) == []


def test_a_job_admitted_between_read_and_write_is_not_suspended(api):
    """Queued suspended (as Kueue queues it); the queue admits it and its pod starts in between."""
    dummy, h = api
    pool = "hold-" + secrets.token_hex(3)
    h.make_node(h.uniq("n"), pool)
    name = h.uniq("admitted")
    seen = {}

    def admit_and_start(job_id, job):
        h.batch.patch_namespaced_job(job_id, h.ns, {"spec": {"suspend": False}})
        seen["pod"] = h.wait(lambda: _running_pod(h, job_id), what="the admitted Job's pod running").metadata.uid
    q = _queue(api, pool, admit_and_start)
    _enqueue(q, h, name, suspend=True)
    assert q.hold(name) == backends.ALREADY_STARTED
    assert _not_held(h, name)
    pod = _running_pod(h, name)
    assert pod is not None and pod.metadata.uid == seen["pod"], "the started pod was killed"


def test_a_waiting_pod_that_starts_between_read_and_write_is_not_killed(api):
    """Not suspended, its pod waits for a node; a node joins and the pod starts in between."""
    dummy, h = api
    pool = "hold-" + secrets.token_hex(3)
    name = h.uniq("waiting")
    seen = {}

    def node_joins(job_id, job):
        h.make_node(h.uniq("n"), pool)
        seen["pod"] = h.wait(lambda: _running_pod(h, job_id), what="the waiting pod running").metadata.uid
        # the Job controller counts the ready pod in the Job's status: the Job changed after the read
        h.wait(lambda: (h.batch.read_namespaced_job(job_id, h.ns).status.ready or 0) >= 1, what="status.ready")
    q = _queue(api, pool, node_joins)
    q.enqueue(name, "small-input", ["sleep", "60"], gpus=0)
    h.wait(lambda: _pods(h, name), what="the Job's waiting pod")
    for p in _pods(h, name):        # keep it Running once started
        h.core.patch_namespaced_pod(p.metadata.name, h.ns, {"metadata": {"labels": {HOLD_LABEL: "true"}}})
    assert q.hold(name) == backends.ALREADY_STARTED
    assert _not_held(h, name)
    pod = _running_pod(h, name)
    assert pod is not None and pod.metadata.uid == seen["pod"], "the started pod was killed"


def test_a_waiting_pod_bound_without_a_job_write_is_answered_started(api):
    """The scheduler binds the waiting pod (no write to the Job): the hold sees it after its own
    write, takes the hold back and answers ALREADY_STARTED; the job runs locally."""
    dummy, h = api
    pool = "hold-" + secrets.token_hex(3)
    name = h.uniq("bound")

    def bind(job_id, job):
        h.make_node(h.uniq("n"), pool, heartbeat=False)      # no kubelet: bound, not yet running
        h.wait(lambda: any(p.spec.node_name for p in _pods(h, job_id)), what="the pod bound")
    q = _queue(api, pool, bind)
    q.enqueue(name, "small-input", ["sleep", "60"], gpus=0)
    h.wait(lambda: _pods(h, name), what="the Job's waiting pod")
    assert q.hold(name) == backends.ALREADY_STARTED
    assert _not_held(h, name)
    assert q.state(name) == backends.Q_RUNNING
