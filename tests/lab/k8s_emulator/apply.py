"""Server-side apply (PATCH `application/apply-patch+yaml` with `fieldManager`, `force`).

Create-or-merge: the applied configuration is merged onto the live object with the strategic
merge rules of patch.py (maps merged, keyed lists merged by key, other lists replaced whole),
and the manager's field set is recorded in `metadata.managedFields` (operation Apply, FieldsV1).
Fields the manager applied before and no longer applies are removed unless another manager owns
them. Applying a value to a field another Apply manager owns is 409 Conflict naming that manager
and the field, in structured-merge-diff's wording, unless `force=true` (the field then moves to
this manager). Simplified: only Apply operations own fields; writes by create, update and
non-apply patches are not tracked in managedFields."""
import copy
import json

import yaml

from . import patch as patchlib
from . import validation
from .errors import ApiError

# Metadata the server owns; never part of a manager's field set.
_SERVER_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "generation",
                "managedFields", "deletionTimestamp", "selfLink")


def _invalid_options(field, message, reason="FieldValueRequired"):
    return ApiError(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: %s: %s' % (field, message),
                    {"group": "meta.k8s.io", "kind": "PatchOptions",
                     "causes": [{"reason": reason, "message": message, "field": field}]})


def _strategy(kind):
    return patchlib.STRATEGY.get(kind, patchlib._COMMON)


def field_set(obj, kind, dotted="", path=()):
    """{path tuple: value} of the leaves `obj` sets. Path elements are FieldsV1 keys:
    `f:<field>`, `k:<merge key json>` for keyed list items, `v:<json>` for set items."""
    out = {}
    strategy = _strategy(kind)
    for key, value in obj.items():
        if not path and key in ("apiVersion", "kind"):
            continue
        if path == ("f:metadata",) and key in _SERVER_META:
            continue
        here = path + ("f:" + key,)
        sub = "%s.%s" % (dotted, key) if dotted else key
        rule = strategy.get(sub)
        if isinstance(value, dict) and value:
            out.update(field_set(value, kind, sub, here))
        elif isinstance(value, list) and rule is patchlib.PRIMITIVE:
            for item in value:
                out[here + ("v:" + json.dumps(item, sort_keys=True),)] = item
        elif isinstance(value, list) and isinstance(rule, str) and all(isinstance(i, dict) for i in value):
            for item in value:
                item_path = here + ("k:" + json.dumps({rule: item.get(rule)}, separators=(",", ":")),)
                out[item_path + ("f:" + rule,)] = item.get(rule)
                rest = {k: v for k, v in item.items() if k != rule}
                out.update(field_set(rest, kind, sub, item_path))
        else:
            out[here] = value
    return out


def to_fields_v1(paths):
    tree = {}
    for path in paths:
        node = tree
        for elem in path:
            node = node.setdefault(elem, {})
        if path and path[-1].startswith("k:"):
            node["."] = {}
    return tree


def from_fields_v1(tree, prefix=()):
    out = set()
    for key, sub in (tree or {}).items():
        if key == ".":
            continue
        here = prefix + (key,)
        if sub and any(k != "." for k in sub):
            out |= from_fields_v1(sub, here)
        else:
            out.add(here)
    return out


def path_text(path):
    """fieldpath.Path.String(): .spec.containers[name="main"].image"""
    text = ""
    for elem in path:
        kind, _, rest = elem.partition(":")
        if kind == "f":
            text += "." + rest
        elif kind == "k":
            text += "[" + ",".join("%s=%s" % (k, json.dumps(v)) for k, v in json.loads(rest).items()) + "]"
        else:
            text += "[=%s]" % rest
    return text


def _lookup(obj, path):
    node = obj
    for elem in path:
        kind, _, rest = elem.partition(":")
        if kind == "f":
            if not isinstance(node, dict) or rest not in node:
                return False, None
            node = node[rest]
        elif kind == "k":
            want = json.loads(rest)
            found = [i for i in node or [] if isinstance(i, dict) and all(i.get(k) == v for k, v in want.items())]
            if not found:
                return False, None
            node = found[0]
        else:
            value = json.loads(rest)
            return (value in (node or [])), value
    return True, node


def _remove(obj, path):
    """Remove one owned leaf (a field, a keyed list item or a set item) from `obj`."""
    parent = obj
    for elem in path[:-1]:
        found, parent = _lookup(parent, (elem,))
        if not found:
            return
    kind, _, rest = path[-1].partition(":")
    if kind == "f" and isinstance(parent, dict):
        parent.pop(rest, None)
    elif kind == "k" and isinstance(parent, list):
        want = json.loads(rest)
        parent[:] = [i for i in parent if not all(i.get(k) == v for k, v in want.items())]
    elif kind == "v" and isinstance(parent, list):
        value = json.loads(rest)
        parent[:] = [i for i in parent if i != value]


