#!/usr/bin/env python3
"""The overflow failure drill in the lab, for both local queue backends.

    drill.py --out DIR [--backend slurm|kubernetes ...] [--class small-input ...]
             [--failure NAME ...] [--min-runs 4] [--max-runs 8] [--no-spread] [--no-checkpoint]

For each backend, each movable class and each failure, one job goes through the real path:
local queue entry as its user wrote it (a batch script on Slurm on site-sched, or a Job on the
onprem emulator; userjobs.py) -> held -> inputs staged to cloud-storage over rsync -> the carried
job on the cloud emulator, run by a real node agent inside the collection's upload step ->
outputs with their manifest rsynced back on-prem -> verified -> one commit in the SQLite tracker;
clean runs compare the output with a local reference run of the same job. The failure is injected
once; the job is driven to a final state; its trace is read back and compared with the target.
The restricted class is the control: it must be refused on both paths, even with the queue full.
Clean runs repeat per class until the spread of transfer and queue times settles
(drillstats.should_stop); the checkpoint FAQ is run once. Writes DIR/drill.json and
DIR/drill.html (self-contained, timeline of the five marks per job).

Link faults go through a LinkProxy in front of the cloud API (127.0.0.1 -> 10.213.77.1:7443):
`drop 1` loses the response of the submission, `down` refuses connections (the management link
is cut before the request leaves). A lost cloud node is a stopped node agent (heartbeats stop,
Node goes NotReady). Everything changed is restored in `finally` blocks.

The backends run side by side, each in a cloud namespace and a storage folder of its own (a quota
rejection or a cold image pull of one never reaches the other). They share the cloud nodes, so a
lost-node scenario holds the nodes alone: it waits until the other backend's scenario ends, and
the other waits until the node is back (NODES, a readers-writer lock).
"""
import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LAB_SRC = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(LAB_SRC))
for p in (LAB_SRC, HERE, os.path.join(ROOT, ".collections")):
    if p not in sys.path:
        sys.path.insert(0, p)

import yaml  # noqa: E402

import userjobs  # noqa: E402

from lablib import config  # noqa: E402
from linkproxy import LinkProxy  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.files import write as write_atomic  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import k8s  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import records  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.records import html_text  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import cost as costmod  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import drillstats, jobclass, trigger  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import timemodel  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.dispatch_run import (  # noqa: E402
    cloud_spec, log_rewrites)
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.k8s_backend import (  # noqa: E402
    K8sCloudCluster, K8sLocalQueue, product_label, GPU_PRODUCT)
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.protocol import Dispatcher  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.rsync_stager import RsyncStager  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.slurm_backend import SlurmLocalQueue  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.tracker import Tracker  # noqa: E402

