# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes API requests by path, on the official client's configuration and connection pool.

The generated API classes of the official client (CoreV1Api and the others) cost more than a
second of CPU to import and build in every module run, because they build a typed model for each
operation. The collection reads and writes plain JSON, so it uses the client only for what
matters: the kubeconfig loader, the authentication, the TLS settings and the urllib3 pool.

`ApiGroup` answers the generated method names the collection uses (``read_node``,
``create_namespaced_job``, ``patch_node_status``, ``list_pod_for_all_namespaces``...) with the
same arguments and the same result: the raw HTTP response (``.data``, ``.status``), or an
``ApiException`` carrying the status, reason, body and headers when the answer is not 2xx.
"""

from __future__ import annotations

import json
from urllib.parse import quote, urlencode

try:
    import urllib3
    from kubernetes.client.exceptions import ApiException
except ImportError:  # pragma: no cover - k8s.py reports the missing client
    urllib3 = None

    class ApiException(Exception):
        pass

# API group: (path prefix, {resource in the method names: plural}).
GROUPS = {
    "core": ("/api/v1", {
        "node": "nodes", "namespace": "namespaces", "pod": "pods", "secret": "secrets",
        "service_account": "serviceaccounts", "config_map": "configmaps", "service": "services",
        "persistent_volume_claim": "persistentvolumeclaims", "resource_quota": "resourcequotas",
        "event": "events", "endpoints": "endpoints"}),
    "batch": ("/apis/batch/v1", {"job": "jobs", "cron_job": "cronjobs"}),
    "apps": ("/apis/apps/v1", {"daemon_set": "daemonsets", "deployment": "deployments",
                               "stateful_set": "statefulsets", "replica_set": "replicasets"}),
    "policy": ("/apis/policy/v1", {"pod_disruption_budget": "poddisruptionbudgets"}),
    "rbac": ("/apis/rbac.authorization.k8s.io/v1", {
        "role": "roles", "role_binding": "rolebindings", "cluster_role": "clusterroles",
        "cluster_role_binding": "clusterrolebindings"}),
    "coordination": ("/apis/coordination.k8s.io/v1", {"lease": "leases"}),
    "certificates": ("/apis/certificates.k8s.io/v1", {"certificate_signing_request": "certificatesigningrequests"}),
}
CLUSTER_SCOPED = frozenset({"node", "namespace", "cluster_role", "cluster_role_binding", "certificate_signing_request"})
SUBRESOURCES = frozenset({"status", "log", "eviction", "approval", "binding", "scale"})
VERBS = {"read": "GET", "list": "GET", "create": "POST", "replace": "PUT", "patch": "PATCH", "delete": "DELETE"}
# Keyword arguments of the generated methods that are query parameters under another name.
QUERY_NAMES = {"_continue": "continue"}
# Options of the generated methods that are honoured (a response is always read in full).
OPTIONS = frozenset({"_preload_content", "_request_timeout", "_content_type"})


def operation(group, name):
    """(HTTP method, path prefix, plural, subresource, namespaced, takes a name, takes a body) for a
    generated method name of the group, or None when the name is not one of the shapes above."""
    prefix, kinds = GROUPS[group]
    verb, rest = name.partition("_")[::2]
    if verb not in VERBS:
        return None
    all_namespaces = rest.endswith("_for_all_namespaces")
    if all_namespaces:
        rest = rest[:-len("_for_all_namespaces")]
    namespaced = rest.startswith("namespaced_")
    if namespaced:
        rest = rest[len("namespaced_"):]
    for kind in sorted(kinds, key=len, reverse=True):
        if rest == kind:
            sub = None
        elif rest.startswith(kind + "_") and rest[len(kind) + 1:] in SUBRESOURCES:
            sub = rest[len(kind) + 1:]
        else:
            continue
        if (kind in CLUSTER_SCOPED) != (not namespaced and not all_namespaces):
            return None
        if all_namespaces and (verb != "list" or namespaced or sub):
            return None
        named = verb != "list" and (verb != "create" or sub is not None)
        return VERBS[verb], prefix, kinds[kind], sub, namespaced, named, verb not in ("read", "list")
    return None


def content_type(method, body, given):
    """The request's Content-Type: the one given, else the official client's rule for patches (a
    list is a JSON patch, anything else a strategic merge patch), else JSON."""
    if given and not (given == "application/json-patch+json" and not isinstance(body, list)):
        return given
    if method == "PATCH":
        return "application/json-patch+json" if isinstance(body, list) else "application/strategic-merge-patch+json"
    return "application/json"


def request(api_client, method, path, query=None, body=None, ctype=None, timeout=None, accept="application/json"):
    """One request on the client's pool; the urllib3 response, or ApiException when not 2xx."""
    cfg = api_client.configuration
    headers = dict(getattr(api_client, "default_headers", None) or {})
    headers["Accept"] = accept
    for auth in (cfg.auth_settings() or {}).values():
        if auth.get("in") == "header" and auth.get("value"):
            headers[auth["key"]] = auth["value"]
    url = cfg.host.rstrip("/") + path
    if query:
        url += "?" + urlencode([(k, _text(v)) for k, v in query.items() if v is not None])
    data = None
    if body is not None or method in ("POST", "PUT", "PATCH"):
        headers["Content-Type"] = content_type(method, body, ctype)
        if isinstance(body, (bytes, str)):
            data = body
        else:
            if not isinstance(body, (dict, list)) and body is not None:
                body = api_client.sanitize_for_serialization(body)
            data = json.dumps(body).encode("utf-8")
    if isinstance(timeout, (int, float)):
        timeout = urllib3.Timeout(total=timeout)
    elif isinstance(timeout, tuple) and len(timeout) == 2:
        timeout = urllib3.Timeout(connect=timeout[0], read=timeout[1])
    resp = api_client.rest_client.pool_manager.request(method, url, body=data, headers=headers,
                                                       timeout=timeout, preload_content=True)
    if not 200 <= resp.status <= 299:
        exc = ApiException(status=resp.status, reason=resp.reason)
        exc.body = resp.data
        exc.headers = resp.headers
        raise exc
    return resp


