# -*- coding: utf-8 -*-
"""Exactly-once dispatch of a queued local job to the cloud cluster. Backend-agnostic.

Rules:
1. Hold the local entry before the cloud submission goes out, keeping the job ID.
   If the job already started locally, abandon: nothing goes to the cloud.
2. Submit under a name derived from the job ID, labelled with job ID and attempt ID.
   AlreadyExists means adopt the existing Job, never create a second.
3. A lost submission response keeps the entry held until a lookup by job-ID label tells the cloud state.
4. Release locally only when the cloud rejected the submission or the lookup shows no Job.
5. Returning a job to the local queue stops the cloud attempt first, so it cannot commit later.
   Before submitting, the job's image is made present in the cloud pool's cache: cached when the
   digests match, else a cold pull verified by digest (both digests logged).
6. Commit only after outputs are verified by checksum; retries stay under caps.
Every step is appended to the tracker's attempt log, labelled with the dispatch path.
"""
from __future__ import annotations

import hashlib
import re
import uuid

from . import backends
from .ledger import summary

PATHS = ("operator", "policy")

# Tracker job states
J_QUEUED = "queued"             # known, not dispatched
J_LOCAL_RUNNING = "local_running"   # started locally at dispatch time; dispatch abandoned
J_HELD = "held"                 # local entry held, staging / submitting
J_HELD_UNKNOWN = "held_unknown"  # held, cloud state unknown (lost response or link down)
J_CLOUD = "cloud"               # a cloud attempt is live
J_RETURNING = "returning"       # cloud finished, results coming back
J_FINISHED = "finished"         # output verified and committed
J_BACK_LOCAL = "back_local"     # released to the local queue
J_GONE = "gone"                 # the local entry no longer exists
ACTIVE_STATES = frozenset([J_HELD, J_HELD_UNKNOWN, J_CLOUD, J_RETURNING])

LABEL_JOB = "hybridgpu.io/overflow-job"
LABEL_ATTEMPT = "hybridgpu.io/overflow-attempt"
LABEL_PATH = "hybridgpu.io/overflow-path"
ANNOTATION_JOB_ID = "hybridgpu.io/overflow-job-id"

_NOT_DNS = re.compile(r"[^a-z0-9-]+")


def cloud_job_name(job_id):
    """Deterministic DNS-1123 label (<= 63 chars) for a job ID: ovf-<sanitized id>-<8 hex of sha256>."""
    digest = hashlib.sha256(job_id.encode("utf-8")).hexdigest()[:8]
    clean = re.sub(r"-+", "-", _NOT_DNS.sub("-", job_id.lower())).strip("-")
    clean = clean[:63 - len("ovf-") - 1 - len(digest)].rstrip("-")
    return "ovf-%s-%s" % (clean, digest) if clean else "ovf-%s" % digest


def job_labels(job_id, attempt_id, path):
    """Labels and annotations put on the cloud Job. The job-ID label value is the derived name
    (label-safe and unique per job); the raw job ID goes in an annotation."""
    return {
        "labels": {LABEL_JOB: cloud_job_name(job_id), LABEL_ATTEMPT: attempt_id, LABEL_PATH: path},
        "annotations": {ANNOTATION_JOB_ID: job_id},
    }


def new_attempt_id():
    return "att-" + uuid.uuid4().hex[:12]


