"""Background controllers: scheduler, Job controller, DaemonSet controller (daemonsets.py), node
lifecycle (nodehealth.py), PDB status, garbage collection (lifecycle.py) and pod GC.
One thread, one pass every `tick` seconds (and on every write), under the store lock."""
import copy
import logging
import math
import threading
import time

from . import daemonsets, lifecycle, nodehealth
from .resources import BY_PLURAL
from .selectors import SelectorError, label_selector_from_object, labels_match
from .store import ApiError, now_rfc3339, parse_time, random_suffix

log = logging.getLogger("k8s_emulator")
GPU = "nvidia.com/gpu"
TERMINAL = ("Succeeded", "Failed")
PODS, NODES, JOBS = BY_PLURAL["pods"], BY_PLURAL["nodes"], BY_PLURAL["jobs"]
PDBS = BY_PLURAL["poddisruptionbudgets"]
_EVICTED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def _cond(obj, ctype):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def _set_cond(obj, ctype, status, reason="", message="", heartbeat=False, full=False):
    """Set a condition; return True when something meaningful changed."""
    conds = obj.setdefault("status", {}).setdefault("conditions", [])
    now = now_rfc3339()
    cur = next((c for c in conds if c.get("type") == ctype), None)
    if cur and cur.get("status") == status and cur.get("reason", "") == reason \
            and cur.get("message", "") == message:
        return False
    new = {"type": ctype, "status": status, "lastTransitionTime": now}
    if reason or full:
        new["reason"] = reason
    if message or full:
        new["message"] = message  # metav1.Condition (full=True) requires both
    if heartbeat:
        new["lastProbeTime"] = now
    if cur is not None:
        if cur.get("status") == status:
            new["lastTransitionTime"] = cur.get("lastTransitionTime", now)
        cur.clear()
        cur.update(new)
    else:
        conds.append(new)
    return True


def pod_gpu_request(pod):
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        val = (res.get("limits") or {}).get(GPU, (res.get("requests") or {}).get(GPU, 0))
        try:
            total += int(val)
        except (TypeError, ValueError):
            pass
    return total


def node_ready(node):
    c = _cond(node, "Ready")
    return bool(c and c.get("status") == "True")


def tolerates(tolerations, taint):
    for t in tolerations or []:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        op = t.get("operator", "Equal")
        if not t.get("key") and op == "Exists":
            return True
        if t.get("key") != taint.get("key"):
            continue
        if op == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _expr_match(expr, labels, fields=None):
    source = fields if fields is not None else labels
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    has, val = key in source, source.get(key)
    if op == "In":
        return has and val in values
    if op == "NotIn":
        return not has or val not in values
    if op == "Exists":
        return has
    if op == "DoesNotExist":
        return not has
    if op in ("Gt", "Lt"):
        try:
            a, b = int(val), int(values[0])
        except (TypeError, ValueError, IndexError):
            return False
        return a > b if op == "Gt" else a < b
    return False


def affinity_matches(pod, node):
    spec = pod.get("spec") or {}
    labels = node["metadata"].get("labels") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return True
    fields = {"metadata.name": node["metadata"]["name"]}
    for term in required.get("nodeSelectorTerms") or []:
        exprs = term.get("matchExpressions") or []
        fexprs = term.get("matchFields") or []
        if not exprs and not fexprs:
            continue
        if all(_expr_match(e, labels) for e in exprs) and \
                all(_expr_match(e, labels, fields) for e in fexprs):
            return True
    return False


def pod_ready(pod):
    ready = _cond(pod, "Ready")
    return bool(ready and ready.get("status") == "True")


def pod_healthy(pod):
    """As the disruption controller counts: Ready=True and not being deleted."""
    return pod_ready(pod) and not pod["metadata"].get("deletionTimestamp")


def terminating(pod):
    return bool(pod["metadata"].get("deletionTimestamp"))


def _job_fields(job):
    spec = job.get("spec") or {}
    return (spec.get("suspend"), spec.get("parallelism"), spec.get("completions"), spec.get("backoffLimit"),
            len((job.get("status") or {}).get("conditions") or []))


