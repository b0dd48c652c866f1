# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Overflow failure drills that are safe on a real estate, and the table of those that are not.

A safe drill moves one test job of a test class through the real protocol (protocol.Dispatcher
with the real cloud cluster backend in a test namespace, the real stager and ledger) and injects
its fault in this process only, around the client calls; nothing shared is broken:
  lost_submission_response  the Job create reaches the API, its answer is dropped (LostResponse):
                            the protocol must confirm by the job-ID label and not create a second Job;
  lost_result_return        the return copy lands, its acknowledgement is dropped (ReturnFailed):
                            the retry must verify the checksum and commit once;
  retried_commit            the ledger commit is sent twice (the first answer lost): one commit record;
  link_cut_<mark>           from the moment the mark is recorded, the next `cut_calls` calls to the
                            cloud API fail as a refused connection (LinkDown), then the link is back:
                            the job must reach exactly one final state.
The test job is not in the site's local queue: its local entry lives in this process (DrillLocal),
so no production queue entry is held or released. Each drill records evidence (Jobs carrying the
job-ID label, ledger entries, checksums), then deletes the Jobs it created in the test namespace.

UNSAFE lists the drills that must break shared parts of the estate; they run only where the
inventory declares the estate disposable and a verified change record approves them (the
overflow_drill action plugin verifies it; the estate's own drill script injects them).
"""
from __future__ import annotations

import json
import time
import uuid

from . import backends, carry
from .ledger import MARKS
from .protocol import (J_BACK_LOCAL, J_FINISHED, J_GONE, J_LOCAL_RUNNING, Dispatcher,
                       cloud_job_name)

LINK_CUT_SAFE = ("only this process's calls to the cloud API fail, as a refused connection, for a few calls "
                 "from the mark on; the link and the API stay up for everyone else")

# name -> (safe on a real estate, why)
SAFE = (
    ("lost_submission_response", "the create reaches the API and only its answer is dropped, in this process; "
                                 "the Job is a test Job in the test namespace"),
    ("lost_result_return", "the test job's return copy lands and only its acknowledgement is dropped, in this process"),
    ("retried_commit", "this process sends the test job's commit twice to the ledger; other records are untouched"),
) + tuple(("link_cut_%s" % mark, LINK_CUT_SAFE) for mark in MARKS)

# name -> why it cannot be safe on a real estate
UNSAFE = (
    ("local_gpus_free", "starts a job on the site's local GPUs at the moment of dispatch: needs the site's "
                        "local scheduler driven"),
    ("cloud_rejects_quota", "lowers a ResourceQuota in the cloud cluster: every submission there is rejected "
                            "while it holds"),
    ("cloud_node_lost", "stops a cloud node: every pod on it is lost"),
    ("transfer_interrupted", "cuts transfers to the storage host part way: every job staging then is hit"),
    ("corrupted_result", "corrupts results in storage: stored results are damaged"),
    ("return_copy_fails", "makes the storage host refuse return copies: every job returning then is hit"),
    ("operator_returns_job", "releases a job into the site's local queue, where it runs on production GPUs"),
)

SAFE_NAMES = tuple(name for name, why in SAFE)
UNSAFE_NAMES = tuple(name for name, why in UNSAFE)
FINAL_STATES = frozenset([J_FINISHED, J_BACK_LOCAL, J_GONE, J_LOCAL_RUNNING])
# what each drill may end in: a lost link before the submission may send the job back to the local queue
ALLOWED_FINAL = dict((name, {J_FINISHED}) for name in SAFE_NAMES)
ALLOWED_FINAL.update({"link_cut_dispatch": {J_FINISHED, J_BACK_LOCAL}, "link_cut_transfer_in": {J_FINISHED, J_BACK_LOCAL}})
OUTPUT_DIR = "drill-output"


class DrillRefused(ValueError):
    pass


def table():
    """The safe/unsafe split: [{"drill", "safe", "why"}]."""
    return ([{"drill": n, "safe": True, "why": w} for n, w in SAFE]
            + [{"drill": n, "safe": False, "why": w} for n, w in UNSAFE])


def split(names):
    """(safe, unsafe) drill names chosen from `names` (empty: all); an unknown name raises DrillRefused."""
    names = list(names or [])
    unknown = [n for n in names if n not in SAFE_NAMES and n not in UNSAFE_NAMES]
    if unknown:
        raise DrillRefused("unknown drill %s; the drills are %s" % (", ".join(unknown), ", ".join(SAFE_NAMES + UNSAFE_NAMES)))
    if not names:
        return list(SAFE_NAMES), list(UNSAFE_NAMES)
    return [n for n in SAFE_NAMES if n in names], [n for n in UNSAFE_NAMES if n in names]


def refused(unsafe, estate):
    """The unsafe drills that do not run on this estate, each with why ([] on a disposable estate)."""
    if estate == "disposable":
        return []
    why = dict(UNSAFE)
    return [{"drill": n, "safe": False, "ran": False,
             "reason": "refused: the estate is %s, not disposable; %s" % (estate or "production", why[n])}
            for n in unsafe]


def check_namespace(namespace, production_namespace):
    if not namespace:
        raise DrillRefused("the drill needs a test namespace in the cloud cluster (overflow_drill_namespace)")
    if production_namespace and namespace == production_namespace:
        raise DrillRefused("namespace %s is the production overflow namespace; the drill runs only in a test namespace"
                           % namespace)


# -- faults, all in this process ------------------------------------------------------------------

class LinkCut(object):
    """A window of refused calls: open(n) makes the next n calls raise LinkDown, then the link is back."""

    def __init__(self):
        self.left = 0
        self.refused = []

    def open(self, calls):
        self.left = int(calls)

    def close(self):
        self.left = 0

    def check(self, what):
        if self.left > 0:
            self.left -= 1
            self.refused.append(what)
            raise backends.LinkDown("%s: connection refused (drill: link cut)" % what)


class DrillCloud(backends.CloudCluster):
    """The real cloud cluster backend with the drill's client-side faults in front of it."""

    def __init__(self, inner, cut):
        self.inner = inner
        self.cut = cut
        self.drop_responses = 0
        self.creates = []       # (attempt ID, outcome) of every create that reached the API

    def submit(self, name, job_id, attempt_id, spec):
        self.cut.check("create Job %s" % name)
        res = self.inner.submit(name, job_id, attempt_id, spec)
        self.creates.append((attempt_id, res.outcome))
        if self.drop_responses:
            self.drop_responses -= 1
            raise backends.LostResponse("create of Job %s: response dropped (drill)" % name)
        return res

    def find_by_job_id(self, job_id):
        self.cut.check("look up Jobs of %s" % job_id)
        return self.inner.find_by_job_id(job_id)

    def stop(self, job_id):
        self.cut.check("delete Job of %s" % job_id)
        return self.inner.stop(job_id)

    def jobs_by_label(self, job_id):
        """Names of the Jobs in the test namespace that carry the job-ID label (read past the fault)."""
        return [j["metadata"]["name"] for j in self.inner.jobs_of(job_id)]


class DrillStager(backends.Stager):
    """The real stager; drop_acks makes the next return copies land and then lose their acknowledgement."""

    def __init__(self, inner):
        self.inner = inner
        self.drop_acks = 0
        self.landed = []        # checksum of every return copy that landed, acknowledged or not

    def stage_inputs(self, job_id, inputs):
        return self.inner.stage_inputs(job_id, inputs)

    def ensure_image(self, job_id, image):
        return self.inner.ensure_image(job_id, image)

    def fetch_outputs(self, job_id, cloud_job):
        got = self.inner.fetch_outputs(job_id, cloud_job)
        self.landed.append(got["checksum"])
        if self.drop_acks:
            self.drop_acks -= 1
            raise backends.ReturnFailed("return copy of %s landed; its acknowledgement was dropped (drill)" % job_id)
        return got

    def __getattr__(self, name):
        return getattr(self.inner, name)


class DrillLedger(object):
    """The real ledger; opens the link cut when the drill's mark is recorded, and can send commits twice."""

    def __init__(self, inner, cut, cut_at=None, cut_calls=3, retry_commits=False):
        self.inner = inner
        self.cut = cut
        self.cut_at = cut_at
        self.cut_calls = cut_calls
        self.retry_commits = retry_commits
        self.cut_opened = None
        self.commit_answers = []

    def mark(self, job_id, attempt_id, name, at=None, path=None):
        done = self.inner.mark(job_id, attempt_id, name, at=at, path=path)
        if name == self.cut_at and self.cut_opened is None:
            self.cut_opened = {"mark": name, "attempt_id": attempt_id, "calls": self.cut_calls}
            self.cut.open(self.cut_calls)
        return done

    def commit(self, job_id, attempt_id, checksum, tried_by, output_ref=None, verified_at=None):
        answer = self.inner.commit(job_id, attempt_id, checksum, tried_by, output_ref=output_ref, verified_at=verified_at)
        self.commit_answers.append(answer)
        if self.retry_commits:
            answer = self.inner.commit(job_id, attempt_id, checksum, tried_by, output_ref=output_ref,
                                       verified_at=verified_at)
            self.commit_answers.append(answer)
        return answer

    def __getattr__(self, name):
        return getattr(self.inner, name)


class DrillLocal(backends.LocalQueue):
    """The test job's local entry, kept in this process: no site queue entry is held or released."""

    def __init__(self):
        self.jobs = {}

    def add(self, job_id):
        self.jobs[job_id] = backends.Q_QUEUED

    def hold(self, job_id):
        if job_id not in self.jobs:
            return backends.GONE
        self.jobs[job_id] = backends.Q_HELD
        return backends.HELD

    def release(self, job_id):
        if self.jobs.get(job_id) == backends.Q_HELD:
            self.jobs[job_id] = backends.Q_QUEUED

    def withdraw(self, job_id):
        if self.jobs.get(job_id) == backends.Q_HELD:
            self.jobs[job_id] = backends.Q_WITHDRAWN

    def state(self, job_id):
        return self.jobs.get(job_id, backends.Q_GONE)


# -- the test job ---------------------------------------------------------------------------------

def test_spec(job_id, template, image=None, run_s=0):
    """The cloud Job of the test job: a shell step in the site's image that runs for run_s seconds
    (so the protocol's polls see it running and record the start mark) and writes one small file,
    run inside the upload step (carry.slurm_pod_spec), no GPU asked."""
    tpl = dict(template or {})
    tpl["outputs"] = [OUTPUT_DIR]
    script = {"shebang": "#!/bin/sh", "container_image": image or tpl.get("image"),
              "body": "sleep %d\nmkdir -p %s\necho %s > %s/drill.txt\n" % (int(run_s), OUTPUT_DIR, job_id, OUTPUT_DIR)}
    pod, rewrites = carry.slurm_pod_spec(job_id, {"job_id": job_id, "gpus": 0}, script, tpl)
    return {"pod_spec": pod, "rewrites": rewrites}


# -- one drill ------------------------------------------------------------------------------------

def _count(cloud, job_id):
    try:
        return len(cloud.jobs_by_label(job_id))
    except backends.LinkDown:
        return None


def _in_use(ledger, job_id):
    return [a["attempt_id"] for a in ledger.attempts(job_id) if a["resources"] == "in_use"]


def run_drill(name, cloud, stager, ledger, job_class, spec, inputs=(), tag=None, cut_calls=3, poll_s=2.0,
              timeout_s=600.0, sleep=time.sleep, clock=time.time, actor="drill", id_factory=None):
    """Run one safe drill; returns its record {"drill", "job_id", "pass", "checks", "evidence", ...}.
    cloud: the cloud backend of the test namespace (k8s_backend.K8sCloudCluster); stager, ledger: real ones;
    spec: the cloud Job spec, or a function of the job ID that returns it (test_spec)."""
    if name not in SAFE_NAMES:
        raise DrillRefused("%s is not a safe drill" % name)
    job_id = "drill-%s-%s" % (name.replace("_", "-"), tag or uuid.uuid4().hex[:6])
    cut = LinkCut()
    dcloud = DrillCloud(cloud, cut)
    dstager = DrillStager(stager)
    dledger = DrillLedger(ledger, cut, cut_at=name[len("link_cut_"):] if name.startswith("link_cut_") else None,
                          cut_calls=cut_calls, retry_commits=name == "retried_commit")
    if name == "lost_submission_response":
        dcloud.drop_responses = 1
    if name == "lost_result_return":
        dstager.drop_acks = 1
    local = DrillLocal()
    local.add(job_id)
    kw = {"id_factory": id_factory} if id_factory else {}
    disp = Dispatcher(local, dcloud, dstager, dledger, "operator", actor=actor, **kw)
    started = clock()
    outcomes, counts, at_release = [], [], None
    record = {"drill": name, "job_id": job_id, "cloud_name": cloud_job_name(job_id), "safe": True, "ran": True}
    try:
        body = spec(job_id) if callable(spec) else spec
        outcomes.append(disp.dispatch(job_id, job_class, spec=body, inputs=list(inputs)))
        while True:
            counts.append(_count(dcloud, job_id))
            state = ledger.job(job_id)["state"]
            if state == J_BACK_LOCAL and at_release is None:
                at_release = counts[-1]
            if state in FINAL_STATES and not _in_use(ledger, job_id):
                break
            if clock() - started > timeout_s:
                break
            sleep(poll_s)
            outcomes.append(disp.step(job_id))
    finally:
        cut.close()
        record["cleanup"] = cleanup(cloud, job_id)
    record.update(_judge(name, job_id, ledger, dcloud, dstager, dledger, cut, outcomes, counts, at_release))
    record["seconds"] = round(clock() - started, 3)
    return record


def cleanup(cloud, job_id):
    """Delete the Jobs of the test job in the test namespace; say what is left."""
    try:
        cloud.stop(job_id)
        left = [j["metadata"]["name"] for j in cloud.jobs_of(job_id) if not j["metadata"].get("deletionTimestamp")]
    except backends.LinkDown as exc:
        return {"deleted": False, "left": None, "error": str(exc)}
    return {"deleted": not left, "left": left}


def _judge(name, job_id, ledger, cloud, stager, dledger, cut, outcomes, counts, at_release):
    trace = ledger.trace(job_id)
    state = trace["job"]["state"]
    logs = [e for a in trace["attempts"] for e in a["log"]]
    fetches = [(e["result"], e["detail"]) for e in logs if e["step"] == "fetch_outputs"]
    verified = [json.loads(d) if isinstance(d, str) else d for r, d in fetches if r == "verified"]
    commit = trace["commit"]
    seen = [c for c in counts if c is not None]
    checks = []

    def check(what, ok, detail=None):
        checks.append({"check": what, "pass": bool(ok), "detail": detail})

    check("one final state", state in ALLOWED_FINAL[name] and not _in_use(ledger, job_id),
          {"state": state, "allowed": sorted(ALLOWED_FINAL[name]), "resources_in_use": _in_use(ledger, job_id)})
    check("at most one Job carries the job-ID label", max(seen or [0]) <= 1, {"counts": counts})
    check("at most one commit", trace["commit_count"] <= 1, {"commit_count": trace["commit_count"]})
    if state == J_FINISHED:
        check("committed once", trace["commit_count"] == 1, {"commit": commit})
        check("committed checksum is the verified return", commit is not None and bool(verified)
              and commit["checksum"] == verified[-1].get("checksum"),
              {"committed": (commit or {}).get("checksum"), "verified": [v.get("checksum") for v in verified]})
    if state == J_BACK_LOCAL:
        check("no double dispatch: no cloud Job when released locally", not at_release,
              {"jobs_with_label_at_release": at_release})
        check("no commit when released locally", trace["commit_count"] == 0, None)
    if name == "lost_submission_response":
        check("the create reached the API once", len(cloud.creates) == 1, {"creates": cloud.creates})
        check("confirmed by the job-ID label", any(e["step"] == "lookup" and e["result"] == "found" for e in logs),
              [(e["step"], e["result"]) for e in logs if e["step"] in ("submit", "lookup", "adopt", "release_local")])
    if name == "lost_result_return":
        check("the acknowledgement was dropped once, then the retry verified",
              [r for r, d in fetches][:1] == ["failed"] and len(verified) == 1, {"fetch_outputs": [r for r, d in fetches]})
        check("every landed copy has the committed checksum",
              commit is not None and set(stager.landed) == {commit["checksum"]}, {"landed": stager.landed})
    if name == "retried_commit":
        answers = dledger.commit_answers
        check("the commit was sent twice and the second was refused as a repeat",
              len(answers) == 2 and answers[0]["committed"] and not answers[1]["committed"]
              and "repeated" in answers[1]["reason"], answers)
    if name.startswith("link_cut_"):
        check("the link was cut at the mark", dledger.cut_opened is not None and bool(cut.refused),
              {"opened": dledger.cut_opened, "refused_calls": cut.refused})
    return {"pass": all(c["pass"] for c in checks), "final_state": state, "checks": checks,
            "evidence": {"jobs_with_label": counts, "commit": commit, "commit_count": trace["commit_count"],
                         "rejected_commits": [r["reason"] for r in trace["rejected_commits"]],
                         "fetch_outputs": [r for r, d in fetches], "landed_checksums": stager.landed,
                         "creates": cloud.creates, "refused_calls": cut.refused,
                         "attempts": [{"attempt_id": a["attempt_id"], "state": a["state"], "resources": a["resources"]}
                                      for a in trace["attempts"]],
                         "log": [(e["attempt_id"], e["step"], e["result"]) for e in logs],
                         "outcomes": [o.get("outcome") for o in outcomes]}}