def _conflict(conflicts):
    def one(manager, path):
        return 'conflict with "%s": %s' % (manager, path_text(path))
    if len(conflicts) == 1:
        message = "Apply failed with 1 conflict: " + one(*conflicts[0])
    else:
        lines = []
        for manager in sorted({m for m, dummy in conflicts}):
            lines.append('conflicts with "%s":' % manager)
            lines.extend("- %s" % path_text(p) for m, p in conflicts if m == manager)
        message = "Apply failed with %d conflicts: %s" % (len(conflicts), "\n".join(lines))
    return ApiError(409, "Conflict", message, {"causes": [
        {"reason": "FieldManagerConflict", "message": 'conflict with "%s"' % m, "field": path_text(p)}
        for m, p in conflicts]})


def _decode(raw, res):
    try:
        body = yaml.safe_load(raw) if raw else None
    except yaml.YAMLError as exc:
        raise ApiError(400, "BadRequest", "error decoding YAML: %s" % exc)
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "error decoding YAML: the apply configuration must be an object")
    if not body.get("apiVersion") or not body.get("kind"):
        raise ApiError(400, "BadRequest", "invalid object type: %s, Kind=%s" % (
            body.get("apiVersion") or "/", body.get("kind") or ""))
    return body


def _entry(manager, res, paths, stamp, sub):
    entry = {"manager": manager, "operation": "Apply", "apiVersion": res.api_version, "time": stamp,
             "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(paths)}
    if sub:
        entry["subresource"] = sub
    return entry


def serve(store, res, ns, name, raw, sub, query, admit, dry, field_validation, warnings):
    """(code, object, None) for an apply patch."""
    from .store import now_rfc3339
    manager = query.get("fieldManager") or ""
    if not manager:
        raise _invalid_options("fieldManager", "Required value: is required for apply patch")
    force = query.get("force") in ("true", "1")
    body = _decode(raw, res)
    validation.check_body_type(res, body)
    applied = field_set(body, res.kind)
    with store.lock:
        live = store.find(res, ns, name)
        if live is None:
            if sub:
                raise ApiError(404, "NotFound", '%s "%s" not found' % (res.plural, name))
            new = copy.deepcopy(body)
            meta = new.setdefault("metadata", {})
            if meta.get("name") not in (None, name):
                raise ApiError(400, "BadRequest", "the name of the object (%s) does not match the name on "
                               "the URL (%s)" % (meta.get("name"), name))
            meta["name"] = name
            obj = store.create(res, ns, new, admit, True, field_validation, warnings)
            obj["metadata"]["managedFields"] = [_entry(manager, res, applied, now_rfc3339(), sub)]
            if dry:
                return 201, obj, None
            return 201, store._commit(res, obj), None
        entries = live["metadata"].get("managedFields") or []
        mine, mine_time = set(), None
        others = []
        for entry in entries:
            owned = from_fields_v1(entry.get("fieldsV1"))
            if entry.get("manager") == manager and entry.get("operation") == "Apply" \
                    and entry.get("subresource", "") == (sub or ""):
                mine, mine_time = owned, entry.get("time")
            else:
                others.append((entry, owned))
        conflicts = []
        for entry, owned in others:
            if entry.get("operation") != "Apply":
                continue
            for path in sorted(owned & set(applied)):
                found, value = _lookup(live, path)
                if found and value != applied[path]:
                    conflicts.append((entry["manager"], path))
        if conflicts and not force:
            raise _conflict(conflicts)
        merged = patchlib.strategic_merge_patch(live, body, res.kind)
        others_owned = set()
        for entry, owned in others:
            others_owned |= owned
        for path in sorted(mine - set(applied) - others_owned, key=len, reverse=True):
            _remove(merged, path)
        # Same fields and nothing else changed: keep the entry's time, so a no-op apply stays a no-op.
        rest_same = {k: v for k, v in merged.items() if k != "metadata"} == {
            k: v for k, v in live.items() if k != "metadata"} and {
            k: v for k, v in merged["metadata"].items() if k != "managedFields"} == {
            k: v for k, v in live["metadata"].items() if k != "managedFields"}
        stamp = mine_time if (mine == set(applied) and rest_same and mine_time) else now_rfc3339()
        kept = []
        for entry, owned in others:
            if force and entry.get("operation") == "Apply":
                owned = owned - set(applied)
                if not owned:
                    continue
                entry = dict(entry, fieldsV1=to_fields_v1(owned))
            kept.append(entry)
        merged["metadata"]["managedFields"] = kept + [_entry(manager, res, applied, stamp, sub)]
        merged["metadata"]["resourceVersion"] = (body.get("metadata") or {}).get(
            "resourceVersion") or live["metadata"]["resourceVersion"]
        return 200, store.update(res, ns, name, merged, sub, admit, dry, field_validation, warnings), None
