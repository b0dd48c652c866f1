# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one place that talks to Kubernetes.

Every Kubernetes call of the collection goes through `Kube`: it builds a client from the shared
connection options (AUTH_KEYS), retries with backoff on 429, 5xx and transport errors, and returns
plain dicts decoded from the response body (no model objects: cheaper, and unknown fields survive).
Requests go by path through k8s_rest.py on the official client's configuration and pool.
"""

from __future__ import annotations

import json
import os
import random
import time

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import k8s_rest
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import kubectl_node

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.client.exceptions import ApiException
    import urllib3

    HAS_K8S = True
    K8S_IMPORT_ERROR = None
except ImportError as exc:  # pragma: no cover - reported by the module
    HAS_K8S = False
    K8S_IMPORT_ERROR = exc

    class ApiException(Exception):  # stands in so the except clauses stay valid
        pass

# Names of the shared connection options. Their argument spec is K8S_AUTH_ARG_SPEC in
# k8s_module.py, documented once in plugins/doc_fragments/k8s_auth.py.
AUTH_KEYS = ("kubeconfig", "context", "host", "api_key", "ca_cert", "validate_certs", "request_timeout", "api_retries")

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class K8sError(Exception):
    """A failed API call, with what was attempted on which object."""

    def __init__(self, action, status=None, reason=None, message=None, body=None, cause=None):
        self.action = action
        # the transport exception when no HTTP answer came back (status is None then)
        self.cause = cause
        self.status = status
        self.reason = reason
        self.body = body or {}
        self.message = message or reason or "unknown error"
        text = "%s failed" % action
        if status:
            text += ": HTTP %s %s" % (status, reason or "")
        if message and message != reason:
            text += ": %s" % message
        super().__init__(text)

    @property
    def not_found(self):
        return self.status == 404

    @property
    def conflict(self):
        return self.status == 409

    @property
    def request_sent(self):
        """False when the connection was never made (the request cannot have had an effect);
        True when an HTTP answer came back or the connection broke after the request went out."""
        if self.status is not None or self.cause is None:
            return True
        text = repr(self.cause)
        return not any(word in text for word in ("NewConnectionError", "ConnectTimeoutError",
                                                 "ConnectionRefusedError", "Connection refused"))


def _decode(data):
    if not data:
        return {}
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    try:
        return json.loads(data)
    except ValueError:
        return {"raw": data}


def build_api_client(params):
    """Build an ApiClient from the shared auth options (a dict like module.params)."""
    if not HAS_K8S:
        raise K8sError("import kubernetes", message="the kubernetes Python client is not installed: %s"
                       % K8S_IMPORT_ERROR)
    params = params or {}
    cfg = k8s_client.Configuration()
    kubeconfig = params.get("kubeconfig")
    host = params.get("host")
    if kubeconfig or not host:
        path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser(
            "~/.kube/config")
        if not os.path.exists(path):
            raise K8sError("load kubeconfig", message="kubeconfig %s does not exist; set kubeconfig, "
                           "K8S_AUTH_KUBECONFIG or KUBECONFIG" % path)
        try:
            k8s_config.load_kube_config(config_file=path, context=params.get("context"),
                                        client_configuration=cfg, persist_config=False)
        except Exception as exc:  # the loader raises several unrelated types
            raise K8sError("load kubeconfig %s" % path,
                           message="%s (context %r)" % (exc, params.get("context")))
    # Explicit options win over the kubeconfig. The client sends api_key["BearerToken"] before
    # api_key["authorization"], and the loader's refresh hook rewrites BearerToken before every
    # request, so an explicit token replaces both; the kubeconfig's client certificate is dropped
    # with them, or the server would authenticate the request by the certificate instead.
    if host:
        cfg.host = host
    if params.get("api_key"):
        cfg.api_key = {"BearerToken": "Bearer %s" % params["api_key"]}
        cfg.api_key_prefix = {}
        cfg.refresh_api_key_hook = None
        cfg.cert_file = None
        cfg.key_file = None
    if params.get("ca_cert"):
        cfg.ssl_ca_cert = params["ca_cert"]
    # validate_certs given either way wins over the kubeconfig's insecure-skip-tls-verify;
    # unset, the kubeconfig decides (verification is on unless it says otherwise).
    if params.get("validate_certs") is not None:
        cfg.verify_ssl = bool(params["validate_certs"])
    # Our own backoff decides about retries; urllib3 must not retry underneath it.
    cfg.retries = False
    # pool_size: connections kept open for reuse, at least one per thread that shares the client
    cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize or 1, int(params.get("pool_size") or 0))
    return k8s_client.ApiClient(configuration=cfg)


class Kube(object):
    """Thin, retrying access to the API groups the collection uses. Returns dicts."""

    def __init__(self, params=None, api_client=None, retries=None, backoff=0.25, max_backoff=4.0,
                 sleep=time.sleep):
        params = params or {}
        self.api_client = api_client or build_api_client(params)
        self.timeout = params.get("request_timeout") or 20.0
        self.retries = params.get("api_retries", 4) if retries is None else retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.sleep = sleep
        self.calls = 0  # API requests sent, retries included (for benchmarks and tests)
        # The API groups by path (k8s_rest.py), not the client's generated classes.
        for group in k8s_rest.GROUPS:
            setattr(self, group, k8s_rest.ApiGroup(self.api_client, group))
        self.version_api = k8s_rest.VersionApi(self.api_client)

    # -- transport ---------------------------------------------------------------------
    def call(self, action, fn, *args, retry_statuses=RETRY_STATUSES, **kwargs):
        """Run one API call with backoff; returns the decoded body or raises K8sError."""
        kwargs.setdefault("_preload_content", False)
        kwargs.setdefault("_request_timeout", self.timeout)
        attempt = 0
        while True:
            attempt += 1
            self.calls += 1
            try:
                resp = fn(*args, **kwargs)
                return _decode(resp.data)
            except ApiException as exc:
                body = _decode(getattr(exc, "body", None))
                status = getattr(exc, "status", None)
                if status in retry_statuses and attempt <= self.retries:
                    self._wait(attempt, exc)
                    continue
                raise K8sError(action, status, getattr(exc, "reason", None),
                               body.get("message") if isinstance(body, dict) else None, body)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                if attempt <= self.retries:
                    self._wait(attempt, None)
                    continue
                raise K8sError(action, message="cannot reach the API server at %s: %s"
                               % (self.api_client.configuration.host, exc), cause=exc)

    def _wait(self, attempt, exc):
        delay = min(self.max_backoff, self.backoff * (2 ** (attempt - 1)))
        retry_after = None
        headers = getattr(exc, "headers", None) or {}
        try:
            retry_after = float(headers.get("Retry-After"))
        except (TypeError, ValueError):
            pass
        if retry_after is not None:
            delay = min(self.max_backoff, max(delay, retry_after))
        self.sleep(delay * (0.5 + random.random() / 2))

    def call_or_none(self, action, fn, *args, **kwargs):
        """Like call(), but None when the object does not exist (HTTP 404): a read of something
        absent, or a delete of something already gone."""
        try:
            return self.call(action, fn, *args, **kwargs)
        except K8sError as err:
            if err.not_found:
                return None
            raise

    def server_version(self):
        return self.call("get server version", self.version_api.get_code)

    # -- nodes -------------------------------------------------------------------------
    def list_nodes(self, label_selector=None, field_selector=None):
        kw = _selectors(label_selector, field_selector)
        return self.call("list nodes", self.core.list_node, **kw).get("items", [])

    def get_node(self, name):
        """The Node as a dict, or None when it does not exist."""
        return self.call_or_none("get node %s" % name, self.core.read_node, name)

    def patch_node(self, name, patch, patch_type="strategic"):
        return self.call("patch node %s" % name, self.core.patch_node, name, patch,
                         _content_type=PATCH_TYPES[patch_type])

    def delete_node(self, name):
        """Delete a Node; returns False when it was already gone."""
        return self.call_or_none("delete node %s" % name, self.core.delete_node, name) is not None

    def list_daemonsets(self, namespace=None, label_selector=None):
        kw = _selectors(label_selector, None)
        if namespace:
            return self.call("list daemonsets in %s" % namespace, self.apps.list_namespaced_daemon_set, namespace, **kw).get("items", [])
        return self.call("list daemonsets", self.apps.list_daemon_set_for_all_namespaces, **kw).get("items", [])

    # -- pods --------------------------------------------------------------------------
    def list_pods(self, namespace=None, label_selector=None, field_selector=None):
        kw = _selectors(label_selector, field_selector)
        if namespace:
            return self.call("list pods in %s" % namespace, self.core.list_namespaced_pod,
                             namespace, **kw).get("items", [])
        return self.call("list pods", self.core.list_pod_for_all_namespaces, **kw).get("items", [])

    def pods_on_node(self, node):
        return self.list_pods(field_selector="spec.nodeName=%s" % node)

    def delete_pod(self, namespace, name, grace_period_seconds=None):
        kw = {}
        if grace_period_seconds is not None:
            kw["grace_period_seconds"] = grace_period_seconds
        return self.call_or_none("delete pod %s/%s" % (namespace, name), self.core.delete_namespaced_pod,
                                 name, namespace, **kw) is not None

    def evict_pod(self, namespace, name):
        """Evict through the eviction API. Returns 'evicted', 'gone' or 'blocked' (429: a PDB)."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace}}
        try:
            # A 429 here is the PDB's answer, not back-pressure: hand it to the caller.
            self.call("evict pod %s/%s" % (namespace, name),
                      self.core.create_namespaced_pod_eviction, name, namespace, body,
                      retry_statuses=RETRY_STATUSES - {429})
            return "evicted", None
        except K8sError as err:
            if err.not_found:
                return "gone", None
            if err.status == 429:
                return "blocked", err.message
            raise

    def pod_log(self, namespace, name):
        resp = self.core.read_namespaced_pod_log(name, namespace, _preload_content=False,
                                                 _request_timeout=self.timeout)
        self.calls += 1
        return resp.data.decode("utf-8", "replace")

    # -- jobs --------------------------------------------------------------------------
    def create_job(self, namespace, body):
        return self.call("create job %s/%s" % (namespace, body["metadata"].get("name")),
                         self.batch.create_namespaced_job, namespace, body)

    def get_job(self, namespace, name):
        return self.call_or_none("get job %s/%s" % (namespace, name), self.batch.read_namespaced_job,
                                 name, namespace)

    def list_jobs(self, namespace=None, label_selector=None):
        kw = _selectors(label_selector, None)
        if namespace:
            return self.call("list jobs in %s" % namespace, self.batch.list_namespaced_job,
                             namespace, **kw).get("items", [])
        return self.call("list jobs", self.batch.list_job_for_all_namespaces, **kw).get("items", [])

    def patch_job(self, namespace, name, patch, patch_type="merge"):
        return self.call("patch job %s/%s" % (namespace, name), self.batch.patch_namespaced_job,
                         name, namespace, patch, _content_type=PATCH_TYPES[patch_type])

    def delete_job(self, namespace, name, propagation="Background"):
        return self.call_or_none("delete job %s/%s" % (namespace, name), self.batch.delete_namespaced_job,
                                 name, namespace, propagation_policy=propagation) is not None

    # -- namespaces and secrets --------------------------------------------------------
    def ensure_namespace(self, name):
        try:
            self.call("create namespace %s" % name, self.core.create_namespace,
                      {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
            return True
        except K8sError as err:
            if err.conflict:
                return False
            raise

    def get_secret(self, namespace, name):
        return self.call_or_none("get secret %s/%s" % (namespace, name), self.core.read_namespaced_secret,
                                 name, namespace)

    def create_secret(self, namespace, body):
        return self.call("create secret %s/%s" % (namespace, body["metadata"]["name"]),
                         self.core.create_namespaced_secret, namespace, body)

    def delete_secret(self, namespace, name):
        return self.call_or_none("delete secret %s/%s" % (namespace, name), self.core.delete_namespaced_secret,
                                 name, namespace) is not None

    def list_csrs(self, field_selector=None):
        return self.call("list certificatesigningrequests", self.certificates.list_certificate_signing_request,
                         **_selectors(None, field_selector)).get("items") or []

    def get_csr(self, name):
        return self.call_or_none("get certificatesigningrequest %s" % name,
                                 self.certificates.read_certificate_signing_request, name)

    def approve_csr(self, csr, reason, message):
        """Add the Approved condition (the /approval subresource, as kubectl certificate approve)."""
        body = dict(csr, status=dict(csr.get("status") or {}, conditions=list(
            (csr.get("status") or {}).get("conditions") or []) + [{
                "type": "Approved", "status": "True", "reason": reason, "message": message}]))
        return self.call("approve certificatesigningrequest %s" % csr["metadata"]["name"],
                         self.certificates.replace_certificate_signing_request_approval,
                         csr["metadata"]["name"], body)

    def delete_csr(self, name):
        return self.call_or_none("delete certificatesigningrequest %s" % name,
                                 self.certificates.delete_certificate_signing_request, name) is not None

    def list_pdbs(self, namespace=None):
        if namespace:
            return self.call("list poddisruptionbudgets in %s" % namespace,
                             self.policy.list_namespaced_pod_disruption_budget, namespace).get("items", [])
        return self.call("list poddisruptionbudgets",
                         self.policy.list_pod_disruption_budget_for_all_namespaces).get("items", [])


PATCH_TYPES = {
    "strategic": "application/strategic-merge-patch+json",
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
}


def _selectors(label_selector, field_selector):
    kw = {}
    if label_selector:
        kw["label_selector"] = label_selector
    if field_selector:
        kw["field_selector"] = field_selector
    return kw


def node_ready(node):
    """'True', 'False' or 'Unknown' from the Node's Ready condition ('Unknown' when absent)."""
    found = [c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"]
    return (found[0].get("status") or "Unknown") if found else "Unknown"


def node_summary(node):
    """The few facts about a Node that records and reports use (its InternalIPs too).
    ``gpu`` holds what the GPU feature discovery / GPU operator labels say (product, count,
    memory, MIG strategy and profiles, driver and CUDA versions: kubectl_node.gpu_info);
    its values are None when the Node carries no such labels."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    spec = node.get("spec") or {}
    info = status.get("nodeInfo") or {}
    return {
        "name": meta.get("name"),
        "ready": node_ready(node),
        "unschedulable": bool(spec.get("unschedulable")),
        "labels": meta.get("labels") or {},
        "taints": spec.get("taints") or [],
        "gpu_capacity": to_int((status.get("capacity") or {}).get("nvidia.com/gpu")),
        "gpu_allocatable": to_int((status.get("allocatable") or {}).get("nvidia.com/gpu")),
        "gpu": kubectl_node.gpu_info(meta.get("labels") or {}),
        "kubelet_version": info.get("kubeletVersion"),
        "os_image": info.get("osImage"),
        "kernel_version": info.get("kernelVersion"),
        "internal_ips": [a["address"] for a in status.get("addresses") or [] if a.get("type") == "InternalIP"],
    }


def to_int(value):
    """An int from a quantity string such as a GPU count; 0 when absent or not a number."""
    number = kubectl_node.parse_quantity(value)
    return int(number) if number is not None else 0
