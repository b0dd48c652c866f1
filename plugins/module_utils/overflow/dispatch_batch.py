# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The dispatch protocol with the cloud submissions of a pass sent together.

BatchDispatcher runs every step of protocol.Dispatcher one job at a time (hold, staging, image,
ledger writes), except the cloud create: that waits in `pending` until flush(), which sends the
creates of the whole pass from a bounded worker pool under a client-side QPS limit and confirms
them with one list by the job-ID label (submit_pool.py). Each job's answer is then recorded by
Dispatcher.record_submit, as the one-at-a-time path records it; the lookups that follow a lost
answer read the batch's list instead of one request per job.

Until flush() a submission stands as the attempt state "submitting" with its cloud name in the
ledger, the local entry held: a pass that stops there is picked up by the next (step() sends the
create again; a Job that did land is adopted on 409, never created twice).
"""
from __future__ import annotations

from . import submit_pool
from .protocol import Dispatcher, cloud_job_name, job_labels


class _Lookups(object):
    """The cloud as the protocol sees it while a batch is recorded: lookups answer from the
    batch's list; stop and the rest go to the cloud itself."""

    def __init__(self, cloud, batch):
        self._cloud = cloud
        self._batch = batch

    def find_by_job_id(self, job_id):
        return self._batch.find_by_job_id(job_id)

    def __getattr__(self, name):
        return getattr(self._cloud, name)


class BatchDispatcher(Dispatcher):
    """Dispatcher whose cloud creates go out at flush(). workers: threads sending creates;
    qps: client-side limit on those requests per second (0: none)."""

    def __init__(self, *args, **kwargs):
        self.workers = int(kwargs.pop("workers", 8) or 1)
        self.qps = float(kwargs.pop("qps", 50.0) or 0)
        super(BatchDispatcher, self).__init__(*args, **kwargs)
        self.pending = []   # (job_id, attempt_id, name, body, the result dict handed out)
        self.batches = []

    def _submit(self, job_id, attempt_id, spec):
        name = cloud_job_name(job_id)
        self.tracker.set_attempt(attempt_id, state="submitting", cloud_name=name)
        body = dict(spec)
        body.update(job_labels(job_id, attempt_id, self.path))
        res = self._result(job_id, "submitting", "cloud Job %s waits for the batch" % name, attempt_id)
        self.pending.append((job_id, attempt_id, name, body, res))
        return res

    def flush(self):
        """Send the pending creates, confirm them by list, record each answer. The result dicts
        handed out by dispatch()/step() are updated in place. Returns the Batch (None when empty)."""
        pending, self.pending = self.pending, []
        if not pending:
            return None
        batch = submit_pool.submit_batch(self.cloud, [(p[2], p[0], p[1], p[3]) for p in pending],
                                         workers=self.workers, qps=self.qps)
        cloud, self.cloud = self.cloud, _Lookups(self.cloud, batch)
        try:
            for entry in pending:
                job_id, attempt_id, res = entry[0], entry[1], entry[4]
                res.update(self.record_submit(job_id, attempt_id, batch.answers[job_id]))
                seen = batch.found.get(job_id)
                res["confirmed"] = seen is not None and seen.attempt_id == res.get("attempt_id")
        finally:
            self.cloud = cloud
        self.batches.append(batch)
        return batch
