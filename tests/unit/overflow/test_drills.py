"""The safe overflow drills against the in-process cloud API emulator (official client, HTTPS): the real
cloud backend in a test namespace, the real SQLite ledger, a memory stager; a fake kubelet runs the test
Job's pod and prints the output line the upload step prints. Each drill passes on the protocol as it is
and fails when the protocol step it exercises is broken."""
import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends, drills, protocol
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.k8s_backend import K8sCloudCluster
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.tracker import Tracker

from drill_world import Kubelet, memory_output
from k8s_world import K8sWorld

NS = "ovf-drill-test"
TEMPLATE = {"image": "registry.example.internal/ml/overflow-runner:1",
            "upload": {"host": "stage.example.internal", "ssh_key": "/k", "root": "/srv/overflow", "known_hosts": "/kh"}}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = K8sWorld(tmp_path_factory.mktemp("drills"))
    w.storage = backends.MemoryStorage()
    kube = w.kube("cloud-direct")
    kube.ensure_namespace(NS)
    w.kubelet = Kubelet(kube, NS, memory_output(w.storage))
    yield w
    w.kubelet.close()
    w.stop()


def drill(world, tmp_path, name, timeout_s=30, **kw):
    cloud = K8sCloudCluster(world.kube("cloud-direct"), namespace=NS)
    ledger = Tracker(str(tmp_path / "drill.db"))
    try:
        rec = drills.run_drill(name, cloud, backends.MemoryStager(world.storage), ledger, "drill-test",
                               lambda job_id: drills.test_spec(job_id, TEMPLATE), [{"name": "in.txt", "size": 16}],
                               poll_s=0.1, timeout_s=timeout_s, **kw)
    finally:
        ledger.close()
    # everything the drill created in the test namespace is gone
    assert rec["cleanup"]["deleted"] is True
    assert cloud.jobs_of(rec["job_id"]) == [] or all(j["metadata"].get("deletionTimestamp")
                                                     for j in cloud.jobs_of(rec["job_id"]))
    return rec


def failed(rec):
    return [c["check"] for c in rec["checks"] if not c["pass"]]


@pytest.mark.parametrize("name", drills.SAFE_NAMES)
def test_each_safe_drill_passes_on_the_protocol(world, tmp_path, name):
    rec = drill(world, tmp_path, name)
    assert rec["pass"], (failed(rec), rec["evidence"])
    ev = rec["evidence"]
    assert ev["commit_count"] == (1 if rec["final_state"] == "finished" else 0)
    assert max(c for c in ev["jobs_with_label"] if c is not None) <= 1
    if name == "lost_submission_response":
        assert rec["final_state"] == "finished" and len(ev["creates"]) == 1
        assert ("lookup", "found") in [(s, r) for a, s, r in ev["log"]]
    if name == "lost_result_return":
        assert ev["fetch_outputs"] == ["failed", "verified"]
        assert ev["landed_checksums"] == [ev["commit"]["checksum"]] * 2
    if name == "retried_commit":
        assert ev["commit_count"] == 1 and len(ev["rejected_commits"]) == 1 and "repeated" in ev["rejected_commits"][0]
    if name.startswith("link_cut_"):
        assert len(ev["refused_calls"]) == 3


def test_lost_response_without_confirm_by_label_is_a_double_dispatch(world, tmp_path, monkeypatch):
    # the broken protocol takes a lost answer for "nothing created" and gives the job back to the local queue
    def no_lookup(self, job_id):
        att = self._current_attempt(job_id)
        return self._release(job_id, att["attempt_id"], "lost answer taken for no Job")
    monkeypatch.setattr(protocol.Dispatcher, "reconcile", no_lookup)
    rec = drill(world, tmp_path, "lost_submission_response")
    assert not rec["pass"] and rec["final_state"] == "back_local"
    assert "no double dispatch: no cloud Job when released locally" in failed(rec)
    assert "confirmed by the job-ID label" in failed(rec)


