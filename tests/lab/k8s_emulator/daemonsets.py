"""apps/v1 DaemonSets: defaulting and the DaemonSet controller (pkg/controller/daemon).

One pod per Node the DaemonSet should run on: the Node matches the template's nodeSelector and
required node affinity and every NoSchedule/NoExecute taint is tolerated, counting the
tolerations the controller adds to its pods (not-ready and unreachable NoExecute, the pressure
and unschedulable NoSchedule taints). Pods are named `<ds>-<5 chars>`, carry the template's
labels plus `controller-revision-hash` and `pod-template-generation`, are owned by the DaemonSet
(controller: true, blockOwnerDeletion: true) and pinned to their Node with a required
`matchFields metadata.name` node affinity, which the scheduler honours (as upstream since 1.12).
Pods on Nodes the DaemonSet no longer fits, extra pods and Failed pods are deleted. Status as
upstream, with minReadySeconds 0 (available = ready) and one template revision.
"""
import copy
import hashlib
import json

from . import lifecycle
from .resources import BY_PLURAL
from .selectors import SelectorError, label_selector_from_object, labels_match
from .store import random_suffix

PODS, DAEMONSETS = BY_PLURAL["pods"], BY_PLURAL["daemonsets"]
TERMINAL = ("Succeeded", "Failed")
DAEMON_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


def default(obj):
    """apps/v1 defaults (pkg/apis/apps/v1/defaults.go)."""
    spec = obj.setdefault("spec", {})
    strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
    if strategy.get("type", "RollingUpdate") == "RollingUpdate":
        strategy.setdefault("type", "RollingUpdate")
        strategy.setdefault("rollingUpdate", {}).setdefault("maxUnavailable", 1)
        strategy["rollingUpdate"].setdefault("maxSurge", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    tspec = spec.setdefault("template", {}).setdefault("spec", {})
    tspec.setdefault("restartPolicy", "Always")
    tspec.setdefault("terminationGracePeriodSeconds", 30)
    tspec.setdefault("dnsPolicy", "ClusterFirst")
    tspec.setdefault("schedulerName", "default-scheduler")
    obj["status"] = {"currentNumberScheduled": 0, "desiredNumberScheduled": 0,
                     "numberMisscheduled": 0, "numberReady": 0}


def _revision_hash(template):
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def _tolerations(template_spec):
    out = list(template_spec.get("tolerations") or [])
    for t in DAEMON_TOLERATIONS:
        if not any(x.get("key") == t["key"] and x.get("effect") == t["effect"] for x in out):
            out.append(dict(t))
    return out


def should_run(ds, node):
    from .controllers import affinity_matches, tolerates
    tspec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    if not affinity_matches({"spec": tspec}, node):
        return False
    tolerations = _tolerations(tspec)
    return all(tolerates(tolerations, t) for t in (node.get("spec") or {}).get("taints") or []
               if t.get("effect") in ("NoSchedule", "NoExecute"))


def pod_node(pod):
    """The Node a daemon pod is for: its nodeName, else its matchFields affinity."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return spec["nodeName"]
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    for term in terms:
        for f in term.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("operator") == "In" and f.get("values"):
                return f["values"][0]
    return None


def _pod_body(ds, node_name):
    meta = ds["metadata"]
    template = copy.deepcopy((ds.get("spec") or {}).get("template") or {})
    tmeta = template.get("metadata") or {}
    labels = dict(tmeta.get("labels") or {})
    labels.update({"controller-revision-hash": _revision_hash(template),
                   "pod-template-generation": str(meta.get("generation", 1))})
    spec = template.get("spec") or {}
    spec["tolerations"] = _tolerations(spec)
    affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}
    body = {"metadata": {"name": meta["name"] + "-" + random_suffix(), "namespace": meta["namespace"],
                         "labels": labels,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                              "name": meta["name"], "uid": meta["uid"],
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": spec}
    if tmeta.get("annotations"):
        body["metadata"]["annotations"] = dict(tmeta["annotations"])
    return body


def _ready(pod):
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def sync(store):
    """One DaemonSet controller pass (store lock held)."""
    nodes = store.items("nodes")
    for ds in store.items("daemonsets"):
        if ds["metadata"].get("deletionTimestamp"):
            continue
        meta = ds["metadata"]
        try:
            reqs = label_selector_from_object((ds.get("spec") or {}).get("selector"))
        except SelectorError:
            continue
        pods = [p for p in store.items("pods", meta["namespace"])
                if any(r.get("uid") == meta["uid"] and r.get("controller")
                       for r in p["metadata"].get("ownerReferences") or [])
                and labels_match(reqs, p["metadata"].get("labels"))
                and not p["metadata"].get("deletionTimestamp")]
        by_node = {}
        for p in pods:
            if (p.get("status") or {}).get("phase") == "Failed":
                lifecycle.delete(store, PODS, p)  # the controller replaces failed daemon pods
                continue
            by_node.setdefault(pod_node(p), []).append(p)
        wanted = [n for n in nodes if should_run(ds, n)]
        wanted_names = {n["metadata"]["name"] for n in wanted}
        for node in wanted:
            name = node["metadata"]["name"]
            if not by_node.get(name):
                created = store.create(PODS, meta["namespace"], _pod_body(ds, name))
                by_node[name] = [store.objects["pods"][(meta["namespace"], created["metadata"]["name"])]]
            for extra in by_node[name][1:]:
                lifecycle.delete(store, PODS, extra)
            by_node[name] = by_node[name][:1]
        misscheduled = 0
        for name, group in list(by_node.items()):
            if name not in wanted_names:
                for p in group:
                    if (p.get("spec") or {}).get("nodeName"):
                        misscheduled += 1
                    lifecycle.delete(store, PODS, p)
                del by_node[name]
        placed = [g[0] for g in by_node.values() if g and (g[0].get("spec") or {}).get("nodeName")]
        ready = sum(1 for p in placed if _ready(p))
        status = {"currentNumberScheduled": len(placed), "desiredNumberScheduled": len(wanted),
                  "numberMisscheduled": misscheduled, "numberReady": ready,
                  "numberAvailable": ready, "updatedNumberScheduled": len(placed),
                  "numberUnavailable": len(wanted) - ready,
                  "observedGeneration": meta.get("generation", 1)}
        for key in ("numberAvailable", "updatedNumberScheduled", "numberUnavailable"):
            if not status[key]:
                del status[key]
        if (ds.get("status") or {}) != status:
            new = copy.deepcopy(ds)
            new["status"] = status
            store.put_internal(DAEMONSETS, new)
