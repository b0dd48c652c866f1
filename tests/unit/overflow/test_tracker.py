"""Tracker: one commit per job ID, refusals logged, trace tells the story."""
import sqlite3

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.tracker import Tracker, TrackerError


class Clock(object):
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        self.now += 1.0
        return self.now


@pytest.fixture
def tr(tmp_path):
    t = Tracker(str(tmp_path / "tracker.db"), clock=Clock())
    yield t
    t.close()


def test_wal_mode_and_durable_reopen(tmp_path):
    path = str(tmp_path / "t.db")
    t = Tracker(path)
    assert t.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    t.ensure_job("j1", "small-input", "policy")
    t.start_attempt("j1", "a1")
    assert t.commit("j1", "a1", "sha256:aa", "dispatcher")["committed"]
    t.close()
    t2 = Tracker(path)
    assert t2.commit_of("j1")["attempt_id"] == "a1"
    t2.close()


def test_second_commit_from_other_attempt_rejected_and_logged(tr):
    tr.ensure_job("j1", "small-input", "operator")
    tr.start_attempt("j1", "a1")
    tr.start_attempt("j1", "a2")
    assert tr.commit("j1", "a1", "sha256:aa", "dispatcher")["committed"]
    r = tr.commit("j1", "a2", "sha256:bb", "stale-worker")
    assert not r["committed"] and r["existing_attempt_id"] == "a1"
    assert tr.commit_count("j1") == 1
    rej = tr.rejections("j1")
    assert rej[0]["tried_by"] == "stale-worker" and rej[0]["attempt_id"] == "a2"
    trace = tr.trace("j1")
    assert trace["commit"]["attempt_id"] == "a1"
    assert any("second attempt a2 kept running" in n for n in trace["verdict"]["notes"])
    a2 = [a for a in trace["attempts"] if a["attempt_id"] == "a2"][0]
    assert a2["log"][-1]["result"] == "rejected"


def test_repeated_commit_by_same_attempt_is_told_apart(tr):
    tr.ensure_job("j1")
    tr.start_attempt("j1", "a1")
    tr.commit("j1", "a1", "sha256:aa", "dispatcher")
    r = tr.commit("j1", "a1", "sha256:aa", "dispatcher-retry")
    assert not r["committed"] and "repeated commit" in r["reason"]
    assert tr.trace("j1")["verdict"]["notes"] == ["attempt a1 repeated its commit (refused)"]


def test_stopped_attempt_cannot_commit(tr):
    tr.ensure_job("j1")
    tr.start_attempt("j1", "a1")
    tr.set_attempt("a1", state="stopped", ended=True)
    r = tr.commit("j1", "a1", "sha256:aa", "late-cloud-job")
    assert not r["committed"] and "stopped" in r["reason"]
    assert tr.commit_of("j1") is None


def test_attempt_of_other_job_cannot_commit(tr):
    tr.ensure_job("j1")
    tr.ensure_job("j2")
    tr.start_attempt("j2", "b1")
    assert not tr.commit("j1", "b1", "x", "who")["committed"]


def test_unique_constraint_is_in_the_schema(tr):
    tr.ensure_job("j1")
    tr.start_attempt("j1", "a1")
    tr.start_attempt("j1", "a2")
    tr.commit("j1", "a1", "x", "who")
    with pytest.raises(sqlite3.IntegrityError):
        tr.db.execute("INSERT INTO commits(job_id, attempt_id, checksum, committed_at) VALUES ('j1','a2','y',1)")


def test_resources_marking_and_sequence(tr):
    tr.ensure_job("j1")
    assert tr.start_attempt("j1", "a1") == 1
    assert tr.start_attempt("j1", "a2") == 2
    tr.mark_resources("a1", "in_use")
    assert tr.trace("j1")["verdict"]["cloud_resources_in_use"] == ["a1"]
    tr.mark_resources("a1", "returned_to_pool")
    assert tr.attempt("a1")["resources"] == "returned_to_pool"
    with pytest.raises(TrackerError):
        tr.mark_resources("a1", "vanished")
    with pytest.raises(TrackerError):
        tr.set_attempt("nope", state="x")
    with pytest.raises(TrackerError):
        tr.start_attempt("unknown-job", "z")


def test_two_connections_race_one_commit(tmp_path):
    path = str(tmp_path / "race.db")
    a, b = Tracker(path), Tracker(path)
    a.ensure_job("j1")
    a.start_attempt("j1", "a1")
    a.start_attempt("j1", "a2")
    ra = a.commit("j1", "a1", "x", "worker-a")
    rb = b.commit("j1", "a2", "y", "worker-b")
    assert ra["committed"] and not rb["committed"]
    assert b.commit_count("j1") == 1
    a.close()
    b.close()
