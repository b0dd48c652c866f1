"""A queued job's own text cannot steer the overflow pass: a Slurm job name or comment holding a
delimiter, a newline or a forged row is read as the user's text, never as fields; a job whose
fields cannot be read is refused on its own and named in the pass's result while every other job
is judged; a Kubernetes Job whose deadline annotation is not a number is refused the same way.

The Slurm side runs the whole dispatch pass (dispatch_run.run, check mode: nothing is held) with
ssh replaced by a fake controller (slurm_fake.FakeSlurm) that prints whatever the backend's
command asks for, as squeue does, with or without --json."""
import os

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import dispatch_run, k8s_backend, slurm_backend

import slurm_fake
from k8s_world import K8sWorld
from test_remote_safety import Recorder

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
CLASSES = os.path.join(ROOT, "tests", "lab", "overflow", "job_classes.yml")
A100 = "NVIDIA A100-SXM4-80GB"
# The columns squeue printed for the pass, cell by cell: a name that ends one job's row as a
# cloud-small job and starts another row, as a user can type it into `sbatch -J`.
FORGED_ROW = ("a|#PENDING|#Priority|#2026-01-01T00:00:00|#N/A|#(null)|#1|#cloud-small|#normal|#research|#\n"
              "78|#b")


def slurm_pass(monkeypatch, tmp_path, jobs, json_ok=True):
    fake = slurm_fake.FakeSlurm(jobs, json_ok=json_ok)
    monkeypatch.setattr(slurm_backend, "subprocess", Recorder(fake))
    out = dispatch_run.run({"path": "policy", "tracker_db": str(tmp_path / "t.db"), "job_classes": CLASSES,
                            "local_queue": {"kind": "slurm", "host": "ctl", "ssh_key": "/k"},
                            "cloud": {}, "storage": {}, "job_template": {}, "check_mode": True,
                            "total_gpus": {A100: 1}})
    return out, fake


def judged(out):
    return dict((d["job_id"], d) for d in out["decisions"])


@pytest.mark.parametrize("json_ok", [True, False], ids=["squeue-json", "squeue-without-json"])
def test_a_name_forging_a_cloud_row_leaves_a_restricted_job_restricted(monkeypatch, tmp_path, json_ok):
    jobs = [slurm_fake.job(77, name=FORGED_ROW, partition="restricted"),
            slurm_fake.job(80, name="plain", partition="cloud-small")]
    out, fake = slurm_pass(monkeypatch, tmp_path, jobs, json_ok)
    classes = dict((j["job_id"], j["job_class"]) for j in out["snapshot"]["jobs"])
    assert classes == {"77": "restricted", "80": "small-input"}           # no job 78, 77 stays restricted
    assert judged(out)["77"]["decision"] == "stay" and "restricted" in judged(out)["77"]["reason"]
    assert [r["outcome"] for r in out["results"] if r["job_id"] == "77"] == ["would_stay"]
    assert "80" in judged(out) and out["refused"] == []
    # the queue was read as JSON, or through -o without the name, never split on a fixed delimiter
    assert any("--json" in c for c in fake.squeue_calls)
    assert all("-O" not in c and "%j" not in " ".join(c) for c in fake.squeue_calls)


@pytest.mark.parametrize("json_ok", [True, False], ids=["squeue-json", "squeue-without-json"])
def test_a_name_holding_the_delimiter_does_not_fail_the_pass(monkeypatch, tmp_path, json_ok):
    jobs = [slurm_fake.job(81, name="x|#y|#z", partition="cloud-small", comment="c|#d\novf-0000|cloud-large|ovf-0000|"),
            slurm_fake.job(82, name='"}], "jobs": [', partition="cloud-large"),
            slurm_fake.job(83, name="ok", partition="cloud-small")]
    out, dummy = slurm_pass(monkeypatch, tmp_path, jobs, json_ok)
    assert sorted(judged(out)) == ["81", "82", "83"] and out["refused"] == []
    assert dict((j["job_id"], j["job_class"]) for j in out["snapshot"]["jobs"]) == {
        "81": "small-input", "82": "large-input", "83": "small-input"}


def test_an_unreadable_json_job_is_refused_on_its_own_and_named(monkeypatch, tmp_path):
    bad_state = dict(slurm_fake.job(90), job_state={"not": "a state"})
    bad_id = dict(slurm_fake.job(91), job_id="91; rm -rf /")
    bad_part = dict(slurm_fake.job(92), partition=["cloud-small"])
    out, dummy = slurm_pass(monkeypatch, tmp_path, [bad_state, bad_id, bad_part, slurm_fake.job(93)])
    refused = dict((r["job_id"], r["reason"]) for r in out["refused"])
    assert sorted(refused) == ["90", "92", "entry 1"]
    assert "job_state" in refused["90"] and "partition" in refused["92"] and "job_id" in refused["entry 1"]
    assert list(judged(out)) == ["93"]                                    # the rest is judged
    assert [r["job_id"] for r in out["results"]] == ["93"]


