# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One dispatch pass with real backends: what the overflow_dispatch module runs.

Builds the local queue (Kubernetes Jobs or Slurm), the cloud cluster and the rsync stager from
plain option dicts, then either moves chosen jobs (operator path), or evaluates the trigger
against the real local queue and moves what it says (policy path). Jobs already in flight are
advanced one step in the same pass (reconcile, poll, collect, retry under caps). Every result
carries the path that produced it.
"""
from __future__ import annotations

from ..common import k8s
from . import jobclass, trigger
from .remote import UnsafeName, check_name
from .k8s_backend import K8sCloudCluster, K8sLocalQueue
from .ledger import LedgerBusy, open_ledger
from .protocol import ACTIVE_STATES, J_FINISHED, Dispatcher
from .rsync_stager import RsyncStager
from .slurm_backend import SlurmLocalQueue


class RunError(ValueError):
    pass


def _kube(opts, what):
    params = dict((key, opts.get(key)) for key in k8s.AUTH_KEYS if opts.get(key) is not None)
    params.setdefault("request_timeout", 10.0)
    try:
        return k8s.Kube(params)
    except k8s.K8sError as exc:
        raise RunError("%s: %s" % (what, exc))


def build_local(opts, classes):
    kind = opts.get("kind")
    if kind == "kubernetes":
        return K8sLocalQueue(_kube(opts, "local_queue"), namespace=opts.get("namespace") or "overflow-local",
                             node_selector=opts.get("node_selector"), tolerations=opts.get("tolerations"))
    if kind == "slurm":
        if not opts.get("host") or not opts.get("ssh_key"):
            raise RunError("local_queue: kind slurm needs host and ssh_key")
        return SlurmLocalQueue(opts["host"], opts["ssh_key"], user=opts.get("user") or "root", classes=classes,
                               known_hosts=opts.get("known_hosts"))
    raise RunError("local_queue.kind must be kubernetes or slurm, not %r" % (kind,))


def build_cloud(opts):
    return K8sCloudCluster(_kube(opts, "cloud"), namespace=opts.get("namespace") or "overflow",
                           pool=opts.get("pool") or "warm")


def build_stager(opts):
    for key in ("host", "ssh_key", "onprem_root"):
        if not opts.get(key):
            raise RunError("storage.%s is required" % key)
    st = RsyncStager(opts["host"], opts["ssh_key"], opts["onprem_root"],
                     remote_root=opts.get("remote_root") or "/srv/cloud-storage", user=opts.get("user") or "root",
                     known_hosts=opts.get("known_hosts"))
    return st


def apply_faults(stager, faults):
    """Drill faults that live in this process (the link faults live in the link proxy)."""
    faults = faults or {}
    stager.interrupt_next = int(faults.get("interrupt_transfers", 0))
    stager.corrupt_next = int(faults.get("corrupt_results", 0))
    stager.fail_return_next = int(faults.get("failed_returns", 0))


def cloud_spec(job_id, cls, template, inputs=()):
    """The cloud Job spec for one job: the template's command with `{job_id}` filled in and a
    `{shared}` item expanded to `--shared <name>` for each shared input."""
    tpl = template or {}
    command = []
    for c in tpl.get("command") or ["true"]:
        if c == "{shared}":
            for it in inputs:
                if it.get("shared"):
                    command += ["--shared", it["name"]]
            continue
        command.append(str(c).replace("{job_id}", job_id))
    return {"command": command, "gpus": int(cls.get("gpus", 1)) if tpl.get("request_gpus", True) else 0,
            "image": tpl.get("image"), "env": tpl.get("env") or {}, "node_selector": tpl.get("node_selector"),
            "cloud_gpu_type": tpl.get("cloud_gpu_type")}


def check_names(params):
    """Refuse unsafe job IDs and input/dataset names (remote.check_name) before anything runs."""
    try:
        for job_id in params.get("jobs") or []:
            check_name("job ID", job_id)
        for cls_name, inputs in (params.get("inputs") or {}).items():
            for it in inputs or []:
                item = it if isinstance(it, dict) else {"name": it}
                field = "dataset name" if item.get("shared") else "input name"
                check_name("%s (inputs.%s)" % (field, cls_name), item.get("name"))
    except UnsafeName as exc:
        raise RunError(str(exc))


def open_pass_ledger(params, actor):
    """The ledger the settings name (ledger, else the SQLite file tracker_db), locked for this pass.
    Returns (ledger, None), or (None, busy) when another pass holds it past ledger.wait_s."""
    opts = dict(params.get("ledger") or {})
    if (opts.get("kind") or "sqlite") == "sqlite" and not opts.get("path"):
        opts["path"] = params.get("tracker_db")
    try:
        ledger = open_ledger(opts)
    except (ValueError, k8s.K8sError) as exc:
        raise RunError("ledger: %s" % exc)
    try:
        ledger.lock(actor, wait_s=float(opts.get("wait_s") or 0))
    except LedgerBusy as exc:
        ledger.close()
        return None, {"holder": exc.holder, "renewed": exc.renewed, "reason": str(exc)}
    return ledger, None


def run(params):
    """params: tracker_db or ledger, path, actor, job_classes, local_queue, cloud, storage, job_template,
    inputs (class -> input list), jobs (operator), action, faults, total_gpus, check_mode.
    Returns {"path", "results", "decisions", "snapshot", "staging"}."""
    path = params["path"]
    check_names(params)
    classes = jobclass.load(params["job_classes"])
    local = build_local(params["local_queue"], classes)
    snap = local.snapshot(total_gpus=params.get("total_gpus"))
    decisions = trigger.evaluate(snap, classes, path=path)
    out = {"path": path, "decisions": decisions, "results": [],
           "snapshot": {"now": snap.now, "free_gpus": snap.free_gpus, "total_gpus": snap.total_gpus,
                        "jobs": [dict((k, getattr(j, k)) for k in j.__slots__) for j in snap.jobs]}}
    if params.get("check_mode"):
        out["results"] = [{"job_id": dispatcher["job_id"], "path": path, "outcome": "would_move" if dispatcher["decision"] == "move"
                           else "would_stay", "reason": dispatcher["reason"]} for dispatcher in decisions]
        return out
    cloud = build_cloud(params["cloud"])
    stager = build_stager(params["storage"])
    apply_faults(stager, params.get("faults"))
    tracker, busy = open_pass_ledger(params, params.get("actor") or path)
    if busy is not None:
        out["busy"] = busy
        return out
    try:
        dispatcher = Dispatcher(local, cloud, stager, tracker, path, actor=params.get("actor") or path,
                                max_attempts=int(params.get("max_attempts") or 3))
        cloud.ensure_namespace()
        by_id = dict((j.job_id, j) for j in snap.jobs)
        action = params.get("action") or "dispatch"
        if action == "return_to_local":
            for job_id in params.get("jobs") or []:
                out["results"].append(dispatcher.return_to_local(job_id, params.get("actor") or path))
            return out
        if path == "operator":
            chosen = list(params.get("jobs") or [])
        else:
            chosen = [x["job_id"] for x in decisions if x["decision"] == "move"]
        # advance jobs already in flight first (their state is in the tracker)
        for job in tracker.jobs():
            if job["state"] in ACTIVE_STATES or (job["state"] == J_FINISHED and action == "step"):
                if job["job_id"] not in chosen:
                    out["results"].append(dispatcher.step(job["job_id"]))
        if action == "step":
            return out
        for job_id in chosen:
            q = by_id.get(job_id)
            cls_name = q.job_class if q else None
            if cls_name is None and tracker.job(job_id):
                cls_name = tracker.job(job_id)["job_class"]
            cls = classes.get(cls_name)
            if cls is None:
                out["results"].append({"job_id": job_id, "path": path, "outcome": "refused",
                                       "reason": "job is not in the local queue or its class %r is unknown" % cls_name})
                continue
            if cls["restricted"]:
                out["results"].append({"job_id": job_id, "path": path, "outcome": "refused",
                                       "reason": "class %s is restricted: its data may not leave the site" % cls_name})
                continue
            job = tracker.job(job_id)
            if job is not None and job["state"] in ACTIVE_STATES:
                out["results"].append(dispatcher.step(job_id))
                continue
            inputs = (params.get("inputs") or {}).get(cls_name) or []
            spec = cloud_spec(job_id, cls, params.get("job_template"), inputs)
            res = dispatcher.dispatch(job_id, cls_name, spec=spec, inputs=inputs)
            res["staging"] = dict(stager.last)
            out["results"].append(res)
        return out
    finally:
        tracker.close()