CLASSES_FILE = os.path.join(HERE, "job_classes.yml")
JOB_SCRIPT = userjobs.JOB_SCRIPT
SLURM_HOST = "10.213.77.5"
STORAGE_HOST = "10.213.77.30"
REMOTE_ROOT = "/srv/cloud-storage/drill"
IMAGE_SIZE = 3_000_000      # bytes of each class's emulated image blob (deterministic content)
COLD_CLASS = "small-input"  # its image is evicted from the cloud pool's cache at drill start: one cold pull
A100 = "NVIDIA A100-SXM4-80GB"
POOL = {"hybridgpu.io/overflow-lab-pool": "local"}
TAINT_KEY = "hybridgpu.io/overflow-lab"
TOL = [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
MOVABLE = ("small-input", "large-input")
FAILURES = ("none", "dropped_response", "local_gpus_free", "cloud_rejects_quota", "cloud_node_lost",
            "transfer_interrupted", "corrupted_result", "return_copy_fails", "operator_returns_job",
            "second_commit", "link_down_at_dispatch")
# failure -> (allowed final tracker states, commits expected)
TARGETS = {
    "none": ({"finished"}, 1),
    "dropped_response": ({"finished"}, 1),
    "local_gpus_free": ({"local_running"}, 0),
    "cloud_rejects_quota": ({"back_local"}, 0),
    "cloud_node_lost": ({"finished"}, 1),
    "transfer_interrupted": ({"finished"}, 1),
    "corrupted_result": ({"finished"}, 1),
    "return_copy_fails": ({"finished"}, 1),
    "operator_returns_job": ({"back_local"}, 0),
    "second_commit": ({"finished"}, 1),
    "link_down_at_dispatch": ({"finished"}, 1),
}
FINAL = {"finished", "back_local", "local_running", "gone"}
# site-sched's and cloud-storage's host keys, written by the lab (lablib/extra.py) like a site would
KNOWN_HOSTS = config.path("ssh", "known_hosts")
SSH = ["ssh", "-i", config.path("ssh", "id_ed25519"), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
       "-o", "UserKnownHostsFile=" + KNOWN_HOSTS, "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5"]


def slurm_queue(classes=None):
    """The lab's Slurm local queue (site-sched), host key checked; classes from the lab's job classes."""
    return SlurmLocalQueue(SLURM_HOST, config.path("ssh", "id_ed25519"),
                           classes=classes if classes is not None else jobclass.load(CLASSES_FILE),
                           known_hosts=KNOWN_HOSTS)


class SharedNodes(object):
    """A readers-writer lock over the cloud nodes: scenarios share them, a lost-node scenario holds them
    alone. A waiting writer goes before new readers."""

    def __init__(self):
        self.cond = threading.Condition()
        self.readers = 0
        self.writer = False
        self.waiting = 0

    @contextlib.contextmanager
    def hold(self, alone):
        with self.cond:
            if alone:
                self.waiting += 1
                self.cond.wait_for(lambda: not self.writer and self.readers == 0)
                self.waiting -= 1
                self.writer = True
            else:
                self.cond.wait_for(lambda: not self.writer and self.waiting == 0)
                self.readers += 1
        try:
            yield
        finally:
            with self.cond:
                if alone:
                    self.writer = False
                else:
                    self.readers -= 1
                self.cond.notify_all()


NODES = SharedNodes()


def stager(onprem_root, remote_root=REMOTE_ROOT):
    """The stager to the lab's cloud-storage, host key checked."""
    return RsyncStager(STORAGE_HOST, config.path("ssh", "id_ed25519"), onprem_root, remote_root=remote_root,
                       known_hosts=KNOWN_HOSTS)


def ssh(host, command, check=True, timeout=60):
    res = subprocess.run(SSH + ["root@" + host, command], capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise RuntimeError("ssh %s %s: %s" % (host, command, res.stderr.strip()))
    return res.stdout


class Env(object):
    """Backends of one drill run; `backend` picks the local queue."""

    def __init__(self, backend, workdir, tag):
        self.backend = backend
        self.tag = tag
        self.workdir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.classes = jobclass.load(CLASSES_FILE)
        self.mode_file = os.path.join(workdir, "link.mode")
        with open(self.mode_file, "w") as fh:
            fh.write("pass\n")
        self.proxy = LinkProxy((config.BRIDGE_IP, config.CLUSTERS["cloud"]["port"]), mode_file=self.mode_file).start()
        kc = yaml.safe_load(open(config.path("k8s", "kubeconfig")))
        for c in kc["clusters"]:
            if c["name"] == "cloud":
                c["cluster"]["server"] = "https://127.0.0.1:%d" % self.proxy.port
        self.kubeconfig = os.path.join(workdir, "kubeconfig")
        with open(self.kubeconfig, "w") as fh:
            yaml.safe_dump(kc, fh)
        os.chmod(self.kubeconfig, 0o600)
        direct = {"kubeconfig": config.path("k8s", "kubeconfig"), "context": "cloud", "request_timeout": 10}
        self.cloud_admin = k8s.Kube(direct)       # the drill's own hands on the cloud, not through the link
        self.cloud = K8sCloudCluster(k8s.Kube({"kubeconfig": self.kubeconfig, "context": "cloud",
                                               "request_timeout": 5}, retries=1, backoff=0.1),
                                     namespace="overflow-drill-%s" % backend)
        self.cloud.ensure_namespace()
        self.remote_root = "%s/%s" % (REMOTE_ROOT, backend)
        self.stager = stager(os.path.join(workdir, "results"), self.remote_root)
        self.tracker = Tracker(os.path.join(workdir, "tracker.db"))
        if backend == "slurm":
            self.local = slurm_queue(self.classes)
        else:
            self.onprem = k8s.Kube({"kubeconfig": config.path("k8s", "kubeconfig"), "context": "onprem"})
            self.local = K8sLocalQueue(self.onprem, namespace="overflow-drill-local", node_selector=POOL,
                                       tolerations=TOL, classes=self.classes)
            self.local.ensure_namespace()
        self.inputs = self._make_inputs()
        self.images = self._make_images()
        # one cold pull per drill: the first job of COLD_CLASS finds the cache empty, later ones find it cached
        self.stager.clear_image(self.images[COLD_CLASS]["name"])
        self.fill_site()

    def _make_images(self):
        """Emulated images (the lab runs pods as processes): one deterministic blob per class in on-prem
        storage, named with its sha256 digest, like an OCI archive pulled by digest."""
        import hashlib
        d = os.path.join(self.workdir, "images")
        os.makedirs(d, exist_ok=True)
        out = {}
        for cls in list(MOVABLE) + ["restricted"]:
            path = os.path.join(d, "overflow-job-%s.tar" % cls)
            if not os.path.exists(path) or os.path.getsize(path) != IMAGE_SIZE:
                blob = bytearray()
                n = 0
                while len(blob) < IMAGE_SIZE:
                    blob += hashlib.sha256(("overflow-image:%s:%d" % (cls, n)).encode()).digest()
                    n += 1
                with open(path, "wb") as fh:
                    fh.write(bytes(blob[:IMAGE_SIZE]))
            h = hashlib.sha256(open(path, "rb").read()).hexdigest()
            out[cls] = {"name": os.path.basename(path), "path": path, "digest": "sha256:" + h,
                        "size": IMAGE_SIZE}
        return out

    def _make_inputs(self):
        d = os.path.join(self.workdir, "inputs")
        os.makedirs(d, exist_ok=True)
        sizes = {"small.bin": 2_000_000, "vocab.bin": 500_000, "large.bin": 32_000_000, "restricted.bin": 100_000}
        for name, size in sizes.items():
            p = os.path.join(d, name)
            if not os.path.exists(p) or os.path.getsize(p) != size:
                with open(p, "wb") as fh:
                    fh.write(os.urandom(size))
        return {"small-input": [{"name": "small.bin", "path": os.path.join(d, "small.bin")},
                                {"name": "vocab.bin", "path": os.path.join(d, "vocab.bin"), "shared": True}],
                "large-input": [{"name": "large.bin", "path": os.path.join(d, "large.bin")}],
                "restricted": [{"name": "restricted.bin", "path": os.path.join(d, "restricted.bin")}]}

    # -- the local site ---------------------------------------------------------------------------
    def fill_site(self):
        """A long site-batch job takes every local GPU, so the queue is full (the trigger's input)."""
        name = "site-batch-%s" % self.tag
        if getattr(self, "blocker", None) and self.local.state(self.blocker) in (backends.Q_RUNNING, backends.Q_QUEUED):
            return
        if self.backend == "slurm":
            self.blocker = self.local.enqueue(name, "site-batch", "sleep 3600", cpus=4)
        else:
            self.local.enqueue(name, "site-batch", ["sleep", "3600"], gpus=8, gpu_type=A100)
            self.blocker = name

    def enqueue(self, name, cls, **train):
        """Submit the user's job (userjobs.py); returns its job ID (Slurm's numeric ID, or the Job name)."""
        if self.backend == "slurm":
            return userjobs.submit_slurm(self.local, name, self.classes[cls]["slurm"]["partition"],
                                         userjobs.slurm_script(**train))
        self.onprem.create_job(self.local.ns, userjobs.k8s_job(name, cls, self.classes[cls]["gpus"], A100, POOL, TOL,
                                                               **train))
        return name

    def snapshot(self):
        return self.local.snapshot(total_gpus={A100: 8})

    def cleanup_local(self, job_id):
        if self.backend == "slurm":
            self.local.run("scancel %s" % shlex.quote(job_id), check=False)
        else:
            self.onprem.delete_job(self.local.ns, job_id)

    def close(self):
        try:
            if self.backend == "slurm":
                self.local.run("scancel -n site-batch-%s" % self.tag, check=False)
            else:
                self.onprem.delete_job(self.local.ns, "site-batch-%s" % self.tag)
        finally:
            self.proxy.stop()
            self.tracker.close()

    def dispatcher(self, path="policy"):
        return Dispatcher(self.local, self.cloud, self.stager, self.tracker, path, actor="drill-" + path,
                          max_attempts=3)

    def template(self):
        return userjobs.job_template(STORAGE_HOST, self.remote_root)

    def cloud_spec(self, job_id, cls):
        """The carried job, as the overflow pass makes it (refused jobs raise carry.CarryRefused)."""
        read = self.local.read_jobs([job_id]).get(job_id) if self.backend == "slurm" else None
        return cloud_spec(job_id, self.classes[cls], self.template(), self.inputs[cls], self.local, read)


def wait(what, probe, timeout, interval=0.5):
    end = time.time() + timeout
    while time.time() < end:
        got = probe()
        if got:
            return got
        time.sleep(interval)
    raise RuntimeError("timed out after %ss waiting for %s" % (timeout, what))


def queued(env, job_id, timeout=20):
    """The local queue's snapshot once it lists the job as pending behind the site batch."""
    def probe():
        snap = env.snapshot()
        return snap if any(j.job_id == job_id and j.state in trigger.PENDING_STATES for j in snap.jobs) else None
    return wait("job %s to be pending in the local queue" % job_id, probe, timeout, interval=0.2)


def drive(env, dispatcher, job_id, marks, timeout=150):
    """step() until the job reaches a final state. Records when the cloud run was first seen running."""
    end = time.time() + timeout
    res = None
    while time.time() < end:
        job = env.tracker.job(job_id)
        if job and job["state"] in FINAL:
            return job["state"]
        res = dispatcher.step(job_id)
        if res["outcome"] == "running" and "cloud GPUs" not in marks and "is running" in res["reason"]:
            marks["cloud GPUs"] = time.time()
        if res["outcome"] in ("running", "held", "submitted", "adopted", "returning", "noop"):
            time.sleep(0.5)
    job = env.tracker.job(job_id)
    return job["state"] if job else None


def log_time(trace, step, result=None):
    for a in trace["attempts"]:
        for e in a["log"]:
            if e["step"] == step and (result is None or e["result"] == result):
                return e["at"]
    for e in trace["job_log"]:
        if e["step"] == step and (result is None or e["result"] == result):
            return e["at"]
    return None


def cloud_node_of(env, job_id):
    jobs = env.cloud_admin.list_jobs(env.cloud.ns, label_selector="hybridgpu.io/overflow-job")
    for j in jobs:
        if (j["metadata"].get("annotations") or {}).get("hybridgpu.io/overflow-job-id") == job_id:
            for p in env.cloud_admin.list_pods(env.cloud.ns, label_selector="job-name=%s" % j["metadata"]["name"]):
                if (p.get("status") or {}).get("phase") == "Running":
                    return p["spec"].get("nodeName")
    return None


def run_scenario(env, cls, failure, run=1):
    """One job through the path with one injected failure. Returns the scenario record."""
    with NODES.hold(alone=failure == "cloud_node_lost"):
        return _run_scenario(env, cls, failure, run)


def _run_scenario(env, cls, failure, run):
    name = "dr-%s-%s-%s-%s-%d" % (env.tag, env.backend[:2], cls.split("-")[0], failure.replace("_", "")[:12], run)
    name = name[:60]
    marks = {}
    notes = []
    path = "operator" if failure == "operator_returns_job" else "policy"
    dispatcher = env.dispatcher(path)
    # a slower run where the drill acts while the job runs (locally too: Slurm must see it running); a
    # lost node's job runs again in full on another node, so its pace only leaves time to stop the node
    pace = {"cloud_node_lost": 0.15, "operator_returns_job": 0.5, "local_gpus_free": 0.5}.get(failure, 0.0)
    job_id = env.enqueue(name, cls, pace=pace)
    marks["started waiting"] = time.time()
    spec = env.cloud_spec(job_id, cls)
    restore = []
    try:
        decision = [x for x in trigger.evaluate(queued(env, job_id), env.classes, path) if x["job_id"] == job_id]
        decision = decision[0] if decision else None
        if path == "policy" and (decision is None or decision["decision"] != "move"):
            notes.append("trigger did not move it: %s" % (decision and decision["reason"]))
        inject_before_dispatch(env, failure, job_id, restore)
        outcome = dispatcher.dispatch(job_id, cls, spec=spec, inputs=env.inputs[cls], image=env.images[cls])
        log_rewrites(env.tracker, job_id, outcome, spec, path)
        notes.append("dispatch: %s (%s)" % (outcome["outcome"], outcome["reason"]))
        undo(restore)
        inject_after_dispatch(env, dispatcher, cls, failure, job_id, spec, marks, notes, restore)
        drive(env, dispatcher, job_id, marks)
        undo(restore)
        if failure == "second_commit":
            commit = env.tracker.commit_of(job_id)
            if commit:
                again = env.tracker.commit(job_id, commit["attempt_id"], commit["checksum"], "replayed-commit")
                notes.append("second commit: %s" % again["reason"])
    finally:
        for fn in restore:
            try:
                fn()
            except Exception as exc:  # report, keep restoring
                notes.append("restore failed: %s" % exc)
    return scenario_record(env, cls, failure, run, job_id, path, decision, marks, notes)


def undo(restore):
    """Run the restore steps of the failures injected so far, then forget them."""
    for fn in restore:
        fn()
    del restore[:]


def inject_before_dispatch(env, failure, job_id, restore):
    """Failures in place when the job is dispatched; each adds its restore step to ``restore``."""
    if failure == "dropped_response":
        env.proxy.set_mode("drop", 1)
        restore.append(lambda: env.proxy.set_mode("pass"))
    elif failure == "link_down_at_dispatch":
        env.proxy.set_mode("down")
        restore.append(lambda: env.proxy.set_mode("pass"))
    elif failure == "cloud_rejects_quota":
        env.cloud_admin.call("create quota", env.cloud_admin.core.create_namespaced_resource_quota, env.cloud.ns,
                             {"metadata": {"name": "drill-gpu-pool"}, "spec": {"hard": {"count/jobs.batch": "0"}}})
        restore.append(lambda: env.cloud_admin.call(
            "delete quota", env.cloud_admin.core.delete_namespaced_resource_quota, "drill-gpu-pool", env.cloud.ns))
    elif failure == "transfer_interrupted":
        env.stager.interrupt_next = 1
    elif failure == "corrupted_result":
        env.stager.corrupt_next = 1
    elif failure == "return_copy_fails":
        env.stager.fail_return_next = 1
    elif failure == "local_gpus_free":
        restore.append(free_local_gpus(env, job_id))


def inject_after_dispatch(env, dispatcher, cls, failure, job_id, spec, marks, notes, restore):
    """Failures that act on a dispatched job: the link coming back, a lost cloud node, an operator return."""
    if failure == "link_down_at_dispatch":
        res = dispatcher.step(job_id)        # link back: the lookup decides
        notes.append("after the link came back: %s (%s)" % (res["outcome"], res["reason"]))
        if env.tracker.job(job_id)["state"] == "back_local":
            res = dispatcher.dispatch(job_id, cls, spec=spec, inputs=env.inputs[cls], image=env.images[cls])
            notes.append("dispatched again: %s" % res["outcome"])
    if failure == "cloud_node_lost":
        node = wait("the cloud run to start", lambda: cloud_node_of(env, job_id), 60)
        marks["cloud GPUs"] = time.time()
        lab_node = [x for x in config.NODES if x["name"] == node][0]
        ssh(lab_node["ip"], "systemctl stop hybridgpu-node-agent")
        restore.append(lambda: restart_agent(env, lab_node))
        notes.append("stopped the node agent on %s while the job ran" % node)
    if failure == "operator_returns_job":
        wait("the cloud run to start", lambda: cloud_node_of(env, job_id), 60)
        marks["cloud GPUs"] = time.time()
        stale = env.tracker.attempts(job_id)[-1]["attempt_id"]
        res = dispatcher.return_to_local(job_id, "operator")
        notes.append("operator return: %s (%s)" % (res["outcome"], res["reason"]))
        late = env.tracker.commit(job_id, stale, "sha256:" + "0" * 64, "late-cloud-attempt")
        notes.append("the stopped attempt tried to commit later: %s" % late["reason"])


def scenario_record(env, cls, failure, run, job_id, path, decision, marks, notes):
    """Judge the job's trace against the failure's target and build the scenario record."""
    trace = env.tracker.trace(job_id)
    state = trace["job"]["state"]
    allowed, commits = TARGETS[failure]
    local_state = env.local.state(job_id)
    leftover = env.cloud.find_by_job_id(job_id)
    ok = state in allowed and trace["commit_count"] == commits and trace["commit_count"] <= 1
    if state == "finished":
        ok = ok and local_state in (backends.Q_WITHDRAWN, backends.Q_GONE)
    if state == "back_local":
        ok = ok and local_state in (backends.Q_QUEUED, backends.Q_RUNNING, backends.Q_DONE)
    ok = ok and (leftover is None or leftover.phase not in backends.LIVE_PHASES)
    staged = log_time(trace, "stage_inputs", "verified")
    image = image_of(trace)
    landed = max(x for x in (staged, image and image["ready_at"]) if x) if (staged or image) else None
    commit = trace["commit"]
    marks_out = {"started waiting": marks.get("started waiting"), "data and image landed": landed,
                 "started on cloud GPUs": marks.get("cloud GPUs") or log_time(trace, "submit", "created"),
                 "finished": log_time(trace, "fetch_outputs"), "results back": commit["committed_at"] if commit else None}
    stage_log = [entry for attempt in trace["attempts"] for entry in attempt["log"]
                 if entry["step"] == "stage_inputs" and entry["result"] == "verified"]
    staging = json.loads(stage_log[-1]["detail"]) if stage_log else {}
    reference = None
    if commit and failure in ("none", "second_commit"):
        reference = reference_check(env, cls, commit["checksum"])
        ok = ok and reference["match"]
    env.cleanup_local(job_id)
    return {"backend": env.backend, "job_class": cls, "failure": failure, "run": run, "job_id": job_id,
            "path": path, "decision": decision and {"decision": decision["decision"], "reason": decision["reason"]},
            "target": {"states": sorted(allowed), "commits": commits}, "final_state": state,
            "local_state": local_state, "commit_count": trace["commit_count"], "pass": bool(ok),
            "explained": trace["verdict"], "notes": notes, "marks": marks_out, "staging": staging,
            "queue_s": (staged - marks["started waiting"]) if staged else None,
            "transfer_s": staging.get("seconds"), "reference": reference, "image": image,
            "cloud_estimate": cloud_estimate(env.classes[cls], staging, image),
            "measured_total_s": (commit["committed_at"] - marks["started waiting"]) if commit else None,
            "cost_inputs": cost_inputs(env, trace, staging, staged, commit),
            "attempts": [{k: attempt[k] for k in ("attempt_id", "seq", "state", "resources", "started_at", "ended_at")}
                         for attempt in trace["attempts"]],
            "rejected_commits": [rejected["reason"] for rejected in trace["rejected_commits"]]}


def _detail(entry):
    d = entry.get("detail")
    if isinstance(d, str):
        try:
            return json.loads(d)
        except ValueError:
            return {"text": d}
    return d or {}


def image_of(trace):
    """The last image check of the job (cached or cold pull) with both digests, from the attempt log."""
    got = None
    for a in trace["attempts"]:
        for e in a["log"]:
            if e["step"] == "ensure_image" and e["result"] in ("cached", "cold_pull"):
                d = _detail(e)
                got = {"outcome": e["result"], "onprem_digest": d.get("onprem_digest"),
                       "cached_digest": d.get("cached_digest"), "verified_digest": d.get("verified_digest"),
                       "pull_s": d.get("pull_seconds"), "bytes_sent": d.get("bytes_sent"), "ready_at": e["at"],
                       "attempt_id": a["attempt_id"]}
    return got


def cloud_estimate(cls, staging, image):
    """The time model's cloud completion for this class, with the measured image pull fed in
    (the model's own estimate is kept next to it for comparison)."""
    kw = dict(link_bps=cls["link_bps"], runtime=cls.get("cloud_runtime") or cls["typical_runtime"],
              input_bytes=staging.get("bytes_sent", cls["input_size"]), output_bytes=cls["output_size"],
              dispatch=cls["dispatch"], cloud_queue_wait=cls["cloud_queue_wait"], startup=cls["startup"],
              image_bytes=IMAGE_SIZE, image_cached=bool(image and image["outcome"] == "cached"),
              return_link_bps=cls.get("return_link_bps"))
    modelled = timemodel.cloud_completion(**kw)
    measured = timemodel.cloud_completion(image_pull_s=(image or {}).get("pull_s") or 0.0, **kw)
    return {"total_s": round(measured["total_s"], 3), "parts": {k: round(v, 3) for k, v in measured.items()},
            "image_pull_measured_s": measured["image_pull_s"], "image_pull_modelled_s": round(modelled["image_pull_s"], 3),
            "image_outcome": image and image["outcome"]}


def cost_inputs(env, trace, staging, staged_at, commit):
    """What the drill measured for the cost row: GPU time of each cloud attempt (retries flagged),
    bytes in (inputs + image pulls) and out (results), staged data and how long it stayed."""
    runs = []
    in_bytes = 0
    for a in trace["attempts"]:
        start = None
        for e in a["log"]:
            if e["step"] == "stage_inputs" and e["result"] == "verified":
                in_bytes += _detail(e).get("bytes_sent", 0)
            if e["step"] == "ensure_image" and e["result"] == "cold_pull":
                in_bytes += _detail(e).get("bytes_sent", 0)
            if start is None and e["step"] in ("submit", "adopt") and e["result"] in ("created", "adopted"):
                start = e["at"]
        if start is None:
            continue            # never ran on cloud GPUs (rejected, not created, abandoned)
        end = a["ended_at"] or (a["log"][-1]["at"] if a["log"] else start)
        runs.append({"gpus": int(env.classes[trace["job"]["job_class"]]["gpus"]),
                     "seconds": max(0.0, end - start), "retry": a["state"] != "committed"})
    out_bytes = 0
    if commit and commit.get("output_ref") and os.path.isdir(commit["output_ref"]):
        for dirpath, _, files in os.walk(commit["output_ref"]):
            out_bytes += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
    kept = staging.get("bytes_sent", 0) + staging.get("bytes_skipped", 0)
    stay = (commit["committed_at"] - staged_at) if (commit and staged_at) else 0.0
    return {"runs": runs, "in_bytes": in_bytes, "out_bytes": out_bytes,
            "storage": [{"bytes": kept, "seconds": max(0.0, stay)}] if kept else [],
            "dispatched": bool(runs), "completed_returned": bool(commit)}


def cost_section(report, classes_file):
    """One cost row per backend and class from the drill's measured times (cost.scenario_row)."""
    conf = jobclass.load_cost(classes_file)
    rows = []
    groups = {}
    for s in report["scenarios"]:
        groups.setdefault((s["backend"], s["job_class"]), []).append(s)
    for (backend, cls), items in sorted(groups.items()):
        ci = [s["cost_inputs"] for s in items]
        wall = sum((s["marks"]["results back"] or s["marks"]["started waiting"]) - s["marks"]["started waiting"]
                   for s in items if s["marks"]["started waiting"])
        busy = sum(r["seconds"] * r["gpus"] for c in ci for r in c["runs"])
        pool = conf["warm_pool_gpus"]
        moves = sum(1 for s in items if s["path"] == "operator")
        scenario = {
            "name": "%s/%s" % (backend, cls), "path": "policy+operator" if moves else "policy",
            "jobs_dispatched": sum(1 for c in ci if c["dispatched"]),
            "jobs_completed_returned": sum(1 for c in ci if c["completed_returned"]),
            "runs": [r for c in ci for r in c["runs"]],
            "warm_pool": [{"gpus": 1, "seconds": max(0.0, pool * wall - busy)}] if pool else [],
            "storage": [x for c in ci for x in c["storage"]],
            "transfer": {"in_bytes": sum(c["in_bytes"] for c in ci), "out_bytes": sum(c["out_bytes"] for c in ci)},
            "operator_minutes": moves * conf["operator_minutes_per_move"],
        }
        row = costmod.scenario_row(scenario, conf["prices"])
        row.update(backend=backend, job_class=cls, operator_moves=moves, runs=len(scenario["runs"]),
                   retries=sum(1 for r in scenario["runs"] if r["retry"]), in_bytes=scenario["transfer"]["in_bytes"],
                   out_bytes=scenario["transfer"]["out_bytes"])
        rows.append(row)
    return {"prices": conf["prices"], "operator_minutes_per_move": conf["operator_minutes_per_move"],
            "warm_pool_gpus": conf["warm_pool_gpus"], "source": classes_file, "rows": rows,
            "rule": "GPU time billed per started minute per GPU; retries = GPU time of attempts that did not commit; "
                    "engineering = operator-path moves x operator_minutes_per_move; total / jobs completed and returned"}


def free_local_gpus(env, job_id):
    """Local GPUs free up at the moment of dispatch: the local scheduler starts the job first."""
    if env.backend == "slurm":
        env.local.run("scancel %s" % env.blocker)
        wait("Slurm to start %s" % job_id, lambda: env.local.state(job_id) == backends.Q_RUNNING, 30)

        def restore():
            env.cleanup_local(job_id)
            env.fill_site()
        return restore
    node = "ovf-drill-local-%s" % env.tag
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": dict(
        POOL, **{GPU_PRODUCT: product_label(A100)})},
        "spec": {"taints": [{"key": TAINT_KEY, "value": "local", "effect": "NoSchedule"}]},
        "status": {"capacity": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
                   "allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}
    env.onprem.delete_job(env.local.ns, env.blocker)
    env.onprem.call("register node %s" % node, env.onprem.core.create_node, body)
    wait("the onprem scheduler to bind %s" % job_id, lambda: env.local.state(job_id) == backends.Q_RUNNING, 30)

    def restore():
        env.onprem.delete_node(node)
        env.cleanup_local(job_id)
        env.fill_site()
    return restore


def restart_agent(env, node):
    ssh(node["ip"], "systemctl start hybridgpu-node-agent")
    wait("Node %s Ready again" % node["name"],
         lambda: k8s.node_ready(env.cloud_admin.get_node(node["name"]) or {}) == "True", 60)


def reference_inputs(env, cls):
    ref_in = os.path.join(env.workdir, "ref", cls, "inputs")
    os.makedirs(ref_in, exist_ok=True)
    for it in env.inputs[cls]:
        dst = os.path.join(ref_in, it["name"])
        if not os.path.exists(dst):
            os.link(it["path"], dst)
    return ref_in


def reference_check(env, cls, checksum):
    """Run the same job locally (control host, same program, inputs and parameters) and compare its
    output tree (with the manifest the upload step writes) by checksum."""
    digest, dummy = userjobs.reference(reference_inputs(env, cls))
    return {"method": "checksum (deterministic job)", "local": digest, "cloud": checksum, "match": digest == checksum}


def checkpoint_drill(env):
    """FAQ: a moved job stops part way; its last checkpoint comes back and resumes locally; the curve
    is compared with an uninterrupted run against a tolerance fixed here, before running."""
    with NODES.hold(alone=False):
        return _checkpoint_drill(env)


def _checkpoint_drill(env):
    tolerance = {"abs_tol": 1e-9, "rel_tol": 0.0}
    # the user's job plans 120 steps and stops at 60
    job_id = env.enqueue("dr-%s-ckpt" % env.tag, "small-input", steps=120, stop_at=60)
    queued(env, job_id)
    d = env.dispatcher("operator")
    spec = env.cloud_spec(job_id, "small-input")
    d.dispatch(job_id, "small-input", spec=spec, inputs=env.inputs["small-input"], image=env.images["small-input"])
    cj = wait("the cloud attempt to stop part way", lambda: (lambda j: j if j and j.phase in (
        backends.SUCCEEDED, backends.FAILED) else None)(env.cloud.find_by_job_id(job_id)), 90)
    got = env.stager.fetch_outputs(job_id, cj)
    verified = got["checksum"] == cj.output_checksum
    ckpt = os.path.join(got["ref"], "output", "checkpoint.json")
    resumed = os.path.join(env.workdir, "ckpt", "resumed")
    full = os.path.join(env.workdir, "ckpt", "uninterrupted")
    ref_in = reference_inputs(env, "small-input")
    subprocess.run([sys.executable, JOB_SCRIPT, "train", "--out", resumed, "--inputs", ref_in, "--steps", "120",
                    "--resume", ckpt], check=True, capture_output=True)
    subprocess.run([sys.executable, JOB_SCRIPT, "train", "--out", full, "--inputs", ref_in, "--steps", "120"],
                   check=True, capture_output=True)
    a = json.load(open(os.path.join(full, "metrics.json")))["curve"]
    c = json.load(open(os.path.join(resumed, "metrics.json")))["curve"]
    cmp_ = drillstats.compare_curves(list(enumerate(a)), list(enumerate(c)), **tolerance)
    d.return_to_local(job_id, "operator")
    env.cleanup_local(job_id)
    state = json.load(open(ckpt))["state"]
    return {"job_id": job_id, "checkpoint_verified": verified, "checkpoint_step": state["step"],
            "checkpoint_holds": sorted(k for k in state if k in ("model", "optimizer", "scheduler", "step", "rng")),
            "tolerance": tolerance, "comparison": cmp_, "pass": bool(verified and cmp_["ok"] and state["step"] == 60)}


def spread_runs(env, cls, min_runs, max_runs):
    runs = []
    verdict = None
    for n in range(1, max_runs + 1):
        r = run_scenario(env, cls, "none", run=n)
        runs.append(r)
        series = {"transfer_s": [x["transfer_s"] or 0.0 for x in runs], "queue_s": [x["queue_s"] or 0.0 for x in runs]}
        if n >= 2:
            verdict = drillstats.should_stop(series, rel_tol=0.25, min_runs=min_runs, max_runs=max_runs)
            if verdict["stop"]:
                break
    return runs, verdict


# -- report --------------------------------------------------------------------------------------
def render_html(report):
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8"><title>Overflow drill</title>',
           "<style>%s .bar{display:inline-block;height:10px;background:#58a}.ok{color:#070}.bad{color:#b00}"
           "</style></head><body>" % records.PAGE_CSS,
           "<h1>Overflow drill</h1>",
           "<p>%s &middot; verdict <b class='%s'>%s</b></p>" % (
               html_text(report["generated"]), "ok" if report["pass"] else "bad", "PASS" if report["pass"] else "FAIL"),
           "".join("<p class='bad'>A backend stopped before its scenarios ended: %s</p>" % html_text(e)
                   for e in report.get("errors") or []),
           "<h2>Failures injected</h2><table><tr><th>backend</th><th>class</th><th>failure</th><th>path</th>"
           "<th>target</th><th>final state</th><th>commits</th><th>verdict</th><th>what happened</th></tr>"]
    for s in report["scenarios"]:
        out.append("<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td>"
                   "<td class='%s'>%s</td><td>%s</td></tr>" % (
                       html_text(s["backend"]), html_text(s["job_class"]), html_text(s["failure"]), html_text(s["path"]),
                       html_text(", ".join(s["target"]["states"]) + " / %d commit(s)" % s["target"]["commits"]),
                       html_text(s["final_state"]), html_text(s["commit_count"]), "ok" if s["pass"] else "bad",
                       "pass" if s["pass"] else "FAIL", html_text("; ".join(s["notes"] + s["explained"]["notes"]))))
    out.append("</table><h2>Control (restricted class)</h2><table><tr><th>backend</th><th>path</th><th>result</th></tr>")
    for c in report["controls"]:
        out.append("<tr><td>%s</td><td>%s</td><td class='%s'>%s</td></tr>" % (
            html_text(c["backend"]), html_text(c["path"]), "ok" if c["pass"] else "bad", html_text(c["reason"])))
    out.append("</table><h2>Timeline: the five marks per job</h2><table><tr><th>job</th>%s<th>image</th></tr>"
               % "".join("<th>%s</th>" % html_text(m) for m in MARKS))
    for s in report["scenarios"]:
        t0 = s["marks"]["started waiting"]
        cells = []
        for m in MARKS:
            v = s["marks"].get(m)
            if v is None or t0 is None:
                cells.append("<td>&mdash;</td>")
            else:
                cells.append("<td>+%.1fs <span class='bar' style='width:%dpx'></span></td>" % (
                    v - t0, max(1, min(300, int((v - t0) * 4)))))
        out.append("<tr><td>%s</td>%s<td>%s</td></tr>" % (html_text(s["job_id"]), "".join(cells), html_text(image_cell(s.get("image")))))
    out.append("</table><h2>Image on the cloud pool</h2><table><tr><th>job</th><th>outcome</th>"
               "<th>on-prem digest</th><th>cached digest before</th><th>after</th><th>pull (s, measured)</th>"
               "<th>cloud completion (model, measured pull)</th><th>measured (waiting to results back)</th></tr>")
    for s in report["scenarios"]:
        im = s.get("image") or {}
        est = s.get("cloud_estimate") or {}
        out.append("<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>" % (
            html_text(s["job_id"]), html_text(im.get("outcome") or "-"), html_text(im.get("onprem_digest") or "-"),
            html_text(im.get("cached_digest") or "absent"), html_text(im.get("verified_digest") or "-"),
            html_text("%.3f" % im["pull_s"] if im.get("pull_s") is not None else "-"),
            html_text(timemodel.human(est["total_s"]) if est.get("total_s") is not None else "-"),
            html_text(timemodel.human(s["measured_total_s"]) if s.get("measured_total_s") is not None else "-")))
    out.append("</table>")
    cs = report.get("cost")
    if cs:
        cols = ("gpu_running", "gpu_retries", "gpu_warm_pool", "storage", "network", "engineering",
                "prepaid_commitment", "total", "jobs_completed_returned", "cost_per_completed_job")
        out.append("<h2>Cost per backend and class</h2><p>%s. Prices from %s: %s; operator minutes per move %s; "
                   "warm pool GPUs %s.</p><table><tr><th>backend</th><th>class</th><th>billing</th><th>runs</th>"
                   "<th>retries</th><th>operator moves</th><th>bytes in</th><th>bytes out</th>%s</tr>" % (
                       html_text(cs["rule"]), html_text(cs["source"]), html_text(cs["prices"]), html_text(cs["operator_minutes_per_move"]),
                       html_text(cs["warm_pool_gpus"]), "".join("<th>%s</th>" % html_text(c) for c in cols)))
        for r in cs["rows"]:
            out.append("<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td>%s</tr>"
                       % (html_text(r["backend"]), html_text(r["job_class"]), html_text(r["billing"]), html_text(r["runs"]), html_text(r["retries"]),
                          html_text(r["operator_moves"]), html_text(r["in_bytes"]), html_text(r["out_bytes"]),
                          "".join("<td>%s</td>" % html_text(r[c]) for c in cols)))
        out.append("</table>")
    out.append("<h2>Spread of transfer and queue times</h2><table><tr><th>backend</th><th>class</th>"
               "<th>runs</th><th>stopping rule</th><th>verdict</th><th>spreads (IQR, s)</th></tr>")
    for sp in report["spread"]:
        v = sp["verdict"] or {}
        out.append("<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>" % (
            html_text(sp["backend"]), html_text(sp["job_class"]), html_text(sp["runs"]), html_text(v.get("rule")), html_text(v.get("reason")),
            html_text(", ".join("%s=%.3f" % (k, x["spread"]) for k, x in sorted((v.get("spreads") or {}).items())))))
    out.append("</table>")
    ck = report.get("checkpoint")
    if ck:
        out.append("<h2>Checkpoint resume</h2><p class='%s'>%s: checkpoint at step %s verified=%s, curve max diff %s "
                   "(tolerance %s)</p>" % ("ok" if ck["pass"] else "bad", "pass" if ck["pass"] else "FAIL",
                                           html_text(ck["checkpoint_step"]), html_text(ck["checkpoint_verified"]),
                                           html_text(ck["comparison"]["max_abs_diff"]), html_text(ck["tolerance"])))
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def image_cell(im):
    if not im:
        return "-"
    if im["outcome"] == "cached":
        return "cached (%s)" % (im["onprem_digest"] or "")[:19]
    return "cold pull %.2fs (%s)" % (im.get("pull_s") or 0.0, (im["onprem_digest"] or "")[:19])


