"""The Kubernetes ledger across processes, against the API emulator on loopback: each pass is a
fresh Python process (ledger_pass.py runs dispatch_run.run on the policy path) in an empty working
directory, as a scheduled AWX job runs in a throw-away container.

- two passes started at once: one holds the Lease, the other waits, then only advances the jobs
  in flight; no job is held, attempted or created in the cloud twice, none is committed twice;
- a pass that may not wait exits saying who holds the Lease;
- the policy path run twice from fresh processes with no local files continues the jobs in flight
  (the second pass collects and commits what the first one dispatched);
- two processes committing the same jobs at once: exactly one commit per job.
"""
import json
import os
import subprocess
import sys
import time
import uuid

import pytest
import yaml

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends, jobclass, k8s_backend
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.ledger import open_ledger
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.protocol import J_CLOUD, J_FINISHED

from ledger_pass import CHECKSUM_ANNOTATION
from ledger_world import Emulator

PASS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ledger_pass.py")
A100 = "NVIDIA A100-SXM4-80GB"
CLASSES = """
defaults: {link_bps: 10Gbps, dispatch: 10s, cloud_queue_wait: 5s, startup: 5s}
classes:
  small-input:
    description: moves
    input_size: 1MB
    output_size: 1kB
    image_size: 1MB
    typical_runtime: 4h
    data_may_leave_site: true
    gpu_type: NVIDIA A100-SXM4-80GB
    gpus: 1
    queue_wait_threshold: 0s
    kubernetes: {queue: small-input}
  site-batch:
    description: the site's own long job ahead in the queue; never moves
    input_size: 1TB
    output_size: 1kB
    image_size: 1MB
    typical_runtime: 9h
    data_may_leave_site: false
    gpu_type: NVIDIA A100-SXM4-80GB
    gpus: 1
    queue_wait_threshold: 0s
    kubernetes: {queue: site-batch}
"""
JOBS = ["job-%d" % n for n in range(4)]


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    emu = Emulator(tmp_path_factory.mktemp("ledger-proc"))
    yield emu
    emu.stop()


class Site(object):
    def __init__(self, emu, tmp):
        self.emu, self.tmp = emu, tmp
        tag = uuid.uuid4().hex[:6]
        self.ns = {"local": "lq-" + tag, "cloud": "cl-" + tag, "ledger": "lg-" + tag}
        for ns in self.ns.values():
            emu.kube().ensure_namespace(ns)
        self.local = k8s_backend.K8sLocalQueue(emu.kube(), namespace=self.ns["local"],
                                               classes=jobclass.validate(yaml.safe_load(CLASSES)))
        classes = tmp / "classes.yml"
        classes.write_text(CLASSES)
        conn = {"kubeconfig": emu.kubeconfig, "context": "ledger"}
        self.ledger_opts = dict(conn, kind="kubernetes", namespace=self.ns["ledger"])
        self.params = {
            "path": "policy", "job_classes": str(classes), "total_gpus": {A100: 1},
            "local_queue": dict(conn, kind="kubernetes", namespace=self.ns["local"]),
            "cloud": dict(conn, namespace=self.ns["cloud"]), "storage": {},
            "job_template": {"outputs": ["output"], "upload": {
                "host": "st.cloud", "ssh_key": "/k", "root": "/srv/cs", "host_keys": "st.cloud ssh-ed25519 AAAA"}},
            "inputs": {}, "jobs": []}
        self.local.enqueue("site-batch", "site-batch", ["true"], gpus=1, gpu_type=A100)
        time.sleep(1.1)        # queued a second before the others (creationTimestamp has whole seconds)
        for job_id in JOBS:
            self.local.enqueue(job_id, "small-input", ["true"], gpus=1, gpu_type=A100)

    def start(self, name, wait_s=30.0, go=None, commit=None):
        """Start one pass (or one commit) in a fresh process and an empty working directory."""
        cwd = self.tmp / ("cwd-" + name)
        cwd.mkdir()
        settings = {"actor": name, "go": go, "params": self.params, "ledger": dict(self.ledger_opts, wait_s=wait_s)}
        path = self.tmp / ("%s.json" % name)
        path.write_text(json.dumps(settings))
        env = dict(os.environ, HOME=str(cwd))
        argv = [sys.executable, PASS, str(path)] + (["commit"] + list(commit) if commit else [])
        return subprocess.Popen(argv, cwd=str(cwd), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True), cwd

    @staticmethod
    def result(proc):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        return json.loads(out.strip().splitlines()[-1])

    def ledger(self):
        return open_ledger(self.ledger_opts)

    def cloud_jobs(self):
        return self.emu.kube().list_jobs(self.ns["cloud"])

    def finish_cloud_jobs(self):
        """The cloud runs every Job to completion and reports its output checksum."""
        kube = self.emu.kube()
        for job in self.cloud_jobs():
            name = job["metadata"]["name"]
            kube.patch_job(self.ns["cloud"], name, {"metadata": {"annotations": {
                CHECKSUM_ANNOTATION: "sha256:" + job["metadata"]["labels"]["hybridgpu.io/overflow-attempt"]}}})
            kube.call("complete %s" % name, kube.batch.patch_namespaced_job_status, name, self.ns["cloud"], {
                "status": {"conditions": [{"type": "Complete", "status": "True"}]}})


