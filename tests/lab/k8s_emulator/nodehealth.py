"""Node lifecycle controller: Node health from Leases and status updates on the server's clock.

As pkg/controller/nodelifecycle/node_lifecycle_controller.go (tryUpdateNodeHealth): the
controller keeps, per Node, the server time at which it last *saw* a change, a new Ready
`lastHeartbeatTime` (a status update) or a new `renewTime` of the Node's Lease in
`kube-node-lease`. The timestamps the kubelet writes are only compared for change, never
against the server's clock, so a kubelet with a skewed clock is judged correctly. When more than
`node-monitor-grace-period` has passed since that moment, Ready (and the pressure conditions the
node reported) become Unknown, reason NodeStatusUnknown "Kubelet stopped posting node status."
(NodeStatusNeverUpdated "Kubelet never posted node status." for a Node that never reported
Ready), and the Node is tainted node.kubernetes.io/unreachable NoSchedule and NoExecute. The
taints go when Ready is True again. A Node seen for the first time counts from now when it has
a Ready condition, else from its creationTimestamp (the controller's startup grace is the same
node grace here).
"""
import copy
import time

from .resources import BY_PLURAL
from .store import now_rfc3339, parse_time

NODES = BY_PLURAL["nodes"]
UNREACHABLE = "node.kubernetes.io/unreachable"
UNREACHABLE_TAINTS = [{"key": UNREACHABLE, "effect": "NoSchedule"},
                      {"key": UNREACHABLE, "effect": "NoExecute"}]
PRESSURE = ("MemoryPressure", "DiskPressure", "PIDPressure")


def _cond(obj, ctype):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


class NodeHealth:
    def __init__(self, grace, clock=time.time):
        self.grace = float(grace)
        self.clock = clock
        self.seen = {}  # node uid -> {"beat": lastHeartbeatTime, "renew": renewTime, "probe": server time}

    def _probe(self, node, lease, now):
        uid = node["metadata"]["uid"]
        ready = _cond(node, "Ready")
        beat = (ready or {}).get("lastHeartbeatTime")
        renew = ((lease or {}).get("spec") or {}).get("renewTime")
        saved = self.seen.get(uid)
        if saved is None:
            start = now if ready else (parse_time(node["metadata"].get("creationTimestamp")) or now)
            saved = self.seen[uid] = {"beat": beat, "renew": renew, "probe": start}
        if beat != saved["beat"] or (renew and renew != saved["renew"]):
            saved.update(beat=beat, renew=renew, probe=now)
        return saved

    def sync(self, store):
        now = self.clock()
        leases = {l["metadata"]["name"]: l for l in store.items("leases", "kube-node-lease")}
        live = set()
        for node in store.items("nodes"):
            live.add(node["metadata"]["uid"])
            saved = self._probe(node, leases.get(node["metadata"]["name"]), now)
            ready = _cond(node, "Ready")
            taints = (node.get("spec") or {}).get("taints") or []
            stale = now - saved["probe"] > self.grace
            if stale and (ready is None or ready.get("status") != "Unknown"):
                new = self._unknown(node, ready)
                saved["beat"] = _cond(new, "Ready").get("lastHeartbeatTime")
                store.put_internal(NODES, new)
            elif not stale and ready and ready.get("status") == "True" and any(
                    t.get("key") == UNREACHABLE for t in taints):
                new = copy.deepcopy(node)
                new["spec"]["taints"] = [t for t in taints if t.get("key") != UNREACHABLE]
                if not new["spec"]["taints"]:
                    del new["spec"]["taints"]
                store.put_internal(NODES, new)
        for uid in set(self.seen) - live:
            del self.seen[uid]

    @staticmethod
    def _unknown(node, ready):
        new = copy.deepcopy(node)
        stamp = now_rfc3339()
        conds = new.setdefault("status", {}).setdefault("conditions", [])
        if ready is None:
            conds.append({"type": "Ready", "status": "Unknown", "reason": "NodeStatusNeverUpdated",
                          "message": "Kubelet never posted node status.",
                          "lastHeartbeatTime": node["metadata"]["creationTimestamp"],
                          "lastTransitionTime": stamp})
        for c in conds:
            if (c.get("type") == "Ready" and ready is not None) or c.get("type") in PRESSURE:
                if c.get("status") != "Unknown":
                    c["lastTransitionTime"] = stamp
                c.update(status="Unknown", reason="NodeStatusUnknown",
                         message="Kubelet stopped posting node status.")
        taints = new.setdefault("spec", {}).setdefault("taints", [])
        for t in UNREACHABLE_TAINTS:
            if not any(x.get("key") == t["key"] and x.get("effect") == t["effect"] for x in taints):
                taints.append(dict(t, timeAdded=stamp))
        return new
