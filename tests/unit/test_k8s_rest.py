"""The collection's API requests by path (k8s_rest.py) against the official client's generated
classes: for every operation the collection uses, both send the same request to a scripted
server on loopback (method, path and query, Content-Type, Authorization, body)."""
import json
import threading
from urllib.parse import parse_qsl, urlsplit

import pytest
from kubernetes import client as generated

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import k8s, k8s_rest

from test_k8s_layer import Scripted, make_kube

GENERATED = {"core": generated.CoreV1Api, "batch": generated.BatchV1Api, "apps": generated.AppsV1Api,
             "policy": generated.PolicyV1Api, "rbac": generated.RbacAuthorizationV1Api,
             "coordination": generated.CoordinationV1Api, "certificates": generated.CertificatesV1Api}
BODY = {"metadata": {"name": "x", "labels": {"a": "b"}}}
JSON_PATCH = [{"op": "remove", "path": "/status/conditions"}]
# The generated classes check some bodies against their models before sending.
BINDING = {"metadata": {"name": "crb"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                    "name": "view"}, "subjects": [{"kind": "User", "name": "u"}]}
CSR = {"metadata": {"name": "csr-1"}, "spec": {"request": "LS0t", "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                                               "usages": ["client auth"]}}

# (group, method, positional arguments, keyword arguments): every operation the product calls
# and those its tests call through a Kube.
CALLS = [
    ("core", "list_node", (), {"label_selector": "a=b,c!=d", "field_selector": "metadata.name=n1"}),
    ("core", "read_node", ("n1",), {}),
    ("core", "create_node", (BODY,), {}),
    ("core", "patch_node", ("n1", BODY), {"_content_type": "application/merge-patch+json"}),
    ("core", "patch_node", ("n1", BODY), {"_content_type": "application/strategic-merge-patch+json"}),
    ("core", "patch_node_status", ("n1", BODY), {}),
    ("core", "delete_node", ("n1",), {}),
    ("core", "create_namespace", (BODY,), {}),
    ("core", "delete_namespace", ("ns1",), {}),
    ("core", "list_namespaced_pod", ("ns1",), {"label_selector": "job-name=j"}),
    ("core", "list_pod_for_all_namespaces", (), {"field_selector": "spec.nodeName=n 1"}),
    ("core", "create_namespaced_pod", ("ns1", BODY), {}),
    ("core", "delete_namespaced_pod", ("p1", "ns1"), {"grace_period_seconds": 0}),
    ("core", "patch_namespaced_pod_status", ("p1", "ns1", BODY), {}),
    ("core", "patch_namespaced_pod_status", ("p1", "ns1", JSON_PATCH), {}),
    ("core", "create_namespaced_pod_eviction", ("p1", "ns1", BODY), {}),
    ("core", "read_namespaced_pod_log", ("p1", "ns1"), {}),
    ("core", "read_namespaced_secret", ("s1", "ns1"), {}),
    ("core", "list_namespaced_secret", ("ns1",), {"field_selector": "type=kubernetes.io/service-account-token"}),
    ("core", "create_namespaced_secret", ("ns1", BODY), {}),
    ("core", "delete_namespaced_secret", ("s1", "ns1"), {}),
    ("core", "read_namespaced_service_account", ("sa", "ns1"), {}),
    ("core", "create_namespaced_service_account", ("ns1", BODY), {}),
    ("core", "delete_namespaced_service_account", ("sa", "ns1"), {}),
    ("core", "read_namespaced_persistent_volume_claim", ("c1", "ns1"), {}),
    ("core", "create_namespaced_resource_quota", ("ns1", BODY), {}),
    ("core", "read_namespaced_config_map", ("cm", "ns1"), {}),
    ("core", "create_namespaced_config_map", ("ns1", BODY), {}),
    ("core", "replace_namespaced_config_map", ("cm", "ns1", BODY), {}),
    ("core", "list_namespaced_config_map", ("ns1",), {"label_selector": "app=x"}),
    ("batch", "create_namespaced_job", ("ns1", BODY), {}),
    ("batch", "read_namespaced_job", ("j1", "ns1"), {}),
    ("batch", "list_namespaced_job", ("ns1",), {"label_selector": "a in (b,c)"}),
    ("batch", "list_job_for_all_namespaces", (), {}),
    ("batch", "patch_namespaced_job", ("j1", "ns1", BODY), {"_content_type": "application/merge-patch+json"}),
    ("batch", "patch_namespaced_job_status", ("j1", "ns1", BODY), {}),
    ("batch", "delete_namespaced_job", ("j1", "ns1"), {"propagation_policy": "Background"}),
    ("apps", "list_namespaced_daemon_set", ("ns1",), {}),
    ("apps", "list_daemon_set_for_all_namespaces", (), {"label_selector": "x"}),
    ("policy", "list_namespaced_pod_disruption_budget", ("ns1",), {}),
    ("policy", "list_pod_disruption_budget_for_all_namespaces", (), {}),
    ("rbac", "read_cluster_role_binding", ("crb",), {}),
    ("rbac", "create_cluster_role_binding", (BINDING,), {}),
    ("rbac", "delete_cluster_role_binding", ("crb",), {}),
    ("rbac", "read_namespaced_role_binding", ("rb", "ns1"), {}),
    ("rbac", "delete_namespaced_role_binding", ("rb", "ns1"), {}),
    ("coordination", "read_namespaced_lease", ("l1", "ns1"), {}),
    ("coordination", "create_namespaced_lease", ("ns1", BODY), {}),
    ("coordination", "replace_namespaced_lease", ("l1", "ns1", BODY), {}),
    ("certificates", "list_certificate_signing_request", (), {"field_selector": "spec.signerName=x"}),
    ("certificates", "read_certificate_signing_request", ("csr-1",), {}),
    ("certificates", "create_certificate_signing_request", (CSR,), {}),
    ("certificates", "replace_certificate_signing_request_approval", ("csr-1", CSR), {}),
    ("certificates", "delete_certificate_signing_request", ("csr-1",), {}),
]


def sent(server, fn, args, kwargs):
    server.replies.append((200, {"kind": "Status"}))
    fn(*args, _preload_content=False, **kwargs)
    method, path, ctype, auth, body = server.seen.pop()
    url = urlsplit(path)
    # The generated classes of kubernetes 37 send creates and replaces without a Content-Type,
    # which the API server reads as JSON; k8s_rest.py names it.
    if body and ctype is None:
        ctype = "application/json"
    return (method, url.path, sorted(parse_qsl(url.query)), ctype, auth,
            json.loads(body) if body else None)


@pytest.fixture(scope="module")
def both():
    """One scripted server, a Kube on it, and the generated classes on the same client (built
    once: each costs about a second)."""
    srv = Scripted()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    kube = make_kube(srv)
    yield srv, kube, {group: cls(kube.api_client) for group, cls in GENERATED.items()}
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("group, name, args, kwargs", CALLS,
                         ids=["%s.%s" % (c[0], c[1]) for c in CALLS])
def test_a_request_by_path_is_the_request_of_the_official_client(both, group, name, args, kwargs):
    srv, kube, theirs = both
    assert sent(srv, getattr(getattr(kube, group), name), args, kwargs) == \
        sent(srv, getattr(theirs[group], name), args, kwargs)


def test_the_version_is_read_from_its_path(both):
    server, kube = both[:2]
    server.replies.append((200, {"gitVersion": "v1.30.4"}))
    assert kube.server_version()["gitVersion"] == "v1.30.4"
    assert server.seen[-1][:2] == ("GET", "/version")


def test_an_error_answer_carries_its_status_body_and_headers(both):
    server = both[0]
    kube = make_kube(server, retries=0)
    server.replies.append((422, {"kind": "Status", "message": "spec.x: Invalid value"}))
    with pytest.raises(k8s.K8sError) as err:
        kube.call("create job", kube.batch.create_namespaced_job, "ns1", BODY)
    assert err.value.status == 422 and "spec.x: Invalid value" in str(err.value)
    server.replies.append((404, {"kind": "Status", "message": "nodes \"n9\" not found"}))
    with pytest.raises(k8s_rest.ApiException) as raw:
        kube.core.read_node("n9")
    assert raw.value.status == 404 and b"not found" in raw.value.body
    assert raw.value.headers["Content-Type"] == "application/json"


@pytest.mark.parametrize("name", ["watch_namespaced_pod", "read_namespaced_widget", "list_node_for_all_namespaces", "read_namespaced_node",
                                  "delete_collection_namespaced_pod"])
def test_an_operation_outside_the_table_is_refused_by_name(name):
    group = k8s_rest.ApiGroup(None, "core")
    with pytest.raises(AttributeError, match=name):
        getattr(group, name)


def test_wrong_arguments_are_refused_before_a_request():
    group = k8s_rest.ApiGroup(None, "core")
    with pytest.raises(TypeError, match="read_namespaced_pod takes 2 or 2"):
        group.read_namespaced_pod("p1")
    with pytest.raises(TypeError, match="_async"):
        group.read_node("n1", _async=True)