def _pod_fields(pod):
    meta = pod["metadata"]
    return (meta["name"], meta.get("resourceVersion"), meta.get("deletionTimestamp"),
            (pod.get("status") or {}).get("phase"), pod_healthy(pod))


def pdb_numbers(store, pdb):
    """(expected, current_healthy, desired_healthy, disruptions_allowed) for one PDB."""
    ns = pdb["metadata"]["namespace"]
    spec = pdb.get("spec") or {}
    try:
        reqs = label_selector_from_object(spec.get("selector"))
    except SelectorError:
        reqs = None
    pods = [p for p in store.items("pods", ns)
            if labels_match(reqs, p["metadata"].get("labels"))
            and (p.get("status") or {}).get("phase") not in TERMINAL]
    expected = len(pods)
    healthy = sum(1 for p in pods if pod_healthy(p))

    def scaled(value):
        if isinstance(value, str) and value.endswith("%"):
            return int(math.ceil(float(value[:-1]) * expected / 100.0))
        return int(value)

    if spec.get("minAvailable") is not None:
        desired = scaled(spec["minAvailable"])
    elif spec.get("maxUnavailable") is not None:
        desired = max(0, expected - scaled(spec["maxUnavailable"]))
    else:
        desired = expected
    return expected, healthy, desired, max(0, healthy - desired)