MARKS = ("started waiting", "data and image landed", "started on cloud GPUs", "finished", "results back")


def write_report(outdir, report):
    os.makedirs(outdir, exist_ok=True)
    for name, text in (("drill.json", json.dumps(report, indent=2, sort_keys=True, default=str) + "\n"),
                       ("drill.html", render_html(report))):
        write_atomic(os.path.join(outdir, name), text)
    return [os.path.join(outdir, "drill.json"), os.path.join(outdir, "drill.html")]


def control(env, path):
    """The restricted class with the queue full: the trigger keeps it, an operator move is refused."""
    job_id = env.enqueue("dr-%s-%s-restricted-%s" % (env.tag, env.backend[:2], path[:3]), "restricted")
    try:
        dec = [x for x in trigger.evaluate(queued(env, job_id), env.classes, path) if x["job_id"] == job_id][0]
        ok = dec["decision"] == "stay" and bool(dec["full"]) and "restricted" in dec["reason"]
        moved = env.tracker.job(job_id) is not None
        return {"backend": env.backend, "path": path, "job_id": job_id, "pass": ok and not moved,
                "reason": "%s (full: %s)" % (dec["reason"], "; ".join(dec["full"]))}
    finally:
        env.cleanup_local(job_id)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--backend", action="append", choices=["slurm", "kubernetes"])
    p.add_argument("--class", dest="classes", action="append", choices=MOVABLE)
    p.add_argument("--failure", action="append", choices=FAILURES)
    p.add_argument("--min-runs", type=int, default=4)
    p.add_argument("--max-runs", type=int, default=8)
    p.add_argument("--no-spread", action="store_true")
    p.add_argument("--no-checkpoint", action="store_true")
    a = p.parse_args(argv)
    tag = "%x" % int(time.time() * 10 % 0xFFFFFF)
    report = {"generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "scenarios": [], "controls": [],
              "spread": [], "checkpoint": None, "cost": None}
    backends_ = a.backend or ["slurm", "kubernetes"]
    parts = dict((b, {"scenarios": [], "controls": [], "spread": [], "checkpoint": None, "error": None})
                 for b in backends_)

    def one_backend(backend, part, checkpoint):
        try:
            env = Env(backend, os.path.join(a.out, backend), tag)
            try:
                for path in ("policy", "operator"):
                    part["controls"].append(control(env, path))
                for cls in a.classes or MOVABLE:
                    for failure in a.failure or [f for f in FAILURES if f != "none"]:
                        if failure == "none" and not a.no_spread:
                            continue    # the spread's runs are the baseline (the same job names)
                        r = run_scenario(env, cls, failure)
                        print("%-10s %-12s %-22s %-12s %s" % (backend, cls, failure, r["final_state"],
                                                              "pass" if r["pass"] else "FAIL"), flush=True)
                        part["scenarios"].append(r)
                    if not a.no_spread:
                        runs, verdict = spread_runs(env, cls, a.min_runs, a.max_runs)
                        part["scenarios"].extend(runs)
                        part["spread"].append({"backend": backend, "job_class": cls, "runs": len(runs),
                                               "verdict": verdict})
                if checkpoint:
                    part["checkpoint"] = checkpoint_drill(env)
            finally:
                env.close()
        except Exception as exc:  # reported with the backend named; the other backend goes on
            part["error"] = "%s: %s: %s" % (backend, type(exc).__name__, exc)
            print("%-10s stopped: %s" % (backend, part["error"]), flush=True)

    threads = [threading.Thread(target=one_backend, args=(b, parts[b], not a.no_checkpoint and i == 0))
               for i, b in enumerate(backends_)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for b in backends_:
        for key in ("scenarios", "controls", "spread"):
            report[key].extend(parts[b][key])
        report["checkpoint"] = report["checkpoint"] or parts[b]["checkpoint"]
    report["errors"] = [parts[b]["error"] for b in backends_ if parts[b]["error"]]
    report["cost"] = cost_section(report, CLASSES_FILE) if report["scenarios"] else None
    report["pass"] = not report["errors"] and all(s["pass"] for s in report["scenarios"]) and \
        all(c["pass"] for c in report["controls"]) and \
        (report["checkpoint"] is None or report["checkpoint"]["pass"])
    files = write_report(a.out, report)
    print("drill %s: %s" % ("PASS" if report["pass"] else "FAIL", " ".join(files)))
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
