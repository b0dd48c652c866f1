"""The join's API side against an in-process API emulator on 127.0.0.1 (real HTTP, the official
client): a bootstrap token Secret made by join.token_secret authenticates as
system:bootstrap:<id>, its CSR is sorted as expected, approved with Kube.approve_csr, signed, and
deleted again; another requester's CSR is left alone."""
import base64
import os
import secrets
import sys
import time

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography import x509
from cryptography.x509.oid import NameOID

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LAB = os.path.join(REPO, "tests", "lab")
if LAB not in sys.path:
    sys.path.insert(0, LAB)

import labpki  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError, Kube  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import join  # noqa: E402

GROUPS = ["system:bootstrappers:hybridgpu"]


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    from k8s_emulator import serve
    work = str(tmp_path_factory.mktemp("emu"))
    ca, ca_key = labpki.make_ca(work)
    crt, key = labpki.make_server_cert(work, work, ["127.0.0.1", "localhost"])
    admin = secrets.token_hex(16)
    tokens = os.path.join(work, "tokens.csv")
    with open(tokens, "w") as fh:
        fh.write('%s,admin,admin-uid,"system:masters"\n' % admin)
    srv = serve(cluster="join", binds=["127.0.0.1"], port=0, cert=crt, key=key, token_file=tokens,
                node_grace=3600.0, client_ca=ca, signing_cert=ca, signing_key=ca_key)

    def kube(token=admin):
        return Kube({"host": srv.url, "api_key": token, "ca_cert": ca, "request_timeout": 5}, retries=0,
                    sleep=lambda s: None)
    yield {"kube": kube, "ca": ca}
    srv.stop()


def csr_body(name, node):
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "system:node:" + node)])
    pem = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256()).public_bytes(
        serialization.Encoding.PEM)
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": name},
            "spec": {"request": base64.b64encode(pem).decode(), "signerName": join.KUBELET_CLIENT,
                     "usages": ["digital signature", "client auth"]}}


def create_csr(kube, body):
    return kube.call("create csr", kube.certificates.create_certificate_signing_request, body)


def test_token_csr_approval_signing_and_deletion(api):
    admin = api["kube"]()
    token = join.new_token()
    token_id = token.split(".", maxsplit=1)[0]
    admin.create_secret("kube-system", join.token_secret(token, 600, GROUPS, "join of n1"))
    mine, other = "node-csr-" + token_id, "node-csr-other-" + token_id
    create_csr(api["kube"](token), csr_body(mine, "n1"))
    # a second token's CSR for the same node name: not this join's, left alone
    token2 = join.new_token()
    admin.create_secret("kube-system", join.token_secret(token2, 600, GROUPS, "other"))
    create_csr(api["kube"](token2), csr_body(other, "n1"))

    pending, approved, unexpected = join.sort_csrs(admin.list_csrs(), "n1", token_id, GROUPS)
    assert [c["metadata"]["name"] for c in pending] == [mine] and not approved and not unexpected
    assert pending[0]["spec"]["username"] == "system:bootstrap:" + token_id
    admin.approve_csr(pending[0], "Test", "checked")
    deadline = time.time() + 10
    while time.time() < deadline and not (admin.get_csr(mine).get("status") or {}).get("certificate"):
        time.sleep(0.2)
    cert = x509.load_pem_x509_certificate(base64.b64decode(admin.get_csr(mine)["status"]["certificate"]))
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:n1"
    assert "Approved" not in join.conditions(admin.get_csr(other))
    pending, approved, unexpected = join.sort_csrs(admin.list_csrs(), "n1", token_id, GROUPS)
    assert not pending and [c["metadata"]["name"] for c in approved] == [mine]

    # removal: the CSR and the token go; the deleted token no longer authenticates
    assert admin.delete_csr(mine) and admin.get_csr(mine) is None and not admin.delete_csr(mine)
    assert admin.delete_secret("kube-system", join.secret_name(token_id))
    with pytest.raises(K8sError) as err:
        api["kube"](token).list_csrs()
    assert err.value.status == 401


def test_an_expired_token_does_not_authenticate(api):
    import datetime
    admin = api["kube"]()
    token = join.new_token()
    past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
    admin.create_secret("kube-system", join.token_secret(token, 60, GROUPS, "old", now=past))
    with pytest.raises(K8sError) as err:
        create_csr(api["kube"](token), csr_body("node-csr-expired", "n2"))
    assert err.value.status == 401
