"""Image digests before submit: cached when the cloud pool's copy has the on-prem
digest, a verified cold pull otherwise, both digests in the attempt log."""
import json

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends

from ovf_world import INPUTS, World

IMG = {"name": "overflow-job-small.tar"}


def world():
    w = World()
    w.storage.onprem_images[IMG["name"]] = backends._content("img", 5000)
    return w


def image_logs(w, job_id):
    return [e for e in w.tracker.logs(job_id) if e["step"] == "ensure_image"]


def test_equal_digest_means_no_copy():
    w = world()
    w.storage.image_cache[IMG["name"]] = bytes(w.storage.onprem_images[IMG["name"]])
    got = w.stager.ensure_image("j1", IMG)
    assert got["outcome"] == "cached" and got["bytes_sent"] == 0 and w.stager.image_pulls == 0
    assert got["cached_digest"] == got["onprem_digest"] == got["verified_digest"]


def test_absent_image_is_pulled_and_verified():
    w = world()
    got = w.stager.ensure_image("j1", IMG)
    assert got["outcome"] == "cold_pull" and got["cached_digest"] is None and got["bytes_sent"] == 5000
    assert got["verified_digest"] == got["onprem_digest"] == backends.sha256_hex(w.storage.image_cache[IMG["name"]])
    assert w.stager.ensure_image("j2", IMG)["outcome"] == "cached" and w.stager.image_pulls == 1


def test_corrupted_cache_is_pulled_again():
    w = world()
    good = w.storage.onprem_images[IMG["name"]]
    w.storage.image_cache[IMG["name"]] = bytes([good[0] ^ 1]) + good[1:]
    got = w.stager.ensure_image("j1", IMG)
    assert got["outcome"] == "cold_pull" and got["cached_digest"] not in (None, got["onprem_digest"])
    assert w.storage.image_cache[IMG["name"]] == good


def test_pull_that_lands_damaged_is_removed_and_raises():
    w = world()
    w.stager.corrupt_pull_next = 1
    with pytest.raises(backends.TransferInterrupted, match="after the pull"):
        w.stager.ensure_image("j1", IMG)
    assert IMG["name"] not in w.storage.image_cache


def test_declared_digest_must_match_the_onprem_copy():
    w = world()
    with pytest.raises(backends.TransferInterrupted, match="declares"):
        w.stager.ensure_image("j1", dict(IMG, digest="sha256:" + "0" * 64))


def test_dispatch_logs_cold_pull_then_cached():
    w = world()
    for job in ("j1", "j2"):
        w.add(job)
        res = w.disp.dispatch(job, "small-input", {}, INPUTS, image=IMG)
        assert res["outcome"] == "submitted"
    first, second = image_logs(w, "j1"), image_logs(w, "j2")
    assert [e["result"] for e in first] == ["cold_pull"] and [e["result"] for e in second] == ["cached"]
    detail = json.loads(first[0]["detail"]) if isinstance(first[0]["detail"], str) else first[0]["detail"]
    assert detail["onprem_digest"] == detail["verified_digest"] and detail["cached_digest"] is None
    # the image is ready before the submission goes out
    steps = [e["step"] for e in w.tracker.logs("j1")]
    assert steps.index("ensure_image") < steps.index("submit")


def test_damaged_pull_is_retried_within_the_transfer_cap():
    w = world()
    w.stager.corrupt_pull_next = 1
    w.add("j1")
    assert w.disp.dispatch("j1", "small-input", {}, INPUTS, image=IMG)["outcome"] == "submitted"
    assert [e["result"] for e in image_logs(w, "j1")] == ["interrupted", "cold_pull"]


def test_image_that_never_verifies_releases_the_job_and_sends_nothing():
    w = world()
    w.stager.corrupt_pull_next = 5
    w.add("j1")
    res = w.disp.dispatch("j1", "small-input", {}, INPUTS, image=IMG)
    assert res["outcome"] == "released" and "image" in res["reason"]
    assert w.cloud.creations == [] and w.local.state("j1") == backends.Q_QUEUED
