# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Overflow backends on Kubernetes: the local queue as batch/v1 Jobs, and the cloud cluster.

Local queue (on-prem cluster): the job ID is the Job name in one namespace. Holding sets
`spec.suspend: true` (the field Kueue uses to keep a Job from starting) plus the annotation
`hybridgpu.io/overflow-hold` in one merge patch that carries the Job's resourceVersion as its
precondition. A Job has started when a pod of it is bound to a node or running, or its status
counts ready, succeeded or failed pods: hold then answers ALREADY_STARTED and changes nothing.
The write lands only on the Job exactly as read (k8s_hold.py says how a race ends).
Withdraw keeps the Job, suspended, with `hybridgpu.io/overflow-withdrawn`, so the ID stays
visible and never runs.

Cloud cluster: one Job per job ID, named by protocol.cloud_job_name and labelled with the job
and attempt IDs. A create that gets no HTTP answer raises LostResponse when the request went
out and LinkDown when it never did (K8sError.request_sent). 409 AlreadyExists is adopted. A
403/422 answer (quota, admission) is a rejection. Every call goes through module_utils/common/k8s.py.
"""
from __future__ import annotations

import copy
import json
import math
import time

from ..common import k8s
from . import backends, jobclass, k8s_hold, k8s_jobs
from .jobbody import (GPU, GPU_PRODUCT, REWRITES_ANNOTATION,  # noqa: F401 (names other modules read here)
                      build_job, job_body, product_label)
from .k8s_hold import HOLD_ANNOTATION, WITHDRAWN_ANNOTATION
from .k8s_jobs import cond as _cond, job_gpu_type as _job_gpu_type, job_gpus as _job_gpus, live as _live, ts as _ts
from .protocol import ANNOTATION_JOB_ID, LABEL_ATTEMPT, LABEL_JOB, cloud_job_name
from .trigger import QueueJob, QueueSnapshot

# A label the submitter sets: read by the history reports only. The class that decides a move comes
# from the Job's namespace and Kueue LocalQueue (k8s_jobs.job_class), facts the site controls.
CLASS_LABEL = "hybridgpu.io/job-class"
DEADLINE_ANNOTATION = "hybridgpu.io/deadline"
# send() answers CONFLICT for 409 AlreadyExists: submit() adopts, the pool confirms by its list.
CONFLICT = "conflict"
# The line the upload step (upload_step.py) prints once the job's output is in cloud storage.
OUTPUT_MARK = "OVF_OUTPUT"


def _deadline(annotations):
    """The job's deadline (epoch seconds) from its deadline annotation, None without one;
    ValueError naming the annotation when it is not a finite number."""
    text = annotations.get(DEADLINE_ANNOTATION)
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = None
    if value is None or math.isnan(value) or math.isinf(value):
        raise ValueError("annotation %s is %r, not epoch seconds; the job is not judged" % (DEADLINE_ANNOTATION, text))
    return value


class K8sLocalQueue(backends.LocalQueue):
    """The on-prem queue as Kubernetes Jobs in one namespace; the job ID is the Job name.
    classes: the site's job classes (jobclass.load): a Job's class is the one its namespace and
    Kueue LocalQueue map to (none without classes), and its restricted placement is judged with the
    classes' restricted_placement."""

    def __init__(self, kube, namespace="overflow-local", node_selector=None, tolerations=None, classes=None):
        self.kube = kube
        self.ns = namespace
        self.node_selector = dict(node_selector or {})
        self.tolerations = list(tolerations or [])
        self.classes = classes if classes is not None else {}
        self.placement = getattr(self.classes, "restricted_placement", None)

    def ensure_namespace(self):
        return self.kube.ensure_namespace(self.ns)

    def enqueue(self, job_id, job_class, command, gpus=1, gpu_type=None, deadline=None, env=None, suspend=False):
        """Submit a job to the local queue (what a user does; suspend: queued the way Kueue queues it),
        to the LocalQueue that the class's `kubernetes.queue` names."""
        ann = {DEADLINE_ANNOTATION: "%d" % deadline} if deadline else None
        labels = {CLASS_LABEL: job_class}
        queue = ((self.classes.get(job_class) or {}).get("kubernetes") or {}).get("queue")
        if queue:
            labels[jobclass.QUEUE_LABEL] = queue
        body = build_job(job_id, self.ns, command, gpus=gpus, gpu_type=gpu_type, env=env,
                         labels=labels, annotations=ann,
                         node_selector=self.node_selector, tolerations=self.tolerations, suspend=suspend)
        return self.kube.create_job(self.ns, body)

    def _pods(self, job_id):
        return self.kube.list_pods(self.ns, label_selector="job-name=%s" % job_id)

    @staticmethod
    def _started(pods):
        return any((p.get("spec") or {}).get("nodeName") or (p.get("status") or {}).get("phase") == "Running"
                   for p in pods)

    def between_read_and_write(self, job_id, job):
        """Called after the hold judged the Job not started and before its write (a seam for tests)."""

    def hold(self, job_id, attempts=5):
        return k8s_hold.hold(self, job_id, attempts)

    def release(self, job_id):
        job = self.kube.get_job(self.ns, job_id)
        if job is None:
            return False
        ann = job["metadata"].get("annotations") or {}
        if HOLD_ANNOTATION not in ann or WITHDRAWN_ANNOTATION in ann:
            return False
        self.kube.patch_job(self.ns, job_id, {"metadata": {"annotations": {HOLD_ANNOTATION: None}},
                                              "spec": {"suspend": False}}, patch_type="merge")
        return True

    def withdraw(self, job_id):
        job = self.kube.get_job(self.ns, job_id)
        if job is None or HOLD_ANNOTATION not in (job["metadata"].get("annotations") or {}):
            return False
        self.kube.patch_job(self.ns, job_id, {"metadata": {"annotations": {
            WITHDRAWN_ANNOTATION: "%d" % time.time()}}, "spec": {"suspend": True}}, patch_type="merge")
        return True

    def _state_of(self, job, pods):
        if job is None:
            return backends.Q_GONE
        ann = job["metadata"].get("annotations") or {}
        if WITHDRAWN_ANNOTATION in ann:
            return backends.Q_WITHDRAWN
        if _cond(job, "Complete") or _cond(job, "Failed"):
            return backends.Q_DONE
        if (job.get("spec") or {}).get("suspend"):
            return backends.Q_HELD if HOLD_ANNOTATION in ann else backends.Q_QUEUED   # suspended by Kueue: still queued
        return backends.Q_RUNNING if self._started(pods) else backends.Q_QUEUED

    def state(self, job_id):
        job = self.kube.get_job(self.ns, job_id)
        return self._state_of(job, self._pods(job_id) if job else [])

    def snapshot(self, now=None, total_gpus=None):
        """The queue as trigger.QueueSnapshot from one list of Jobs, one of pods and one of Nodes.
        `total_gpus` (GPU type -> count) is the site's pool size when the on-prem Nodes are not
        visible to this cluster; free GPUs are then that total minus the GPUs of started jobs."""
        now = time.time() if now is None else now
        jobs = self.kube.list_jobs(self.ns)
        pods = self.kube.list_pods(self.ns)
        by_job = {}
        for p in pods:
            by_job.setdefault((p["metadata"].get("labels") or {}).get("job-name"), []).append(p)
        entries, refused = [], []
        used = {}
        for j in jobs:
            name = j["metadata"]["name"]
            st = self._state_of(j, by_job.get(name, []))
            state = {backends.Q_QUEUED: "pending", backends.Q_RUNNING: "running", backends.Q_HELD: "held"}.get(st, st)
            ann = j["metadata"].get("annotations") or {}
            try:
                deadline = _deadline(ann)
            except ValueError as exc:
                # refused on its own: the rest of the queue is still judged; its GPUs still count
                refused.append({"job_id": name, "reason": str(exc)})
                if state == "running" and _job_gpu_type(j):
                    used[_job_gpu_type(j)] = used.get(_job_gpu_type(j), 0) + _job_gpus(j)
                continue
            e = QueueJob(name, k8s_jobs.job_class(j, self.classes, self.ns), _ts(j["metadata"].get("creationTimestamp")) or now,
                         state, _job_gpus(j), _job_gpu_type(j), deadline=deadline,
                         restricted_placement=k8s_jobs.restricted(j, self.placement))
            entries.append(e)
            if state == "running" and e.gpu_type:
                used[e.gpu_type] = used.get(e.gpu_type, 0) + e.gpus
        free, total = self._gpu_capacity(dict((product_label(e.gpu_type), e.gpu_type) for e in entries
                                              if e.gpu_type))
        if not total and total_gpus:
            total = dict(total_gpus)
            free = dict((t, max(0, n - used.get(t, 0))) for t, n in total.items())
        snap = QueueSnapshot(now, entries, free, total)
        snap.refused = refused
        return snap

    def _gpu_capacity(self, names):
        """Free and total GPUs by product over Ready nodes matching the queue's node selector.
        `names` maps a product label value back to the GPU type the job classes use."""
        sel = ",".join("%s=%s" % kv for kv in sorted(self.node_selector.items())) or None
        nodes = self.kube.list_nodes(label_selector=sel)
        if not nodes:
            return {}, {}
        used = {}
        for p in self.kube.list_pods():
            node = (p.get("spec") or {}).get("nodeName")
            if not node or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            for c in (p.get("spec") or {}).get("containers") or []:
                used[node] = used.get(node, 0) + int(((c.get("resources") or {}).get("limits") or {}).get(GPU, 0))
        free, total = {}, {}
        for n in nodes:
            if k8s.node_ready(n) != "True" or (n.get("spec") or {}).get("unschedulable"):
                continue
            product = (n["metadata"].get("labels") or {}).get(GPU_PRODUCT)
            product = names.get(product, product)
            cap = k8s.node_summary(n)["gpu_allocatable"]
            if not product:
                continue
            total[product] = total.get(product, 0) + cap
            free[product] = free.get(product, 0) + max(0, cap - used.get(n["metadata"]["name"], 0))
        return free, total


