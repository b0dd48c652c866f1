# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One dispatch pass with real backends: what the overflow_dispatch module runs.

Builds the local queue (Kubernetes Jobs or Slurm), the cloud cluster and the stager (rsync or S3,
stagers.build) from plain option dicts, then either moves chosen jobs (operator path), or evaluates the trigger
against the real local queue and moves what it says (policy path). Jobs already in flight are
advanced one step in the same pass (reconcile, poll, collect, retry under caps). Every result
carries the path that produced it.
"""
from __future__ import annotations

from ..common import k8s
from . import carry, jobclass, prepull, stagers, trigger
from .remote import UnsafeName, check_name
from .k8s_backend import K8sCloudCluster, K8sLocalQueue
from .ledger import LedgerBusy, open_ledger
from .dispatch_batch import BatchDispatcher
from .protocol import ACTIVE_STATES, J_FINISHED
from .slurm_backend import SlurmLocalQueue


DEFAULT_WORKERS = 8
DEFAULT_QPS = 50.0


class RunError(ValueError):
    pass


def _kube(opts, what, pool_size=None):
    params = dict((key, opts.get(key)) for key in k8s.AUTH_KEYS if opts.get(key) is not None)
    params.setdefault("request_timeout", 10.0)
    params["pool_size"] = pool_size
    try:
        return k8s.Kube(params)
    except k8s.K8sError as exc:
        raise RunError("%s: %s" % (what, exc))


def build_local(opts, classes):
    kind = opts.get("kind")
    if kind == "kubernetes":
        return K8sLocalQueue(_kube(opts, "local_queue"), namespace=opts.get("namespace") or "overflow-local",
                             node_selector=opts.get("node_selector"), tolerations=opts.get("tolerations"), classes=classes)
    if kind == "slurm":
        if not opts.get("host") or not opts.get("ssh_key"):
            raise RunError("local_queue: kind slurm needs host and ssh_key")
        return SlurmLocalQueue(opts["host"], opts["ssh_key"], user=opts.get("user") or "root", classes=classes,
                               known_hosts=opts.get("known_hosts"))
    raise RunError("local_queue.kind must be kubernetes or slurm, not %r" % (kind,))


def submit_settings(opts):
    """(workers, qps) of the cloud submission pool: cloud.submit_workers (8) and cloud.submit_qps (50; 0: no limit)."""
    workers = opts.get("submit_workers")
    qps = opts.get("submit_qps")
    workers = DEFAULT_WORKERS if workers is None else int(workers)
    qps = DEFAULT_QPS if qps is None else float(qps)
    if workers < 1 or qps < 0:
        raise RunError("cloud.submit_workers must be 1 or more and cloud.submit_qps 0 or more (got %s, %s)" % (workers, qps))
    return workers, qps


def build_cloud(opts):
    return K8sCloudCluster(_kube(opts, "cloud", pool_size=submit_settings(opts)[0]),
                           namespace=opts.get("namespace") or "overflow", pool=opts.get("pool") or "warm")


def build_stager(opts):
    try:
        return stagers.build(opts)
    except stagers.StorageError as exc:
        raise RunError(str(exc))


def apply_faults(stager, faults):
    """Drill faults that live in this process (the link faults live in the link proxy)."""
    faults = faults or {}
    stager.interrupt_next = int(faults.get("interrupt_transfers", 0))
    stager.corrupt_next = int(faults.get("corrupt_results", 0))
    stager.fail_return_next = int(faults.get("failed_returns", 0))


def _claim_classes(kube, namespace, job):
    """Storage class of each PVC the queued Job mounts (None where the claim cannot be read)."""
    out = {}
    pod = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    for vol in pod.get("volumes") or []:
        claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
        if not claim:
            continue
        try:
            got = kube.call_or_none("read PVC %s/%s" % (namespace, claim),
                                    kube.core.read_namespaced_persistent_volume_claim, claim, namespace)
        except k8s.K8sError:
            got = None
        out[claim] = ((got or {}).get("spec") or {}).get("storageClassName")
    return out


def cloud_spec(job_id, cls, template, inputs=(), local=None, slurm_read=None):
    """The cloud Job for one queued job, carried from the job itself (carry.py): the queued
    Kubernetes Job's pod template, or the Slurm job's batch script and TRES (`slurm_read`: one
    entry of SlurmLocalQueue.read_jobs). Raises carry.CarryRefused when the job cannot move."""
    tpl = template or {}
    if isinstance(local, K8sLocalQueue):
        job = local.kube.get_job(local.ns, job_id)
        if job is None:
            raise carry.CarryRefused(job_id, ["to be in the local queue (no Job %s/%s)" % (local.ns, job_id)])
        pod, rewrites = carry.k8s_pod_spec(job_id, job, tpl, inputs, _claim_classes(local.kube, local.ns, job),
                                           placement=local.placement)
    else:
        if not slurm_read:
            raise carry.CarryRefused(job_id, ["its batch script and TRES (scontrol knows no job %s)" % job_id])
        req = dict(slurm_read["request"])
        if not req.get("gpus") and tpl.get("request_gpus", True):
            req["gpus"] = int(cls.get("gpus", 1))
        pod, rewrites = carry.slurm_pod_spec(job_id, req, slurm_read["script"], tpl, inputs)
        if not slurm_read["request"].get("gpus") and req.get("gpus"):
            rewrites.append({"field": "gpus", "from": 0, "to": req["gpus"], "why": "no gres/gpu in the job: the class's"})
    return {"pod_spec": pod, "rewrites": rewrites}


def build_puller(params, cloud_kube=None):
    """The PrePuller of this pass (None without the `images` option or with images.prepull false)."""
    opts = params.get("images")
    if not opts or opts.get("prepull") is False:
        return None
    copts = params["cloud"]
    kube = cloud_kube or _kube(copts, "cloud")
    return prepull.PrePuller(kube, copts.get("namespace") or "overflow", command=opts.get("command") or ["true"],
                             timeout_s=float(opts.get("timeout_s") or 600), poll_s=float(opts.get("poll_s") or 2))


def measured_pulls(puller, classes, notes=None):
    """{class name: measured pull seconds} from the pre-pull record on the cloud cluster. When the
    record cannot be read the trigger keeps the classes' estimates, and `notes` says why."""
    if puller is None:
        return {}
    try:
        got = prepull.measured_pulls(puller.records())
    except k8s.K8sError as exc:
        if notes is not None:
            notes.append("pre-pull record not read (%s): the time model uses the image_size estimates" % exc)
        return {}
    return dict((name, got[prepull.class_key(name)]) for name in classes if prepull.class_key(name) in got)


