# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Facts read from a batch/v1 Job and its pods as the API returns them: times, conditions, GPUs,
and the two facts the overflow rule trusts, the Job's class (from its namespace and Kueue
LocalQueue, jobclass.kubernetes_class) and its restricted placement (podspec.restricted_placement)."""
from __future__ import annotations

import calendar
import time

from . import jobclass, podspec
from .jobbody import GPU, GPU_PRODUCT, GPU_TYPE_ANNOTATION


def ts(text):
    """RFC 3339 UTC timestamp -> epoch seconds (None when absent)."""
    if not text:
        return None
    return float(calendar.timegm(time.strptime(text.replace("Z", "")[:19], "%Y-%m-%dT%H:%M:%S")))


def cond(obj, ctype):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype and c.get("status") == "True":
            return c
    return None


def live(pods):
    """Pods not being deleted: a Terminating pod (an evicted one, or one on a lost node, waiting
    for its kubelet) has a replacement, and the Job is judged by the newest pods."""
    return [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]


def pod_spec(job):
    return ((job.get("spec") or {}).get("template") or {}).get("spec") or {}


def job_gpus(job):
    total = 0
    for c in pod_spec(job).get("containers") or []:
        lim = (c.get("resources") or {}).get("limits") or {}
        try:
            total += int(lim.get(GPU, 0))
        except (TypeError, ValueError):
            pass
    return total


def job_gpu_type(job):
    ann = job["metadata"].get("annotations") or {}
    if ann.get(GPU_TYPE_ANNOTATION):
        return ann[GPU_TYPE_ANNOTATION]
    return (pod_spec(job).get("nodeSelector") or {}).get(GPU_PRODUCT)


def job_class(job, classes, namespace):
    """The Job's class from its namespace and Kueue LocalQueue; None when no one class matches.
    A label the submitter sets is never read."""
    queue = (job["metadata"].get("labels") or {}).get(jobclass.QUEUE_LABEL)
    return jobclass.kubernetes_class(classes, job["metadata"].get("namespace") or namespace, queue)


def restricted(job, placement):
    """The Job's placement fields that select restricted data, joined; None when none do."""
    return ", ".join(podspec.restricted_placement(pod_spec(job), placement)) or None
