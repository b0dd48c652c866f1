"""Dispatch protocol: one deterministic test per drill failure, each asserting the seed's target outcome."""
import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import protocol

from ovf_world import INPUTS, World


@pytest.fixture
def w(tmp_path):
    world = World(str(tmp_path / "tracker.db"))
    world.add("job-1")
    yield world
    world.tracker.close()


def finish_in_cloud(w, job_id="job-1"):
    w.run_cloud_to_end(job_id)
    return w.disp.step(job_id)


def steps(w, job_id="job-1"):
    return [(e["step"], e["result"]) for e in w.tracker.logs(job_id) if e["step"] != "mark"]


def test_cloud_job_name_is_dns_safe_and_deterministic():
    n1 = protocol.cloud_job_name("slurm/12345_[train]")
    assert n1 == protocol.cloud_job_name("slurm/12345_[train]")
    assert n1.startswith("ovf-slurm-12345-train-")
    long = protocol.cloud_job_name("X" * 200)
    assert len(long) <= 63 and long[-1] != "-"
    assert protocol.cloud_job_name("___") .startswith("ovf-") and len(protocol.cloud_job_name("___")) == 12
    assert protocol.cloud_job_name("a/b") != protocol.cloud_job_name("a-b")   # the hash keeps them apart
    import re
    for n in (n1, long, protocol.cloud_job_name("Ünïcode job")):
        assert re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", n) and len(n) <= 63


def test_happy_path_commits_once_and_releases(w):
    r = w.disp.dispatch("job-1", "small-input", {"image": "x"}, INPUTS)
    assert r["outcome"] == "submitted" and r["path"] == "policy"
    assert w.local.state("job-1") == backends.Q_HELD
    r = finish_in_cloud(w)
    assert r["outcome"] == "finished"
    assert w.tracker.commit_count("job-1") == 1
    assert w.local.state("job-1") == backends.Q_WITHDRAWN
    trace = w.tracker.trace("job-1")
    assert trace["attempts"][0]["resources"] == "returned_to_pool"
    assert trace["verdict"]["cloud_resources_in_use"] == []
    assert all(e["path"] == "policy" for e in w.tracker.logs("job-1") if e["step"] != "commit")
    assert steps(w)[:4] == [("dispatch", "started"), ("hold", "held"), ("stage_inputs", "verified"),
                            ("submit", "created")]
    # labels carry job ID and attempt ID; the name is derived from the job ID
    assert w.cloud.creations == [(protocol.cloud_job_name("job-1"), "att-1")]


def test_submission_response_dropped_keeps_hold_then_adopts(w):
    w.cloud.drop_responses = 1
    r = w.disp.dispatch("job-1", "small-input", {}, INPUTS)
    assert r["outcome"] == "adopted"           # lookup by job-ID label found it
    assert w.local.state("job-1") == backends.Q_HELD
    assert len(w.cloud.creations) == 1
    assert ("submit", "lost_response") in steps(w) and ("lookup", "found") in steps(w)
    assert finish_in_cloud(w)["outcome"] == "finished"
    assert w.tracker.commit_count("job-1") == 1


def test_local_gpus_free_at_dispatch_abandons(w):
    w.local.started_on_hold.add("job-1")
    r = w.disp.dispatch("job-1", "small-input", {}, INPUTS)
    assert r["outcome"] == "abandoned"
    assert w.cloud.creations == [] and w.stager.bytes_sent_total == 0
    assert w.local.state("job-1") == backends.Q_RUNNING
    assert w.tracker.job("job-1")["state"] == protocol.J_LOCAL_RUNNING


def test_cloud_rejects_quota_releases_locally(w):
    w.cloud.reject_next = 1
    r = w.disp.dispatch("job-1", "small-input", {}, INPUTS)
    assert r["outcome"] == "released" and "quota" in r["reason"]
    assert w.local.state("job-1") == backends.Q_QUEUED
    assert w.tracker.attempts("job-1")[0]["state"] == "rejected"


def test_cloud_node_lost_retries_under_cap(w):
    w.disp.dispatch("job-1", "large-input", {}, INPUTS)
    w.cloud.advance("job-1")
    assert w.cloud.lose_node("job-1")
    r = w.disp.step("job-1")
    assert r["outcome"] == "submitted" and r["attempt_id"] == "att-2"
    assert w.local.state("job-1") == backends.Q_HELD
    assert finish_in_cloud(w)["outcome"] == "finished"
    trace = w.tracker.trace("job-1")
    assert [a["state"] for a in trace["attempts"]] == ["failed", "committed"]
    assert trace["commit"]["attempt_id"] == "att-2"


