"""The operator path never moves a job of a restricted class (data_may_leave_site: false), tested
through dispatch_run.run, the entry point of the overflow_dispatch module, on in-memory backends."""
import os
import time

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import dispatch_run, trigger

JOB_CLASSES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lab", "overflow",
                           "job_classes.yml")
GPU = "NVIDIA A100-SXM4-80GB"


class Queue(backends.MemoryLocalQueue):
    def __init__(self, classes):
        super(Queue, self).__init__()
        self.classes = classes

    def snapshot(self, now=None, total_gpus=None):
        now = time.time()
        jobs = [trigger.QueueJob(job_id, self.classes[job_id], now - 3600, "pending", 1, GPU)
                for job_id, state in self.jobs.items() if state == backends.Q_QUEUED]
        return trigger.QueueSnapshot(now, jobs, {GPU: 0}, {GPU: 8})


class Cloud(backends.MemoryCloud):
    def ensure_namespace(self):
        return None


class Stager(backends.MemoryStager):
    last = {}  # what the rsync stager reports of its last transfer


@pytest.fixture
def world(monkeypatch, tmp_path):
    local = Queue({"reg-1": "restricted", "ok-1": "small-input"})
    local.add("reg-1")
    local.add("ok-1")
    storage = backends.MemoryStorage()
    cloud = Cloud(storage)
    stager = Stager(storage)
    monkeypatch.setattr(dispatch_run, "build_local", lambda opts, classes: local)
    monkeypatch.setattr(dispatch_run, "build_cloud", lambda opts: cloud)
    monkeypatch.setattr(dispatch_run, "build_stager", lambda opts: stager)
    # the in-memory queue holds no job bodies to carry: every job becomes the same small cloud Job
    monkeypatch.setattr(dispatch_run, "cloud_spec", lambda job_id, *args: {
        "pod_spec": {"containers": [{"name": "job", "command": ["run", job_id]}]}, "rewrites": []})
    params = {"path": "operator", "action": "dispatch", "actor": "ops", "tracker_db": str(tmp_path / "t.db"),
              "job_classes": JOB_CLASSES, "local_queue": {"kind": "kubernetes"}, "cloud": {}, "storage": {},
              "job_template": {"outputs": ["output"]}, "inputs": {}, "faults": None, "check_mode": False}
    return params, local, cloud


def test_operator_path_refuses_a_restricted_class(world):
    params, local, cloud = world
    out = dispatch_run.run(dict(params, jobs=["reg-1"]))
    assert [(r["job_id"], r["outcome"]) for r in out["results"]] == [("reg-1", "refused")]
    assert "restricted" in out["results"][0]["reason"]
    assert local.state("reg-1") == backends.Q_QUEUED        # never held, still the site's
    assert cloud.creations == [] and "reg-1" not in cloud.by_job


def test_operator_path_moves_a_movable_class_in_the_same_pass(world):
    params, local, cloud = world
    out = dispatch_run.run(dict(params, jobs=["reg-1", "ok-1"]))
    outcomes = dict((r["job_id"], r["outcome"]) for r in out["results"])
    assert outcomes["reg-1"] == "refused"
    assert outcomes["ok-1"] != "refused"
    assert local.state("ok-1") == backends.Q_HELD
    assert list(cloud.by_job) == ["ok-1"]
