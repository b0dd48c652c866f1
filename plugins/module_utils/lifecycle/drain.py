# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cordon and drain a Node through the eviction API, with one overall deadline.

- Pods are classified first: mirror (static) pods and DaemonSet pods are skipped (a DaemonSet
  pod would come back at once and tolerates unschedulable; a mirror pod is the kubelet's
  copy of a static pod and cannot be evicted through the API). Pods with no controller are
  blockers unless ``allow_unmanaged`` (they would be gone for good).
- Evictions run in parallel threads. A 429 (a PodDisruptionBudget allows no disruption now)
  is retried every ``retry_interval`` until the deadline. With ``force_delete`` a pod still
  blocked ``force_after`` seconds before the deadline is deleted directly; every such delete
  is reported in ``force_deleted``.
- The deadline is enforced here: workers are daemon threads and every API request is bounded
  by the time left, so the call returns by ``timeout`` plus at most one request timeout.
- On failure the Node is uncordoned, unless it was already cordoned when the run began.
  Nothing here deletes a Node.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading
import time

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def pod_ref(pod):
    meta = pod.get("metadata") or {}
    return "%s/%s" % (meta.get("namespace"), meta.get("name"))


def classify(pods, allow_unmanaged=False):
    """Split pods into (to_evict, skipped, blockers); each item a dict with a reason."""
    evict, skipped, blockers = [], [], []
    for pod in pods:
        meta = pod.get("metadata") or {}
        item = {"namespace": meta.get("namespace"), "name": meta.get("name"),
                "uid": meta.get("uid"), "phase": (pod.get("status") or {}).get("phase")}
        owners = meta.get("ownerReferences") or []
        controller = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
        if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
            skipped.append(dict(item, reason="mirror pod of a static pod (managed by the kubelet)"))
        elif controller and controller.get("kind") == "DaemonSet":
            skipped.append(dict(item, reason="DaemonSet pod (DaemonSet %s)" % controller.get("name")))
        elif not controller and not allow_unmanaged and item["phase"] not in ("Succeeded", "Failed"):
            blockers.append(dict(item, reason="no controller: evicting it loses it for good "
                                              "(set allow_unmanaged to evict it anyway)"))
        else:
            if controller:
                item["owner"] = "%s/%s" % (controller.get("kind"), controller.get("name"))
            evict.append(item)
    return evict, skipped, blockers


