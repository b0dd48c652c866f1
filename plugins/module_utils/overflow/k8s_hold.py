# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The hold of a Kubernetes local-queue Job, so that a Job that started is never suspended.

The hold is one merge patch (spec.suspend true plus the hold annotation) carrying the Job's
resourceVersion as its precondition, sent only when the Job as read has not started: no pod of it
bound to a node or running, no ready, succeeded or failed pods in its status. Whatever changed the
Job after the read (a queue such as Kueue admitting it, the Job controller recording startTime,
active or ready pods) makes the API answer 409; the hold then reads again and judges again, so it
answers ALREADY_STARTED for a Job that started in between and leaves it as it is.

A Job queued suspended (no startTime, no active pods) cannot start without a write to the Job,
so its hold is atomic. A Job whose pods already wait unbound can have a pod bound by the scheduler
without a write to the Job; the hold lists the pods after reading the Job and again after its own
write, and when a pod was bound in between it takes the hold back (same precondition) and answers
ALREADY_STARTED: that pod is replaced by the Job controller and the job runs locally, once.
"""
from __future__ import annotations

import time

from ..common import k8s
from . import backends

HOLD_ANNOTATION = "hybridgpu.io/overflow-hold"
WITHDRAWN_ANNOTATION = "hybridgpu.io/overflow-withdrawn"


def _done(job):
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def _ran(job):
    status = job.get("status") or {}
    return bool(status.get("ready") or status.get("succeeded") or status.get("failed"))


def hold(queue, job_id, attempts=5):
    """queue: k8s_backend.K8sLocalQueue. Returns HELD, ALREADY_STARTED or GONE."""
    for dummy in range(attempts):
        job = queue.kube.get_job(queue.ns, job_id)
        if job is None:
            return backends.GONE
        ann = job["metadata"].get("annotations") or {}
        if WITHDRAWN_ANNOTATION in ann:
            return backends.GONE
        if _done(job):
            return backends.ALREADY_STARTED
        if (job.get("spec") or {}).get("suspend") and HOLD_ANNOTATION in ann:
            return backends.HELD
        waiting = queue._pods(job_id)  # pylint: disable=protected-access
        if _ran(job) or queue._started(waiting):  # pylint: disable=protected-access
            return backends.ALREADY_STARTED
        queue.between_read_and_write(job_id, job)
        patch = {"metadata": {"resourceVersion": job["metadata"]["resourceVersion"],
                              "annotations": {HOLD_ANNOTATION: "%d" % time.time()}},
                 "spec": {"suspend": True}}
        try:
            held = queue.kube.patch_job(queue.ns, job_id, patch, patch_type="merge")
        except k8s.K8sError as err:
            if err.conflict:
                continue        # the Job changed after the read (admitted, started): read again
            if err.not_found:
                return backends.GONE
            raise
        if waiting and queue._started(queue._pods(job_id)):  # pylint: disable=protected-access
            return take_back(queue, job_id, held)
        return backends.HELD
    raise k8s.K8sError("hold job %s/%s" % (queue.ns, job_id), message="still conflicting after %d tries" % attempts)


def take_back(queue, job_id, held, attempts=5):
    """A waiting pod was bound between the read and the write: undo this hold. Each try carries the
    resourceVersion last seen; on 409 the Job is read again and undone only while it still holds."""
    job = held
    for dummy in range(attempts):
        patch = {"metadata": {"resourceVersion": job["metadata"]["resourceVersion"],
                              "annotations": {HOLD_ANNOTATION: None}}, "spec": {"suspend": False}}
        try:
            queue.kube.patch_job(queue.ns, job_id, patch, patch_type="merge")
            break
        except k8s.K8sError as err:
            if not err.conflict:
                if err.not_found:
                    return backends.GONE
                raise
        job = queue.kube.get_job(queue.ns, job_id)
        ann = (job or {}).get("metadata", {}).get("annotations") or {}
        if job is None or HOLD_ANNOTATION not in ann or WITHDRAWN_ANNOTATION in ann:
            break
    return backends.ALREADY_STARTED
