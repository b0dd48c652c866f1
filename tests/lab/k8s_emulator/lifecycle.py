"""Deletion as kube-apiserver 1.30 runs it: graceful pod deletion, finalizers, propagation
policies, and the garbage collector that finishes them.

- A Pod bound to a Node and not yet Succeeded/Failed is deleted gracefully: the request's
  `gracePeriodSeconds`, else the pod's `terminationGracePeriodSeconds` (default 30), sets
  `metadata.deletionGracePeriodSeconds` and `deletionTimestamp` (now + grace) and the pod stays
  (Terminating) until its kubelet deletes it again with grace 0. A later delete may only shorten
  the grace (pkg/registry/rest/delete.go BeforeDelete, pkg/registry/core/pod/strategy.go
  CheckGracefulDelete). Other objects, unbound pods and finished pods go at once.
- `metadata.finalizers` hold any object: it gets `deletionTimestamp` and grace 0 and stays until
  the last finalizer is removed; an update that removes it deletes the object, and no new
  finalizer may be added once it is being deleted (registry store shouldDeleteDuringUpdate).
- propagationPolicy: Orphan (the default for batch/v1 Jobs) adds the `orphan` finalizer and
  Foreground the `foregroundDeletion` finalizer; Background deletes the owner now. The garbage
  collector (`collect`) then strips the owner reference from dependents (orphan), deletes the
  dependents and removes the finalizer once no dependent with blockOwnerDeletion is left
  (foregroundDeletion), and deletes dependents whose owners are all gone.
"""
import copy
import datetime

from . import validation
from .resources import BY_PLURAL

ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"
TERMINAL = ("Succeeded", "Failed")


def rfc3339(offset=0.0):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=offset)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def default_policy(res):
    return "Orphan" if res.kind == "Job" else "Background"


def _pod_grace(pod, grace):
    spec = pod.get("spec") or {}
    if grace is None:
        grace = spec.get("terminationGracePeriodSeconds")
        grace = 30 if grace is None else grace
    if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in TERMINAL:
        grace = 0
    return max(0, int(grace))


def delete(store, res, old, propagation=None, grace=None):
    """Delete `old` (a live object, store lock held). Returns (object, deleted_now): the object as
    stored (Terminating or held by finalizers) or as it was when it went."""
    meta = old["metadata"]
    if meta.get("deletionTimestamp"):
        held = meta.get("deletionGracePeriodSeconds") or 0
        if res.plural == "pods" and held and grace is not None and int(grace) < held:
            if int(grace) > 0 or meta.get("finalizers"):
                new = copy.deepcopy(old)
                new["metadata"]["deletionTimestamp"] = rfc3339(int(grace))
                new["metadata"]["deletionGracePeriodSeconds"] = 0 if int(grace) <= 0 else int(grace)
                return store._commit(res, new), False
            return store.delete_internal(res, old), True
        if held or meta.get("finalizers"):
            return copy.deepcopy(old), False  # graceful deletion or finalizers pending
        return store.delete_internal(res, old), True
    period = _pod_grace(old, grace) if res.plural == "pods" else 0
    finalizers = list(meta.get("finalizers") or [])
    policy = propagation or default_policy(res)
    extra = {"Orphan": ORPHAN, "Foreground": FOREGROUND}.get(policy)
    if extra and extra not in finalizers:
        finalizers.append(extra)
    if period == 0 and not finalizers:
        return store.delete_internal(res, old), True
    new = copy.deepcopy(old)
    nmeta = new["metadata"]
    nmeta["deletionTimestamp"] = rfc3339(period)
    nmeta["deletionGracePeriodSeconds"] = period
    if finalizers:
        nmeta["finalizers"] = finalizers
    return store._commit(res, new), False


def check_update(res, old, new):
    """No new finalizers on an object that is being deleted (422), as upstream."""
    if not old["metadata"].get("deletionTimestamp"):
        return
    added = [f for f in new["metadata"].get("finalizers") or []
             if f not in (old["metadata"].get("finalizers") or [])]
    if added:
        raise validation.invalid_error(res, old["metadata"]["name"], [validation.forbidden(
            "metadata.finalizers", "no new finalizers can be added if the object is being deleted, "
            "found new finalizers []string{%s}" % ", ".join('"%s"' % f for f in added))])


def deletes_on_update(old, new):
    """True when an update removes the last finalizer of an object whose graceful part is over."""
    meta = new["metadata"]
    return bool(meta.get("deletionTimestamp") and not meta.get("finalizers")
                and not old["metadata"].get("deletionGracePeriodSeconds"))


def _dependents(store, uid):
    out = []
    for plural, objs in store.objects.items():
        for obj in list(objs.values()):
            if any(r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or []):
                out.append((BY_PLURAL[plural], obj))
    return out


def _drop_finalizer(store, res, obj, name):
    new = copy.deepcopy(obj)
    new["metadata"]["finalizers"] = [f for f in new["metadata"].get("finalizers") or [] if f != name]
    if not new["metadata"]["finalizers"]:
        del new["metadata"]["finalizers"]
        if not obj["metadata"].get("deletionGracePeriodSeconds"):
            store.delete_internal(res, obj)
            return
    store._commit(res, new)


def collect(store):
    """One garbage-collector pass (store lock held)."""
    uids = set()
    for objs in store.objects.values():
        for o in objs.values():
            uids.add(o["metadata"]["uid"])
    for plural, objs in store.objects.items():
        res = BY_PLURAL[plural]
        for obj in list(objs.values()):
            meta = obj["metadata"]
            fins = meta.get("finalizers") or []
            if meta.get("deletionTimestamp") and ORPHAN in fins:
                for dres, dep in _dependents(store, meta["uid"]):
                    dep = copy.deepcopy(dep)
                    dep["metadata"]["ownerReferences"] = [
                        r for r in dep["metadata"]["ownerReferences"] if r.get("uid") != meta["uid"]]
                    if not dep["metadata"]["ownerReferences"]:
                        del dep["metadata"]["ownerReferences"]
                    store._commit(dres, dep)
                _drop_finalizer(store, res, obj, ORPHAN)
            elif meta.get("deletionTimestamp") and FOREGROUND in fins:
                blocking = 0
                for dres, dep in _dependents(store, meta["uid"]):
                    ref = next(r for r in dep["metadata"]["ownerReferences"] if r.get("uid") == meta["uid"])
                    if ref.get("blockOwnerDeletion"):
                        blocking += 1
                    if not dep["metadata"].get("deletionTimestamp"):
                        delete(store, dres, dep)
                if not blocking:
                    _drop_finalizer(store, res, obj, FOREGROUND)
            refs = meta.get("ownerReferences") or []
            if (meta["uid"] in uids and refs and not meta.get("deletionTimestamp")
                    and not any(r.get("uid") in uids for r in refs)
                    and store.objects[plural].get((meta.get("namespace"), meta["name"])) is obj):
                delete(store, res, obj)