class Drainer(object):
    def __init__(self, kube, node, timeout=300.0, retry_interval=2.0, parallel=8,
                 allow_unmanaged=False, force_delete=False, force_after=30.0,
                 clock=time.monotonic, sleep=time.sleep):
        self.kube = kube
        self.node = node
        self.timeout = float(timeout)
        self.retry_interval = float(retry_interval)
        self.parallel = max(1, int(parallel))
        self.allow_unmanaged = allow_unmanaged
        self.force_delete = force_delete
        self.force_after = float(force_after)
        self.clock = clock
        self.sleep = sleep

    # -- reading ---------------------------------------------------------------------
    def read_node(self):
        node = self.kube.get_node(self.node)
        if node is None:
            raise K8sError("get node %s" % self.node, 404, "NotFound",
                           "node %s does not exist in this cluster" % self.node)
        return node

    def plan(self):
        node = self.read_node()
        pods = self.kube.pods_on_node(self.node)
        evict, skipped, blockers = classify(pods, self.allow_unmanaged)
        return {"node": self.node, "was_cordoned": bool((node.get("spec") or {}).get("unschedulable")),
                "to_evict": evict, "skipped": skipped, "blockers": blockers}

    # -- writing ---------------------------------------------------------------------
    def set_unschedulable(self, value):
        self.kube.patch_node(self.node, {"spec": {"unschedulable": bool(value)}}, patch_type="merge")

    def cordon(self, check_mode=False):
        """Mark the Node unschedulable. Reads the Node only (no pods); returns node,
        was_cordoned and changed."""
        return self._set_cordoned(True, check_mode)

    def uncordon(self, check_mode=False):
        """Mark the Node schedulable again. Reads the Node only; returns like cordon()."""
        return self._set_cordoned(False, check_mode)

    def _set_cordoned(self, want, check_mode):
        was = bool((self.read_node().get("spec") or {}).get("unschedulable"))
        changed = was != want
        if changed and not check_mode:
            self.set_unschedulable(want)
        return {"node": self.node, "was_cordoned": was, "changed": changed}

    def _evict_one(self, item, deadline, results, lock):
        ns, name = item["namespace"], item["name"]
        started = self.clock()
        attempts = 0
        last = None
        while True:
            left = deadline - self.clock()
            if left <= 0:
                with lock:
                    results["blocked"].append(dict(item, reason=last or "timed out", attempts=attempts))
                return
            if self.force_delete and attempts and left <= self.force_after:
                try:
                    self.kube.delete_pod(ns, name, grace_period_seconds=0)
                    with lock:
                        results["force_deleted"].append(dict(item, reason=last, attempts=attempts,
                                                             seconds=round(self.clock() - started, 3)))
                except K8sError as err:
                    with lock:
                        results["errors"].append(dict(item, reason=str(err)))
                return
            attempts += 1
            try:
                outcome, message = self.kube.evict_pod(ns, name)
            except K8sError as err:
                with lock:
                    results["errors"].append(dict(item, reason=str(err), attempts=attempts))
                return
            if outcome in ("evicted", "gone"):
                with lock:
                    results["evicted"].append(dict(item, attempts=attempts, outcome=outcome,
                                                   seconds=round(self.clock() - started, 3)))
                return
            last = "PodDisruptionBudget: %s" % (message or "eviction refused (429)")
            self.sleep(min(self.retry_interval, max(0.0, deadline - self.clock())))

    def _remaining(self, items):
        """Evicted pods that are still on the node under the same uid."""
        still = {(p["metadata"]["namespace"], p["metadata"]["name"], p["metadata"].get("uid"))
                 for p in self.kube.pods_on_node(self.node)}
        return [i for i in items if (i["namespace"], i["name"], i["uid"]) in still]

    def drain(self, check_mode=False):
        """Cordon and evict; returns the result dict. Never raises for a blocked drain: the
        result has ``failed`` and ``msg``. API errors during the drain are reported too."""
        t0 = self.clock()
        deadline = t0 + self.timeout
        plan = self.plan()
        result = {"node": self.node, "was_cordoned": plan["was_cordoned"], "skipped": plan["skipped"],
                  "would_evict": plan["to_evict"], "evicted": [], "blockers": list(plan["blockers"]),
                  "force_deleted": [], "errors": [], "uncordoned_on_failure": False,
                  "timed_out": False, "failed": False}
        if check_mode:
            result["changed"] = (not plan["was_cordoned"]) or bool(plan["to_evict"])
            result["failed"] = bool(plan["blockers"])
            result["duration_s"] = round(self.clock() - t0, 3)
            if result["failed"]:
                result["msg"] = self._blocker_msg(result["blockers"])
            return result
        changed = False
        if not plan["was_cordoned"]:
            self.set_unschedulable(True)
            changed = True
        if plan["blockers"]:
            return self._fail(result, t0, changed, self._blocker_msg(plan["blockers"]))
        results = {"evicted": [], "blocked": [], "force_deleted": [], "errors": []}
        lock = threading.Lock()
        queue = list(plan["to_evict"])
        qlock = threading.Lock()

        def worker():
            while True:
                with qlock:
                    if not queue:
                        return
                    item = queue.pop(0)
                self._evict_one(item, deadline, results, lock)

        threads = [threading.Thread(target=worker, daemon=True)
                   for dummy in range(min(self.parallel, len(queue)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, deadline - self.clock()) + 0.05)
        if any(t.is_alive() for t in threads):
            result["timed_out"] = True
        with lock:
            result["evicted"] = sorted(results["evicted"], key=lambda i: (i["namespace"], i["name"]))
            result["force_deleted"] = list(results["force_deleted"])
            result["errors"] = list(results["errors"])
            blocked = list(results["blocked"])
        with qlock:
            blocked.extend(dict(i, reason="not attempted before the deadline") for i in queue)
        changed = changed or bool(result["evicted"] or result["force_deleted"])
        # Confirm the evicted pods are gone (deletion is not instant on a real cluster).
        gone_ids = result["evicted"] + result["force_deleted"]
        left = self._wait_gone(gone_ids, deadline)
        blocked.extend(dict(i, reason="evicted but still on the node at the deadline") for i in left)
        if self.clock() >= deadline and (blocked or result["errors"]):
            result["timed_out"] = True
        result["blockers"] = sorted(blocked, key=lambda i: (i["namespace"], i["name"]))
        if result["blockers"] or result["errors"]:
            what = self._blocker_msg(result["blockers"]) if result["blockers"] else ""
            if result["errors"]:
                what += ("; " if what else "") + "API errors: " + "; ".join(
                    "%s/%s: %s" % (e["namespace"], e["name"], e["reason"]) for e in result["errors"])
            return self._fail(result, t0, changed, what)
        result["changed"] = changed
        result["duration_s"] = round(self.clock() - t0, 3)
        return result

    def _wait_gone(self, items, deadline):
        left = list(items)
        while left:
            left = self._remaining(left)
            if not left or self.clock() >= deadline:
                return left
            self.sleep(min(0.5, max(0.0, deadline - self.clock())))
        return left

    def _blocker_msg(self, blockers):
        return "drain of node %s blocked by %d pod(s): %s" % (
            self.node, len(blockers), "; ".join("%s/%s (%s)" % (b["namespace"], b["name"], b["reason"])
                                                for b in blockers))

    def _fail(self, result, t0, changed, msg):
        result["failed"] = True
        if not result["was_cordoned"]:
            try:
                self.set_unschedulable(False)
                result["uncordoned_on_failure"] = True
                msg += "; the node was uncordoned again (it was schedulable before the run)"
            except K8sError as err:
                msg += "; uncordoning it again failed too: %s" % err
        else:
            msg += "; the node stays cordoned (it was cordoned before the run began)"
        result["msg"] = msg + ". The Node was not deleted."
        result["changed"] = changed and not result["uncordoned_on_failure"] or bool(
            result["evicted"] or result["force_deleted"])
        result["duration_s"] = round(self.clock() - t0, 3)
        return result
