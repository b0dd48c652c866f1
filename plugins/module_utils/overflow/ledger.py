# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What both exactly-once ledgers share: the five marks, the pass lock errors, and the choice.

Two ledgers have the same interface (the methods protocol.Dispatcher calls, plus lock/unlock):
  - sqlite:     tracker.Tracker, one file on one host (a lock file next to it serialises passes);
  - kubernetes: ledger_k8s.K8sLedger, objects in a namespace of a cluster every run can reach
                (a Lease serialises passes, a ConfigMap per job, a commit object per job).

The five marks of a moved job, recorded once per attempt in the attempt log (step "mark"):
dispatch (the local entry is held), transfer_in (inputs and image verified in cloud storage),
start (the cloud Job first seen running), end (first seen finished), return (outputs verified on-prem).
"""
from __future__ import annotations

import json

MARKS = ("dispatch", "transfer_in", "start", "end", "return")
KINDS = ("sqlite", "kubernetes")


class LedgerBusy(Exception):
    """Another dispatch pass holds the ledger. `holder` and `renewed` say who and when."""

    def __init__(self, message, holder=None, renewed=None):
        super().__init__(message)
        self.holder = holder
        self.renewed = renewed


class LedgerConflict(Exception):
    """Someone else changed a job's record since this pass read it (HTTP 409): nothing was overwritten."""


class MarksMixin(object):
    """mark() and marks() over the ledger's log(); the ledger class provides log() and logs()."""

    def mark(self, job_id, attempt_id, name, at=None, path=None):
        """Record mark `name` for the attempt once; a repeated mark keeps the first time. True if recorded."""
        if name not in MARKS:
            raise ValueError("mark must be one of %s, not %r" % (MARKS, name))
        for e in self.logs(job_id):
            if e["step"] == "mark" and e["result"] == name and e["attempt_id"] == attempt_id:
                return False
        self.log(job_id, attempt_id, "mark", name, {"at": self.clock() if at is None else at}, path=path)
        return True

    def marks(self, job_id):
        """{attempt_id: {mark: epoch seconds}} in attempt order, plus "durations" for the last attempt
        with marks: seconds from dispatch to each later mark."""
        out = {}
        for e in self.logs(job_id):
            if e["step"] != "mark":
                continue
            out.setdefault(e["attempt_id"], {})[e["result"]] = mark_time(e)
        return out


def mark_time(entry):
    detail = entry.get("detail")
    if isinstance(detail, str):
        try:
            detail = json.loads(detail)
        except ValueError:
            detail = None
    if isinstance(detail, dict) and detail.get("at") is not None:
        return float(detail["at"])
    return float(entry["at"])


def summary(marks_by_attempt, attempt_id=None):
    """The marks of one attempt (the given one, else the last with marks) and the seconds between them."""
    if not marks_by_attempt:
        return {"attempt_id": None, "marks": {}, "seconds": {}}
    if attempt_id not in marks_by_attempt:
        attempt_id = list(marks_by_attempt)[-1]
    got = marks_by_attempt[attempt_id]
    seconds = {}
    prev = None
    for name in MARKS:
        if name in got:
            if prev is not None:
                seconds["%s_to_%s" % (prev, name)] = round(got[name] - got[prev], 3)
            prev = name
    if "dispatch" in got and "return" in got:
        seconds["total"] = round(got["return"] - got["dispatch"], 3)
    return {"attempt_id": attempt_id, "marks": dict((n, got[n]) for n in MARKS if n in got), "seconds": seconds}


def open_ledger(opts, clock=None):
    """The ledger the overflow settings name: {kind: sqlite, path} or {kind: kubernetes, kubeconfig,
    context, namespace, name_prefix, lease_seconds}. Raises ValueError naming the missing field."""
    opts = dict(opts or {})
    kind = opts.get("kind") or "sqlite"
    kw = {"clock": clock} if clock is not None else {}
    if kind == "sqlite":
        if not opts.get("path"):
            raise ValueError("ledger.path is required for kind sqlite")
        from .tracker import Tracker
        return Tracker(opts["path"], **kw)
    if kind == "kubernetes":
        if not opts.get("namespace"):
            raise ValueError("ledger.namespace is required for kind kubernetes")
        from ..common import k8s
        from .ledger_k8s import K8sLedger
        params = dict((key, opts.get(key)) for key in k8s.AUTH_KEYS if opts.get(key) is not None)
        params.setdefault("request_timeout", 10.0)
        return K8sLedger(k8s.Kube(params), opts["namespace"], prefix=opts.get("name_prefix") or "hgpu-overflow",
                         lease_seconds=int(opts.get("lease_seconds") or 300), **kw)
    raise ValueError("ledger.kind must be one of %s, not %r" % (KINDS, kind))