def _text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _camel(name):
    if name in QUERY_NAMES:
        return QUERY_NAMES[name]
    head, *tail = name.split("_")
    return head + "".join(t.title() for t in tail)


class ApiGroup(object):
    """One API group answering the generated method names (see the module's docstring)."""

    def __init__(self, api_client, group):
        self.api_client = api_client
        self.group = group

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        op = operation(self.group, name)
        if op is None:
            raise AttributeError("the %s API group of the collection has no operation %s" % (self.group, name))
        method, prefix, plural, sub, namespaced, named, takes_body = op

        def call(*args, **kwargs):
            args = list(args)
            want = int(named) + int(namespaced)
            if len(args) < want or len(args) > want + int(takes_body):
                raise TypeError("%s takes %d or %d positional arguments, got %d" % (
                    name, want, want + int(takes_body), len(args)))
            ident = args.pop(0) if named else None
            ns = args.pop(0) if namespaced else None
            body = kwargs.pop("body", args[0] if args else None)
            path = prefix + ("/namespaces/%s" % quote(str(ns), safe="") if namespaced else "")
            path += "/" + plural
            if named:
                path += "/" + quote(str(ident), safe="")
            if sub:
                path += "/" + sub
            options = {k: kwargs.pop(k) for k in list(kwargs) if k in OPTIONS}
            kwargs.pop("async_req", None)
            bad = [k for k in kwargs if k.startswith("_") and k not in QUERY_NAMES]
            if bad:
                raise TypeError("%s got unexpected options %s" % (name, ", ".join(sorted(bad))))
            query = {_camel(k): v for k, v in kwargs.items()}
            accept = "application/json, */*" if sub == "log" else "application/json"
            return request(self.api_client, method, path, query, body, options.get("_content_type"),
                           options.get("_request_timeout"), accept)

        call.__name__ = name
        return call


class VersionApi(object):
    """GET /version, as the generated VersionApi.get_code."""

    def __init__(self, api_client):
        self.api_client = api_client

    def get_code(self, _preload_content=False, _request_timeout=None):
        return request(self.api_client, "GET", "/version", timeout=_request_timeout)
