"""OpenAPI documents for the served resources: `/openapi/v2` (JSON) and `/openapi/v3` (the index
and one document per group/version), built from the Kubernetes 1.30 JSON schemas that
`kubernetes-validate` ships.

kubectl 1.30 reads `/openapi/v3`, then the group/version document, and looks for the PATCH
operation of the kind (`x-kubernetes-group-version-kind`) with a `fieldValidation` query
parameter: when it is there kubectl leaves validation to the server (`fieldValidation=Strict`).
`kubectl apply` also reads the patch strategies (`x-kubernetes-patch-strategy`,
`x-kubernetes-patch-merge-key`) from the component schemas."""
import functools
import hashlib
import json
import os
import re

from .resources import RESOURCES

SCHEMA_VERSION = "v1.30.0-local"
_REF = re.compile(r"#/\$defs/")
# Kinds every group/version document refers to besides its own resources.
_COMMON_DEFS = ("io.k8s.apimachinery.pkg.apis.meta.v1.Status",
                "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
                "io.k8s.apimachinery.pkg.apis.meta.v1.Patch")
_QUERY = {
    "dryRun": "When present, indicates that modifications should not be persisted.",
    "fieldManager": "fieldManager is a name associated with the actor or entity that is making these changes.",
    "fieldValidation": "fieldValidation instructs the server on how to handle objects in the request containing "
                       "unknown or duplicate fields. Valid values are: Ignore, Warn (default), Strict.",
    "pretty": "If 'true', then the output is pretty printed.",
}
_LIST_QUERY = ("allowWatchBookmarks", "continue", "fieldSelector", "labelSelector", "limit",
               "resourceVersion", "resourceVersionMatch", "sendInitialEvents", "timeoutSeconds", "watch")


def _schema_dir():
    import kubernetes_validate
    return os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema",
                        SCHEMA_VERSION)


@functools.lru_cache(maxsize=None)
def _defs():
    with open(os.path.join(_schema_dir(), "_definitions.json"), encoding="utf-8") as fh:
        return json.load(fh)["$defs"]