class K8sCloudCluster(backends.CloudCluster):
    """The cloud cluster: one Job per job ID in `namespace`; `pool` is 'warm' (standing pool) or 'on_demand'."""

    def __init__(self, kube, namespace="overflow", pool="warm", node_lost_after=None):
        self.kube = kube
        self.ns = namespace
        self.pool = pool
        self.node_lost_after = node_lost_after

    def ensure_namespace(self):
        return self.kube.ensure_namespace(self.ns)

    def _link(self, err, action):
        """Map a K8sError without HTTP status to LinkDown; re-raise the rest."""
        if err.status is None:
            raise backends.LinkDown("%s: management link to the cloud is down: %s" % (action, err.message))
        raise err

    def body(self, name, job_id, attempt_id, spec):
        """The cloud Job: spec["pod_spec"] (the carried job, carry.py) with the job and attempt IDs
        in every container's env and the carry rewrites in an annotation; else one container
        from spec["command"]."""
        env = dict(spec.get("env") or {})
        env.update({"OVF_JOB_ID": job_id, "OVF_ATTEMPT_ID": attempt_id})
        ann = dict(spec.get("annotations") or {})
        ann[ANNOTATION_JOB_ID] = job_id
        if spec.get("pod_spec"):
            pod = copy.deepcopy(spec["pod_spec"])
            for c in pod.get("containers") or []:
                c["env"] = [e for e in c.get("env") or [] if e.get("name") not in env] + \
                    [{"name": k, "value": str(v)} for k, v in sorted(env.items())]
            ann[REWRITES_ANNOTATION] = json.dumps(spec.get("rewrites") or [], sort_keys=True)
            return job_body(name, self.ns, pod, spec.get("labels"), ann, backoff_limit=0)
        return build_job(name, self.ns, spec.get("command") or ["true"], gpus=spec.get("gpus", 0),
                         gpu_type=spec.get("cloud_gpu_type"), image=spec.get("image") or "localhost/overflow-job:1",
                         env=env, labels=spec.get("labels"), annotations=ann,
                         node_selector=spec.get("node_selector"), backoff_limit=0)

    def submit(self, name, job_id, attempt_id, spec):
        saved = self.kube.retries
        self.kube.retries = 0       # a create is never retried blindly: the protocol reconciles
        try:
            res = self.send(name, job_id, attempt_id, spec)
        finally:
            self.kube.retries = saved
        if res.outcome == CONFLICT:
            existing = self.find_by_job_id(job_id)
            if existing is None:
                raise res.reason
            return backends.SubmitResult(backends.ALREADY_EXISTS, job=existing)
        return res

    def sender(self):
        """A Kube on this cluster's API client (its connection pool) that never retries: for
        creates sent from several threads at once (submit_pool.py)."""
        once = k8s.Kube(api_client=self.kube.api_client, retries=0)
        once.timeout = self.kube.timeout
        return once

    def send(self, name, job_id, attempt_id, spec, kube=None):
        """One create of the Job, as it comes: SubmitResult CREATED (.job), REJECTED (.reason), or
        CONFLICT (409 AlreadyExists; .reason holds the error). Raises LostResponse when the request
        went out and no answer (or a 5xx) came back, LinkDown when it never went out."""
        kube = kube or self.kube
        try:
            created = kube.create_job(self.ns, self.body(name, job_id, attempt_id, spec))
        except k8s.K8sError as err:
            if not err.status:      # None: no HTTP answer; 0: the client's TLS or transport error (effect unknown)
                if err.request_sent:
                    raise backends.LostResponse("create of Job %s/%s: no response (%s)" % (self.ns, name, err.message))
                raise backends.LinkDown("create of Job %s/%s never got out: %s" % (self.ns, name, err.message))
            if err.conflict and (err.body.get("reason") == "AlreadyExists" or "already exists" in (err.message or "")):
                return backends.SubmitResult(CONFLICT, reason=err)
            if err.status in (400, 403, 422):
                return backends.SubmitResult(backends.REJECTED, reason="HTTP %s: %s" % (err.status, err.message))
            if err.status >= 500:
                raise backends.LostResponse("create of Job %s/%s: HTTP %s, effect unknown" % (self.ns, name, err.status))
            raise
        return backends.SubmitResult(backends.CREATED, job=self._cloud_job(created, []))

    def find_many(self, job_ids, chunk=100):
        """job ID -> CloudJob for the job IDs that have a Job here, from one list by the job-ID
        label per `chunk` IDs (`in (...)`: the selector stays a few kB long). The phase is read
        from the Jobs alone (no pods): enough to confirm a submission, not to judge a run."""
        names = dict((cloud_job_name(j), j) for j in job_ids)
        found = {}
        wanted = sorted(names)
        for start in range(0, len(wanted), chunk):
            sel = "%s in (%s)" % (LABEL_JOB, ",".join(wanted[start:start + chunk]))
            try:
                jobs = self.kube.list_jobs(self.ns, label_selector=sel)
            except k8s.K8sError as err:
                self._link(err, "list Jobs of %d job IDs" % len(wanted[start:start + chunk]))
            for job in jobs:
                job_id = names.get((job["metadata"].get("labels") or {}).get(LABEL_JOB))
                if job_id is not None:
                    found[job_id] = self._cloud_job(job, [])
        return found

    def _jobs(self, job_id):
        try:
            return self.kube.list_jobs(self.ns, label_selector="%s=%s" % (LABEL_JOB, cloud_job_name(job_id)))
        except k8s.K8sError as err:
            self._link(err, "look up Jobs of %s" % job_id)

    def jobs_of(self, job_id):
        """Every Job in the namespace carrying the job-ID label (raw objects). Raises LinkDown."""
        return self._jobs(job_id) or []

    def find_by_job_id(self, job_id):
        jobs = self._jobs(job_id)
        if not jobs:
            return None
        job = jobs[0]
        try:
            pods = self.kube.list_pods(self.ns, label_selector="job-name=%s" % job["metadata"]["name"])
        except k8s.K8sError as err:
            self._link(err, "list pods of %s" % job_id)
        return self._cloud_job(job, pods)

    def _cloud_job(self, job, pods):
        meta = job["metadata"]
        labels = meta.get("labels") or {}
        cj = backends.CloudJob(meta["name"], (meta.get("annotations") or {}).get(ANNOTATION_JOB_ID),
                               labels.get(LABEL_ATTEMPT))
        if meta.get("deletionTimestamp"):
            cj.phase = backends.TERMINATING
        elif _cond(job, "Complete"):
            cj.phase = backends.SUCCEEDED
            cj.output_checksum = self._output_checksum(pods)
            if cj.output_checksum is None:
                cj.phase, cj.reason = backends.FAILED, "job finished without reporting its output checksum"
        elif _cond(job, "Failed"):
            cj.phase, cj.reason = backends.FAILED, _cond(job, "Failed").get("reason")
        elif any((p.get("status") or {}).get("phase") == "Running" for p in _live(pods)):
            cj.phase = backends.RUNNING
            lost = self._lost_node(_live(pods))
            if lost:
                cj.phase, cj.reason = backends.FAILED, "NodeLost: %s is not Ready" % lost
        else:
            cj.phase = backends.PENDING
        return cj

    def _lost_node(self, pods):
        """Name of a node running this job whose Ready condition is not True (heartbeats stopped)."""
        for p in pods:
            node = (p.get("spec") or {}).get("nodeName")
            if not node or (p.get("status") or {}).get("phase") != "Running":
                continue
            got = self.kube.get_node(node)
            if got is None or k8s.node_ready(got) != "True":
                return node
        return None

    def _output_checksum(self, pods):
        for p in pods:
            if (p.get("status") or {}).get("phase") != "Succeeded":
                continue
            try:
                text = self.kube.pod_log(self.ns, p["metadata"]["name"])
            except Exception:   # the log endpoint raises the client's own types
                continue
            for line in reversed(text.splitlines()):
                parts = line.split()
                if len(parts) >= 2 and parts[0] == OUTPUT_MARK:
                    return parts[1]
        return None

    def output_ref(self, job_id):
        """Where the job's output lies in cloud storage, as the job printed it (third field), or None."""
        jobs = self._jobs(job_id)
        if not jobs:
            return None
        pods = self.kube.list_pods(self.ns, label_selector="job-name=%s" % jobs[0]["metadata"]["name"])
        for p in pods:
            if (p.get("status") or {}).get("phase") != "Succeeded":
                continue
            for line in reversed(self.kube.pod_log(self.ns, p["metadata"]["name"]).splitlines()):
                parts = line.split()
                if len(parts) >= 3 and parts[0] == OUTPUT_MARK:
                    return parts[2]
        return None

    def stop(self, job_id):
        try:
            for job in self._jobs(job_id) or []:
                self.kube.delete_job(self.ns, job["metadata"]["name"], propagation="Background")
        except k8s.K8sError as err:
            self._link(err, "delete Job of %s" % job_id)
        return "returned_to_pool" if self.pool == "warm" else "released"