class Dispatcher(object):
    """Drives one job at a time through the protocol. All durable state is in the tracker and the backends,
    so a new Dispatcher (e.g. the next scheduled run) picks up where the last one stopped."""

    def __init__(self, local, cloud, stager, tracker, path, actor="dispatcher", max_attempts=3,
                 max_transfer_tries=3, max_return_tries=3, id_factory=new_attempt_id):
        if path not in PATHS:
            raise ValueError("path must be one of %s, not %r" % (PATHS, path))
        self.local, self.cloud, self.stager, self.tracker = local, cloud, stager, tracker
        self.path, self.actor, self.new_id = path, actor, id_factory
        self.max_attempts, self.max_transfer_tries, self.max_return_tries = max_attempts, max_transfer_tries, max_return_tries

    # -- helpers --------------------------------------------------------------------------------

    def _log(self, job_id, attempt_id, step, result, detail=None):
        self.tracker.log(job_id, attempt_id, step, result, detail, path=self.path)

    def _result(self, job_id, outcome, reason, attempt_id=None):
        job = self.tracker.job(job_id)
        return {"job_id": job_id, "path": self.path, "outcome": outcome, "reason": reason,
                "state": job["state"] if job else None, "attempt_id": attempt_id,
                "cloud_name": cloud_job_name(job_id), "marks": summary(self.tracker.marks(job_id), attempt_id)}

    def _current_attempt(self, job_id):
        attempts = self.tracker.attempts(job_id)
        return attempts[-1] if attempts else None

    def _cloud_attempts(self, job_id):
        """Attempts that reached the cloud side (count against max_attempts)."""
        return [a for a in self.tracker.attempts(job_id) if a["cloud_name"]]

    def _release(self, job_id, attempt_id, why):
        self.local.release(job_id)
        self.tracker.set_job_state(job_id, J_BACK_LOCAL)
        self._log(job_id, attempt_id, "release_local", "released", why)
        return self._result(job_id, "released", why, attempt_id)

    # -- entry points ---------------------------------------------------------------------------

    def dispatch(self, job_id, job_class=None, spec=None, inputs=None, image=None):
        """Hold the local entry, stage inputs, ensure the image on the cloud pool, submit to the cloud.
        image: the job's image artefact for Stager.ensure_image (also read from spec["image_artifact"]).
        Returns a result dict."""
        spec = dict(spec or {})
        if inputs is not None:
            spec["inputs"] = inputs
        if image is not None:
            spec["image_artifact"] = image
        self.tracker.ensure_job(job_id, job_class, self.path, spec)
        job = self.tracker.job(job_id)
        if job["state"] not in (J_QUEUED, J_BACK_LOCAL):
            return self._result(job_id, "noop", "job is %s; dispatch does nothing" % job["state"])
        if len(self._cloud_attempts(job_id)) >= self.max_attempts:
            return self._result(job_id, "noop", "attempt cap %d reached; job stays local" % self.max_attempts)
        attempt_id = self.new_id()
        self.tracker.start_attempt(job_id, attempt_id)
        self._log(job_id, attempt_id, "dispatch", "started", {"actor": self.actor, "job_class": job_class})
        answer = self.local.hold(job_id)
        self._log(job_id, attempt_id, "hold", answer)
        if answer == backends.ALREADY_STARTED:
            self.tracker.set_attempt(attempt_id, state="abandoned", ended=True)
            self.tracker.set_job_state(job_id, J_LOCAL_RUNNING)
            return self._result(job_id, "abandoned", "job already started locally; nothing sent to the cloud",
                                attempt_id)
        if answer == backends.GONE:
            self.tracker.set_attempt(attempt_id, state="abandoned", ended=True)
            self.tracker.set_job_state(job_id, J_GONE)
            return self._result(job_id, "abandoned", "local entry is gone", attempt_id)
        self.tracker.set_job_state(job_id, J_HELD)
        self.tracker.mark(job_id, attempt_id, "dispatch", path=self.path)
        return self._stage_and_submit(job_id, attempt_id)

    def step(self, job_id):
        """Advance a dispatched job by one look at the world (what a scheduled policy run does)."""
        job = self.tracker.job(job_id)
        if job is None:
            return {"job_id": job_id, "path": self.path, "outcome": "unknown", "reason": "not in tracker",
                    "state": None, "attempt_id": None, "cloud_name": cloud_job_name(job_id)}
        state = job["state"]
        if state == J_HELD_UNKNOWN:
            return self.reconcile(job_id)
        if state == J_HELD:
            # A previous run stopped between hold and submit (crash): continue with the same attempt.
            att = self._current_attempt(job_id)
            return self._stage_and_submit(job_id, att["attempt_id"])
        if state in (J_CLOUD, J_RETURNING):
            return self.poll(job_id)
        if state == J_FINISHED:
            return self.cleanup(job_id)
        return self._result(job_id, "noop", "job is %s" % state)

    def cleanup(self, job_id):
        """Release cloud resources still marked in use for a finished job (stop failed earlier)."""
        pending = [a for a in self.tracker.attempts(job_id) if a["resources"] == "in_use"]
        if not pending:
            return self._result(job_id, "noop", "job is finished; nothing left to release")
        try:
            res = self.cloud.stop(job_id)
        except backends.LinkDown as exc:
            self._log(job_id, pending[-1]["attempt_id"], "stop", "link_down", str(exc))
            return self._result(job_id, "finished", "cloud resources not released yet (%s)" % exc)
        for a in pending:
            self.tracker.mark_resources(a["attempt_id"], res)
            self._log(job_id, a["attempt_id"], "stop", res)
        return self._result(job_id, "released_resources", "cloud resources %s" % res, pending[-1]["attempt_id"])

    def reconcile(self, job_id):
        """Cloud state unknown: look up by job-ID label. Adopt what is there, or release if nothing is."""
        att = self._current_attempt(job_id)
        attempt_id = att["attempt_id"] if att else None
        try:
            found = self.cloud.find_by_job_id(job_id)
        except backends.LinkDown as exc:
            self._log(job_id, attempt_id, "lookup", "link_down", str(exc))
            return self._result(job_id, "held", "cloud state unknown (%s); local entry stays held" % exc,
                                attempt_id)
        if found is None:
            self._log(job_id, attempt_id, "lookup", "no_job")
            self.tracker.set_attempt(attempt_id, state="not_created", ended=True)
            return self._release(job_id, attempt_id, "lookup shows no cloud Job under this job ID")
        if found.phase == backends.TERMINATING:
            self._log(job_id, attempt_id, "lookup", "terminating", found.as_dict())
            return self._result(job_id, "held", "a cloud Job is still terminating; entry stays held", attempt_id)
        self._log(job_id, attempt_id, "lookup", "found", found.as_dict())
        return self._adopt(job_id, attempt_id, found)

    def poll(self, job_id):
        """Look at the live cloud attempt: wait, collect results, or retry after a failure."""
        att = self._current_attempt(job_id)
        try:
            cj = self.cloud.find_by_job_id(job_id)
        except backends.LinkDown as exc:
            self._log(job_id, att["attempt_id"], "poll", "link_down", str(exc))
            return self._result(job_id, "running", "cloud unreachable; the cloud run goes on on its own",
                                att["attempt_id"])
        if cj is None:
            self._log(job_id, att["attempt_id"], "poll", "no_job")
            self.tracker.set_attempt(att["attempt_id"], state="lost", resources="released", ended=True)
            return self._retry_or_release(job_id, att["attempt_id"], "cloud Job disappeared")
        if cj.attempt_id != att["attempt_id"]:
            # The cloud runs another attempt than the one we recorded last: follow the cloud.
            self._adopt(job_id, att["attempt_id"], cj)
            att = self._current_attempt(job_id)
        if cj.phase == backends.RUNNING:
            self.tracker.mark(job_id, cj.attempt_id, "start", path=self.path)
        elif cj.phase in (backends.SUCCEEDED, backends.FAILED):
            self.tracker.mark(job_id, cj.attempt_id, "end", path=self.path)
        if cj.phase in backends.LIVE_PHASES or cj.phase == backends.TERMINATING:
            return self._result(job_id, "running", "cloud Job is %s" % cj.phase, cj.attempt_id)
        if cj.phase == backends.FAILED:
            self._log(job_id, cj.attempt_id, "poll", "failed", cj.reason)
            try:
                res = self.cloud.stop(job_id)
            except backends.LinkDown as exc:
                self._log(job_id, cj.attempt_id, "stop", "link_down", str(exc))
                return self._result(job_id, "running", "failed Job could not be removed yet", cj.attempt_id)
            self.tracker.set_attempt(cj.attempt_id, state="failed", resources=res, ended=True)
            self._log(job_id, cj.attempt_id, "stop", res)
            return self._retry_or_release(job_id, cj.attempt_id, "cloud attempt failed: %s" % cj.reason)
        return self._collect(job_id, cj)

    def return_to_local(self, job_id, who):
        """Operator or scheduler takes the job back: stop the cloud attempt FIRST, then release locally."""
        job = self.tracker.job(job_id)
        if job is None or job["state"] not in ACTIVE_STATES:
            state = job["state"] if job else None
            return self._result(job_id, "noop", "job is %s; nothing to return" % state)
        att = self._current_attempt(job_id)
        attempt_id = att["attempt_id"] if att else None
        try:
            res = self.cloud.stop(job_id)
            still = self.cloud.find_by_job_id(job_id)
        except backends.LinkDown as exc:
            self._log(job_id, attempt_id, "return_to_local", "refused", {"who": who, "error": str(exc)})
            return self._result(job_id, "held", "cannot stop the cloud attempt (%s); entry stays held" % exc,
                                attempt_id)
        if still is not None:
            self._log(job_id, attempt_id, "return_to_local", "stop_pending", {"who": who})
            return self._result(job_id, "held", "cloud Job still present after stop; entry stays held", attempt_id)
        for a in self.tracker.attempts(job_id):
            if a["ended_at"] is None:
                self.tracker.set_attempt(a["attempt_id"], state="stopped",
                                         resources=res if a["resources"] == "in_use" else None, ended=True)
        self._log(job_id, attempt_id, "stop", res, {"who": who})
        return self._release(job_id, attempt_id, "returned to the local queue by %s after stopping the cloud attempt"
                             % who)

    # -- internals ------------------------------------------------------------------------------

    def _stage_and_submit(self, job_id, attempt_id):
        spec = self.tracker.job_spec(job_id) or {}
        inputs = spec.get("inputs") or []
        for n in range(1, self.max_transfer_tries + 1):
            try:
                got = self.stager.stage_inputs(job_id, inputs)
            except backends.TransferInterrupted as exc:
                self._log(job_id, attempt_id, "stage_inputs", "interrupted",
                          {"try": n, "done_bytes": exc.done_bytes, "error": str(exc)})
                continue
            self._log(job_id, attempt_id, "stage_inputs", "verified", got)
            break
        else:
            # Nothing was submitted for this attempt, and earlier attempts were stopped before it began.
            self.tracker.set_attempt(attempt_id, state="failed", ended=True)
            return self._release(job_id, attempt_id, "input transfer failed %d times" % self.max_transfer_tries)
        image = spec.get("image_artifact")
        if image:
            for n in range(1, self.max_transfer_tries + 1):
                try:
                    got = self.stager.ensure_image(job_id, image)
                except backends.TransferInterrupted as exc:
                    self._log(job_id, attempt_id, "ensure_image", "interrupted", {"try": n, "error": str(exc)})
                    continue
                # both digests and the outcome (cached / cold_pull) go in the attempt log
                self._log(job_id, attempt_id, "ensure_image", got["outcome"], got)
                break
            else:
                self.tracker.set_attempt(attempt_id, state="failed", ended=True)
                return self._release(job_id, attempt_id, "image %s could not be cached on the cloud pool in %d tries"
                                     % (image.get("name"), self.max_transfer_tries))
        self.tracker.mark(job_id, attempt_id, "transfer_in", path=self.path)
        return self._submit(job_id, attempt_id, spec)

    def _submit(self, job_id, attempt_id, spec):
        name = cloud_job_name(job_id)
        self.tracker.set_attempt(attempt_id, state="submitting", cloud_name=name)
        body = dict(spec)
        body.update(job_labels(job_id, attempt_id, self.path))
        try:
            res = self.cloud.submit(name, job_id, attempt_id, body)
        except (backends.LostResponse, backends.LinkDown) as exc:
            res = exc
        return self.record_submit(job_id, attempt_id, res)

    def record_submit(self, job_id, attempt_id, res):
        """Record the cloud's answer to a submission: a SubmitResult, or the LostResponse or
        LinkDown it raised (then the cloud is looked up by job-ID label: reconcile)."""
        name = cloud_job_name(job_id)
        if isinstance(res, Exception):
            kind = "lost_response" if isinstance(res, backends.LostResponse) else "link_down"
            self._log(job_id, attempt_id, "submit", kind, str(res))
            self.tracker.set_attempt(attempt_id, state="unknown")
            self.tracker.set_job_state(job_id, J_HELD_UNKNOWN)
            return self.reconcile(job_id)
        if res.outcome == backends.CREATED:
            self._log(job_id, attempt_id, "submit", "created", name)
            self.tracker.set_attempt(attempt_id, state="submitted", resources="in_use")
            self.tracker.set_job_state(job_id, J_CLOUD)
            return self._result(job_id, "submitted", "cloud Job %s created" % name, attempt_id)
        if res.outcome == backends.ALREADY_EXISTS:
            self._log(job_id, attempt_id, "submit", "already_exists", res.job.as_dict())
            return self._adopt(job_id, attempt_id, res.job)
        self._log(job_id, attempt_id, "submit", "rejected", res.reason)
        self.tracker.set_attempt(attempt_id, state="rejected", ended=True)
        return self._release(job_id, attempt_id, "cloud rejected the submission: %s" % res.reason)

    def _adopt(self, job_id, attempt_id, cj):
        """Adopt the Job the cloud already has for this job ID instead of creating another."""
        if cj.attempt_id != attempt_id:
            if attempt_id is not None and self.tracker.attempt(attempt_id)["ended_at"] is None:
                self.tracker.set_attempt(attempt_id, state="adopted_away", ended=True)
            if self.tracker.attempt(cj.attempt_id) is None:
                self.tracker.start_attempt(job_id, cj.attempt_id, state="submitted")
                self.tracker.set_attempt(cj.attempt_id, cloud_name=cj.name)
        self.tracker.set_attempt(cj.attempt_id, state="submitted", resources="in_use")
        self.tracker.set_job_state(job_id, J_CLOUD)
        self._log(job_id, cj.attempt_id, "adopt", "adopted", cj.as_dict())
        return self._result(job_id, "adopted", "adopted existing cloud Job %s (attempt %s)" % (cj.name, cj.attempt_id),
                            cj.attempt_id)

    def _retry_or_release(self, job_id, failed_attempt, why):
        if len(self._cloud_attempts(job_id)) >= self.max_attempts:
            self._log(job_id, failed_attempt, "retry", "cap_reached", why)
            return self._release(job_id, failed_attempt, "%s; attempt cap %d reached" % (why, self.max_attempts))
        attempt_id = self.new_id()
        self.tracker.start_attempt(job_id, attempt_id)
        self._log(job_id, attempt_id, "retry", "started", {"after": failed_attempt, "why": why})
        self.tracker.set_job_state(job_id, J_HELD)
        self.tracker.mark(job_id, attempt_id, "dispatch", path=self.path)
        return self._stage_and_submit(job_id, attempt_id)

    def _return_failures(self, job_id, attempt_id):
        return sum(1 for e in self.tracker.logs(job_id)
                   if e["attempt_id"] == attempt_id and e["step"] == "fetch_outputs" and e["result"] != "verified")

    def _collect(self, job_id, cj):
        self.tracker.set_job_state(job_id, J_RETURNING)
        attempt_id = cj.attempt_id
        while self._return_failures(job_id, attempt_id) < self.max_return_tries:
            try:
                got = self.stager.fetch_outputs(job_id, cj)
            except backends.ReturnFailed as exc:
                self._log(job_id, attempt_id, "fetch_outputs", "failed", str(exc))
                continue
            if got["checksum"] != cj.output_checksum:
                self._log(job_id, attempt_id, "fetch_outputs", "checksum_mismatch",
                          {"expected": cj.output_checksum, "got": got["checksum"], "ref": got["ref"]})
                continue
            self._log(job_id, attempt_id, "fetch_outputs", "verified", got)
            self.tracker.mark(job_id, attempt_id, "return", path=self.path)
            verdict = self.tracker.commit(job_id, attempt_id, got["checksum"], self.actor, output_ref=got["ref"],
                                          verified_at=self.tracker.clock())
            if not verdict["committed"] and verdict["existing_attempt_id"] is None:
                # Refused for a reason other than an earlier commit (e.g. attempt stopped): do not finish.
                return self._result(job_id, "commit_refused", verdict["reason"], attempt_id)
            return self._finish(job_id, attempt_id, verdict)
        # Results could not be brought back intact within the cap: give the job back to the local queue.
        try:
            res = self.cloud.stop(job_id)
        except backends.LinkDown as exc:
            self._log(job_id, attempt_id, "stop", "link_down", str(exc))
            return self._result(job_id, "returning", "return failed and cloud unreachable; retry later", attempt_id)
        self.tracker.set_attempt(attempt_id, state="failed", resources=res, ended=True)
        self._log(job_id, attempt_id, "stop", res)
        return self._release(job_id, attempt_id, "results could not be returned intact after %d tries"
                             % self.max_return_tries)

    def _finish(self, job_id, attempt_id, verdict):
        try:
            res = self.cloud.stop(job_id)
            self._log(job_id, attempt_id, "stop", res)
        except backends.LinkDown as exc:
            res = None
            self._log(job_id, attempt_id, "stop", "link_down", str(exc))
        if verdict["committed"]:
            self.tracker.set_attempt(attempt_id, state="committed", resources=res, ended=True)
        else:
            self.tracker.set_attempt(attempt_id, resources=res, ended=True)
        self.local.withdraw(job_id)
        self.tracker.set_job_state(job_id, J_FINISHED)
        self._log(job_id, attempt_id, "finish", "finished", verdict["reason"])
        return self._result(job_id, "finished", verdict["reason"], attempt_id)
