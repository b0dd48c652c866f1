# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bounded parallel submission of cloud Jobs, confirmed by one list per batch.

The creates of a batch go out from `workers` threads that share the cloud's API client (its
connection pool keeps at least `workers` connections open, so they are reused), never faster
than `qps` requests per second in all (a token bucket; `qps` 0 sets no client-side limit).
Each create is sent once, never retried blindly. Then the cloud's Jobs are listed by the job-ID
label (`cloud.find_many`: one list per 100 job IDs; a cloud without it is asked job by job) and
every answer is settled against the list:

- 201 Created: the Job, confirmed when the list shows it with the same attempt;
- no answer (request sent, response lost, or a 5xx): the Job the list shows is adopted (it was
  created), and none there means none was created;
- 409 AlreadyExists: the Job the list shows is adopted; nothing is created a second time;
- any other 4xx (400/403/422, a missing namespace): a rejection; a request that never went out
  (link down), or any other error: looked up like a lost one.

When the list itself fails, every lookup of the batch answers LinkDown: the protocol keeps those
local entries held and looks again in the next pass.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ..common import k8s
from . import backends
from .k8s_backend import CONFLICT

LIST_CHUNK = 100    # job IDs per confirming list: the selector stays about 6 kB long


class RateLimiter(object):
    """Token bucket: `qps` requests per second on average, `burst` at once. qps 0: no limit.
    acquire() reserves the next slot under a lock and sleeps outside it, so threads queue in order."""

    def __init__(self, qps, burst=1, clock=time.monotonic, sleep=time.sleep):
        self.qps = float(qps or 0)
        self.burst = max(1, int(burst or 1))
        self.clock = clock
        self.sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(self.burst)
        self._last = None

    def acquire(self):
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = self.clock()
            if self._last is not None:
                self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
        if wait > 0:
            self.sleep(wait)
        return wait


class Batch(object):
    """What one batch came to. answers: job ID -> SubmitResult, or the LostResponse/LinkDown to
    look up (lookups answer from `found`); found: job ID -> CloudJob the list shows; confirmed: job
    IDs whose Job the list shows (with the attempt sent, or the one a 409 adopts); list_error:
    why the list failed (None when it answered); creates and lists: API requests sent."""

    def __init__(self):
        self.answers = {}
        self.found = {}
        self.confirmed = set()
        self.list_error = None
        self.creates = 0
        self.lists = 0
        self.seconds = 0.0

    def find_by_job_id(self, job_id):
        if self.list_error is not None:
            raise backends.LinkDown("cloud state unknown: the confirming list failed: %s" % self.list_error)
        return self.found.get(job_id)


def _send(cloud, kube, limiter, item):
    name, job_id, attempt_id, spec = item
    limiter.acquire()
    try:
        if kube is None:    # a cloud without send(): its own submit() settles a 409
            return cloud.submit(name, job_id, attempt_id, spec)
        return cloud.send(name, job_id, attempt_id, spec, kube=kube)
    except (backends.LostResponse, backends.LinkDown) as exc:
        return exc
    except k8s.K8sError as err:
        if err.status and 400 <= err.status < 500:     # the API refused the create (a missing namespace)
            return backends.SubmitResult(backends.REJECTED, reason=str(err))
        return backends.LostResponse("create of Job %s: %s, effect unknown" % (name, err))


def _find_many(cloud, job_ids, batch):
    if hasattr(cloud, "find_many"):
        batch.lists = (len(job_ids) + LIST_CHUNK - 1) // LIST_CHUNK
        return cloud.find_many(job_ids, chunk=LIST_CHUNK)
    batch.lists = len(job_ids)      # a cloud that cannot list is asked job by job
    found = dict((job_id, cloud.find_by_job_id(job_id)) for job_id in job_ids)
    return dict((job_id, job) for job_id, job in found.items() if job is not None)


def submit_batch(cloud, items, workers=8, qps=50.0, limiter=None):
    """items: [(name, job_id, attempt_id, spec)], one per job ID. Returns a Batch."""
    batch = Batch()
    if not items:
        return batch
    start = time.monotonic()
    limiter = limiter or RateLimiter(qps, burst=workers)
    kube = cloud.sender() if hasattr(cloud, "sender") else None
    with ThreadPoolExecutor(max_workers=max(1, int(workers))) as pool:
        sent = list(pool.map(lambda item: _send(cloud, kube, limiter, item), items))
    batch.creates = len(items)
    try:
        batch.found = _find_many(cloud, [item[1] for item in items], batch)
    except (backends.LinkDown, k8s.K8sError) as exc:   # the batch stays unconfirmed
        batch.list_error = exc
    for item, res in zip(items, sent):
        name, job_id, attempt_id = item[:3]
        seen = batch.found.get(job_id)
        conflict = isinstance(res, backends.SubmitResult) and res.outcome == CONFLICT
        if seen is not None and (seen.attempt_id == attempt_id or conflict):
            batch.confirmed.add(job_id)
        if conflict:
            res = backends.SubmitResult(backends.ALREADY_EXISTS, job=seen) if seen is not None else \
                backends.LostResponse("create of Job %s: AlreadyExists, and no Job has its job-ID label" % name)
        batch.answers[job_id] = res
    batch.seconds = time.monotonic() - start
    return batch
