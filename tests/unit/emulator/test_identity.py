"""Node identity in the emulator: JWS, bootstrap tokens, client-certificate users, the kubelet
signers' subject rules, NodeRestriction's label policy (below the HTTP layer)."""
import base64
import datetime
import os
import sys

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LAB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lab")
sys.path.insert(0, os.path.abspath(LAB))

from k8s_emulator import auth, certificates, identity  # noqa: E402
from k8s_emulator.resources import BY_PLURAL  # noqa: E402
from k8s_emulator.store import ApiError, Store  # noqa: E402

CONTENT = "Hello from the other side. I must have called a thousand times."


def test_detached_jws_matches_the_cluster_bootstrap_vectors():
    # the vectors of k8s.io/cluster-bootstrap/token/jws's own test
    assert identity.detached_jws(CONTENT, "joshua", "my voice is my passcode") == \
        "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8"
    assert identity.detached_jws("", "joshua", "my voice is my passcode") == \
        "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..7Ui1ALizW4jXphVUB7xUqC9vLYLL9RZeOFfVLoB7Tgk"


def _b64(text):
    return base64.b64encode(text.encode()).decode()


def _token_secret(store, token_id="abcdef", secret="0123456789abcdef", **data):
    fields = {"token-id": token_id, "token-secret": secret, "usage-bootstrap-authentication": "true"}
    fields.update(data)
    store.create(BY_PLURAL["secrets"], "kube-system", {
        "metadata": {"name": "bootstrap-token-" + token_id}, "type": identity.BOOTSTRAP_TYPE,
        "data": {k: _b64(v) for k, v in fields.items()}})


def test_bootstrap_token_user_groups_and_refusals():
    st = Store()
    _token_secret(st, **{"auth-extra-groups": "system:bootstrappers:b,system:bootstrappers:a"})
    assert identity.bootstrap_user(st, "abcdef.0123456789abcdef") == (
        "system:bootstrap:abcdef", ["system:bootstrappers", "system:bootstrappers:a", "system:bootstrappers:b"])
    assert identity.bootstrap_user(st, "abcdef.0123456789abcdeX") is None  # not the token format
    assert identity.bootstrap_user(st, "abcdef.0123456789abcdee") is None  # wrong secret
    _token_secret(st, "ghijkl", **{"auth-extra-groups": "system:masters"})
    assert identity.bootstrap_user(st, "ghijkl.0123456789abcdef") is None
    _token_secret(st, "mnopqr", expiration="2000-01-01T00:00:00Z")
    assert identity.bootstrap_user(st, "mnopqr.0123456789abcdef") is None
    _token_secret(st, "stuvwx", **{"usage-bootstrap-authentication": "false"})
    assert identity.bootstrap_user(st, "stuvwx.0123456789abcdef") is None


def test_expiration_rules():
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    assert not identity.expired({}, now)
    assert not identity.expired({"expiration": "2026-01-01T00:00:01Z"}, now)
    assert identity.expired({"expiration": "2025-12-31T23:59:59Z"}, now)
    assert identity.expired({"expiration": "2026-01-02T00:00:00"}, now)  # no offset: not RFC 3339
    assert identity.expired({"expiration": "soon"}, now)


def test_signer_keeps_cluster_info_signatures_current_and_cleans_expired_tokens():
    st = Store()
    ctl = identity.IdentityControllers(st)
    ctl.publish_cluster_info("https://127.0.0.1:6443", b"-----BEGIN CERTIFICATE-----\n")
    _token_secret(st, **{"usage-bootstrap-signing": "true"})
    _token_secret(st, "ghijkl")
    _token_secret(st, "mnopqr", expiration="2000-01-01T00:00:00Z", **{"usage-bootstrap-signing": "true"})
    ctl.run_once()
    data = st.get(BY_PLURAL["configmaps"], "kube-public", "cluster-info")["data"]
    assert sorted(data) == ["jws-kubeconfig-abcdef", "kubeconfig"]
    assert data["jws-kubeconfig-abcdef"] == identity.detached_jws(data["kubeconfig"], "abcdef", "0123456789abcdef")
    assert st.find(BY_PLURAL["secrets"], "kube-system", "bootstrap-token-mnopqr") is None  # tokencleaner
    st.delete(BY_PLURAL["secrets"], "kube-system", "bootstrap-token-abcdef")
    ctl.run_once()
    assert sorted(st.get(BY_PLURAL["configmaps"], "kube-public", "cluster-info")["data"]) == ["kubeconfig"]


def _cert(cn, orgs=(), eku=(ExtendedKeyUsageOID.CLIENT_AUTH,)):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    names = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    if cn:
        names.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    builder = (x509.CertificateBuilder().subject_name(x509.Name(names)).issuer_name(x509.Name(names))
               .public_key(key.public_key()).serial_number(1).not_valid_before(now)
               .not_valid_after(now + datetime.timedelta(hours=1)))
    if eku:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(eku)), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


def test_client_certificate_user_is_cn_and_organizations():
    assert identity.cert_user(_cert("system:node:n1", ["system:nodes"])) == ("system:node:n1", ["system:nodes"])
    assert identity.cert_user(_cert("alice", ["team-a", "ops"])) == ("alice", ["team-a", "ops"])
    assert identity.cert_user(_cert("", ["x"])) is None
    assert identity.cert_user(_cert("bob", eku=[ExtendedKeyUsageOID.SERVER_AUTH])) is None
    user = auth.authenticate({}, None, Store(), _cert("system:node:n1", ["system:nodes"]))
    assert user.node_name == "n1" and "system:authenticated" in user.groups
    anonymous = auth.authenticate({}, None, Store())
    assert (anonymous.name, anonymous.groups) == ("system:anonymous", ["system:unauthenticated"])
    assert auth.authenticate({"Authorization": "Bearer nope"}, None, Store()) is None


