"""Node identity through the official client: bootstrap tokens, cluster-info and its JWS
signatures, anonymous requests, CertificateSigningRequests and the kubelet signers, client
certificates, and what the Node authorizer and NodeRestriction let a node do.

Against a real cluster these need a kubeadm-style control plane (bootstrap token
authentication, the bootstrapsigner, csrsigning with the cluster CA); a cluster without
cluster-info skips the tests that read it.
"""
import base64
import datetime
import hashlib
import hmac
import json
import os
import secrets
import string
import time

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client, config

from conftest import emulator_only

KUBELET_CLIENT = "kubernetes.io/kube-apiserver-client-kubelet"
KUBELET_SERVING = "kubernetes.io/kubelet-serving"
# the group kubeadm binds to system:node-bootstrapper (create CSRs) on a real cluster
JOIN_GROUP = "system:bootstrappers:kubeadm:default-node-token"


def _status(exc_info):
    return exc_info.value.status


def _b64(text):
    return base64.b64encode(text.encode()).decode()


def _stamp(seconds_from_now):
    when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds_from_now)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _client(h, name, token=None, cert_pem=None, key_pem=None):
    """An ApiClient for the same server and CA as the admin one, with other credentials
    (none at all: anonymous)."""
    conf = h.api.configuration
    with open(conf.ssl_ca_cert, "rb") as fh:
        ca = base64.b64encode(fh.read()).decode()
    user = {}
    if token:
        user["token"] = token
    if cert_pem:
        user["client-certificate-data"] = base64.b64encode(cert_pem).decode()
        user["client-key-data"] = base64.b64encode(key_pem).decode()
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": name,
           "clusters": [{"name": name, "cluster": {"server": conf.host, "certificate-authority-data": ca}}],
           "users": [{"name": name, "user": user}],
           "contexts": [{"name": name, "context": {"cluster": name, "user": name}}]}
    path = os.path.join(h.workdir, "%s.kubeconfig" % name)
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(doc, fh)
    return config.new_client_from_config(config_file=path, context=name)


def _token(h, signing=False, expires_in=3600, groups=(JOIN_GROUP,), authentication=True, **extra):
    """Create a bootstrap token Secret as admin; return (token id, token secret)."""
    alphabet = string.ascii_lowercase + string.digits
    token_id = "".join(secrets.choice(alphabet) for _index in range(6))
    token_secret = "".join(secrets.choice(alphabet) for _index in range(16))
    data = {"token-id": token_id, "token-secret": token_secret, "expiration": _stamp(expires_in),
            "usage-bootstrap-authentication": "true" if authentication else "false",
            "usage-bootstrap-signing": "true" if signing else "false"}
    if groups:
        data["auth-extra-groups"] = ",".join(groups)
    data.update(extra)
    h.core.create_namespaced_secret("kube-system", {
        "metadata": {"name": "bootstrap-token-" + token_id}, "type": "bootstrap.kubernetes.io/token",
        "data": {k: _b64(v) for k, v in data.items()}})
    h.bootstrap_tokens = getattr(h, "bootstrap_tokens", []) + [token_id]
    return token_id, token_secret


@pytest.fixture
def tokens(api):
    dummy, h = api
    yield h
    for token_id in getattr(h, "bootstrap_tokens", []):
        try:
            h.core.delete_namespaced_secret("bootstrap-token-" + token_id, "kube-system")
        except client.ApiException:
            pass
    h.bootstrap_tokens = []
    certs = client.CertificatesV1Api(h.api)
    for csr in certs.list_certificate_signing_request().items:
        if h.run_id in csr.metadata.name:
            certs.delete_certificate_signing_request(csr.metadata.name)


