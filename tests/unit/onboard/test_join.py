"""Node identity of a kubeadm join: bootstrap token Secrets, the discovery CA hash, which CSRs
are approved, the JoinConfiguration. Checked against independent computations (openssl, the
emulator's own signer and JWS)."""
import base64
import datetime
import hashlib
import subprocess

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import join

NODE, TOKEN_ID = "owned-a100-1", "abcdef"
GROUPS = ["system:bootstrappers:hybridgpu"]


def make_ca():
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(4242).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


def make_csr(cn="system:node:%s" % NODE, orgs=("system:nodes",), san=False):
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attrs))
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName("evil.example")]), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def csr_obj(name="node-csr-1", pem=None, username="system:bootstrap:" + TOKEN_ID, groups=None,
            usages=("digital signature", "client auth"), signer=join.KUBELET_CLIENT, conditions=(), seconds=None):
    spec = {"request": base64.b64encode(pem or make_csr()).decode(), "signerName": signer,
            "username": username, "groups": list(groups if groups is not None else
                                                 ["system:bootstrappers", "system:authenticated"] + GROUPS),
            "usages": list(usages)}
    if seconds:
        spec["expirationSeconds"] = seconds
    return {"metadata": {"name": name, "uid": "u-" + name}, "spec": spec,
            "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}


def test_new_tokens_have_the_bootstrap_format_and_differ():
    first, second = join.new_token(), join.new_token()
    assert join.TOKEN_RE.match(first) and join.TOKEN_RE.match(second) and first != second


def test_token_secret_is_what_the_authenticator_reads():
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    body = join.token_secret("abcdef.0123456789abcdef", 1800, GROUPS, "join of x", now=now)
    data = dict((k, base64.b64decode(v).decode()) for k, v in body["data"].items())
    assert body["type"] == "bootstrap.kubernetes.io/token"
    assert body["metadata"] == {"name": "bootstrap-token-abcdef", "namespace": "kube-system"}
    assert data["token-id"] == "abcdef" and data["token-secret"] == "0123456789abcdef"
    assert data["expiration"] == "2026-01-01T00:30:00Z"
    assert data["usage-bootstrap-authentication"] == data["usage-bootstrap-signing"] == "true"
    assert data["auth-extra-groups"] == "system:bootstrappers:hybridgpu"


@pytest.mark.parametrize("token, groups, ttl, field", [
    ("ABCDEF.0123456789abcdef", GROUPS, 60, "token"),
    ("abcdef.0123456789abcdef", ["system:masters"], 60, "groups"),
    ("abcdef.0123456789abcdef", GROUPS, 0, "ttl"),
])
def test_token_secret_refuses_bad_input(token, groups, ttl, field):
    with pytest.raises(join.JoinError, match=field):
        join.token_secret(token, ttl, groups, "x")


def test_ca_hash_is_the_spki_hash_openssl_computes():
    pem = make_ca()
    pub = subprocess.run(["openssl", "x509", "-noout", "-pubkey"], input=pem, capture_output=True, check=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "DER"], input=pub, capture_output=True,
                         check=True).stdout
    assert join.ca_cert_hash(pem) == "sha256:" + hashlib.sha256(der).hexdigest()


def test_the_expected_csr_has_no_problems():
    assert join.csr_problems(csr_obj(), NODE, TOKEN_ID, GROUPS) == []


@pytest.mark.parametrize("change, reason", [
    ({"pem": make_csr(cn="system:node:owned-a100-2")}, "subject CN"),
    ({"pem": make_csr(orgs=("system:masters",))}, "subject O"),
    ({"pem": make_csr(orgs=("system:nodes", "system:masters"))}, "subject O"),
    ({"pem": make_csr(san=True)}, "subjectAltName"),
    ({"username": "system:bootstrap:zzzzzz"}, "requested by"),
    ({"username": "system:node:owned-a100-1"}, "requested by"),
    ({"groups": ["system:bootstrappers"]}, "lacks the token's groups"),
    ({"usages": ["digital signature", "client auth", "server auth"]}, "usages"),
    ({"usages": ["digital signature"]}, "usages"),
    ({"signer": "kubernetes.io/kubelet-serving"}, "signer"),
    ({"seconds": 7200}, "expirationSeconds"),
])
def test_any_difference_is_named(change, reason):
    problems = join.csr_problems(csr_obj(**change), NODE, TOKEN_ID, GROUPS, max_seconds=3600)
    assert any(reason in p for p in problems), problems


def test_sort_csrs_leaves_other_requesters_and_finished_ones_alone():
    items = [csr_obj("mine"), csr_obj("done", conditions=("Approved",)),
             csr_obj("denied", conditions=("Denied",)), csr_obj("other", username="system:bootstrap:qqqqqq"),
             csr_obj("bad", pem=make_csr(cn="system:node:someone-else"))]
    pending, approved, unexpected = join.sort_csrs(items, NODE, TOKEN_ID, GROUPS)
    assert [c["metadata"]["name"] for c in pending] == ["mine"]
    assert [c["metadata"]["name"] for c in approved] == ["done"]
    assert [c["metadata"]["name"] for c, why in unexpected] == ["bad"]


def test_describe_csr_records_who_asked_for_what():
    got = join.describe_csr(csr_obj("node-csr-9"))
    assert got["username"] == "system:bootstrap:abcdef" and got["signer"] == join.KUBELET_CLIENT
    assert got["subject"] == {"cn": "system:node:owned-a100-1", "o": ["system:nodes"]}
    assert got["usages"] == ["client auth", "digital signature"]


def test_join_configuration_pins_the_ca_and_registers_labels_and_taints():
    cfg = join.join_configuration(NODE, "10.0.0.1:6443", "abcdef.0123456789abcdef", "sha256:00",
                                  labels={"hybridgpu.io/side": "owned", "node.kubernetes.io/pool": "a"},
                                  taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}],
                                  extra_args={"max-pods": 50})
    assert cfg["apiVersion"] == "kubeadm.k8s.io/v1beta4" and cfg["kind"] == "JoinConfiguration"
    boot = cfg["discovery"]["bootstrapToken"]
    assert boot == {"apiServerEndpoint": "10.0.0.1:6443", "token": "abcdef.0123456789abcdef",
                    "caCertHashes": ["sha256:00"]}
    reg = cfg["nodeRegistration"]
    assert reg["name"] == NODE and reg["taints"] == [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    assert reg["kubeletExtraArgs"] == [
        {"name": "node-labels", "value": "hybridgpu.io/side=owned,node.kubernetes.io/pool=a"},
        {"name": "max-pods", "value": "50"}]


@pytest.mark.parametrize("label", ["node-restriction.kubernetes.io/data-class", "node-role.kubernetes.io/gpu",
                                   "team.k8s.io/x"])
def test_join_configuration_refuses_labels_the_node_may_not_set(label):
    with pytest.raises(join.JoinError, match="node_placement"):
        join.join_configuration(NODE, "h:1", "abcdef.0123456789abcdef", "sha256:00", labels={label: "x"})