def test_node_lost_every_time_returns_to_local_at_cap(tmp_path):
    w = World(str(tmp_path / "t.db"), max_attempts=2)
    w.add("job-1")
    w.disp.dispatch("job-1", "large-input", {}, INPUTS)
    for dummy in range(2):
        w.cloud.lose_node("job-1")
        r = w.disp.step("job-1")
    assert r["outcome"] == "released" and "cap 2" in r["reason"]
    assert w.local.state("job-1") == backends.Q_QUEUED and not w.cloud.live("job-1")
    assert w.disp.dispatch("job-1")["outcome"] == "noop"   # cap holds across dispatches


def test_transfer_interrupted_resumes_and_verifies(w):
    w.stager.interrupt_next = 1
    r = w.disp.dispatch("job-1", "large-input", {}, INPUTS)
    assert r["outcome"] == "submitted"
    logs = [e for e in w.tracker.logs("job-1") if e["step"] == "stage_inputs"]
    assert [e["result"] for e in logs] == ["interrupted", "verified"]
    assert '"resumed": true' in logs[1]["detail"]
    # only the missing half was re-sent: total sent equals input sizes
    assert w.stager.bytes_sent_total == 5000


def test_transfer_failing_past_cap_releases(w):
    w.stager.interrupt_next = 10
    r = w.disp.dispatch("job-1", "large-input", {}, [{"name": "big", "size": 10**6}])
    assert r["outcome"] == "released" and "transfer failed 3 times" in r["reason"]
    assert w.cloud.creations == [] and w.local.state("job-1") == backends.Q_QUEUED


def test_shared_dataset_warm_is_not_resent(w):
    w.add("job-2")
    w.disp.dispatch("job-1", "small-input", {}, INPUTS)
    sent_before = w.stager.bytes_sent_total
    w.disp.dispatch("job-2", "small-input", {}, INPUTS)
    assert w.stager.bytes_sent_total - sent_before == 1000   # only its own input


def test_corrupted_result_refetched_then_committed(w):
    w.disp.dispatch("job-1", "small-input", {}, INPUTS)
    w.stager.corrupt_next = 1
    r = finish_in_cloud(w)
    assert r["outcome"] == "finished"
    results = [e["result"] for e in w.tracker.logs("job-1") if e["step"] == "fetch_outputs"]
    assert results == ["checksum_mismatch", "verified"]
    assert w.tracker.commit_count("job-1") == 1


def test_corrupted_every_time_never_commits_and_goes_back(w):
    w.disp.dispatch("job-1", "small-input", {}, INPUTS)
    w.stager.corrupt_next = 99
    r = finish_in_cloud(w)
    assert r["outcome"] == "released" and "intact" in r["reason"]
    assert w.tracker.commit_count("job-1") == 0
    assert w.local.state("job-1") == backends.Q_QUEUED and not w.cloud.live("job-1")


def test_return_copy_fails_then_retried(w):
    w.disp.dispatch("job-1", "small-input", {}, INPUTS)
    w.stager.fail_return_next = 2
    r = finish_in_cloud(w)
    assert r["outcome"] == "finished"
    results = [e["result"] for e in w.tracker.logs("job-1") if e["step"] == "fetch_outputs"]
    assert results == ["failed", "failed", "verified"]


def test_operator_returns_job_while_cloud_runs_stops_cloud_first(w):
    w.disp.dispatch("job-1", "small-input", {}, INPUTS)
    w.cloud.advance("job-1")
    r = w.disp.return_to_local("job-1", who="operator:alice")
    assert r["outcome"] == "released"
    assert not w.cloud.live("job-1") and w.local.state("job-1") == backends.Q_QUEUED
    order = steps(w)
    assert order.index(("stop", "returned_to_pool")) < order.index(("release_local", "released"))
    # the stopped attempt can no longer commit
    v = w.tracker.commit("job-1", "att-1", "sha256:late", "late-cloud-writer")
    assert not v["committed"] and "stopped" in v["reason"]
    assert w.local.start("job-1") and not w.both_sides("job-1")


