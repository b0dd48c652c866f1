# -*- coding: utf-8 -*-
"""Durable job tracker for overflow (SQLite in WAL mode).

One committed output per job ID is enforced by the database itself (UNIQUE(job_id) on commits).
A second commit is rejected and the rejection is stored (who tried, with which attempt).
Every attempt keeps its log; cloud resources are marked released or returned to the pool.
"""
from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import time

from .ledger import LedgerBusy, MarksMixin

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id      TEXT PRIMARY KEY,
    job_class   TEXT,
    path        TEXT,
    spec        TEXT,
    state       TEXT NOT NULL,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS attempts (
    attempt_id  TEXT PRIMARY KEY,
    job_id      TEXT NOT NULL REFERENCES jobs(job_id),
    seq         INTEGER NOT NULL,
    state       TEXT NOT NULL,
    cloud_name  TEXT,
    resources   TEXT NOT NULL DEFAULT 'none',
    started_at  REAL NOT NULL,
    ended_at    REAL,
    UNIQUE (job_id, seq)
);
CREATE TABLE IF NOT EXISTS attempt_log (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id      TEXT NOT NULL,
    attempt_id  TEXT,
    step        TEXT NOT NULL,
    result      TEXT NOT NULL,
    detail      TEXT,
    path        TEXT,
    at          REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS commits (
    job_id       TEXT NOT NULL UNIQUE REFERENCES jobs(job_id),
    attempt_id   TEXT NOT NULL REFERENCES attempts(attempt_id),
    checksum     TEXT NOT NULL,
    output_ref   TEXT,
    committed_by TEXT,
    verified_at  REAL,
    committed_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS commit_rejections (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id              TEXT NOT NULL,
    attempt_id          TEXT,
    tried_by            TEXT,
    checksum            TEXT,
    reason              TEXT NOT NULL,
    existing_attempt_id TEXT,
    at                  REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS attempt_log_job ON attempt_log(job_id, id);
CREATE INDEX IF NOT EXISTS attempts_job ON attempts(job_id, seq);
"""

# Attempt states from which a commit is refused: the attempt was stopped or never ran.
NO_COMMIT_STATES = frozenset(["stopped", "abandoned", "rejected", "adopted_away", "superseded"])
RESOURCE_STATES = frozenset(["none", "in_use", "released", "returned_to_pool"])


class TrackerError(Exception):
    """Misuse of the tracker (unknown job or attempt, bad state)."""


class Tracker(MarksMixin):
    """SQLite-backed tracker (the single-host ledger). `clock` returns seconds (injectable for simulations)."""

    def __init__(self, path, clock=time.time):
        self.path = path
        self.clock = clock
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        if path != ":memory:":
            self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.executescript(SCHEMA)

    def close(self):
        self.unlock()
        self.db.close()

    # -- the pass lock (a lock file next to the database) ---------------------------------------
    def lock(self, holder=None, wait_s=0.0, poll_s=1.0):
        """One dispatch pass at a time on this host: an exclusive lock on <db>.lock, waiting up to wait_s.
        Raises LedgerBusy naming the holder written in the lock file."""
        if self.path == ":memory:" or getattr(self, "_lock_fh", None):
            return True
        fh = open(self.path + ".lock", "a+")
        deadline = time.monotonic() + float(wait_s or 0)
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    fh.seek(0)
                    who = fh.read().strip() or "unknown"
                    fh.close()
                    raise LedgerBusy("another dispatch pass holds %s.lock (%s); this pass waited %ss and changed "
                                     "nothing" % (self.path, who, wait_s or 0), holder=who)
                time.sleep(poll_s)
        fh.seek(0)
        fh.truncate()
        fh.write("%s pid %d since %s\n" % (holder or "dispatcher", os.getpid(),
                                           time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))
        fh.flush()
        self._lock_fh = fh
        return True

    def unlock(self):
        fh = getattr(self, "_lock_fh", None)
        if fh is not None:
            self._lock_fh = None
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()

    # -- jobs and attempts --------------------------------------------------------------------

    def ensure_job(self, job_id, job_class=None, path=None, spec=None, state="queued"):
        """Create the job row, or fill in class, path and spec on an existing one. State is kept."""
        now = self.clock()
        spec_text = json.dumps(spec, sort_keys=True) if spec is not None else None
        self.db.execute(
            "INSERT INTO jobs(job_id, job_class, path, spec, state, created_at, updated_at) VALUES (?,?,?,?,?,?,?) "
            "ON CONFLICT(job_id) DO UPDATE SET job_class=COALESCE(excluded.job_class, jobs.job_class), "
            "path=COALESCE(excluded.path, jobs.path), spec=COALESCE(excluded.spec, jobs.spec)",
            (job_id, job_class, path, spec_text, state, now, now))

    def job_spec(self, job_id):
        row = self.db.execute("SELECT spec FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        return json.loads(row[0]) if row and row[0] else None

    def set_job_state(self, job_id, state):
        cur = self.db.execute("UPDATE jobs SET state=?, updated_at=? WHERE job_id=?", (state, self.clock(), job_id))
        if cur.rowcount != 1:
            raise TrackerError("unknown job %r" % job_id)

    def job(self, job_id):
        row = self.db.execute("SELECT * FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        return dict(row) if row else None

    def jobs(self):
        return [dict(r) for r in self.db.execute("SELECT * FROM jobs ORDER BY job_id")]

    def start_attempt(self, job_id, attempt_id, state="created"):
        """Record a new attempt; returns its sequence number (1, 2, ...)."""
        if self.job(job_id) is None:
            raise TrackerError("unknown job %r" % job_id)
        self.db.execute("BEGIN IMMEDIATE")
        try:
            seq = self.db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM attempts WHERE job_id=?",
                                  (job_id,)).fetchone()[0]
            self.db.execute("INSERT INTO attempts(attempt_id, job_id, seq, state, started_at) VALUES (?,?,?,?,?)",
                            (attempt_id, job_id, seq, state, self.clock()))
            self.db.execute("COMMIT")
        except Exception:
            self.db.execute("ROLLBACK")
            raise
        return seq

    def set_attempt(self, attempt_id, state=None, cloud_name=None, resources=None, ended=False):
        if resources is not None and resources not in RESOURCE_STATES:
            raise TrackerError("resources must be one of %s, not %r" % (sorted(RESOURCE_STATES), resources))
        sets, args = [], []
        for col, val in (("state", state), ("cloud_name", cloud_name), ("resources", resources)):
            if val is not None:
                sets.append("%s=?" % col)
                args.append(val)
        if ended:
            sets.append("ended_at=COALESCE(ended_at, ?)")
            args.append(self.clock())
        if not sets:
            return
        cur = self.db.execute("UPDATE attempts SET %s WHERE attempt_id=?" % ", ".join(sets), args + [attempt_id])
        if cur.rowcount != 1:
            raise TrackerError("unknown attempt %r" % attempt_id)

    def attempt(self, attempt_id):
        row = self.db.execute("SELECT * FROM attempts WHERE attempt_id=?", (attempt_id,)).fetchone()
        return dict(row) if row else None

    def attempts(self, job_id):
        return [dict(r) for r in self.db.execute("SELECT * FROM attempts WHERE job_id=? ORDER BY seq", (job_id,))]

    def mark_resources(self, attempt_id, resources):
        """Record that an attempt's cloud resources were released or returned to the warm pool."""
        self.set_attempt(attempt_id, resources=resources)

    # -- log ------------------------------------------------------------------------------------

    def log(self, job_id, attempt_id, step, result, detail=None, path=None):
        if detail is not None and not isinstance(detail, str):
            detail = json.dumps(detail, sort_keys=True, default=str)
        self.db.execute(
            "INSERT INTO attempt_log(job_id, attempt_id, step, result, detail, path, at) VALUES (?,?,?,?,?,?,?)",
            (job_id, attempt_id, step, result, detail, path, self.clock()))

    def logs(self, job_id):
        return [dict(r) for r in self.db.execute("SELECT * FROM attempt_log WHERE job_id=? ORDER BY id", (job_id,))]

    # -- commits --------------------------------------------------------------------------------

    def commit(self, job_id, attempt_id, checksum, tried_by, output_ref=None, verified_at=None):
        """Commit the verified output of one attempt. Exactly one commit per job ID ever succeeds.

        Returns {"committed": bool, "reason": str, "existing_attempt_id": str|None}.
        A refused commit is stored in commit_rejections and in the attempt log.
        """
        now = self.clock()
        self.db.execute("BEGIN IMMEDIATE")
        try:
            att = self.db.execute("SELECT job_id, state FROM attempts WHERE attempt_id=?", (attempt_id,)).fetchone()
            existing = self.db.execute("SELECT attempt_id FROM commits WHERE job_id=?", (job_id,)).fetchone()
            reason = None
            if att is None or att["job_id"] != job_id:
                reason = "attempt %s is not an attempt of job %s" % (attempt_id, job_id)
            elif existing is not None:
                if existing["attempt_id"] == attempt_id:
                    reason = "job %s already committed by this same attempt %s (repeated commit)" % (
                        job_id, attempt_id)
                else:
                    reason = "job %s already committed by attempt %s; second attempt %s refused" % (
                        job_id, existing["attempt_id"], attempt_id)
            elif att["state"] in NO_COMMIT_STATES:
                reason = "attempt %s is %s and may not commit" % (attempt_id, att["state"])
            if reason is None:
                try:
                    self.db.execute(
                        "INSERT INTO commits(job_id, attempt_id, checksum, output_ref, committed_by, verified_at,"
                        " committed_at) VALUES (?,?,?,?,?,?,?)",
                        (job_id, attempt_id, checksum, output_ref, tried_by, verified_at, now))
                except sqlite3.IntegrityError:
                    # Another writer got there first between our read and insert: still refused.
                    existing = self.db.execute("SELECT attempt_id FROM commits WHERE job_id=?", (job_id,)).fetchone()
                    reason = "job %s already committed by attempt %s" % (job_id, existing["attempt_id"])
            existing_id = existing["attempt_id"] if existing is not None else None
            if reason is not None:
                self.db.execute(
                    "INSERT INTO commit_rejections(job_id, attempt_id, tried_by, checksum, reason,"
                    " existing_attempt_id, at) VALUES (?,?,?,?,?,?,?)",
                    (job_id, attempt_id, tried_by, checksum, reason, existing_id, now))
                self.db.execute(
                    "INSERT INTO attempt_log(job_id, attempt_id, step, result, detail, at) VALUES (?,?,?,?,?,?)",
                    (job_id, attempt_id, "commit", "rejected", reason, now))
            else:
                self.db.execute(
                    "INSERT INTO attempt_log(job_id, attempt_id, step, result, detail, at) VALUES (?,?,?,?,?,?)",
                    (job_id, attempt_id, "commit", "committed", checksum, now))
            self.db.execute("COMMIT")
        except Exception:
            self.db.execute("ROLLBACK")
            raise
        return {"committed": reason is None, "reason": reason or "committed",
                "existing_attempt_id": existing_id}

    def commit_of(self, job_id):
        row = self.db.execute("SELECT * FROM commits WHERE job_id=?", (job_id,)).fetchone()
        return dict(row) if row else None

    def commit_count(self, job_id):
        return self.db.execute("SELECT COUNT(*) FROM commits WHERE job_id=?", (job_id,)).fetchone()[0]

    def rejections(self, job_id):
        return [dict(r) for r in self.db.execute(
            "SELECT * FROM commit_rejections WHERE job_id=? ORDER BY id", (job_id,))]

    # -- trace ----------------------------------------------------------------------------------

    def trace(self, job_id):
        """The full story of one job ID: attempts with their logs, the commit, refused commits, a verdict."""
        job = self.job(job_id)
        if job is None:
            raise TrackerError("unknown job %r" % job_id)
        logs = self.logs(job_id)
        attempts = self.attempts(job_id)
        for a in attempts:
            a["log"] = [entry for entry in logs if entry["attempt_id"] == a["attempt_id"]]
        commit = self.commit_of(job_id)
        rejections = self.rejections(job_id)
        return {
            "job": job,
            "attempts": attempts,
            "job_log": [entry for entry in logs if entry["attempt_id"] is None],
            "commit": commit,
            "commit_count": self.commit_count(job_id),
            "rejected_commits": rejections,
            "verdict": explain(job, attempts, commit, rejections),
        }


def explain(job, attempts, commit, rejections):
    """Read a trace and say what happened, in the drill's terms."""
    notes = []
    for r in rejections:
        if commit is not None and r["attempt_id"] == commit["attempt_id"]:
            notes.append("attempt %s repeated its commit (refused)" % r["attempt_id"])
        elif commit is not None:
            notes.append("second attempt %s kept running and tried to commit (refused)" % r["attempt_id"])
        else:
            notes.append("attempt %s tried to commit and was refused: %s" % (r["attempt_id"], r["reason"]))
    live = [a["attempt_id"] for a in attempts if a["resources"] == "in_use"]
    return {
        "state": job["state"],
        "committed_once": commit is not None,
        "attempt_count": len(attempts),
        "cloud_resources_in_use": live,
        "notes": notes,
    }