def _request(cn, orgs=("system:nodes",), dns=()):
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs] + [
        x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(names))
    if dns:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False)
    return builder.sign(key, hashes.SHA256())


@pytest.mark.parametrize("signer, req, usages, why", [
    (certificates.KUBELET_CLIENT, _request("system:node:a"), ["digital signature", "client auth"], None),
    (certificates.KUBELET_CLIENT, _request("system:node:a"), ["digital signature", "key encipherment", "client auth"],
     None),
    (certificates.KUBELET_CLIENT, _request("admin", ["system:masters"]), ["client auth"],
     "subject organization is not system:nodes"),
    (certificates.KUBELET_CLIENT, _request("a"), ["digital signature", "client auth"],
     "subject common name does not begin with system:node:"),
    (certificates.KUBELET_CLIENT, _request("system:node:a", dns=["a"]), ["digital signature", "client auth"],
     "DNS subjectAltNames are not allowed"),
    (certificates.KUBELET_CLIENT, _request("system:node:a"), ["client auth"],
     "usages did not match [client auth digital signature key encipherment]"),
    (certificates.KUBELET_SERVING, _request("system:node:a"), ["digital signature", "server auth"],
     "DNS or IP subjectAltName is required"),
    (certificates.KUBELET_SERVING, _request("system:node:a", dns=["a"]), ["digital signature", "server auth"], None),
])
def test_kubelet_signer_subject_rules(signer, req, usages, why):
    assert certificates.validate_for_signer(signer, req, usages) == why


def test_signer_duration_is_clamped():
    signer = certificates.Signer.__new__(certificates.Signer)
    signer.max_seconds = 86400
    assert signer.duration(None) == 86400
    assert signer.duration(600) == 600
    assert signer.duration(10 ** 9) == 86400


@pytest.mark.parametrize("labels, bad", [
    (["kubernetes.io/hostname", "kubernetes.io/os", "topology.kubernetes.io/zone", "node.kubernetes.io/x",
      "kubelet.kubernetes.io/y", "nvidia.com/gpu.count", "team"], []),
    (["node-role.kubernetes.io/gpu"], ["node-role.kubernetes.io/gpu"]),
    (["node-restriction.kubernetes.io/pool", "a.node-restriction.kubernetes.io/b"],
     ["a.node-restriction.kubernetes.io/b", "node-restriction.kubernetes.io/pool"]),
    (["example.k8s.io/x", "kubernetes.io/made-up"], ["example.k8s.io/x", "kubernetes.io/made-up"]),
])
def test_node_restriction_label_policy(labels, bad):
    assert auth.forbidden_labels(labels) == bad


def test_node_may_not_create_ordinary_pods_or_touch_its_taints():
    node = auth.User("system:node:n1", "", ["system:nodes"])
    pods, nodes = BY_PLURAL["pods"], BY_PLURAL["nodes"]
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}}
    with pytest.raises(ApiError) as err:
        auth.admit_node(node, pods, "", None, pod)
    assert err.value.code == 403 and "can only create mirror pods" in err.value.message
    mirror = {"metadata": {"name": "p", "annotations": {"kubernetes.io/config.mirror": "x"}}, "spec": {"nodeName": "n1"}}
    auth.admit_node(node, pods, "", None, mirror)
    old = {"metadata": {"name": "n1"}, "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}
    with pytest.raises(ApiError) as err:
        auth.admit_node(node, nodes, "", old, {"metadata": {"name": "n1"}, "spec": {}})
    assert err.value.message == 'nodes "n1" is forbidden: node "n1" is not allowed to modify taints'


def test_auto_approval_only_for_the_configured_bootstrap_group():
    st = Store()
    csrs = BY_PLURAL["certificatesigningrequests"]

    def csr(name, groups, username="system:bootstrap:abcdef", signer="kubernetes.io/kube-apiserver-client-kubelet"):
        st.put_internal(csrs, {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
                               "metadata": {"name": name},
                               "spec": {"signerName": signer, "username": username, "groups": groups,
                                        "usages": ["digital signature", "client auth"], "request": ""}})

    csr("vendor", ["system:bootstrappers", "system:bootstrappers:vendor"])
    csr("other-group", ["system:bootstrappers", "system:bootstrappers:hybridgpu"])
    csr("not-bootstrap", ["system:bootstrappers:vendor"], username="alice")
    csr("serving", ["system:bootstrappers:vendor"], signer="kubernetes.io/kubelet-serving")
    identity.IdentityControllers(st).run_once()  # no group configured: nothing approved
    assert not (st.find(csrs, None, "vendor").get("status") or {}).get("conditions")
    identity.IdentityControllers(st, auto_approve_groups=["system:bootstrappers:vendor"]).run_once()
    approved = [n for n in ("vendor", "other-group", "not-bootstrap", "serving")
                if (st.find(csrs, None, n).get("status") or {}).get("conditions")]
    assert approved == ["vendor"]
    assert st.find(csrs, None, "vendor")["status"]["conditions"][0]["reason"] == "AutoApproved"
