"""JSON merge patch (RFC 7386), strategic merge patch, and JSON patch (RFC 6902)."""
import copy


class PatchError(ValueError):
    pass


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# Strategic merge: list fields that merge, by path inside the object (list indices dropped).
# A string value is the merge key; PRIMITIVE merges a list of scalars as a set.
# Lists not named here are replaced whole, like the real types without a patchStrategy
# (e.g. spec.taints, spec.tolerations, status.containerStatuses).
PRIMITIVE = object()

_CONTAINER = {"env": "name", "ports": "containerPort", "volumeMounts": "mountPath",
              "volumeDevices": "devicePath"}
_POD_SPEC = {"containers": "name", "initContainers": "name", "ephemeralContainers": "name",
             "volumes": "name", "imagePullSecrets": "name", "hostAliases": "ip"}
_COMMON = {"metadata.ownerReferences": "uid", "metadata.finalizers": PRIMITIVE}


def _pod_spec_paths(prefix):
    out = {}
    for name, key in _POD_SPEC.items():
        out["%s.%s" % (prefix, name)] = key
    for cname in ("containers", "initContainers", "ephemeralContainers"):
        for name, key in _CONTAINER.items():
            out["%s.%s.%s" % (prefix, cname, name)] = key
    return out


STRATEGY = {
    "Pod": dict(_COMMON, **_pod_spec_paths("spec"), **{"status.conditions": "type"}),
    "Node": dict(_COMMON, **{"spec.podCIDRs": PRIMITIVE, "status.conditions": "type",
                             "status.addresses": "type", "status.volumesAttached": "name"}),
    "Job": dict(_COMMON, **_pod_spec_paths("spec.template.spec"),
                **{"status.conditions": "type"}),
    "PodDisruptionBudget": dict(_COMMON, **{"status.conditions": "type"}),
    "Namespace": dict(_COMMON, **{"status.conditions": "type", "spec.finalizers": PRIMITIVE}),
}


def strategic_merge_patch(target, patch, kind):
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch must be a JSON object")
    return _smp_map(target if isinstance(target, dict) else {}, patch,
                    STRATEGY.get(kind, _COMMON), "")


def _join(path, key):
    return "%s.%s" % (path, key) if path else key


def _smp_map(target, patch, table, path):
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = copy.deepcopy(target)
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            if isinstance(result.get(name), list):
                result[name] = [v for v in result[name] if v not in (value or [])]
            continue
        sub = _join(path, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = _smp_map(result.get(key) if isinstance(result.get(key), dict) else {},
                              value, table, sub)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _smp_list(result.get(key), value, table, sub)
        else:
            result[key] = copy.deepcopy(value)
    if retain is not None:
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _smp_list(current, patch, table, path):
    strategy = table.get(path)
    current = current if isinstance(current, list) else []
    if strategy is None:
        if any(isinstance(v, dict) and v.get("$patch") == "replace" for v in patch):
            return [copy.deepcopy(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
        return [copy.deepcopy(v) for v in patch]
    if strategy is PRIMITIVE:
        result = list(current)
        for v in patch:
            if v not in result:
                result.append(v)
        return result
    key = strategy
    if any(isinstance(v, dict) and v.get("$patch") == "replace" for v in patch):
        return [copy.deepcopy(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
    result = copy.deepcopy(current)
    for item in patch:
        if not isinstance(item, dict):
            raise PatchError("%s: list entries must be objects with merge key %r" % (path, key))
        if key not in item:
            raise PatchError("%s: map in list does not contain the merge key %r" % (path, key))
        idx = next((i for i, cur in enumerate(result)
                    if isinstance(cur, dict) and cur.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                result.pop(idx)
            continue
        if idx is None:
            result.append(_smp_map({}, item, table, path))
        else:
            result[idx] = _smp_map(result[idx], item, table, path)
    return result


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError("invalid JSON pointer %r" % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc, parts, path):
    cur = doc
    for p in parts:
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and p.isdigit() and int(p) < len(cur):
            cur = cur[int(p)]
        else:
            raise PatchError("path %r does not exist" % path)
    return cur


def _add(doc, parts, value, path):
    if not parts:
        return value
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise PatchError("index %r out of range in %r" % (last, path))
    else:
        raise PatchError("path %r does not exist" % path)
    return doc


def _remove(doc, parts, path):
    if not parts:
        raise PatchError("cannot remove the whole document")
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise PatchError("unable to remove nonexistent key %r" % path)


def json_patch(target, ops):
    if not isinstance(ops, list):
        raise PatchError("JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError("invalid JSON patch operation %r" % (op,))
        kind, path = op["op"], op["path"]
        parts = _pointer(path)
        if kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")), path)
        elif kind == "remove":
            _remove(doc, parts, path)
        elif kind == "replace":
            _walk(doc, parts, path)
            if parts:
                _remove(doc, parts, path)
            doc = _add(doc, parts, copy.deepcopy(op.get("value")), path)
        elif kind in ("move", "copy"):
            src = _pointer(op.get("from", ""))
            value = copy.deepcopy(_walk(doc, src, op.get("from")))
            if kind == "move":
                _remove(doc, src, op.get("from"))
            doc = _add(doc, parts, value, path)
        elif kind == "test":
            if _walk(doc, parts, path) != op.get("value"):
                raise PatchError("testing value %s failed" % path)
        else:
            raise PatchError("unknown JSON patch operation %r" % kind)
    return doc