def _request(cn, orgs=("system:nodes",), dns=(), key=None):
    """A PEM certificate request and its PEM key, made with an EC P-256 key as kubelet does."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    names = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    names.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(names))
    if dns:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False)
    csr = builder.sign(key, hashes.SHA256())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return csr.public_bytes(serialization.Encoding.PEM), key_pem


def _csr_body(name, pem, signer=KUBELET_CLIENT, usages=("digital signature", "client auth"), seconds=None):
    spec = {"request": base64.b64encode(pem).decode(), "signerName": signer, "usages": list(usages)}
    if seconds is not None:
        spec["expirationSeconds"] = seconds
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name}, "spec": spec}


def _approve(certs, name, ctype="Approved"):
    csr = certs.read_certificate_signing_request(name)
    csr.status.conditions = (csr.status.conditions or []) + [client.V1CertificateSigningRequestCondition(
        type=ctype, status="True", reason="HgpuConformance", message="by the conformance tests")]
    return certs.replace_certificate_signing_request_approval(name, csr)


def _wait_cert(h, certs, name):
    def done():
        csr = certs.read_certificate_signing_request(name)
        return csr if csr.status.certificate or any(
            c.type == "Failed" for c in csr.status.conditions or []) else None
    return h.wait(done, timeout=30, what="CSR %s to be signed" % name)


def _cluster_info(h):
    try:
        return h.core.read_namespaced_config_map("cluster-info", "kube-public")
    except client.ApiException as exc:
        if exc.status == 404 and not h.emulator:
            pytest.skip("real-cluster mode: no kube-public/cluster-info (not a kubeadm cluster)")
        raise


def _join(h, node):
    """kubelet's TLS bootstrap: bootstrap token -> CSR -> admin approves -> certificate.
    Returns (CoreV1Api as the node, the certificate)."""
    token_id, token_secret = _token(h)
    boot = _client(h, "boot-" + node, token="%s.%s" % (token_id, token_secret))
    boot_certs = client.CertificatesV1Api(boot)
    csr_pem, key_pem = _request("system:node:" + node)
    name = "node-csr-" + node
    created = boot_certs.create_certificate_signing_request(_csr_body(name, csr_pem, seconds=3600))
    assert created.spec.username == "system:bootstrap:" + token_id
    admin_certs = client.CertificatesV1Api(h.api)
    _approve(admin_certs, name)
    # the bootstrap client reads its own CSR back for the certificate, as kubelet does
    signed = h.wait(lambda: boot_certs.read_certificate_signing_request(name).status.certificate,
                    timeout=30, what="certificate for " + node)
    cert_pem = base64.b64decode(signed)
    return client.CoreV1Api(_client(h, "node-" + node, cert_pem=cert_pem, key_pem=key_pem)), \
        x509.load_pem_x509_certificate(cert_pem)


def _node_body(name):
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"taints": [{"key": "hybridgpu.io/new", "effect": "NoSchedule"}]}}


# ---- bootstrap tokens ----
def test_bootstrap_token_authenticates_as_bootstrapper_until_deleted(tokens):
    h = tokens
    token_id, token_secret = _token(h)
    boot = _client(h, "boot-" + token_id, token="%s.%s" % (token_id, token_secret))
    certs = client.CertificatesV1Api(boot)
    csr_pem, dummy = _request("system:node:" + h.uniq("bt"))
    name = h.uniq("csr-bt")
    csr = certs.create_certificate_signing_request(_csr_body(name, csr_pem))
    assert csr.spec.username == "system:bootstrap:" + token_id
    assert {"system:bootstrappers", JOIN_GROUP, "system:authenticated"} <= set(csr.spec.groups)
    assert certs.read_certificate_signing_request(name).metadata.name == name
    # nothing else
    boot_core = client.CoreV1Api(boot)
    for call in (boot_core.list_node, lambda: boot_core.list_namespaced_secret("kube-system"),
                 lambda: boot_core.create_namespace({"metadata": {"name": h.uniq("boot")}})):
        with pytest.raises(client.ApiException) as exc:
            call()
        assert _status(exc) == 403
    with pytest.raises(client.ApiException) as exc:  # approving its own CSR: no
        _approve(certs, name)
    assert _status(exc) == 403
    # a wrong secret, then the deleted token: 401
    wrong = client.CoreV1Api(_client(h, "wrong-" + token_id, token="%s.%s" % (token_id, "0" * 16)))
    with pytest.raises(client.ApiException) as exc:
        wrong.list_node()
    assert _status(exc) == 401
    h.core.delete_namespaced_secret("bootstrap-token-" + token_id, "kube-system")
    with pytest.raises(client.ApiException) as exc:
        certs.list_certificate_signing_request()
    assert _status(exc) == 401


def test_expired_or_unusable_bootstrap_token_is_401(tokens):
    h = tokens
    good_id, good_secret = _token(h)
    good = client.CertificatesV1Api(_client(h, "good-" + good_id, token="%s.%s" % (good_id, good_secret)))
    assert good.list_certificate_signing_request() is not None  # the same token, valid: accepted
    cases = [_token(h, expires_in=-60), _token(h, authentication=False),
             _token(h, groups=("system:nodes",)), _token(h, expiration="tomorrow")]
    for token_id, token_secret in cases:
        api = client.CertificatesV1Api(_client(h, "bad-" + token_id, token="%s.%s" % (token_id, token_secret)))
        with pytest.raises(client.ApiException) as exc:
            api.list_certificate_signing_request()
        assert _status(exc) == 401, token_id


# ---- cluster-info and anonymous requests ----
def test_anonymous_reads_cluster_info_and_nothing_else(api):
    dummy, h = api
    info = _cluster_info(h)
    kubeconfig = yaml.safe_load(info.data["kubeconfig"])
    cluster = kubeconfig["clusters"][0]["cluster"]
    with open(h.api.configuration.ssl_ca_cert, "rb") as fh:
        ca = x509.load_pem_x509_certificate(fh.read())
    published = x509.load_pem_x509_certificate(base64.b64decode(cluster["certificate-authority-data"]))
    assert published == ca and cluster["server"].startswith("https://")
    anon_api = _client(h, "anonymous")
    anon = client.CoreV1Api(anon_api)
    assert anon.read_namespaced_config_map("cluster-info", "kube-public").data["kubeconfig"] == info.data["kubeconfig"]
    assert client.VersionApi(anon_api).get_code().git_version
    for call in (anon.list_node, lambda: anon.list_namespaced_config_map("kube-public"),
                 lambda: anon.read_namespaced_config_map("kube-root-ca.crt", "kube-public"),
                 lambda: client.CertificatesV1Api(anon_api).list_certificate_signing_request()):
        with pytest.raises(client.ApiException) as exc:
            call()
        assert _status(exc) == 403 and "system:anonymous" in exc.value.body


def _jws(content, token_id, token_secret):
    def enc(data):
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    header = enc(json.dumps({"alg": "HS256", "kid": token_id}, separators=(",", ":")).encode())
    mac = hmac.new(token_secret.encode(), ("%s.%s" % (header, enc(content.encode()))).encode(), hashlib.sha256)
    return "%s..%s" % (header, enc(mac.digest()))


def test_bootstrap_signer_keeps_cluster_info_signed(tokens):
    h = tokens
    _cluster_info(h)
    signing_id, signing_secret = _token(h, signing=True)
    plain_id, dummy = _token(h, signing=False)
    key = "jws-kubeconfig-" + signing_id

    def signed():
        data = h.core.read_namespaced_config_map("cluster-info", "kube-public").data
        return data if key in data else None
    data = h.wait(signed, timeout=30, what="cluster-info to carry " + key)
    assert data[key] == _jws(data["kubeconfig"], signing_id, signing_secret)
    time.sleep(1)
    assert "jws-kubeconfig-" + plain_id not in h.core.read_namespaced_config_map("cluster-info", "kube-public").data
    h.core.delete_namespaced_secret("bootstrap-token-" + signing_id, "kube-system")
    h.wait(lambda: key not in h.core.read_namespaced_config_map("cluster-info", "kube-public").data,
           timeout=30, what="the signature of a deleted token to go")


# ---- CertificateSigningRequests ----
def test_csr_validation_is_422(tokens):
    h = tokens
    certs = client.CertificatesV1Api(h.api)
    pem, dummy = _request("system:node:" + h.uniq("v"))
    cases = [
        (_csr_body(h.uniq("csr-pem"), b"not a request"), "spec.request"),
        (_csr_body(h.uniq("csr-signer"), pem, signer="unknown"), "spec.signerName"),
        (_csr_body(h.uniq("csr-legacy"), pem, signer="kubernetes.io/legacy-unknown"), "spec.signerName"),
        (_csr_body(h.uniq("csr-usages"), pem, usages=()), "spec.usages"),
        (_csr_body(h.uniq("csr-usage"), pem, usages=("digital signature", "flying")), "spec.usages[1]"),
        (_csr_body(h.uniq("csr-short"), pem, seconds=599), "spec.expirationSeconds"),
    ]
    for body, field in cases:
        with pytest.raises(client.ApiException) as exc:
            certs.create_certificate_signing_request(body)
        assert _status(exc) == 422, field
        status = json.loads(exc.value.body)
        assert status["reason"] == "Invalid"
        assert field in [c["field"] for c in status["details"]["causes"]], status
    # a well-formed signer nobody serves is accepted (nothing signs it)
    name = h.uniq("csr-custom")
    created = certs.create_certificate_signing_request(_csr_body(name, pem, signer="example.com/custom"))
    assert created.spec.signer_name == "example.com/custom" and created.spec.username
    # Approved and Denied together: 422
    csr = certs.read_certificate_signing_request(name)
    csr.status.conditions = [client.V1CertificateSigningRequestCondition(type=t, status="True")
                             for t in ("Approved", "Denied")]
    with pytest.raises(client.ApiException) as exc:
        certs.replace_certificate_signing_request_approval(name, csr)
    assert _status(exc) == 422 and "mutually exclusive" in exc.value.body


def test_approved_kubelet_client_csr_is_signed_with_the_cluster_ca(tokens):
    h = tokens
    certs = client.CertificatesV1Api(h.api)
    node = h.uniq("signed")
    pem, dummy = _request("system:node:" + node)
    name = h.uniq("csr-ok")
    certs.create_certificate_signing_request(_csr_body(name, pem, seconds=3600))
    watch_list = certs.list_certificate_signing_request(field_selector="metadata.name=" + name)
    assert [c.metadata.name for c in watch_list.items] == [name]
    assert not certs.read_certificate_signing_request(name).status.certificate
    approved = _approve(certs, name)
    assert [c.type for c in approved.status.conditions] == ["Approved"]
    csr = _wait_cert(h, certs, name)
    cert = x509.load_pem_x509_certificate(base64.b64decode(csr.status.certificate))
    with open(h.api.configuration.ssl_ca_cert, "rb") as fh:
        ca = x509.load_pem_x509_certificate(fh.read())
    cert.verify_directly_issued_by(ca)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:" + node
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:nodes"]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature
    lifetime = (cert.not_valid_after_utc - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    assert 3600 - 6 * 60 <= lifetime <= 3600 + 60, lifetime
    # a denied CSR gets no certificate
    denied = h.uniq("csr-denied")
    certs.create_certificate_signing_request(_csr_body(denied, _request("system:node:" + node)[0]))
    _approve(certs, denied, "Denied")
    time.sleep(1.5)
    assert not certs.read_certificate_signing_request(denied).status.certificate


def test_kubelet_signers_refuse_other_subjects_and_serve_sans(tokens):
    h = tokens
    certs = client.CertificatesV1Api(h.api)
    bad = h.uniq("csr-admin")
    certs.create_certificate_signing_request(_csr_body(bad, _request("admin", orgs=("system:masters",))[0]))
    _approve(certs, bad)
    csr = _wait_cert(h, certs, bad)
    assert not csr.status.certificate
    failed = [c for c in csr.status.conditions if c.type == "Failed"]
    assert failed and failed[0].reason == "SignerValidationFailure"
    assert failed[0].message == "subject organization is not system:nodes"
    node = h.uniq("serving")
    serving = h.uniq("csr-serving")
    pem = _request("system:node:" + node, dns=[node + ".example.internal"])[0]
    certs.create_certificate_signing_request(_csr_body(serving, pem, signer=KUBELET_SERVING,
                                                       usages=("digital signature", "server auth")))
    _approve(certs, serving)
    csr = _wait_cert(h, certs, serving)
    cert = x509.load_pem_x509_certificate(base64.b64decode(csr.status.certificate))
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.SERVER_AUTH]
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [node + ".example.internal"]


# ---- client certificates, the Node authorizer and NodeRestriction ----
def test_tls_bootstrap_end_to_end_then_node_restriction(tokens):
    """token -> CSR -> admin approves -> certificate -> the client certificate is the node."""
    h = tokens
    node = h.uniq("tls")
    node_api, cert = _join(h, node)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:" + node
    created = node_api.create_node(_node_body(node))
    h.created_nodes.append(node)
    assert created.metadata.name == node
    # who the certificate is: the node's own CSR records it
    certs = client.CertificatesV1Api(node_api.api_client)
    name = "node-id-" + node
    mine = certs.create_certificate_signing_request(_csr_body(name, _request("system:node:" + node)[0]))
    assert mine.spec.username == "system:node:" + node and "system:nodes" in mine.spec.groups
    # its own status: yes
    node_api.patch_node_status(node, {"status": {"conditions": [{"type": "Ready", "status": "True",
                                                                 "reason": "KubeletReady"}]}})
    # its own taints: no
    with pytest.raises(client.ApiException) as exc:
        node_api.patch_node(node, {"spec": {"taints": []}})
    assert _status(exc) == 403 and "is not allowed to modify taints" in exc.value.body
    # node-role and node-restriction labels: no, naming the label
    for label in ("node-role.kubernetes.io/gpu", "node-restriction.kubernetes.io/pool"):
        with pytest.raises(client.ApiException) as exc:
            node_api.patch_node(node, {"metadata": {"labels": {label: "x"}}})
        assert _status(exc) == 403 and label in exc.value.body
    h.core.patch_node(node, {"metadata": {"labels": {"node-role.kubernetes.io/gpu": ""}}})
    with pytest.raises(client.ApiException) as exc:  # nor remove one an admin set
        node_api.patch_node(node, {"metadata": {"labels": {"node-role.kubernetes.io/gpu": None}}})
    assert _status(exc) == 403 and "node-role.kubernetes.io/gpu" in exc.value.body
    # other labels are fine
    node_api.patch_node(node, {"metadata": {"labels": {"nvidia.com/gpu.count": "8"}}})


def _minor(h):
    return int("".join(ch for ch in client.VersionApi(h.api).get_code().minor if ch.isdigit()))


def test_node_authorizer_reads_only_what_its_pods_need(tokens):
    h = tokens
    pool = h.uniq("pool")
    node, other = h.uniq("na"), h.uniq("nb")
    node_api, dummy = _join(h, node)
    node_api.create_node(_node_body(node))
    h.created_nodes.append(node)
    h.make_node(other, pool, heartbeat=False)
    with pytest.raises(client.ApiException) as exc:  # another node: no
        node_api.patch_node(other, {"metadata": {"labels": {"x": "y"}}})
    assert _status(exc) == 403
    assert node_api.read_node(other).metadata.name == other  # reading nodes: yes
    used, unused = h.uniq("used"), h.uniq("unused")
    for secret in (used, unused):
        h.core.create_namespaced_secret(h.ns, {"metadata": {"name": secret}, "stringData": {"k": "v"}})
    h.core.create_namespaced_config_map(h.ns, {"metadata": {"name": used}, "data": {"k": "v"}})
    h.core.create_namespaced_config_map(h.ns, {"metadata": {"name": unused}, "data": {"k": "v"}})
    pod, stray = h.uniq("mine"), h.uniq("stray")
    body = h.pod_body(pod, pool)
    body["spec"]["nodeName"] = node
    body["spec"]["volumes"] = [{"name": "s", "secret": {"secretName": used}},
                               {"name": "c", "configMap": {"name": used}}]
    h.core.create_namespaced_pod(h.ns, body)
    h.core.create_namespaced_pod(h.ns, h.pod_body(stray, "nowhere"))
    assert node_api.read_namespaced_secret(used, h.ns).data["k"]
    assert node_api.read_namespaced_config_map(used, h.ns).data["k"] == "v"
    for call in (lambda: node_api.read_namespaced_secret(unused, h.ns),
                 lambda: node_api.read_namespaced_config_map(unused, h.ns),
                 lambda: node_api.list_namespaced_secret(h.ns),
                 lambda: client.BatchV1Api(node_api.api_client).list_namespaced_job(h.ns),
                 node_api.list_namespace):
        with pytest.raises(client.ApiException) as exc:
            call()
        assert _status(exc) == 403
    assert node_api.read_namespaced_pod(pod, h.ns).spec.node_name == node
    listed = node_api.list_pod_for_all_namespaces(field_selector="spec.nodeName=" + node)
    assert [p.metadata.name for p in listed.items] == [pod]
    # its own Lease in kube-node-lease: yes; another node's: no
    leases = client.CoordinationV1Api(node_api.api_client)
    leases.create_namespaced_lease("kube-node-lease", {"metadata": {"name": node},
                                                       "spec": {"holderIdentity": node, "leaseDurationSeconds": 40}})
    assert leases.read_namespaced_lease(node, "kube-node-lease").spec.holder_identity == node
    with pytest.raises(client.ApiException) as exc:
        leases.create_namespaced_lease("kube-node-lease", {"metadata": {"name": other},
                                                           "spec": {"holderIdentity": node}})
    assert _status(exc) == 403
    h.core.delete_namespaced_pod(pod, h.ns)
    if h.emulator or _minor(h) >= 32:  # AuthorizeNodeWithSelectors, on by default from 1.32
        with pytest.raises(client.ApiException) as exc:
            node_api.read_namespaced_pod(stray, h.ns)
        assert _status(exc) == 403
        with pytest.raises(client.ApiException) as exc:
            node_api.list_namespaced_pod(h.ns)
        assert _status(exc) == 403


def test_client_certificate_cn_and_o_are_the_user(api):
    dummy, h = api
    emulator_only(h, "issuing an arbitrary client certificate needs the cluster CA key")
    ca_dir = os.path.dirname(h.ca)
    with open(os.path.join(ca_dir, "ca.key"), "rb") as fh:
        ca_key = serialization.load_pem_private_key(fh.read(), password=None)
    with open(h.ca, "rb") as fh:
        ca = x509.load_pem_x509_certificate(fh.read())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "team-a"),
                                     x509.NameAttribute(NameOID.COMMON_NAME, "alice")]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1)).not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    alice = _client(h, "alice", cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=key_pem)
    certs = client.CertificatesV1Api(alice)
    with pytest.raises(client.ApiException) as exc:
        certs.create_certificate_signing_request(_csr_body(h.uniq("alice"), _request("alice")[0]))
    assert _status(exc) == 403 and 'User "alice"' in json.loads(exc.value.body)["message"]
