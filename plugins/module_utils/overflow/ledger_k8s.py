# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The exactly-once ledger in the Kubernetes API, so every dispatch pass (any host, any AWX
container) sees the same jobs in flight. Objects, all in one namespace (prefix default hgpu-overflow):

  Lease     <prefix>-dispatch              one dispatch pass at a time (holderIdentity, renewTime)
  ConfigMap <prefix>-job-<name>            one job's record: state, attempts, attempt log, refused commits
  ConfigMap <prefix>-commit-<name>         the job's single commit, created once (immutable)

<name> is protocol.cloud_job_name(job_id) without its "ovf-" (sanitised ID plus 8 hex of its SHA-256);
the raw job ID is in the data and in an annotation. Every write of a job record is a replace with the
resourceVersion this ledger last read or wrote: a 409 means someone else moved the record. A state
change then raises LedgerConflict (nothing is overwritten); a log append re-reads and appends again.
A commit is the create of the commit object: a second create is a 409, recorded as a refused commit.
"""
from __future__ import annotations

import json
import socket
import time
import uuid

from ..common import k8s
from .ledger import LedgerBusy, LedgerConflict, MarksMixin
from .ledger_kube import KubeObjects, micro_time, parse_micro_time
from .protocol import LABEL_JOB, ANNOTATION_JOB_ID, cloud_job_name
from .tracker import NO_COMMIT_STATES, RESOURCE_STATES, TrackerError, explain

LEDGER_LABEL = "hybridgpu.io/overflow-ledger"


class K8sLedger(MarksMixin):
    """Same interface as tracker.Tracker; `objects` is KubeObjects or a test double with its semantics."""

    def __init__(self, kube_or_objects, namespace, prefix="hgpu-overflow", lease_seconds=300, clock=time.time,
                 identity=None, sleep=time.sleep):
        objects = kube_or_objects
        self.objects = objects if hasattr(objects, "replace") else KubeObjects(objects, namespace)
        self.ns = getattr(self.objects, "ns", namespace)
        self.prefix = prefix
        self.lease_seconds = int(lease_seconds)
        self.clock = clock
        self.sleep = sleep
        self.identity = identity or "%s-%s" % (socket.gethostname(), uuid.uuid4().hex[:8])
        self.path = "k8s:%s/%s" % (namespace, prefix)
        self._seen = {}          # object name -> resourceVersion this ledger last read or wrote
        self._attempt_jobs = {}  # attempt ID -> job ID
        self._cached = {}        # job ID -> record as last read or written
        self._held = False
        self._renewed = 0.0

    # -- names ----------------------------------------------------------------------------------
    def lease_name(self):
        return "%s-dispatch" % self.prefix

    def job_name(self, job_id):
        return "%s-job-%s" % (self.prefix, cloud_job_name(job_id)[len("ovf-"):])

    def commit_name(self, job_id):
        return "%s-commit-%s" % (self.prefix, cloud_job_name(job_id)[len("ovf-"):])

    # -- the pass lock (Lease) ------------------------------------------------------------------
    def lock(self, holder=None, wait_s=0.0, poll_s=2.0):
        """Take the dispatch Lease for this pass, waiting up to wait_s while another live holder has it.
        Raises LedgerBusy saying who holds it and when they last renewed."""
        if holder:
            self.identity = "%s/%s" % (holder, self.identity)
        deadline = time.monotonic() + float(wait_s or 0)
        while True:
            lease = self.objects.get("lease", self.lease_name())
            spec = (lease or {}).get("spec") or {}
            now = self.clock()
            renewed = parse_micro_time(spec.get("renewTime"))
            expired = renewed is None or now > renewed + int(spec.get("leaseDurationSeconds") or 0)
            if lease is None or not spec.get("holderIdentity") or spec.get("holderIdentity") == self.identity \
                    or expired:
                if self._take(lease, now):
                    return True
                continue
            if time.monotonic() >= deadline:
                raise LedgerBusy("another dispatch pass holds Lease %s/%s: holder %s, renewed %s, lease %ss; "
                                 "this pass waited %ss and changed nothing"
                                 % (self.ns, self.lease_name(), spec.get("holderIdentity"), spec.get("renewTime"),
                                    spec.get("leaseDurationSeconds"), wait_s or 0),
                                 holder=spec.get("holderIdentity"), renewed=spec.get("renewTime"))
            self.sleep(poll_s)

    def _take(self, lease, now):
        spec = dict((lease or {}).get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if lease else 0)
            spec["acquireTime"] = micro_time(now)
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=self.lease_seconds, renewTime=micro_time(now))
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.lease_name(), "namespace": self.ns}, "spec": spec}
        try:
            if lease is None:
                self.objects.create("lease", body)
            else:
                body["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
                self.objects.replace("lease", body)
        except k8s.K8sError as err:
            if err.conflict:
                return False     # another pass took or renewed it in between: read again
            raise
        self._held, self._renewed = True, now
        return True

    def _renew(self):
        """Renew the Lease once a third of its duration passed; a Lease taken by another pass stops the writes."""
        if not self._held or self.clock() - self._renewed < self.lease_seconds / 3.0:
            return
        lease = self.objects.get("lease", self.lease_name())
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        if holder != self.identity or not self._take(lease, self.clock()):
            self._held = False
            raise LedgerBusy("this pass lost Lease %s/%s to %s; it stops writing" % (self.ns, self.lease_name(), holder),
                             holder=holder)

    def unlock(self):
        if not self._held:
            return
        self._held = False
        lease = self.objects.get("lease", self.lease_name())
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        lease["spec"]["holderIdentity"] = None
        try:
            self.objects.replace("lease", lease)
        except k8s.K8sError as err:
            if not err.conflict:
                raise

    def close(self):
        self.unlock()

    # -- job records ----------------------------------------------------------------------------
    def _read(self, job_id):
        obj = self.objects.get("configmap", self.job_name(job_id))
        if obj is None:
            self._cached.pop(job_id, None)
            return None
        self._seen[obj["metadata"]["name"]] = obj["metadata"]["resourceVersion"]
        rec = json.loads((obj.get("data") or {}).get("record") or "{}")
        for a in rec.get("attempts", []):
            self._attempt_jobs[a["attempt_id"]] = job_id
        self._cached[job_id] = rec
        return json.loads(json.dumps(rec))

    def _body(self, job_id, rec):
        name = self.job_name(job_id)
        meta = {"name": name, "namespace": self.ns,
                "labels": {LEDGER_LABEL: "job", LABEL_JOB: cloud_job_name(job_id)},
                "annotations": {ANNOTATION_JOB_ID: job_id}}
        if name in self._seen:
            meta["resourceVersion"] = self._seen[name]
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                "data": {"record": json.dumps(rec, sort_keys=True)}}

    def _write(self, job_id, change, moves_state=True):
        """Apply change(rec) to the record as this ledger last read it and replace it with that
        resourceVersion. On 409 a state change raises LedgerConflict (nothing is overwritten); a log
        append reads again and appends again."""
        self._renew()
        name = self.job_name(job_id)
        for dummy in range(10):
            cached = self._cached.get(job_id)
            rec = json.loads(json.dumps(cached)) if cached is not None else self._read(job_id)
            if rec is None:
                raise TrackerError("unknown job %r" % job_id)
            result = change(rec)
            try:
                got = self.objects.replace("configmap", self._body(job_id, rec))
            except k8s.K8sError as err:
                if not err.conflict:
                    raise
                self._cached.pop(job_id, None)
                if moves_state:
                    raise LedgerConflict("job %s: its ledger record %s/%s changed since this pass read it; "
                                         "nothing was overwritten" % (job_id, self.ns, name))
                self._read(job_id)
                continue
            self._seen[name] = got["metadata"]["resourceVersion"]
            self._cached[job_id] = rec
            for a in rec.get("attempts", []):
                self._attempt_jobs[a["attempt_id"]] = job_id
            return result
        raise LedgerConflict("job %s: record %s/%s kept changing" % (job_id, self.ns, name))

    def ensure_job(self, job_id, job_class=None, path=None, spec=None, state="queued"):
        """Create the job record, or fill in class, path and spec on an existing one. State is kept."""
        fields = {"job_class": job_class, "path": path,
                  "spec": json.dumps(spec, sort_keys=True) if spec is not None else None}
        if self._read(job_id) is None:
            now = self.clock()
            rec = {"job": dict(fields, job_id=job_id, state=state, created_at=now, updated_at=now),
                   "attempts": [], "log": [], "rejections": []}
            self._seen.pop(self.job_name(job_id), None)
            try:
                got = self.objects.create("configmap", self._body(job_id, rec))
                self._seen[self.job_name(job_id)] = got["metadata"]["resourceVersion"]
                self._cached[job_id] = rec
                return
            except k8s.K8sError as err:
                if not err.conflict:
                    raise
                self._read(job_id)       # created by someone else in between: fill in below

        def fill(rec):
            for key, val in fields.items():
                if val is not None:
                    rec["job"][key] = val
        self._write(job_id, fill, moves_state=False)

    def job(self, job_id):
        rec = self._read(job_id)
        return rec["job"] if rec else None

    def job_spec(self, job_id):
        job = self.job(job_id)
        return json.loads(job["spec"]) if job and job.get("spec") else None

    def set_job_state(self, job_id, state):
        def move(rec):
            rec["job"]["state"] = state
            rec["job"]["updated_at"] = self.clock()
        self._write(job_id, move)

    def jobs(self):
        out = []
        for obj in self.objects.list("configmap", "%s=job" % LEDGER_LABEL):
            rec = json.loads((obj.get("data") or {}).get("record") or "{}")
            if rec.get("job"):
                out.append(rec["job"])
        return sorted(out, key=lambda j: j["job_id"])

    def start_attempt(self, job_id, attempt_id, state="created"):
        """Record a new attempt; returns its sequence number (1, 2, ...)."""
        def add(rec):
            if any(a["attempt_id"] == attempt_id for a in rec["attempts"]):
                raise TrackerError("attempt %r exists" % attempt_id)
            seq = max([a["seq"] for a in rec["attempts"]] or [0]) + 1
            rec["attempts"].append({"attempt_id": attempt_id, "job_id": job_id, "seq": seq, "state": state,
                                    "cloud_name": None, "resources": "none", "started_at": self.clock(),
                                    "ended_at": None})
            return seq
        if self._read(job_id) is None:
            raise TrackerError("unknown job %r" % job_id)
        return self._write(job_id, add)

    def _job_of(self, attempt_id):
        if attempt_id not in self._attempt_jobs:
            for job in self.jobs():
                self._read(job["job_id"])
        return self._attempt_jobs.get(attempt_id)

    def set_attempt(self, attempt_id, state=None, cloud_name=None, resources=None, ended=False):
        if resources is not None and resources not in RESOURCE_STATES:
            raise TrackerError("resources must be one of %s, not %r" % (sorted(RESOURCE_STATES), resources))
        job_id = self._job_of(attempt_id)
        if job_id is None:
            raise TrackerError("unknown attempt %r" % attempt_id)

        def change(rec):
            for a in rec["attempts"]:
                if a["attempt_id"] == attempt_id:
                    for key, val in (("state", state), ("cloud_name", cloud_name), ("resources", resources)):
                        if val is not None:
                            a[key] = val
                    if ended and a["ended_at"] is None:
                        a["ended_at"] = self.clock()
                    return
            raise TrackerError("unknown attempt %r" % attempt_id)
        self._write(job_id, change)

    def attempt(self, attempt_id):
        job_id = self._job_of(attempt_id)
        for a in self.attempts(job_id) if job_id else []:
            if a["attempt_id"] == attempt_id:
                return a
        return None

    def attempts(self, job_id):
        rec = self._read(job_id)
        return sorted(rec["attempts"], key=lambda a: a["seq"]) if rec else []

    def mark_resources(self, attempt_id, resources):
        self.set_attempt(attempt_id, resources=resources)

    # -- log ------------------------------------------------------------------------------------
    def log(self, job_id, attempt_id, step, result, detail=None, path=None):
        if detail is not None and not isinstance(detail, str):
            detail = json.dumps(detail, sort_keys=True, default=str)

        def append(rec):
            rec["log"].append({"id": len(rec["log"]) + 1, "job_id": job_id, "attempt_id": attempt_id, "step": step,
                               "result": result, "detail": detail, "path": path, "at": self.clock()})
        self._write(job_id, append, moves_state=False)

    def logs(self, job_id):
        rec = self._read(job_id)
        return list(rec["log"]) if rec else []

    # -- commits --------------------------------------------------------------------------------
    def commit(self, job_id, attempt_id, checksum, tried_by, output_ref=None, verified_at=None):
        """Commit the verified output of one attempt: the create of the job's commit object, so
        exactly one commit per job ID ever succeeds. Same answer as tracker.Tracker.commit."""
        now = self.clock()
        rec = self._read(job_id)
        att = None
        for a in (rec or {}).get("attempts", []):
            if a["attempt_id"] == attempt_id:
                att = a
        existing = self.commit_of(job_id)
        reason = None
        if att is None:
            reason = "attempt %s is not an attempt of job %s" % (attempt_id, job_id)
        elif existing is not None:
            if existing["attempt_id"] == attempt_id:
                reason = "job %s already committed by this same attempt %s (repeated commit)" % (job_id, attempt_id)
            else:
                reason = "job %s already committed by attempt %s; second attempt %s refused" % (
                    job_id, existing["attempt_id"], attempt_id)
        elif att["state"] in NO_COMMIT_STATES:
            reason = "attempt %s is %s and may not commit" % (attempt_id, att["state"])
        if reason is None:
            row = {"job_id": job_id, "attempt_id": attempt_id, "checksum": checksum, "output_ref": output_ref,
                   "committed_by": tried_by, "verified_at": verified_at, "committed_at": now}
            body = {"apiVersion": "v1", "kind": "ConfigMap", "immutable": True,
                    "metadata": {"name": self.commit_name(job_id), "namespace": self.ns,
                                 "labels": {LEDGER_LABEL: "commit", LABEL_JOB: cloud_job_name(job_id)},
                                 "annotations": {ANNOTATION_JOB_ID: job_id}},
                    "data": {"commit": json.dumps(row, sort_keys=True)}}
            try:
                self._renew()
                self.objects.create("configmap", body)
            except k8s.K8sError as err:
                if not err.conflict:
                    raise
                existing = self.commit_of(job_id)     # another writer committed first: still refused
                reason = "job %s already committed by attempt %s" % (job_id, existing["attempt_id"])
        existing_id = existing["attempt_id"] if existing is not None else None

        def record(r):
            if reason is not None:
                r["rejections"].append({"id": len(r["rejections"]) + 1, "job_id": job_id, "attempt_id": attempt_id,
                                        "tried_by": tried_by, "checksum": checksum, "reason": reason,
                                        "existing_attempt_id": existing_id, "at": now})
            r["log"].append({"id": len(r["log"]) + 1, "job_id": job_id, "attempt_id": attempt_id, "step": "commit",
                             "result": "rejected" if reason else "committed", "detail": reason or checksum,
                             "path": None, "at": now})
        if rec is not None:
            self._write(job_id, record, moves_state=False)
        return {"committed": reason is None, "reason": reason or "committed", "existing_attempt_id": existing_id}

    def commit_of(self, job_id):
        obj = self.objects.get("configmap", self.commit_name(job_id))
        return json.loads(obj["data"]["commit"]) if obj else None

    def commit_count(self, job_id):
        return 1 if self.commit_of(job_id) else 0

    def rejections(self, job_id):
        rec = self._read(job_id)
        return list(rec["rejections"]) if rec else []

    def trace(self, job_id):
        """The full story of one job ID, as tracker.Tracker.trace tells it."""
        rec = self._read(job_id)
        if rec is None:
            raise TrackerError("unknown job %r" % job_id)
        attempts = sorted(rec["attempts"], key=lambda a: a["seq"])
        for a in attempts:
            a["log"] = [e for e in rec["log"] if e["attempt_id"] == a["attempt_id"]]
        commit = self.commit_of(job_id)
        return {"job": rec["job"], "attempts": attempts,
                "job_log": [e for e in rec["log"] if e["attempt_id"] is None], "commit": commit,
                "commit_count": 1 if commit else 0, "rejected_commits": rec["rejections"],
                "verdict": explain(rec["job"], attempts, commit, rec["rejections"])}