def test_lost_return_committed_without_verifying_fails(world, tmp_path, monkeypatch):
    # the broken stager drops the acknowledgement and the protocol commits what it never verified
    real = protocol.Dispatcher._collect

    def commit_unverified(self, job_id, cj):
        try:
            self.stager.fetch_outputs(job_id, cj)
        except backends.ReturnFailed:
            self.tracker.commit(job_id, cj.attempt_id, "sha256:unverified", self.actor)
        return real(self, job_id, cj)
    monkeypatch.setattr(protocol.Dispatcher, "_collect", commit_unverified)
    rec = drill(world, tmp_path, "lost_result_return")
    assert not rec["pass"]
    assert "committed checksum is the verified return" in failed(rec)


def test_retried_commit_taken_as_refused_leaves_no_final_state(world, tmp_path, monkeypatch):
    real = protocol.Dispatcher._finish

    def refuse_repeats(self, job_id, attempt_id, verdict):
        if not verdict["committed"]:
            return self._result(job_id, "commit_refused", verdict["reason"], attempt_id)
        return real(self, job_id, attempt_id, verdict)
    monkeypatch.setattr(protocol.Dispatcher, "_finish", refuse_repeats)
    # the broken protocol never reaches a final state, so the drill runs to its timeout; a short one
    # is enough: the commit and its refused repeat come within the first polls (checked below)
    rec = drill(world, tmp_path, "retried_commit", timeout_s=6)
    assert not rec["pass"] and "one final state" in failed(rec)
    assert rec["evidence"]["commit_count"] == 1 and "repeated" in rec["evidence"]["rejected_commits"][0]


def test_link_cut_at_start_that_releases_while_the_cloud_runs_fails(world, tmp_path, monkeypatch):
    # the broken protocol gives up on a job whose cloud side it cannot see
    real = protocol.Dispatcher.poll

    def give_up(self, job_id):
        try:
            self.cloud.find_by_job_id(job_id)
        except backends.LinkDown:
            att = self._current_attempt(job_id)
            return self._release(job_id, att["attempt_id"], "cloud unreachable")
        return real(self, job_id)
    monkeypatch.setattr(protocol.Dispatcher, "poll", give_up)
    # the cloud Job of the released job stays in use, so the drill runs to its timeout; the release
    # comes within the first polls after the cut (checked below)
    rec = drill(world, tmp_path, "link_cut_start", timeout_s=6)
    assert not rec["pass"] and rec["final_state"] == "back_local"
    assert "the link was cut at the mark" not in failed(rec)
    assert "no double dispatch: no cloud Job when released locally" in failed(rec)


def test_table_and_refusals():
    names = [t["drill"] for t in drills.table()]
    assert len(names) == len(set(names)) == len(drills.SAFE_NAMES) + len(drills.UNSAFE_NAMES)
    assert all(t["why"] for t in drills.table())
    assert {"link_cut_%s" % m for m in ("dispatch", "transfer_in", "start", "end", "return")} <= set(drills.SAFE_NAMES)
    assert {"cloud_node_lost", "cloud_rejects_quota", "corrupted_result"} <= set(drills.UNSAFE_NAMES)
    safe, unsafe = drills.split(["retried_commit", "cloud_node_lost"])
    assert (safe, unsafe) == (["retried_commit"], ["cloud_node_lost"])
    out = drills.refused(unsafe, "production")
    assert out[0]["drill"] == "cloud_node_lost" and "not disposable" in out[0]["reason"] and "node" in out[0]["reason"]
    assert drills.refused(unsafe, None)[0]["reason"].startswith("refused: the estate is production")
    assert drills.refused(unsafe, "disposable") == []
    with pytest.raises(drills.DrillRefused, match="unknown drill nope"):
        drills.split(["nope"])
    with pytest.raises(drills.DrillRefused, match="production overflow namespace"):
        drills.check_namespace("overflow", "overflow")
    with pytest.raises(drills.DrillRefused, match="test namespace"):
        drills.check_namespace("", "overflow")
    drills.check_namespace("overflow-drill", "overflow")