def test_an_unreadable_plain_record_is_refused_on_its_own_and_named(monkeypatch, tmp_path):
    jobs = [slurm_fake.job(94, state="PENDING WITH SPACE"), slurm_fake.job(95, partition="cloud small"),
            slurm_fake.job(96)]
    out, dummy = slurm_pass(monkeypatch, tmp_path, jobs, json_ok=False)
    refused = dict((r["job_id"], r["reason"]) for r in out["refused"])
    assert sorted(refused) == ["94", "95"] and "state" in refused["94"] and "partition" in refused["95"]
    assert list(judged(out)) == ["96"]


def test_a_failing_squeue_fails_the_read_instead_of_giving_an_empty_queue(monkeypatch):
    def broken(cmd):
        return "squeue: error: Unable to contact slurm controller\n%s 1\n" % slurm_fake.marks(cmd[-1])[2]
    monkeypatch.setattr(slurm_backend, "subprocess", Recorder(broken))
    with pytest.raises(slurm_backend.SlurmError, match="squeue failed"):
        slurm_backend.SlurmLocalQueue("ctl", "/k", classes={}).snapshot()


# -- Kubernetes: the deadline annotation ----------------------------------------------------------------

@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = K8sWorld(tmp_path_factory.mktemp("k8s"))
    yield w
    w.stop()


def queued(name, deadline=None):
    ann = {k8s_backend.DEADLINE_ANNOTATION: deadline} if deadline is not None else {}
    pod = {"restartPolicy": "Never",
           "containers": [{"name": "main", "image": "registry.site.example/ml/train:2", "command": ["true"],
                           "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "annotations": ann,
                         "labels": {k8s_backend.CLASS_LABEL: "small-input", "kueue.x-k8s.io/queue-name": "cloud-small"}},
            "spec": {"backoffLimit": 0, "suspend": True, "template": {"metadata": {}, "spec": pod}}}


@pytest.mark.parametrize("deadline", ["abc", "nan", "inf", "1e999"])
def test_an_unreadable_deadline_refuses_that_job_alone(world, tmp_path, deadline):
    ns = "deadline-%s" % {"abc": "a", "nan": "n", "inf": "i", "1e999": "e"}[deadline]
    onprem = world.kube("onprem")
    onprem.ensure_namespace(ns)
    onprem.create_job(ns, queued("bad-deadline", deadline))
    onprem.create_job(ns, queued("good-deadline", "1900000000"))
    onprem.create_job(ns, queued("no-deadline"))
    out = dispatch_run.run({"path": "policy", "tracker_db": str(tmp_path / "t.db"), "job_classes": CLASSES,
                            "local_queue": {"kind": "kubernetes", "kubeconfig": world.kubeconfig, "context": "onprem",
                                            "namespace": ns},
                            "cloud": {}, "storage": {}, "job_template": {}, "check_mode": True,
                            "total_gpus": {A100: 8}})
    assert [r["job_id"] for r in out["refused"]] == ["bad-deadline"]
    assert k8s_backend.DEADLINE_ANNOTATION in out["refused"][0]["reason"] and repr(deadline) in out["refused"][0]["reason"]
    assert sorted(judged(out)) == ["good-deadline", "no-deadline"]
    assert "bad-deadline" not in [r["job_id"] for r in out["results"]]
    assert not (onprem.get_job(ns, "bad-deadline")["metadata"].get("annotations") or {}).get(k8s_backend.HOLD_ANNOTATION)


def test_the_decide_module_refuses_an_unreadable_job_alone():
    from test_overflow_decide_module import CLASSES as LAB_CLASSES, NOW, run
    good = {"job_id": "l-1", "job_class": "large-input", "submit_time": NOW - 7200, "state": "pending", "gpus": 8,
            "gpu_type": A100, "expected_start": NOW + 9 * 3600}
    snap = {"now": NOW, "free_gpus": {A100: 0}, "jobs": [
        dict(good, job_id="bad-deadline", deadline="abc"), {"job_id": "no-class"}, good]}
    res = run({"job_classes": LAB_CLASSES, "snapshot": snap, "path": "operator"})
    assert not res.get("failed"), res.get("msg")
    assert [r["job_id"] for r in res["refused"]] == ["bad-deadline", "no-class"]
    assert "jobs[0]" in res["refused"][0]["reason"] and "job_class" in res["refused"][1]["reason"]
    assert [d["job_id"] for d in res["decisions"]] == ["l-1"] and res["move"] == ["l-1"]


@pytest.mark.parametrize("json_ok", [True, False], ids=["scontrol-json", "without-json"])
def test_a_name_or_work_dir_forging_keys_does_not_change_what_is_carried(monkeypatch, json_ok):
    forged = " TresPerNode=gres:gpu:8 TimeLimit=UNLIMITED WorkDir=/etc Command=/bin/evil"
    job = dict(slurm_fake.job(70, name="train" + forged, partition="cloud-small"),
               time_limit=30, current_working_directory="/home/ana/w" + forged, command="/home/ana/run.sh",
               tres_req_str="cpu=1,mem=1G,node=1", script="#!/bin/sh\necho hi\n")
    monkeypatch.setattr(slurm_backend, "subprocess", Recorder(slurm_fake.FakeSlurm([job], json_ok=json_ok)))
    got = slurm_backend.SlurmLocalQueue("ctl", "/k", classes={}).read_jobs(["70"])["70"]["request"]
    assert got["gpus"] == 0 and got["time_limit_s"] == 1800
    assert got["workdir"] == "/home/ana/w" + forged and got["command"] == "/home/ana/run.sh"
