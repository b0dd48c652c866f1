"""The Kubernetes ledger against the API emulator (HTTPS, official client) and against the
in-memory double; every test runs on both, so the double is held to the emulator's answers."""
import threading
import time
import uuid

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import ledger as ledger_mod
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.ledger import LedgerBusy, LedgerConflict
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.ledger_k8s import K8sLedger
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.ledger_kube import (
    KubeObjects, micro_time, parse_micro_time)
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.protocol import cloud_job_name
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.tracker import Tracker

from ledger_world import Emulator, FakeObjects


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    emu = Emulator(tmp_path_factory.mktemp("ledger"))
    yield emu
    emu.stop()


@pytest.fixture(params=["fake", "emulator"])
def objects(request):
    """A fresh namespace's objects; call it again for a second 'process' on the same namespace."""
    if request.param == "fake":
        shared = FakeObjects()
        return lambda: shared
    emu = request.getfixturevalue("emulator")
    ns = "ledger-%s" % uuid.uuid4().hex[:8]
    emu.kube().ensure_namespace(ns)
    return lambda: KubeObjects(emu.kube(), ns)


def two(objects, **kw):
    return (K8sLedger(objects(), "ledger", identity="pass-a", **kw),
            K8sLedger(objects(), "ledger", identity="pass-b", **kw))


def test_object_names_follow_the_job_id():
    led = K8sLedger(FakeObjects(), "ledger")
    suffix = cloud_job_name("Train/Run 7")[len("ovf-"):]
    assert led.lease_name() == "hgpu-overflow-dispatch"
    assert led.job_name("Train/Run 7") == "hgpu-overflow-job-" + suffix
    assert led.commit_name("Train/Run 7") == "hgpu-overflow-commit-" + suffix
    assert abs(parse_micro_time(micro_time(1_700_000_000.25)) - 1_700_000_000.25) < 1e-5


def test_commit_is_the_create_of_one_object(objects):
    a, b = two(objects)
    a.ensure_job("job-1", "small-input", "policy", {"gpus": 1})
    a.ensure_job("job-1", path="operator")              # fills in, keeps state and class
    assert (a.job("job-1")["job_class"], a.job("job-1")["path"], a.job_spec("job-1")) == (
        "small-input", "operator", {"gpus": 1})
    assert [a.start_attempt("job-1", "att-1"), a.start_attempt("job-1", "att-2")] == [1, 2]
    a.set_attempt("att-2", state="stopped", ended=True)
    assert b.commit("job-1", "att-2", "sha256:x", "b")["reason"] == "attempt att-2 is stopped and may not commit"
    first = a.commit("job-1", "att-1", "sha256:good", "a", output_ref="out/1")
    assert first == {"committed": True, "reason": "committed", "existing_attempt_id": None}
    again = b.commit("job-1", "att-1", "sha256:good", "b")
    assert not again["committed"] and "repeated commit" in again["reason"]
    assert b.commit_of("job-1")["checksum"] == "sha256:good" and b.commit_count("job-1") == 1
    trace = b.trace("job-1")
    assert [r["tried_by"] for r in trace["rejected_commits"]] == ["b", "b"]
    assert trace["verdict"]["committed_once"] and trace["attempts"][1]["state"] == "stopped"


def test_commit_race_between_the_read_and_the_create_is_a_409(objects):
    a, b = two(objects)
    a.ensure_job("job-2")
    a.start_attempt("job-2", "att-1")
    a.start_attempt("job-2", "att-2")
    real = a.commit_of
    calls = []

    def late(job_id):      # b commits after a looked for an existing commit and before a creates its own
        if not calls:
            calls.append(1)
            got = real(job_id)
            assert b.commit("job-2", "att-2", "sha256:b", "b")["committed"]
            return got
        return real(job_id)
    a.commit_of = late
    v = a.commit("job-2", "att-1", "sha256:a", "a")
    assert not v["committed"] and v["existing_attempt_id"] == "att-2"
    assert b.commit_of("job-2")["checksum"] == "sha256:b"
    assert [r["attempt_id"] for r in b.rejections("job-2")] == ["att-1"]


