# -*- coding: utf-8 -*-
"""The overflow trigger: is the local queue "full" for a job's class, and does moving pay off?

"Full" for a pending job means any of:
  - wait_above_threshold: it has waited longer than its class's queue_wait_threshold;
  - no_free_gpus: fewer free GPUs of its required type than it asks for;
  - deadline_at_risk: remaining local wait + runtime ends after its deadline.
A restricted class (data_may_leave_site: false) never moves, even when full; the reason is recorded.
A job whose placement selects restricted data (restricted_placement, set by the queue backend from
the job's own nodeSelector, affinity and tolerations) never moves, whatever its class says.
A full job moves only if the time model says the cloud finishes sooner.
The queue snapshot comes from a local queue backend (Kubernetes Jobs, Slurm).
"""
from __future__ import annotations

from . import timemodel

PENDING_STATES = frozenset(["pending", "queued"])


class QueueJob(object):
    """One entry of the local queue, as a backend reports it. Times are epoch seconds."""

    __slots__ = ("job_id", "job_class", "submit_time", "state", "gpus", "gpu_type", "deadline", "expected_start",
                 "restricted_placement")

    def __init__(self, job_id, job_class, submit_time, state, gpus, gpu_type, deadline=None, expected_start=None,
                 restricted_placement=None):
        self.job_id = job_id
        self.job_class = job_class
        self.submit_time = float(submit_time)
        self.state = state
        self.gpus = int(gpus)
        self.gpu_type = gpu_type
        self.deadline = float(deadline) if deadline is not None else None
        # the scheduler's own start estimate (Slurm squeue --start), when it has one
        self.expected_start = float(expected_start) if expected_start is not None else None
        # the job's placement fields that select restricted data (None: none do)
        self.restricted_placement = restricted_placement or None

    @classmethod
    def from_dict(cls, d):
        return cls(d["job_id"], d["job_class"], d["submit_time"], d["state"], d.get("gpus", 1), d["gpu_type"],
                   d.get("deadline"), d.get("expected_start"), d.get("restricted_placement"))


class QueueSnapshot(object):
    """The local queue at one moment: jobs, free GPUs by type, and (optional) total GPUs by type."""

    def __init__(self, now, jobs, free_gpus, total_gpus=None):
        self.now = float(now)
        self.jobs = list(jobs)
        self.free_gpus = dict(free_gpus)
        self.total_gpus = dict(total_gpus or {})

    @classmethod
    def from_dict(cls, d):
        return cls(d["now"], [QueueJob.from_dict(j) for j in d.get("jobs", [])], d.get("free_gpus", {}),
                   d.get("total_gpus"))


def remaining_wait(job, snapshot, classes):
    """Estimate of how long the job still waits locally. Returns (seconds, method)."""
    if job.expected_start is not None:
        return max(0.0, job.expected_start - snapshot.now), "scheduler_estimate"
    total = snapshot.total_gpus.get(job.gpu_type)
    if total:
        # GPU-seconds of work ahead of it (running remainder not known: count running jobs' full runtime)
        ahead = 0.0
        for other in snapshot.jobs:
            if other.gpu_type != job.gpu_type or other.job_id == job.job_id:
                continue
            runtime = classes.get(other.job_class, {}).get("typical_runtime", 0.0)
            if other.state == "running" or (other.state in PENDING_STATES and other.submit_time < job.submit_time):
                ahead += runtime * other.gpus
        return ahead / float(total), "work_ahead"
    # No estimate available: assume it waits as long again as it has waited so far.
    return max(0.0, snapshot.now - job.submit_time), "waited_so_far"


def full_reasons(job, cls, snapshot, wait_s):
    reasons = []
    waited = snapshot.now - job.submit_time
    if waited > cls["queue_wait_threshold"]:
        reasons.append("wait_above_threshold: waited %s, threshold %s" % (
            timemodel.human(waited), timemodel.human(cls["queue_wait_threshold"])))
    free = snapshot.free_gpus.get(job.gpu_type, 0)
    if free < job.gpus:
        reasons.append("no_free_gpus: %d free %s, job needs %d" % (free, job.gpu_type, job.gpus))
    if job.deadline is not None:
        done = snapshot.now + wait_s + cls["typical_runtime"]
        if done > job.deadline:
            reasons.append("deadline_at_risk: local finish %s after the deadline" % timemodel.human(done - job.deadline))
    return reasons


def evaluate(snapshot, classes, path="policy", pulls=None):
    """Decide for every pending job. Returns a list of decision dicts, one per pending job.
    pulls: {class name: seconds}, the image pull measured on the cloud pool (prepull.py); a class
    there uses it in the time model instead of its image_size/image_cached estimate."""
    out = []
    for job in snapshot.jobs:
        if job.state not in PENDING_STATES:
            continue
        d = {"job_id": job.job_id, "job_class": job.job_class, "path": path, "decision": "stay",
             "full": [], "reason": "", "time_model": None}
        if job.restricted_placement:
            d["reason"] = ("placement selects restricted data (%s): data may not leave the site; never moves, "
                           "whatever its class" % job.restricted_placement)
            out.append(d)
            continue
        cls = classes.get(job.job_class)
        if cls is None:
            d["reason"] = "unknown job class %r: not in the overflow rule" % job.job_class
            out.append(d)
            continue
        wait_s, method = remaining_wait(job, snapshot, classes)
        d["wait_estimate"] = {"seconds": wait_s, "method": method}
        d["full"] = full_reasons(job, cls, snapshot, wait_s)
        if not d["full"]:
            d["reason"] = "local queue is not full for this job"
            out.append(d)
            continue
        if cls["restricted"]:
            d["reason"] = "restricted class: data may not leave the site; never moves, even when full"
            out.append(d)
            continue
        tmr = timemodel.compare(
            local_wait=wait_s, local_runtime=cls["typical_runtime"], link_bps=cls["link_bps"],
            cloud_runtime=cls.get("cloud_runtime"), input_bytes=cls["input_size"], output_bytes=cls["output_size"],
            dispatch=cls["dispatch"], cloud_queue_wait=cls["cloud_queue_wait"], image_bytes=cls["image_size"],
            image_cached=cls["image_cached"], startup=cls["startup"], inputs_in_cloud=cls["inputs_in_cloud"],
            return_link_bps=cls.get("return_link_bps"), min_gain=cls["min_gain"],
            image_pull_s=(pulls or {}).get(job.job_class))
        d["time_model"] = tmr
        d["decision"] = tmr["decision"]
        d["reason"] = tmr["reason"]
        out.append(d)
    return out
