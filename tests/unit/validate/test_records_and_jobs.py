"""Per-node and wave records (atomic, unchanged when only `run` differs, self-contained HTML
linking the node records) and the Job runner against an in-memory API double."""
import json
import os

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate import job_run, validation, wave_record
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
from hgpu_testenv import run_module


def node_rec(node, ok=True):
    steps = [{"step": "inventory", "passed": True, "reasons": []},
             {"step": "collectives", "passed": ok, "reasons": [] if ok else ["#wrong is 3 (must be 0)"],
              "avg_busbw": 196.0}]
    return validation.node_record(node, "owned", "ng_a100_535", steps, run={"at": "t1"})


def test_node_record_written_once_and_unchanged_when_only_run_differs(tmp_path):
    rec = node_rec("owned-a100-1")
    first = wave_record.write_node_record(str(tmp_path), rec)
    assert first["changed"] and first["path"].endswith("validate-owned-a100-1.json")
    again = wave_record.write_node_record(str(tmp_path), dict(rec, run={"at": "t2"}))
    assert not again["changed"]
    changed = wave_record.write_node_record(str(tmp_path), node_rec("owned-a100-1", ok=False))
    assert changed["changed"]
    with open(changed["path"]) as fh:
        assert json.load(fh)["failed_steps"] == ["collectives"]
    assert [p for p in os.listdir(str(tmp_path)) if p.startswith(".")] == []  # no temp files left


def test_node_record_check_mode_writes_nothing(tmp_path):
    res = wave_record.write_node_record(str(tmp_path), node_rec("n1"), check_mode=True)
    assert res["changed"] and not os.path.exists(res["path"])


def test_wave_record_links_node_records_and_fails_with_a_failed_node(tmp_path):
    folder = str(tmp_path)
    recs = [node_rec("owned-a100-1"), node_rec("owned-a100-2", ok=False)]
    for r in recs:
        wave_record.write_node_record(folder, r)
    loaded = wave_record.load_node_records(folder, ["owned-a100-1", "owned-a100-2", "missing"])
    assert [r["node"] for r in loaded] == ["owned-a100-1", "owned-a100-2"]
    stages = {"preflight": {"status": "passed", "detail": "../../wave1/index.html"},
              "onboard": {"status": "passed", "detail": "ok"}}
    wave = wave_record.build_wave_record("wave1", "wave1", loaded, stages)
    assert wave["passed"] is False
    assert [n["record"] for n in wave["nodes"]] == ["validate-owned-a100-1.json", "validate-owned-a100-2.json"]
    assert wave["nodes"][1]["failed_steps"] == ["collectives"]
    res = wave_record.write_wave_record(folder, wave, loaded)
    assert res["changed"]
    with open(os.path.join(folder, "wave.html")) as fh:
        page = fh.read()
    assert '<a href="validate-owned-a100-2.json">' in page
    assert "collectives: #wrong is 3 (must be 0)" in page
    assert "<script" not in page and "http" not in page.replace("http-equiv", "")
    assert not wave_record.write_wave_record(folder, dict(wave, run={"x": 1}), loaded)["changed"]


def test_wave_record_escapes_and_passes_when_all_pass():
    recs = [node_rec("<b>n</b>")]
    wave = wave_record.build_wave_record("w", "g", recs, {"onboard": {"status": "passed"}})
    assert wave["passed"]
    page = wave_record.render_wave_html(wave, recs)
    assert "<b>n</b>" not in page and "&lt;b&gt;n&lt;/b&gt;" in page
    failed = wave_record.build_wave_record("w", "g", recs, {"onboard": {"status": "failed"}})
    assert failed["failed_stages"] == ["onboard"] and not failed["passed"]
    assert not wave_record.build_wave_record("w", "g", [], {})["passed"]


# -- Job runner -------------------------------------------------------------------------

