"""Table responses (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), what `kubectl get`
asks for. Columns and cells follow kube-apiserver 1.30's printers
(pkg/printers/internalversion/printers.go); priority 1 columns are the ones `-o wide` adds."""
import datetime
import time


def _col(name, ctype="string", priority=0, fmt="", description=""):
    return {"name": name, "type": ctype, "format": fmt, "description": description or name,
            "priority": priority}


NAME = _col("Name", fmt="name", description="Name must be unique within a namespace.")
AGE = _col("Age", description="CreationTimestamp is a timestamp representing the server time when this object was created.")


def human_duration(seconds):
    """apimachinery's duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return "%ds" % s
    minutes = s // 60
    if minutes < 10:
        return "%dm" % minutes if s % 60 == 0 else "%dm%ds" % (minutes, s % 60)
    if minutes < 180:
        return "%dm" % minutes
    hours = s // 3600
    if hours < 8:
        return "%dh" % hours if minutes % 60 == 0 else "%dh%dm" % (hours, minutes % 60)
    if hours < 48:
        return "%dh" % hours
    if hours < 24 * 8:
        return "%dd" % (hours // 24) if hours % 24 == 0 else "%dd%dh" % (hours // 24, hours % 24)
    if hours < 24 * 365 * 2:
        return "%dd" % (hours // 24)
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return "%dy" % (hours // 24 // 365) if days == 0 else "%dy%dd" % (hours // 24 // 365, days)
    return "%dy" % (hours // 24 // 365)


def _since(stamp):
    if not stamp:
        return "<unknown>"
    try:
        then = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return "<unknown>"
    return human_duration(time.time() - then)


def _age(obj):
    return _since(obj["metadata"].get("creationTimestamp"))


def _cond(obj, ctype):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def _node_row(obj):
    status, spec = obj.get("status") or {}, obj.get("spec") or {}
    ready = _cond(obj, "Ready")
    state = ["Unknown" if ready and ready.get("status") == "Unknown" else
             "Ready" if ready and ready.get("status") == "True" else "NotReady"]
    if spec.get("unschedulable"):
        state.append("SchedulingDisabled")
    labels = obj["metadata"].get("labels") or {}
    roles = sorted({k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k}
                   | ({labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set()))
    addrs = {}
    for a in status.get("addresses") or []:
        addrs.setdefault(a.get("type"), a.get("address"))
    info = status.get("nodeInfo") or {}
    return [obj["metadata"]["name"], ",".join(state), ",".join(r for r in roles if r) or "<none>",
            _age(obj), info.get("kubeletVersion", ""), addrs.get("InternalIP") or "<none>",
            addrs.get("ExternalIP") or "<none>", info.get("osImage") or "<unknown>",
            info.get("kernelVersion") or "<unknown>", info.get("containerRuntimeVersion") or "<unknown>"]


def _pod_row(obj):
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    total = len(spec.get("containers") or [])
    ready = restarts = 0
    reason = status.get("reason") or status.get("phase") or ""
    for cs in status.get("containerStatuses") or []:
        restarts += int(cs.get("restartCount") or 0)
        state = cs.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated"):
            term = state["terminated"]
            reason = term.get("reason") or ("Signal:%d" % term["signal"] if term.get("signal")
                                            else "ExitCode:%d" % term.get("exitCode", 0))
        elif cs.get("ready") and state.get("running"):
            ready += 1
    if reason == "Completed" and status.get("phase") == "Running":
        reason = "Running"
    gates = spec.get("readinessGates") or []
    return [obj["metadata"]["name"], "%d/%d" % (ready, total), reason, str(restarts), _age(obj),
            status.get("podIP") or "<none>", spec.get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>",
            "%d/%d" % (sum(1 for g in gates if (_cond(obj, g.get("conditionType")) or {}).get("status") == "True"),
                       len(gates)) if gates else "<none>"]


def _job_row(obj):
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    completions = spec.get("completions")
    succeeded = status.get("succeeded") or 0
    shown = "%d/%d" % (succeeded, completions) if completions is not None else "%d/1 of %d" % (
        succeeded, spec.get("parallelism") or 1)
    duration = ""
    start = status.get("startTime")
    if start:
        end = status.get("completionTime")
        try:
            t0 = datetime.datetime.fromisoformat(start.replace("Z", "+00:00")).timestamp()
            t1 = (datetime.datetime.fromisoformat(end.replace("Z", "+00:00")).timestamp() if end
                  else time.time())
            duration = human_duration(t1 - t0)
        except ValueError:
            duration = ""
    pod = (spec.get("template") or {}).get("spec") or {}
    sel = ((spec.get("selector") or {}).get("matchLabels") or {})
    return [obj["metadata"]["name"], shown, duration, _age(obj),
            ",".join(c.get("name", "") for c in pod.get("containers") or []),
            ",".join(c.get("image", "") for c in pod.get("containers") or []),
            ",".join("%s=%s" % kv for kv in sorted(sel.items())) or "<none>"]


def _pdb_row(obj):
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return [obj["metadata"]["name"], str(spec["minAvailable"]) if "minAvailable" in spec else "N/A",
            str(spec["maxUnavailable"]) if "maxUnavailable" in spec else "N/A",
            status.get("disruptionsAllowed", 0), _age(obj)]


PRINTERS = {
    "nodes": ([NAME, _col("Status"), _col("Roles"), AGE, _col("Version"),
               _col("Internal-IP", priority=1), _col("External-IP", priority=1),
               _col("OS-Image", priority=1), _col("Kernel-Version", priority=1),
               _col("Container-Runtime", priority=1)], _node_row),
    "pods": ([NAME, _col("Ready"), _col("Status"), _col("Restarts", "string"), AGE,
              _col("IP", priority=1), _col("Node", priority=1), _col("Nominated Node", priority=1),
              _col("Readiness Gates", priority=1)], _pod_row),
    "jobs": ([NAME, _col("Completions"), _col("Duration"), AGE, _col("Containers", priority=1),
              _col("Images", priority=1), _col("Selector", priority=1)], _job_row),
    "namespaces": ([NAME, _col("Status"), AGE],
                   lambda o: [o["metadata"]["name"], (o.get("status") or {}).get("phase", ""), _age(o)]),
    "poddisruptionbudgets": ([NAME, _col("Min Available"), _col("Max Unavailable"),
                              _col("Allowed Disruptions", "integer"), AGE], _pdb_row),
    "secrets": ([NAME, _col("Type"), _col("Data", "integer"), AGE],
                lambda o: [o["metadata"]["name"], o.get("type", ""), len(o.get("data") or {}), _age(o)]),
    "configmaps": ([NAME, _col("Data", "integer"), AGE],
                   lambda o: [o["metadata"]["name"], len(o.get("data") or {}) + len(o.get("binaryData") or {}),
                              _age(o)]),
    "leases": ([NAME, _col("Holder"), AGE],
               lambda o: [o["metadata"]["name"], (o.get("spec") or {}).get("holderIdentity", ""), _age(o)]),
}
DEFAULT = ([NAME, _col("Created At", "date")],
           lambda o: [o["metadata"]["name"], o["metadata"].get("creationTimestamp")])


def wants_table(accept):
    """True when the Accept header asks for a meta.k8s.io/v1 Table first."""
    for part in (accept or "").split(","):
        params = dict(p.strip().split("=", 1) for p in part.split(";")[1:] if "=" in p)
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io" and params.get("v") == "v1":
            return True
    return False


def _row_object(obj, include):
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def table(plural, objs, metadata, include="Metadata", columns=True):
    """A Table of `objs` (the items of a list, or one object for a get)."""
    cols, row = PRINTERS.get(plural, DEFAULT)
    out = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata,
           "columnDefinitions": cols if columns else None,
           "rows": [{"cells": row(o), "object": _row_object(o, include)} for o in objs]}
    return out


def for_request(store, res, ns, name, query):
    """The Table for a get (one row) or a list (its page, with the list's metadata)."""
    include = query.get("includeObject") or "Metadata"
    if name:
        obj = store.get(res, ns, name)
        return table(res.plural, [obj], {"resourceVersion": obj["metadata"].get("resourceVersion", "")}, include)
    limit = int(query["limit"]) if query.get("limit", "").isdigit() else None
    lst = store.list(res, ns, query.get("labelSelector"), query.get("fieldSelector"), limit,
                     query.get("continue"), query.get("resourceVersion"), query.get("resourceVersionMatch"))
    return table(res.plural, lst["items"], lst["metadata"], include)


def watch_table(plural, events, include):
    """Watch events whose objects are one-row Tables; the first carries the column definitions,
    as kube-apiserver's watch encoder does."""
    first = True
    try:
        for event in events:
            obj = event.get("object") or {}
            if event.get("type") in ("ERROR", "BOOKMARK") or "metadata" not in obj or "name" not in obj["metadata"]:
                yield event
                continue
            yield {"type": event["type"], "object": table(plural, [obj], {"resourceVersion": obj["metadata"].get(
                "resourceVersion", "")}, include, columns=first)}
            first = False
    finally:
        events.close()
