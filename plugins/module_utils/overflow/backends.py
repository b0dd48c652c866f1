# -*- coding: utf-8 -*-
"""Backend interfaces for the overflow protocol, and an in-memory reference backend.

The lab backends (Kubernetes Jobs with spec.suspend, Slurm with scontrol hold, the cloud
emulator through the official client, rsync/SSH staging) implement the same interfaces.
The in-memory backend carries real bytes and real sha256 checksums, and lets tests inject
each failure of the drill list.
"""
from __future__ import annotations

import abc
import hashlib

# LocalQueue.hold() answers
HELD = "held"
ALREADY_STARTED = "already_started"
GONE = "gone"

# LocalQueue.state() values
Q_QUEUED = "queued"
Q_HELD = "held"
Q_RUNNING = "running"
Q_DONE = "done"
Q_WITHDRAWN = "withdrawn"   # finished elsewhere (in the cloud); the local entry was removed
Q_GONE = "gone"

# CloudCluster.submit() outcomes
CREATED = "created"
ALREADY_EXISTS = "already_exists"
REJECTED = "rejected"

# CloudJob phases
PENDING = "pending"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
TERMINATING = "terminating"
LIVE_PHASES = frozenset([PENDING, RUNNING])


class LinkDown(Exception):
    """The management link to the cloud is down; the request may not have gone out."""


class LostResponse(Exception):
    """The request went out but no response came back; its effect is unknown."""


class TransferInterrupted(Exception):
    """A transfer stopped part way. `done_bytes` were kept and the next call resumes."""

    def __init__(self, message, done_bytes=0):
        super(TransferInterrupted, self).__init__(message)
        self.done_bytes = done_bytes


class ReturnFailed(Exception):
    """Copying results back on-prem failed; nothing usable landed."""