class FakeKube(object):
    """Jobs and Pods in dicts; `script` advances the Job's state on every get_job."""

    def __init__(self, script):
        self.jobs, self.script, self.namespaces = {}, list(script), set()

    def ensure_namespace(self, name):
        self.namespaces.add(name)

    def create_job(self, ns, body):
        if (ns, body["metadata"]["name"]) in self.jobs:
            raise K8sError("create", status=409, reason="AlreadyExists")
        self.jobs[(ns, body["metadata"]["name"])] = body

    def get_job(self, ns, name):
        if (ns, name) not in self.jobs:
            return None
        self.state = self.script.pop(0) if self.script else self.state
        return {"status": self.state["job"]}

    def list_pods(self, ns, label_selector=None):
        pod = self.state.get("pod")
        return [pod] if pod else []

    def pod_log(self, ns, name):
        return "HGPU_REF {}\n"

    def delete_job(self, ns, name, propagation=None):
        return self.jobs.pop((ns, name), None) is not None


def pod(node, phase, code=None):
    st = {"phase": phase}
    if code is not None:
        st["containerStatuses"] = [{"state": {"terminated": {"exitCode": code}}}]
    return {"metadata": {"name": "p1", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": node}, "status": st}


class Clock(object):
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.now += s


def test_manifest_pins_by_affinity_selector_and_gpus():
    body = job_run.job_manifest("j", "ns", "img", ["python3"], env=[{"name": "A", "value": 1}],
                                node_name="n1", node_selector={"k": "v"}, gpus=1, labels={"a": "b"})
    spec = body["spec"]["template"]["spec"]
    term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"][0] == {
        "key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}
    assert spec["nodeSelector"] == {"k": "v"} and spec["restartPolicy"] == "Never"
    assert spec["containers"][0]["env"] == [{"name": "A", "value": "1"}]
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert body["spec"]["backoffLimit"] == 0 and "nodeName" not in spec


def test_run_waits_until_finished_and_reads_back_node_phase_exit_and_log():
    clock = Clock()
    kube = FakeKube([{"job": {}, "pod": None}, {"job": {"active": 1}, "pod": pod("n1", "Running")},
                     {"job": {"succeeded": 1}, "pod": pod("n1", "Succeeded", 0)}])
    run = job_run.JobRun(kube, "ns", "j", poll=1, clock=clock, sleep=clock.sleep)
    assert run.create(job_run.job_manifest("j", "ns", "img", ["true"]))
    assert not run.create(job_run.job_manifest("j", "ns", "img", ["true"]))  # AlreadyExists
    facts = run.wait(30)
    assert facts["node"] == "n1" and facts["phase"] == "Succeeded" and facts["exit_code"] == 0
    assert facts["succeeded"] and not facts["timed_out"] and facts["log"].startswith("HGPU_REF")
    assert facts["scheduled_after_s"] == 1.0


def test_wait_scheduled_times_out_for_an_unschedulable_pod():
    clock = Clock()
    kube = FakeKube([{"job": {"active": 1}, "pod": pod(None, "Pending")}])
    run = job_run.JobRun(kube, "ns", "j", poll=1, clock=clock, sleep=clock.sleep)
    run.create(job_run.job_manifest("j", "ns", "img", ["true"]))
    facts = run.wait(5, until="scheduled")
    assert facts["timed_out"] and facts["node"] is None and facts["phase"] == "Pending"
    assert "log" not in facts


def test_wait_on_a_vanished_job_raises():
    kube = FakeKube([])
    run = job_run.JobRun(kube, "ns", "gone")
    with pytest.raises(K8sError, match="disappeared"):
        run.wait(5)


class LeftoverKube(object):
    """A Job of the same name left from an earlier run (uid "old"): its Pod is still listed
    after the Job is deleted, and it is the newest Pod. The new Job's Pod appears on the second
    poll. With `stuck`, deleting the earlier Job does not remove it."""

    def __init__(self, leftover=True, stuck=False):
        self.jobs = {("ns", "j"): "old"} if leftover else {}
        self.stuck, self.deleted, self.polls = stuck, [], 0
        self.old_pod = self.owned_pod("p-old", "n-old", "old", "2026-01-02T00:00:00Z")

    @staticmethod
    def owned_pod(name, node, uid, created):
        p = pod(node, "Succeeded", 0)
        p["metadata"] = {"name": name, "creationTimestamp": created, "ownerReferences": [{"uid": uid}]}
        return p

    def ensure_namespace(self, name):
        pass

    def create_job(self, ns, body):
        if (ns, body["metadata"]["name"]) in self.jobs:
            raise K8sError("create", status=409, reason="AlreadyExists")
        self.jobs[(ns, body["metadata"]["name"])] = "new"

    def delete_job(self, ns, name, propagation=None):
        self.deleted.append(propagation)
        return (self.jobs.get((ns, name)) if self.stuck else self.jobs.pop((ns, name), None)) is not None

    def get_job(self, ns, name):
        self.polls += 1
        return {"metadata": {"uid": self.jobs[(ns, name)]},
                "status": {"succeeded": 1} if self.polls >= 2 else {"active": 1}}

    def list_pods(self, ns, label_selector=None):
        pods = [self.old_pod]
        if self.polls >= 2:
            pods.append(self.owned_pod("p-new", "n-new", "new", "2026-01-01T00:00:00Z"))
        return pods

    def pod_log(self, ns, name):
        return ""


def test_replace_deletes_the_leftover_and_reads_only_the_new_jobs_pod():
    clock = Clock()
    kube = LeftoverKube()
    run = job_run.JobRun(kube, "ns", "j", poll=1, clock=clock, sleep=clock.sleep)
    assert run.replace(job_run.job_manifest("j", "ns", "img", ["true"])) is True
    assert kube.deleted == ["Background"] and kube.jobs[("ns", "j")] == "new"
    facts = run.wait(30, until="scheduled")
    assert (facts["pod"], facts["node"]) == ("p-new", "n-new")


def test_replace_without_a_leftover_only_creates():
    kube = LeftoverKube(leftover=False)
    run = job_run.JobRun(kube, "ns", "j", poll=1, clock=Clock(), sleep=lambda s: None)
    assert run.replace(job_run.job_manifest("j", "ns", "img", ["true"])) is False
    assert kube.deleted == []


def test_replace_gives_up_on_a_job_that_does_not_go():
    clock = Clock()
    run = job_run.JobRun(LeftoverKube(stuck=True), "ns", "j", poll=1, clock=clock, sleep=clock.sleep)
    with pytest.raises(K8sError, match="still there after 5"):
        run.replace(job_run.job_manifest("j", "ns", "img", ["true"]), timeout=5)


def test_a_jobs_entry_with_an_unknown_key_is_refused_before_any_call():
    res = run_module("k8s_job_run", {"kubeconfig": "/nonexistent", "image": "busybox", "command": ["true"],
                                     "jobs": [{"name": "a"}, {"name": "b", "nodename": "n1"}]})
    assert res.get("failed") and res["msg"].startswith("jobs[1]: unknown key(s) nodename"), res


@pytest.mark.parametrize("entry,message", [
    ({"name": "b", "command": "true"}, "jobs[0] (b): command must be a list of strings, got 'true'"),
    ({"name": "b", "node_selector": ["a=b"]}, "jobs[0] (b): node_selector must be a mapping"),
    ({"name": "b", "gpus": "two"}, "jobs[0] (b): gpus must be a number"),
    ({"name": "b", "wait": "done"}, "jobs[0] (b): wait must be one of finished, scheduled, none"),
    ({"name": ["b"]}, "jobs[0]: name must be a string"),
])
def test_a_jobs_entry_of_the_wrong_type_is_refused_before_any_call(entry, message):
    res = run_module("k8s_job_run", {"kubeconfig": "/nonexistent", "image": "busybox", "command": ["true"],
                                     "jobs": [entry]})
    assert res.get("failed") and res["msg"].startswith(message), res


def test_jobs_and_name_together_are_refused():
    res = run_module("k8s_job_run", {"name": "a", "image": "busybox", "command": ["true"], "jobs": [{"name": "b"}]})
    assert res.get("failed") and "mutually exclusive" in res["msg"], res