def test_operator_return_refused_while_link_down(w):
    w.disp.dispatch("job-1", "small-input", {}, INPUTS)
    w.cloud.link_down = True
    r = w.disp.return_to_local("job-1", who="operator:bob")
    assert r["outcome"] == "held" and w.local.state("job-1") == backends.Q_HELD


def test_second_commit_is_rejected_and_explained(w):
    w.add("job-2")
    w.disp.dispatch("job-1", "small-input", {}, INPUTS)
    finish_in_cloud(w)
    v = w.tracker.commit("job-1", "att-1", "sha256:again", "drill")
    assert not v["committed"]
    assert w.tracker.commit_count("job-1") == 1
    assert "repeated its commit" in w.tracker.trace("job-1")["verdict"]["notes"][0]


def test_link_down_at_dispatch_holds_until_lookup_then_releases(w):
    w.cloud.link_down = True
    r = w.disp.dispatch("job-1", "small-input", {}, INPUTS)
    assert r["outcome"] == "held" and w.local.state("job-1") == backends.Q_HELD
    assert w.disp.step("job-1")["outcome"] == "held"     # still unknown
    w.cloud.link_down = False
    r = w.disp.step("job-1")
    assert r["outcome"] == "released" and "no cloud Job" in r["reason"]
    assert w.local.state("job-1") == backends.Q_QUEUED and w.cloud.creations == []


def test_lost_response_and_link_down_before_lookup(w):
    w.cloud.drop_responses = 1
    real_submit = w.cloud.submit

    def submit_then_cut(*a):
        try:
            return real_submit(*a)
        finally:
            w.cloud.link_down = True
    w.cloud.submit = submit_then_cut
    r = w.disp.dispatch("job-1", "small-input", {}, INPUTS)
    assert r["outcome"] == "held"
    w.cloud.link_down = False
    assert w.disp.step("job-1")["outcome"] == "adopted"
    assert len(w.cloud.creations) == 1


def test_existing_job_from_earlier_dispatcher_is_adopted(w):
    # a Job exists already (an earlier run created it, then crashed before recording it)
    w.cloud.submit(protocol.cloud_job_name("job-1"), "job-1", "att-old", {})
    r = w.disp.dispatch("job-1", "small-input", {}, INPUTS)
    assert r["outcome"] == "adopted" and r["attempt_id"] == "att-old"
    assert len(w.cloud.creations) == 1
    states = {a["attempt_id"]: a["state"] for a in w.tracker.attempts("job-1")}
    assert states == {"att-1": "adopted_away", "att-old": "submitted"}
    assert finish_in_cloud(w)["outcome"] == "finished"
    assert w.tracker.commit_of("job-1")["attempt_id"] == "att-old"


def test_operator_path_label(tmp_path):
    w = World(str(tmp_path / "t.db"), path="operator")
    w.add("j")
    assert w.disp.dispatch("j", "small-input", {}, INPUTS)["path"] == "operator"
    with pytest.raises(ValueError):
        World(path="cron")


def test_dispatch_of_finished_job_is_noop(w):
    w.disp.dispatch("job-1", "small-input", {}, INPUTS)
    finish_in_cloud(w)
    assert w.disp.dispatch("job-1")["outcome"] == "noop"
    assert len(w.cloud.creations) == 1


def test_new_dispatcher_resumes_from_tracker(w):
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.protocol import Dispatcher
    w.disp.dispatch("job-1", "small-input", {}, INPUTS)
    fresh = Dispatcher(w.local, w.cloud, w.stager, w.tracker, "policy")
    w.run_cloud_to_end("job-1")
    assert fresh.step("job-1")["outcome"] == "finished"


def test_stop_fails_after_commit_then_cleanup_releases(w):
    w.disp.dispatch("job-1", "small-input", {}, INPUTS)
    w.run_cloud_to_end("job-1")
    real_stop = w.cloud.stop
    calls = []

    def stop_link_down(job_id):
        if not calls:
            calls.append(1)
            raise backends.LinkDown("down")
        return real_stop(job_id)
    w.cloud.stop = stop_link_down
    assert w.disp.step("job-1")["outcome"] == "finished"
    assert w.tracker.trace("job-1")["verdict"]["cloud_resources_in_use"] == ["att-1"]
    assert w.disp.step("job-1")["outcome"] == "released_resources"
    assert w.tracker.trace("job-1")["verdict"]["cloud_resources_in_use"] == []