def sha256_hex(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


class SubmitResult(object):
    def __init__(self, outcome, job=None, reason=None):
        self.outcome = outcome
        self.job = job
        self.reason = reason

    def __repr__(self):
        return "SubmitResult(%r, reason=%r)" % (self.outcome, self.reason)


class CloudJob(object):
    """What the cloud side knows about a job: found by its job-ID label."""

    def __init__(self, name, job_id, attempt_id, phase=PENDING, reason=None, output_checksum=None):
        self.name = name
        self.job_id = job_id
        self.attempt_id = attempt_id
        self.phase = phase
        self.reason = reason
        self.output_checksum = output_checksum

    def as_dict(self):
        return dict(name=self.name, job_id=self.job_id, attempt_id=self.attempt_id, phase=self.phase,
                    reason=self.reason, output_checksum=self.output_checksum)


class LocalQueue(abc.ABC):
    """The on-prem queue (Kubernetes Jobs or Slurm). The job ID is kept through hold and release."""

    @abc.abstractmethod
    def hold(self, job_id):
        """Hold or withdraw the entry so the local scheduler will not start it. Returns HELD, ALREADY_STARTED or GONE."""

    @abc.abstractmethod
    def release(self, job_id):
        """Put a held entry back in the local queue, same job ID."""

    @abc.abstractmethod
    def withdraw(self, job_id):
        """Remove a held entry for good: the job finished elsewhere and its output is committed."""

    @abc.abstractmethod
    def state(self, job_id):
        """One of Q_QUEUED, Q_HELD, Q_RUNNING, Q_DONE, Q_WITHDRAWN, Q_GONE."""


class CloudCluster(abc.ABC):
    """The cloud Kubernetes cluster. Calls may raise LinkDown; submit may also raise LostResponse."""

    @abc.abstractmethod
    def submit(self, name, job_id, attempt_id, spec):
        """Create the Job `name` labelled with job and attempt IDs. Returns SubmitResult
        (CREATED, ALREADY_EXISTS with .job to adopt, REJECTED with .reason)."""

    @abc.abstractmethod
    def find_by_job_id(self, job_id):
        """The CloudJob carrying this job-ID label, or None."""

    @abc.abstractmethod
    def stop(self, job_id):
        """Delete the Job and its pods (idempotent). Returns 'released' or 'returned_to_pool'."""


class Stager(abc.ABC):
    """Moves inputs to cloud storage and results back on-prem, both checked by checksum."""

    @abc.abstractmethod
    def stage_inputs(self, job_id, inputs):
        """Copy inputs with checksums, resuming a partial copy. Raises TransferInterrupted.
        Returns {"bytes_sent", "bytes_skipped", "resumed", "files"}."""

    @abc.abstractmethod
    def fetch_outputs(self, job_id, cloud_job):
        """Copy the job's results on-prem. Raises ReturnFailed. Returns {"ref", "checksum"}
        where checksum is computed over what actually landed on-prem."""

    @abc.abstractmethod
    def ensure_image(self, job_id, image):
        """Make the job's image present in the cloud pool's image cache.
        image: {"name", "digest": "sha256:<hex>" of the on-prem copy, ...backend fields}.
        Compares the on-prem digest with the cached copy's digest: equal -> outcome "cached", nothing
        copied; absent or different -> outcome "cold_pull": copied, then the cached digest is read again
        and must equal the on-prem one. Raises TransferInterrupted when the copy fails or does not verify.
        Returns {"name", "outcome", "onprem_digest", "cached_digest" (before), "verified_digest" (after),
        "bytes_sent", "pull_seconds"}."""


# ---------------------------------------------------------------------------------------------
# In-memory reference backend
# ---------------------------------------------------------------------------------------------

def _content(seed, size):
    """Deterministic bytes of a given size."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out.extend(hashlib.sha256(("%s:%d" % (seed, counter)).encode()).digest())
        counter += 1
    return bytes(out[:size])


class MemoryLocalQueue(LocalQueue):
    """A local queue whose scheduler the test drives: start() runs a queued job on local GPUs."""

    def __init__(self):
        self.jobs = {}
        self.started_on_hold = set()    # fault: local GPUs free up at the moment of dispatch
        self.history = []

    def add(self, job_id):
        self.jobs[job_id] = Q_QUEUED

    def start(self, job_id):
        """The local scheduler starts the job if it is queued (not held). Returns True if it started."""
        if self.jobs.get(job_id) == Q_QUEUED:
            self.jobs[job_id] = Q_RUNNING
            self.history.append((job_id, "started"))
            return True
        return False

    def finish(self, job_id):
        if self.jobs.get(job_id) == Q_RUNNING:
            self.jobs[job_id] = Q_DONE
            return True
        return False

    def hold(self, job_id):
        if job_id in self.started_on_hold:
            self.started_on_hold.discard(job_id)
            self.start(job_id)
        st = self.jobs.get(job_id)
        if st is None or st in (Q_GONE, Q_WITHDRAWN):
            return GONE
        if st in (Q_RUNNING, Q_DONE):
            return ALREADY_STARTED
        self.jobs[job_id] = Q_HELD
        return HELD

    def release(self, job_id):
        if self.jobs.get(job_id) == Q_HELD:
            self.jobs[job_id] = Q_QUEUED

    def withdraw(self, job_id):
        if self.jobs.get(job_id) == Q_HELD:
            self.jobs[job_id] = Q_WITHDRAWN

    def state(self, job_id):
        return self.jobs.get(job_id, Q_GONE)


class MemoryStorage(object):
    """Cloud object storage and on-prem result storage, shared by the cloud and the stager."""

    def __init__(self):
        self.cloud_inputs = {}      # (job_id or 'shared', name) -> bytearray
        self.cloud_outputs = {}     # job_id -> bytes written by the cloud job
        self.onprem_outputs = {}    # ref -> bytes landed on-prem
        self.onprem_images = {}     # name -> bytes (the on-prem registry copy)
        self.image_cache = {}       # name -> bytes cached on the cloud pool


class MemoryCloud(CloudCluster):
    """Cloud cluster with one Job per name; tests advance jobs and inject faults."""

    def __init__(self, storage, warm_pool=True, output_size=256):
        self.storage = storage
        self.jobs = {}              # name -> CloudJob
        self.by_job = {}            # job_id -> name
        self.warm_pool = warm_pool
        self.output_size = output_size
        self.link_down = False
        self.drop_responses = 0     # fault: the next N submissions take effect but their response is lost
        self.reject_next = 0        # fault: the next N submissions are refused (quota)
        self.creations = []         # (name, attempt_id) of every Job ever created

    def _link(self):
        if self.link_down:
            raise LinkDown("management link to the cloud is down")

    def submit(self, name, job_id, attempt_id, spec):
        self._link()
        if self.reject_next:
            self.reject_next -= 1
            return SubmitResult(REJECTED, reason="exceeded quota: nvidia.com/gpu")
        if name in self.jobs:
            return SubmitResult(ALREADY_EXISTS, job=self.jobs[name])
        job = CloudJob(name, job_id, attempt_id)
        self.jobs[name] = job
        self.by_job[job_id] = name
        self.creations.append((name, attempt_id))
        if self.drop_responses:
            self.drop_responses -= 1
            raise LostResponse("no response to create of %s" % name)
        return SubmitResult(CREATED, job=job)

    def find_by_job_id(self, job_id):
        self._link()
        name = self.by_job.get(job_id)
        return self.jobs.get(name) if name else None

    def stop(self, job_id):
        self._link()
        name = self.by_job.pop(job_id, None)
        if name:
            self.jobs.pop(name, None)
        return "returned_to_pool" if self.warm_pool else "released"

    # test drivers
    def live(self, job_id):
        job = self.jobs.get(self.by_job.get(job_id))
        return job is not None and job.phase in LIVE_PHASES

    def advance(self, job_id):
        """pending -> running -> succeeded (writing outputs and their checksum)."""
        job = self.jobs.get(self.by_job.get(job_id))
        if job is None:
            return None
        if job.phase == PENDING:
            job.phase = RUNNING
        elif job.phase == RUNNING:
            data = _content("out:%s:%s" % (job_id, job.attempt_id), self.output_size)
            self.storage.cloud_outputs[job_id] = data
            job.output_checksum = sha256_hex(data)
            job.phase = SUCCEEDED
        return job.phase

    def lose_node(self, job_id):
        """Fault: the node running the job is lost; the Job fails."""
        job = self.jobs.get(self.by_job.get(job_id))
        if job is not None and job.phase in LIVE_PHASES:
            job.phase = FAILED
            job.reason = "NodeLost"
            return True
        return False


class MemoryStager(Stager):
    """Stager over MemoryStorage. Inputs are [{"name", "size", "shared": bool}]; content is deterministic."""

    def __init__(self, storage, chunk=64):
        self.storage = storage
        self.chunk = chunk
        self.interrupt_next = 0     # fault: the next N transfers stop half way
        self.corrupt_next = 0       # fault: the next N returns land with a flipped byte
        self.fail_return_next = 0   # fault: the next N return copies fail
        self.corrupt_pull_next = 0  # fault: the next N image pulls land with a flipped byte
        self.bytes_sent_total = 0
        self.image_pulls = 0

    def ensure_image(self, job_id, image):
        name = image["name"]
        data = self.storage.onprem_images.get(name)
        if data is None:
            raise TransferInterrupted("image %s of %s: no on-prem copy" % (name, job_id))
        onprem = sha256_hex(data)
        if image.get("digest") and image["digest"] != onprem:
            raise TransferInterrupted("image %s: on-prem copy has digest %s, the class declares %s" % (
                name, onprem, image["digest"]))
        cached = self.storage.image_cache.get(name)
        before = sha256_hex(cached) if cached is not None else None
        out = {"name": name, "onprem_digest": onprem, "cached_digest": before, "bytes_sent": 0,
               "pull_seconds": 0.0}
        if before == onprem:
            out.update(outcome="cached", verified_digest=before)
            return out
        landed = data
        if self.corrupt_pull_next:
            self.corrupt_pull_next -= 1
            landed = bytes([data[0] ^ 0xFF]) + data[1:]
        self.storage.image_cache[name] = landed
        self.image_pulls += 1
        self.bytes_sent_total += len(data)
        after = sha256_hex(landed)
        if after != onprem:
            del self.storage.image_cache[name]
            raise TransferInterrupted("image %s: cached digest %s after the pull, on-prem %s; removed" % (
                name, after, onprem), done_bytes=0)
        out.update(outcome="cold_pull", verified_digest=after, bytes_sent=len(data))
        return out

    def clear_image(self, name):
        self.storage.image_cache.pop(name, None)

    def stage_inputs(self, job_id, inputs):
        sent = skipped = 0
        resumed = False
        for item in inputs:
            owner = "shared" if item.get("shared") else job_id
            key = (owner, item["name"])
            source = _content("in:%s:%s" % key, int(item["size"]))
            have = self.storage.cloud_inputs.setdefault(key, bytearray())
            if len(have) == len(source) and sha256_hex(bytes(have)) == sha256_hex(source):
                skipped += len(source)      # already there and verified (warm shared dataset)
                continue
            if have and source[:len(have)] == bytes(have):
                resumed = True
            else:
                del have[:]
            if self.interrupt_next:
                self.interrupt_next -= 1
                half = len(have) + max(1, (len(source) - len(have)) // 2)
                sent += half - len(have)
                have.extend(source[len(have):half])
                self.bytes_sent_total += sent
                raise TransferInterrupted("transfer of %s interrupted at %d/%d bytes" % (
                    item["name"], len(have), len(source)), done_bytes=len(have))
            sent += len(source) - len(have)
            have.extend(source[len(have):])
            if sha256_hex(bytes(have)) != sha256_hex(source):
                del have[:]
                raise TransferInterrupted("checksum mismatch on %s after copy" % item["name"], 0)
        self.bytes_sent_total += sent
        return {"bytes_sent": sent, "bytes_skipped": skipped, "resumed": resumed, "files": len(inputs)}

    def fetch_outputs(self, job_id, cloud_job):
        if self.fail_return_next:
            self.fail_return_next -= 1
            raise ReturnFailed("copy of results for %s failed" % job_id)
        data = self.storage.cloud_outputs.get(job_id)
        if data is None:
            raise ReturnFailed("no results for %s in cloud storage" % job_id)
        if self.corrupt_next:
            self.corrupt_next -= 1
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        ref = "onprem://results/%s/%s" % (job_id, cloud_job.attempt_id)
        self.storage.onprem_outputs[ref] = data
        return {"ref": ref, "checksum": sha256_hex(data)}