def _budget_refusal(message):
    return ApiError(429, "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    {"causes": [{"reason": "DisruptionBudget", "message": message}]})


def evict(store, ns, name, body, dry_run=False):
    """The pods/eviction subresource (policy/v1 Eviction), as pkg/registry/core/pod/storage/
    eviction.go: pods that are Pending, finished or already being deleted go without a budget
    check; otherwise the one matching PDB's *status* decides (429 while its observedGeneration
    lags or disruptionsAllowed is 0; an unready pod may go while the budget is met). Allowed
    evictions decrement disruptionsAllowed and delete the pod gracefully. With dry_run the
    answer is the same and nothing changes."""
    with store.lock:
        pod = store.get(PODS, ns, name)
        phase = (pod.get("status") or {}).get("phase")
        grace = ((body or {}).get("deleteOptions") or {}).get("gracePeriodSeconds")
        if phase not in TERMINAL + ("Pending",) and not terminating(pod):
            matching = []
            for pdb in store.items("poddisruptionbudgets", ns):
                try:
                    reqs = label_selector_from_object((pdb.get("spec") or {}).get("selector"))
                except SelectorError:
                    continue
                if labels_match(reqs, pod["metadata"].get("labels")):
                    matching.append(pdb)
            if len(matching) > 1:
                raise ApiError(500, "InternalError", "This pod has more than one "
                               "PodDisruptionBudget, which the eviction subresource does not "
                               "support.")
            if matching:
                pdb = matching[0]
                st = pdb.get("status") or {}
                pname = pdb["metadata"]["name"]
                if int(st.get("observedGeneration") or 0) < int(pdb["metadata"].get("generation") or 1):
                    raise _budget_refusal("The disruption budget %s is still being processed by the server." % pname)
                allowed = int(st.get("disruptionsAllowed") or 0)
                healthy, desired = int(st.get("currentHealthy") or 0), int(st.get("desiredHealthy") or 0)
                policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
                unready_ok = not pod_ready(pod) and (policy == "AlwaysAllow" or (healthy >= desired and desired > 0))
                if not unready_ok:
                    if allowed < 1:
                        raise _budget_refusal("The disruption budget %s needs %d healthy pods and has %d currently"
                                              % (pname, desired, healthy))
                    if not dry_run:
                        updated = copy.deepcopy(pdb)
                        ust = updated.setdefault("status", {})
                        ust["disruptionsAllowed"] = allowed - 1
                        ust.setdefault("disruptedPods", {})[name] = now_rfc3339()
                        store.put_internal(PDBS, updated)
        if dry_run:
            return dict(_EVICTED)
        lifecycle.delete(store, PODS, store.objects["pods"][(ns, name)], grace=grace)
    return dict(_EVICTED)


class Controllers:
    def __init__(self, store, node_grace=40.0, tick=0.2, pdb_lag=0.2, confirm_pod_deletion=False):
        self.store = store
        self.node_grace = float(node_grace)
        self.health = nodehealth.NodeHealth(self.node_grace)
        self.pdb_lag = float(pdb_lag)
        self._pdb_dirty = {}  # pdb uid -> server time its status first lagged
        # Tests without any kubelet: confirm a Terminating pod at once, as its kubelet would.
        self.confirm_pod_deletion = confirm_pod_deletion
        self.tick = tick
        self._stop = threading.Event()
        self._thread = None
        self._job_seen = {}  # job uid -> {"succeeded": set(pod uids), "failed": set(...)}
        self._job_synced = {}  # job uid -> (its resourceVersion, its pods' names and versions) at the last sync

    def start(self):
        self._thread = threading.Thread(target=self._run, name="k8s-emulator-controllers",
                                        daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        with self.store.lock:
            self.store.changed.notify_all()
        if self._thread:
            self._thread.join(timeout=5)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:
                log.exception("controller pass failed")
            with self.store.lock:
                self.store.changed.wait(self.tick)
            time.sleep(0.02)  # let a burst of writes land before the next pass

    def run_once(self):
        with self.store.lock:
            self.node_lifecycle()
            self.garbage_collect()
            self.jobs()
            daemonsets.sync(self.store)
            self.schedule()
            self.pdb_status()

    # ---- node lifecycle ----
    def node_lifecycle(self):
        self.health.sync(self.store)

    # ---- garbage collection ----
    def garbage_collect(self):
        lifecycle.collect(self.store)
        self.pod_gc()

    def pod_gc(self):
        """Force-delete (grace 0) pods whose kubelet will never confirm, like PodGC
        (pkg/controller/podgc): pods bound to a Node that no longer exists, and Terminating pods
        on a Node tainted node.kubernetes.io/out-of-service that is not Ready. Simplified: a
        Terminating pod on a Node that is not Ready (Unknown after the node grace, or False) also
        goes once its deletionTimestamp has passed, so a node that is cut off or gone does not
        leave Terminating pods behind for ever (upstream they stay until the kubelet returns)."""
        nodes = {n["metadata"]["name"]: n for n in self.store.items("nodes")}
        now = time.time()
        for pod in self.store.items("pods"):
            bound = (pod.get("spec") or {}).get("nodeName")
            if not bound:
                continue
            node = nodes.get(bound)
            if node is None:
                self.store.delete_internal(PODS, pod)
                continue
            if not terminating(pod) or pod["metadata"].get("finalizers"):
                continue
            if self.confirm_pod_deletion:
                self.store.delete_internal(PODS, pod)
            elif not node_ready(node) and (
                    any(t.get("key") == "node.kubernetes.io/out-of-service"
                        for t in (node.get("spec") or {}).get("taints") or [])
                    or now >= (parse_time(pod["metadata"]["deletionTimestamp"]) or 0)):
                self.store.delete_internal(PODS, pod)

    # ---- scheduler ----
    def schedule(self):
        nodes = self.store.items("nodes")
        pods = self.store.items("pods")
        used = {}
        for p in pods:
            bound = (p.get("spec") or {}).get("nodeName")
            if bound and (p.get("status") or {}).get("phase") not in TERMINAL:
                used[bound] = used.get(bound, 0) + pod_gpu_request(p)
        for pod in pods:
            spec = pod.get("spec") or {}
            if spec.get("nodeName") or (pod.get("status") or {}).get("phase") in TERMINAL \
                    or terminating(pod):
                continue
            if spec.get("schedulerName", "default-scheduler") != "default-scheduler":
                continue
            want = pod_gpu_request(pod)
            fits, reasons = [], {}

            def why(text):
                reasons[text] = reasons.get(text, 0) + 1

            for node in nodes:
                nname = node["metadata"]["name"]
                nspec = node.get("spec") or {}
                untolerated = [t for t in nspec.get("taints") or []
                               if t.get("effect") in ("NoSchedule", "NoExecute")
                               and not tolerates(spec.get("tolerations"), t)]
                if not node_ready(node):
                    why("node(s) were not ready")
                elif nspec.get("unschedulable") and not tolerates(
                        spec.get("tolerations"),
                        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}):
                    why("node(s) were unschedulable")
                elif not affinity_matches(pod, node):
                    why("node(s) didn't match Pod's node affinity/selector")
                elif untolerated:
                    t = untolerated[0]
                    why("node(s) had untolerated taint {%s: %s}" % (t.get("key"), t.get("value", "")))
                else:
                    alloc = (node.get("status") or {}).get("allocatable") or {}
                    try:
                        have = int(alloc.get(GPU, 0))
                    except (TypeError, ValueError):
                        have = 0
                    if want and have - used.get(nname, 0) < want:
                        why("Insufficient %s" % GPU)
                    else:
                        fits.append((used.get(nname, 0), nname))
            if fits:
                new = copy.deepcopy(pod)
                fits.sort()
                target = fits[0][1]
                new["spec"]["nodeName"] = target
                used[target] = used.get(target, 0) + want
                _set_cond(new, "PodScheduled", "True")
                self.store.put_internal(PODS, new)
            else:
                msg = "0/%d nodes are available" % len(nodes)
                if reasons:
                    msg += ": " + ", ".join("%d %s" % (n, r) for r, n in sorted(reasons.items()))
                msg += "."
                cur = _cond(pod, "PodScheduled") or {}
                if (cur.get("status"), cur.get("reason", ""), cur.get("message", "")) == ("False", "Unschedulable", msg):
                    continue  # said already: no copy, no write
                new = copy.deepcopy(pod)
                if _set_cond(new, "PodScheduled", "False", "Unschedulable", msg):
                    self.store.put_internal(PODS, new)

    # ---- Job controller ----
    def jobs(self):
        # the pods of every Job from one pass over the pods (namespace, owner uid -> pods, in key order)
        owned = {}
        for p in self.store.items("pods"):
            for uid in set(r.get("uid") for r in p["metadata"].get("ownerReferences") or [] if r.get("uid")):
                owned.setdefault((p["metadata"].get("namespace"), uid), []).append(p)
        synced = {}
        for job in self.store.items("jobs"):
            if not job["metadata"].get("deletionTimestamp"):  # a Job being deleted gets no new pods
                meta = job["metadata"]
                pods = owned.get((meta["namespace"], meta["uid"]), [])
                # The sync depends on the Job and its pods alone: a Job whose pods and itself are as
                # at its last sync (versions, and the fields the sync reads) comes out the same: skipped.
                key = (meta.get("resourceVersion"), _job_fields(job), tuple(_pod_fields(p) for p in pods))
                if self._job_synced.get(meta["uid"]) != key:
                    self._sync_job(job, pods)
                synced[meta["uid"]] = key
        self._job_synced = synced

    def _sync_job(self, job, pods):
        store = self.store
        uid = job["metadata"]["uid"]
        spec = job.get("spec") or {}
        for t in ("Complete", "Failed"):
            c = _cond(job, t)
            if c and c.get("status") == "True":
                return
        seen = self._job_seen.setdefault(uid, {"succeeded": set(), "failed": set()})
        for p in pods:
            phase = (p.get("status") or {}).get("phase")
            if terminating(p):
                continue  # deleted while active: replaced, not counted
            if phase == "Succeeded":
                seen["succeeded"].add(p["metadata"]["uid"])
            elif phase == "Failed":
                seen["failed"].add(p["metadata"]["uid"])
        active = [p for p in pods if (p.get("status") or {}).get("phase") not in TERMINAL and not terminating(p)]
        gone = sum(1 for p in pods if terminating(p) and (p.get("status") or {}).get("phase") not in TERMINAL)
        succeeded, failed = len(seen["succeeded"]), len(seen["failed"])
        completions = spec.get("completions")
        completions = 1 if completions is None else int(completions)
        parallelism = int(spec.get("parallelism", 1) if spec.get("parallelism") is not None else 1)
        backoff = int(spec.get("backoffLimit", 6) if spec.get("backoffLimit") is not None else 6)
        new = copy.deepcopy(job)
        nst = new.setdefault("status", {})
        finished = None
        if failed > backoff:
            finished = "Failed"
            for p in active:
                lifecycle.delete(store, PODS, p)
            active = []
            _set_cond(new, "FailureTarget", "True", "BackoffLimitExceeded",
                      "Job has reached the specified backoff limit")
            _set_cond(new, "Failed", "True", "BackoffLimitExceeded",
                      "Job has reached the specified backoff limit")
        elif succeeded >= completions:
            finished = "Complete"
            for p in active:
                lifecycle.delete(store, PODS, p)
            active = []
            _set_cond(new, "SuccessCriteriaMet", "True", "CompletionsReached",
                      "Reached expected number of succeeded pods")
            _set_cond(new, "Complete", "True", "CompletionsReached",
                      "Reached expected number of succeeded pods")
            nst["completionTime"] = now_rfc3339()
        elif spec.get("suspend"):
            for p in active:
                lifecycle.delete(store, PODS, p)
            active = []
            _set_cond(new, "Suspended", "True", "JobSuspended", "Job suspended")
            nst.pop("startTime", None)
        else:
            susp = _cond(new, "Suspended")
            if susp and susp.get("status") == "True":
                _set_cond(new, "Suspended", "False", "JobResumed", "Job resumed")
            want = min(parallelism, completions - succeeded)
            if len(active) < want:
                nst.setdefault("startTime", now_rfc3339())
                for _ in range(want - len(active)):
                    active.append(self._create_job_pod(job))
            elif len(active) > want:
                for p in active[want:]:
                    lifecycle.delete(store, PODS, p)
                active = active[:want]
        nst["active"] = len(active)
        nst["succeeded"] = succeeded
        nst["failed"] = failed
        nst["ready"] = sum(1 for p in active if pod_healthy(p))
        nst["terminating"] = gone
        for key in ("active", "succeeded", "failed", "ready"):
            if not nst[key] and key != "ready":
                nst.pop(key)
        if finished:
            self._job_seen.pop(uid, None)
        if new != job:
            store.put_internal(JOBS, new)

    def _create_job_pod(self, job):
        meta = job["metadata"]
        template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
        tmeta = template.get("metadata") or {}
        labels = dict(tmeta.get("labels") or {})
        labels.update({"job-name": meta["name"], "batch.kubernetes.io/job-name": meta["name"],
                       "controller-uid": meta["uid"],
                       "batch.kubernetes.io/controller-uid": meta["uid"]})
        pods = self.store.objects["pods"]
        name = meta["name"] + "-" + random_suffix()
        while (meta["namespace"], name) in pods:
            name = meta["name"] + "-" + random_suffix()
        body = {"metadata": {"name": name, "namespace": meta["namespace"], "labels": labels,
                             "annotations": dict(tmeta.get("annotations") or {}),
                             "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                                  "name": meta["name"], "uid": meta["uid"],
                                                  "controller": True,
                                                  "blockOwnerDeletion": True}]},
                "spec": template.get("spec") or {}}
        if not body["metadata"]["annotations"]:
            del body["metadata"]["annotations"]
        return self.store.create(PODS, meta["namespace"], body)

    # ---- PodDisruptionBudget status ----
    def pdb_status(self):
        """The disruption controller; its status trails a PDB or pod change by `pdb_lag`
        seconds (evictions meanwhile see the old status, or 429 while observedGeneration lags)."""
        now = time.monotonic()
        seen = set()
        for pdb in self.store.items("poddisruptionbudgets"):
            uid = pdb["metadata"]["uid"]
            seen.add(uid)
            expected, healthy, desired, allowed = pdb_numbers(self.store, pdb)
            new = copy.deepcopy(pdb)
            st = new.setdefault("status", {})
            st.update({"expectedPods": expected, "currentHealthy": healthy,
                       "desiredHealthy": desired, "disruptionsAllowed": allowed,
                       "observedGeneration": pdb["metadata"].get("generation", 1)})
            st.pop("disruptedPods", None)
            if allowed > 0:
                _set_cond(new, "DisruptionAllowed", "True", "SufficientPods", "", full=True)
            else:
                _set_cond(new, "DisruptionAllowed", "False", "InsufficientPods", "", full=True)
            if new == pdb:
                self._pdb_dirty.pop(uid, None)
                continue
            since = self._pdb_dirty.setdefault(uid, now)
            if now - since >= self.pdb_lag:
                self._pdb_dirty.pop(uid, None)
                self.store.put_internal(PDBS, new)
        for uid in set(self._pdb_dirty) - seen:
            del self._pdb_dirty[uid]