def _convert(node, prefix):
    """JSON Schema 2020-12 as kubernetes-validate writes it -> OpenAPI schema: `$ref` to
    `prefix`, `type: [T, "null"]` to `type: T`."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "$ref":
                out[key] = _REF.sub(prefix, value.split("_definitions.json")[-1])
            elif key == "type" and isinstance(value, list):
                kinds = [t for t in value if t != "null"]
                if len(kinds) == 1:
                    out[key] = kinds[0]
                elif kinds:
                    out[key] = kinds
            else:
                out[key] = _convert(value, prefix)
        return out
    if isinstance(node, list):
        return [_convert(v, prefix) for v in node]
    return node


def _def_name(res):
    for name, schema in _defs().items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            if (gvk.get("group"), gvk.get("version"), gvk.get("kind")) == (res.group, res.version, res.kind):
                return name
    raise KeyError("no schema for %s" % res.kind)


def _closure(names):
    """The definitions `names` refer to, transitively."""
    defs = _defs()
    seen = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        todo.extend(m.split("/")[-1] for m in re.findall(r'"\$ref": "([^"]+)"', json.dumps(defs[name])))
    return sorted(seen)


def _gvk(res):
    return {"group": res.group, "version": res.version, "kind": res.kind}


def _paths(res, v3):
    """Paths of one resource: collection (list, create) and item (get, put, patch, delete),
    plus status. Enough for clients that look operations up by GVK."""
    base = "/api/v1" if not res.group else "/apis/%s/%s" % (res.group, res.version)
    coll = "%s/namespaces/{namespace}/%s" % (base, res.plural) if res.namespaced else "%s/%s" % (base, res.plural)
    ref = ("#/components/schemas/" if v3 else "#/definitions/") + _def_name(res)

    def param(name, where="query", required=False):
        p = {"name": name, "in": where, "description": _QUERY.get(name, name),
             "uniqueItems": True}
        if required:
            p["required"] = True
        if v3:
            p["schema"] = {"type": "string"}
        else:
            p["type"] = "string"
        return p

    def op(action, verb_id, params, body=False, patch=False):
        out = {"operationId": "%s%s" % (verb_id, res.kind), "tags": [res.group or "core"],
               "parameters": params, "responses": {"200": {"description": "OK"}},
               "x-kubernetes-action": action, "x-kubernetes-group-version-kind": _gvk(res)}
        if v3:
            out["responses"]["200"]["content"] = {"application/json": {"schema": {"$ref": ref}}}
            if body:
                types = (["application/apply-patch+yaml", "application/json-patch+json",
                          "application/merge-patch+json", "application/strategic-merge-patch+json"]
                         if patch else ["*/*"])
                schema = {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"} if patch \
                    else {"$ref": ref}
                out["requestBody"] = {"content": {t: {"schema": schema} for t in types}, "required": True}
        else:
            out["responses"]["200"]["schema"] = {"$ref": ref}
            if body:
                out["parameters"] = params + [{"name": "body", "in": "body", "required": True,
                                               "schema": {"$ref": ref}}]
        return out

    write = [param(n) for n in ("dryRun", "fieldManager", "fieldValidation")]
    path_params = [param("name", "path", True)] + ([param("namespace", "path", True)] if res.namespaced else [])
    coll_params = [param("namespace", "path", True)] if res.namespaced else []
    paths = {
        coll: {"parameters": coll_params + [param("pretty")],
               "get": op("list", "list", [param(n) for n in _LIST_QUERY]),
               "post": op("post", "create", write, body=True)},
        coll + "/{name}": {"parameters": path_params + [param("pretty")],
                           "get": op("get", "read", []),
                           "put": op("put", "replace", write, body=True),
                           "patch": op("patch", "patch", write + [param("force")], body=True, patch=True),
                           "delete": op("delete", "delete", [param("dryRun"), param("propagationPolicy")])},
    }
    if "status" in res.subresources:
        paths[coll + "/{name}/status"] = {
            "parameters": path_params + [param("pretty")],
            "get": op("get", "read", []), "put": op("put", "replace", write, body=True),
            "patch": op("patch", "patch", write + [param("force")], body=True, patch=True)}
    if not v3:  # v2 has no requestBody; PATCH takes a body parameter like the others
        for item in paths.values():
            for verb in ("put", "patch", "post"):
                if verb in item and not any(p["in"] == "body" for p in item[verb]["parameters"]):
                    item[verb]["parameters"].append({"name": "body", "in": "body", "required": True,
                                                     "schema": {"type": "object"}})
    return paths


def group_versions():
    """"api/v1", "apis/batch/v1", ... for the served resources."""
    out = []
    for res in RESOURCES:
        gv = "api/v1" if not res.group else "apis/%s/%s" % (res.group, res.version)
        if gv not in out:
            out.append(gv)
    return out


@functools.lru_cache(maxsize=None)
def v3_document(gv):
    """The OpenAPI 3.0 document of one group/version ("api/v1", "apis/batch/v1"), JSON bytes;
    None when not served."""
    served = [r for r in RESOURCES
              if ("api/v1" if not r.group else "apis/%s/%s" % (r.group, r.version)) == gv]
    if not served:
        return None
    paths = {}
    for res in served:
        paths.update(_paths(res, True))
    names = _closure([_def_name(r) for r in served] + list(_COMMON_DEFS))
    doc = {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.30.4"},
           "paths": paths,
           "components": {"schemas": {n: _convert(_defs()[n], "#/components/schemas/") for n in names}}}
    return json.dumps(doc, sort_keys=True).encode()


def _hash(data):
    return hashlib.sha512(data).hexdigest()[:128].upper()


@functools.lru_cache(maxsize=None)
def v3_index():
    """`/openapi/v3`: each group/version and the URL of its document (with its hash)."""
    paths = {gv: {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (gv, _hash(v3_document(gv)))}
             for gv in group_versions()}
    return json.dumps({"paths": paths}).encode()


@functools.lru_cache(maxsize=None)
def v2_document():
    """`/openapi/v2` as JSON (Swagger 2.0), JSON bytes."""
    paths = {}
    for res in RESOURCES:
        paths.update(_paths(res, False))
    names = _closure([_def_name(r) for r in RESOURCES] + list(_COMMON_DEFS))
    doc = {"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.30.4"}, "paths": paths,
           "definitions": {n: _convert(_defs()[n], "#/definitions/") for n in names}}
    return json.dumps(doc, sort_keys=True).encode()
