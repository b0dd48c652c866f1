"""Member revocation through the API: what the boundary lists for a member (a ServiceAccount
with its token Secret, a RoleBinding, a ClusterRoleBinding, a bootstrap token) is deleted by
the collection's code and read back gone; the member's bootstrap token then gets 401; a rerun
changes nothing; objects of other members stay."""
import base64
import secrets
import string

import pytest
from kubernetes import client

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import Kube
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import member_access


def _b64(text):
    return base64.b64encode(text.encode()).decode()


def _binding(name, namespace=None):
    meta = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding" if not namespace else "RoleBinding",
            "metadata": meta, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "test-member"}]}


@pytest.fixture
def member(api):
    api_client, h = api
    rbac = client.RbacAuthorizationV1Api(api_client)
    name, other = h.uniq("member"), h.uniq("other")
    for sa in (name, other):
        h.core.create_namespaced_service_account(h.ns, {"metadata": {"name": sa}})
        h.core.create_namespaced_secret(h.ns, {
            "metadata": {"name": sa + "-token", "annotations": {"kubernetes.io/service-account.name": sa}},
            "type": "kubernetes.io/service-account-token"})
    rbac.create_namespaced_role_binding(h.ns, _binding(name, h.ns))
    rbac.create_cluster_role_binding(_binding(name))
    alphabet = string.ascii_lowercase + string.digits
    token_id = "".join(secrets.choice(alphabet) for _index in range(6))
    token_secret = "".join(secrets.choice(alphabet) for _index in range(16))
    h.core.create_namespaced_secret("kube-system", {
        "metadata": {"name": "bootstrap-token-" + token_id}, "type": "bootstrap.kubernetes.io/token",
        "data": {"token-id": _b64(token_id), "token-secret": _b64(token_secret),
                 "usage-bootstrap-authentication": _b64("true")}})
    items = [{"context": "conformance", "kind": "ServiceAccount", "namespace": h.ns, "name": name},
             {"context": "conformance", "kind": "RoleBinding", "namespace": h.ns, "name": name},
             {"context": "conformance", "kind": "ClusterRoleBinding", "name": name},
             {"context": "conformance", "kind": "BootstrapToken", "name": token_id}]
    yield {"items": items, "name": name, "other": other, "token": "%s.%s" % (token_id, token_secret), "rbac": rbac}
    for call in (lambda: rbac.delete_cluster_role_binding(name), lambda: h.core.delete_namespaced_service_account(other, h.ns),
                 lambda: h.core.delete_namespaced_secret(other + "-token", h.ns)):
        try:
            call()
        except client.ApiException:
            pass


def _bootstrap_status(h, token):
    conf = client.Configuration()
    conf.host, conf.ssl_ca_cert = h.api.configuration.host, h.api.configuration.ssl_ca_cert
    conf.api_key = {"BearerToken": "Bearer " + token}
    try:
        client.CertificatesV1Api(client.ApiClient(conf)).list_certificate_signing_request()
        return 200
    except client.ApiException as exc:
        return exc.status


def test_member_access_is_revoked_through_the_api_and_read_back_gone(api, member):
    api_client, h = api
    if not h.emulator:
        pytest.skip("real-cluster mode: bootstrap token authentication needs a kubeadm-style control plane")
    assert _bootstrap_status(h, member["token"]) != 401
    kube = Kube(api_client=api_client, backoff=0.01)
    planned = member_access.revoke(kube, member["items"], check_mode=True)
    name = member["name"]
    assert planned == {"revoked": ["Secret %s/%s-token" % (h.ns, name), "ServiceAccount %s/%s" % (h.ns, name),
                                   "RoleBinding %s/%s" % (h.ns, name), "ClusterRoleBinding %s" % name,
                                   "Secret kube-system/bootstrap-token-%s" % member["items"][3]["name"]],
                       "absent": []}
    assert h.core.read_namespaced_service_account(name, h.ns)  # check mode deleted nothing
    done = member_access.revoke(kube, member["items"])
    assert done["revoked"] == planned["revoked"] and done["absent"] == []
    for read in (lambda: h.core.read_namespaced_service_account(name, h.ns),
                 lambda: h.core.read_namespaced_secret(name + "-token", h.ns),
                 lambda: member["rbac"].read_namespaced_role_binding(name, h.ns),
                 lambda: member["rbac"].read_cluster_role_binding(name)):
        with pytest.raises(client.ApiException) as exc:
            read()
        assert exc.value.status == 404
    assert _bootstrap_status(h, member["token"]) == 401
    # another member's account and token stay
    assert h.core.read_namespaced_service_account(member["other"], h.ns)
    assert h.core.read_namespaced_secret(member["other"] + "-token", h.ns)
    again = member_access.revoke(kube, member["items"])
    assert again["revoked"] == [] and len(again["absent"]) == 4