def onprem_nodes(local):
    """The on-prem Nodes whose status.images give the digests (none for a Slurm queue: pins only)."""
    if isinstance(local, K8sLocalQueue):
        return local.kube.list_nodes()
    return []


def pin_images(spec, cls, params, puller, local, nodes_cache):
    """Pin and pre-pull the images of a carried spec (prepull.prepare) on the pool the spec runs on."""
    if puller is None:
        return None
    if "nodes" not in nodes_cache:
        try:
            nodes_cache["nodes"] = onprem_nodes(local)
        except k8s.K8sError as exc:
            raise prepull.ImageRefused("the on-prem Nodes (their status.images) could not be read: %s" % exc)
    pod = spec["pod_spec"]
    puller.node_selector = dict(pod.get("nodeSelector") or {})
    puller.tolerations = list(pod.get("tolerations") or [])
    try:
        return prepull.prepare(spec, cls, params.get("images") or {}, puller, nodes_cache["nodes"])
    except k8s.K8sError as exc:
        # nothing is held yet: the job stays in the local queue and a later pass tries again
        raise prepull.ImageRefused("the image pre-pull on the cloud pool could not run: %s" % exc)


def _check_images(spec, cls, params, local, nodes_cache):
    """Check mode: refuse an image without an on-prem digest (reads only; nothing is pulled)."""
    opts = params.get("images")
    if not opts or opts.get("prepull") is False:
        return
    if "nodes" not in nodes_cache:
        nodes_cache["nodes"] = onprem_nodes(local)
    pins = list(opts.get("pins") or []) + list(cls.get("image_pins") or [])
    for dummy_where, dummy_c, onprem in prepull.images_of(spec["pod_spec"], spec.get("rewrites")):
        try:
            digest, why = prepull.onprem_digest(onprem, pins, nodes_cache["nodes"])
        except ValueError as exc:
            raise prepull.ImageRefused(str(exc))
        if digest is None and not cls.get("allow_unpinned_images"):
            raise prepull.ImageRefused("image %s has no on-prem digest (%s)" % (onprem, why))


def _check_carry(results, local, classes, class_of, params):
    """Check mode: a job that would move but cannot be carried is reported as would_refuse (reads only)."""
    movers = [r for r in results if r["outcome"] == "would_move"]
    reads = local.read_jobs([r["job_id"] for r in movers]) if isinstance(local, SlurmLocalQueue) and movers else {}
    nodes_cache = {}
    for r in movers:
        cls_name = class_of.get(r["job_id"])
        try:
            spec = cloud_spec(r["job_id"], classes.get(cls_name) or {}, params.get("job_template"),
                              (params.get("inputs") or {}).get(cls_name) or [], local, reads.get(r["job_id"]))
            _check_images(spec, classes.get(cls_name) or {}, params, local, nodes_cache)
        except (carry.CarryRefused, ValueError) as exc:
            r["outcome"], r["reason"] = "would_refuse", str(exc)


def log_rewrites(tracker, job_id, result, spec, path):
    """Every carry rewrite in the record of the attempt the dispatch started (later attempts run the same spec)."""
    if result.get("attempt_id") and spec.get("rewrites") is not None:
        tracker.log(job_id, result["attempt_id"], "carry", "rewritten", spec["rewrites"], path=path)