@pytest.fixture
def site(emulator, tmp_path):
    return Site(emulator, tmp_path)


def outcomes(result):
    return sorted((r["job_id"], r["outcome"]) for r in result["results"])


def test_two_passes_at_once_never_double_dispatch_or_double_commit(site):
    go = site.tmp / "go"
    procs = [site.start("pass-a", go=str(go))[0], site.start("pass-b", go=str(go))[0]]
    time.sleep(1.0)
    go.write_text("go")
    results = [site.result(p) for p in procs]
    first, second = sorted(results, key=lambda r: [o for dummy, o in outcomes(r)].count("submitted"), reverse=True)
    assert outcomes(first) == [(j, "submitted") for j in JOBS]
    assert outcomes(second) == [(j, "running") for j in JOBS], "the second pass only advances the jobs in flight"
    led = site.ledger()
    assert len(site.cloud_jobs()) == len(JOBS)
    for j in JOBS:
        assert [a["seq"] for a in led.attempts(j)] == [1], "%s attempted twice" % j
        assert [e["result"] for e in led.logs(j) if e["step"] == "hold"] == ["held"]
        assert site.local.state(j) == backends.Q_HELD and led.job(j)["state"] == J_CLOUD
    # the cloud finishes; two passes at once collect: one commit per job
    site.finish_cloud_jobs()
    go2 = site.tmp / "go2"
    procs = [site.start("pass-c", go=str(go2))[0], site.start("pass-d", go=str(go2))[0]]
    time.sleep(1.0)
    go2.write_text("go")
    results = [site.result(p) for p in procs]
    done = [r for res in results for r in res["results"] if r["outcome"] == "finished"]
    assert sorted(r["job_id"] for r in done) == JOBS
    for j in JOBS:
        assert led.commit_count(j) == 1 and led.job(j)["state"] == J_FINISHED
        assert led.commit_of(j)["attempt_id"] == led.attempts(j)[0]["attempt_id"]
        assert led.rejections(j) == []
        assert site.local.state(j) == backends.Q_WITHDRAWN


def test_a_pass_that_may_not_wait_says_who_holds_the_lease(site):
    led = site.ledger()
    led.lock("awx-job-17")
    try:
        proc, dummy = site.start("pass-busy", wait_s=0)
        res = site.result(proc)
    finally:
        led.unlock()
    assert res["results"] == [] and res["busy"]["holder"].startswith("awx-job-17/")
    assert "renewed" in res["busy"]["reason"] and res["busy"]["renewed"]
    assert site.cloud_jobs() == []


def test_policy_path_run_twice_from_fresh_processes_continues_the_jobs_in_flight(site):
    proc, cwd1 = site.start("first")
    first = site.result(proc)
    assert outcomes(first) == [(j, "submitted") for j in JOBS]
    assert all(r["marks"]["marks"].keys() == {"dispatch", "transfer_in"} for r in first["results"])
    site.finish_cloud_jobs()
    proc, cwd2 = site.start("second")
    second = site.result(proc)
    assert outcomes(second) == [(j, "finished") for j in JOBS]
    for r in second["results"]:
        assert r["attempt_id"] == [x for x in first["results"] if x["job_id"] == r["job_id"]][0]["attempt_id"]
        assert set(r["marks"]["marks"]) == {"dispatch", "transfer_in", "end", "return"}
    assert os.listdir(str(cwd1)) == [] and os.listdir(str(cwd2)) == [], "a pass left local files"
    led = site.ledger()
    assert all(led.commit_count(j) == 1 and len(led.attempts(j)) == 1 for j in JOBS)
    proc, dummy = site.start("third")
    assert site.result(proc)["results"] == []            # nothing left in flight, nothing pending


def test_two_processes_commit_the_same_jobs_at_once(site):
    led = site.ledger()
    for j in JOBS:
        led.ensure_job(j)
        led.start_attempt(j, "%s-a" % j)
        led.start_attempt(j, "%s-b" % j)
    go = site.tmp / "go"
    procs = [site.start("c-%s-%s" % (j, side), go=str(go), commit=(j, "%s-%s" % (j, side)))[0]
             for j in JOBS for side in "ab"]
    time.sleep(1.0)
    go.write_text("go")
    verdicts = [site.result(p) for p in procs]
    assert sum(v["committed"] for v in verdicts) == len(JOBS)
    for j in JOBS:
        assert led.commit_count(j) == 1
        winner = led.commit_of(j)["attempt_id"]
        assert [r["attempt_id"] for r in led.rejections(j)] == [a for a in ("%s-a" % j, "%s-b" % j) if a != winner]