def test_a_moved_record_is_never_overwritten(objects):
    a, b = two(objects)
    a.ensure_job("job-3")
    assert a.job("job-3")["state"] == "queued"          # a reads ...
    b.job("job-3")
    b.set_job_state("job-3", "held")                    # ... b moves it ...
    with pytest.raises(LedgerConflict):
        a.set_job_state("job-3", "cloud")               # ... a's write is refused, not applied
    assert b.job("job-3")["state"] == "held"
    a.log("job-3", None, "note", "appended")            # an append reads again and lands
    assert [e["step"] for e in b.logs("job-3")] == ["note"]
    a.set_job_state("job-3", "cloud")                   # after the re-read a may move it
    assert b.job("job-3")["state"] == "cloud"


def test_lease_one_pass_at_a_time_says_who_holds_it(objects):
    a, b = two(objects, lease_seconds=60)
    assert a.lock("awx-job-1")
    with pytest.raises(LedgerBusy) as exc:
        b.lock("awx-job-2", wait_s=0)
    assert exc.value.holder.startswith("awx-job-1/") and exc.value.renewed
    assert "holder awx-job-1/" in str(exc.value) and "renewed" in str(exc.value)
    threading.Timer(0.5, a.unlock).start()
    started = time.monotonic()
    assert b.lock("awx-job-2", wait_s=10, poll_s=0.1)        # waits, then takes it
    assert 0.3 < time.monotonic() - started < 10
    with pytest.raises(LedgerBusy):
        a.lock(wait_s=0)
    b.unlock()


def test_an_expired_lease_is_taken_over_and_the_old_holder_stops_writing(objects):
    now = [1_800_000_000.0]
    a, b = two(objects, lease_seconds=30)
    a.clock = b.clock = lambda: now[0]
    a.lock()
    a.ensure_job("job-4")
    now[0] += 31                                          # a stopped renewing
    b.lock(wait_s=0)
    with pytest.raises(LedgerBusy) as exc:
        a.set_job_state("job-4", "held")                  # a's renewal finds b holding the Lease
    assert exc.value.holder.startswith("pass-b")
    assert b.job("job-4")["state"] == "queued"


def test_marks_recorded_once_per_attempt(objects):
    led = K8sLedger(objects(), "ledger")
    led.ensure_job("job-5")
    led.start_attempt("job-5", "att-1")
    for name, at in zip(ledger_mod.MARKS, (10.0, 70.0, 100.0, 400.0, 430.0)):
        assert led.mark("job-5", "att-1", name, at=at)
    assert not led.mark("job-5", "att-1", "start", at=999.0)   # first time kept
    s = ledger_mod.summary(led.marks("job-5"))
    assert s["marks"]["start"] == 100.0 and s["seconds"]["total"] == 420.0
    assert s["seconds"]["dispatch_to_transfer_in"] == 60.0


def test_open_ledger_picks_the_kind(tmp_path):
    assert isinstance(ledger_mod.open_ledger({"kind": "sqlite", "path": str(tmp_path / "t.db")}), Tracker)
    with pytest.raises(ValueError, match="ledger.namespace"):
        ledger_mod.open_ledger({"kind": "kubernetes"})
    with pytest.raises(ValueError, match="ledger.kind"):
        ledger_mod.open_ledger({"kind": "etcd"})


def test_sqlite_lock_says_who_holds_it(tmp_path):
    a, b = Tracker(str(tmp_path / "t.db")), Tracker(str(tmp_path / "t.db"))
    a.lock("awx-job-1")
    with pytest.raises(LedgerBusy, match="awx-job-1"):
        b.lock("awx-job-2", wait_s=0)
    a.close()
    assert b.lock("awx-job-2")
    b.close()