def check_names(params):
    """Refuse unsafe job IDs and input/dataset names (remote.check_name), and image pins that are
    not <repo>@sha256:<hex>, before anything runs."""
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
    bad = prepull.check_pins((params.get("images") or {}).get("pins"), "images.pins")
    if bad:
        raise RunError("; ".join(bad))


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


def move_one(job_id, cls_name, cls, params, dispatcher, slurm_read, puller, nodes_cache):
    """Carry one chosen job (cloud_spec), pin and pre-pull its images (pin_images), then dispatch it.
    A refusal comes before any hold: the local entry is untouched."""
    path, tracker = params["path"], dispatcher.tracker
    inputs = (params.get("inputs") or {}).get(cls_name) or []
    try:
        spec = cloud_spec(job_id, cls, params.get("job_template"), inputs, dispatcher.local, slurm_read)
        images = pin_images(spec, cls, params, puller, dispatcher.local, nodes_cache)
    except (carry.CarryRefused, ValueError) as exc:
        return {"job_id": job_id, "path": path, "outcome": "refused", "reason": str(exc)}
    res = dispatcher.dispatch(job_id, cls_name, spec=spec, inputs=inputs)
    log_rewrites(tracker, job_id, res, spec, path)
    if images is not None:
        res["images"] = images
        if res.get("attempt_id"):
            tracker.log(job_id, res["attempt_id"], "prepull", "verified", images, path=path)
    res["staging"] = dict(dispatcher.stager.last)
    return res


def run(params):
    """params: tracker_db or ledger, path, actor, job_classes, local_queue, cloud, storage, job_template,
    inputs (class -> input list), jobs (operator), action, faults, total_gpus, check_mode.
    Returns {"path", "results", "decisions", "snapshot", "refused" (jobs the local queue could not
    read: [{job_id, reason}]), "staging"}."""
    path = params["path"]
    check_names(params)
    classes = jobclass.load(params["job_classes"])
    local = build_local(params["local_queue"], classes)
    snap = local.snapshot(total_gpus=params.get("total_gpus"))
    puller = build_puller(params)
    notes = []
    decisions = trigger.evaluate(snap, classes, path=path, pulls=measured_pulls(puller, classes, notes))
    out = {"path": path, "decisions": decisions, "results": [],
           "snapshot": {"now": snap.now, "free_gpus": snap.free_gpus, "total_gpus": snap.total_gpus,
                        "jobs": [dict((k, getattr(j, k)) for k in j.__slots__) for j in snap.jobs]}}
    if notes:
        out["notes"] = notes
    # jobs the backend could not read: each refused on its own, named with why; the rest are judged
    out["refused"] = list(getattr(snap, "refused", None) or [])
    if params.get("check_mode"):
        out["results"] = [{"job_id": dispatcher["job_id"], "path": path, "outcome": "would_move" if dispatcher["decision"] == "move"
                           else "would_stay", "reason": dispatcher["reason"]} for dispatcher in decisions]
        _check_carry(out["results"], local, classes, dict((j.job_id, j.job_class) for j in snap.jobs), params)
        return out
    cloud = build_cloud(params["cloud"])
    stager = build_stager(params["storage"])
    apply_faults(stager, params.get("faults"))
    tracker, busy = open_pass_ledger(params, params.get("actor") or path)
    if busy is not None:
        out["busy"] = busy
        return out
    try:
        workers, qps = submit_settings(params["cloud"])
        dispatcher = BatchDispatcher(local, cloud, stager, tracker, path, actor=params.get("actor") or path,
                                     max_attempts=int(params.get("max_attempts") or 3), workers=workers, qps=qps)
        cloud.ensure_namespace()
        _advance(dispatcher, params, decisions, snap, classes, out, puller)
        # the cloud creates of the whole pass, sent from the worker pool and confirmed by one list
        batch = dispatcher.flush()
        if batch is not None:
            out["submission"] = {"jobs": batch.creates, "confirmed": len(batch.confirmed), "lists": batch.lists,
                                 "workers": workers, "qps": qps, "seconds": round(batch.seconds, 3)}
        return out
    finally:
        tracker.close()


def _advance(dispatcher, params, decisions, snap, classes, out, puller=None):
    """The pass itself: return_to_local, or advance jobs in flight, then dispatch the chosen jobs."""
    path, tracker, local = dispatcher.path, dispatcher.tracker, dispatcher.local
    by_id = dict((j.job_id, j) for j in snap.jobs)
    action = params.get("action") or "dispatch"
    if action == "return_to_local":
        for job_id in params.get("jobs") or []:
            out["results"].append(dispatcher.return_to_local(job_id, params.get("actor") or path))
        return
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
        return
    nodes_cache = {}
    # the Slurm jobs' TRES and batch scripts, for every chosen job in one SSH round trip
    slurm_read = local.read_jobs([j for j in chosen if j in by_id]) if isinstance(local, SlurmLocalQueue) else {}
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
        out["results"].append(move_one(job_id, cls_name, cls, params, dispatcher, slurm_read.get(job_id),
                                       puller, nodes_cache))
