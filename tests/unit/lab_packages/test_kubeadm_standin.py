"""The lab's kubeadm stand-in: its configuration reader on what Ansible writes, the cluster-info
JWS check against the emulator's signer, the CA pin against the collection's hash, and the
kubelet flags it hands on (read back by the kubelet stand-in)."""
import datetime
import os
import sys
import types
import urllib.error

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from lab_packages_support import AGENT_DIR, PACKAGES, ROOT, load_module

kubeadm = load_module("lab_kubeadm", os.path.join(PACKAGES, "kubeadm", "kubeadm.py"))
agent = load_module("hgpu_node_agent_flags", os.path.join(AGENT_DIR, "agent.py"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
from k8s_emulator import identity  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import join  # noqa: E402

TOKEN = "abcdef.0123456789abcdef"


def config():
    return join.join_configuration("owned-a100-1", "10.213.77.1:6443", TOKEN, "sha256:00",
                                   labels={"hybridgpu.io/side": "owned"},
                                   taints=[{"key": "hybridgpu.io/owned", "value": "true", "effect": "PreferNoSchedule"},
                                           {"key": "gpu", "effect": "NoSchedule"}])


@pytest.mark.parametrize("indent", [2, 4])
def test_reads_the_join_configuration_as_ansible_writes_it(indent):
    cfg = config()
    # to_nice_yaml is yaml.dump with these options
    text = yaml.dump(cfg, indent=indent, allow_unicode=True, default_flow_style=False)
    assert kubeadm.load_yaml(text) == cfg


def test_flags_reach_the_kubelet():
    cfg = config()
    flags = ["--node-labels=" + v for k, v in kubeadm.extra_args(cfg) if k == "node-labels"]
    flags.append("--register-with-taints=" + kubeadm.taint_arg(cfg["nodeRegistration"]["taints"]))
    got = agent.parse_flags(flags + ["--kubeconfig=/etc/kubernetes/kubelet.conf", "--hostname-override", "n1"])
    assert agent.parse_labels(got["node_labels"]) == {"hybridgpu.io/side": "owned"}
    assert agent.parse_taints(got["register_taints"]) == cfg["nodeRegistration"]["taints"]
    assert got["node_name"] == "n1" and got["state_dir"] == "/var/lib/kubelet/lab-pods"


def test_jws_check_accepts_the_emulators_signature_only_with_the_right_secret():
    content = identity.cluster_info_kubeconfig("https://10.213.77.1:6443", b"ca")
    jws = identity.detached_jws(content, "abcdef", "0123456789abcdef")
    assert kubeadm.jws_ok(content, jws, "abcdef", "0123456789abcdef")
    assert not kubeadm.jws_ok(content, jws, "abcdef", "0123456789abcdeX")
    assert not kubeadm.jws_ok(content + " ", jws, "abcdef", "0123456789abcdef")


def test_ca_pin_matches_the_collections_hash():
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ca")])
    now = datetime.datetime.now(datetime.timezone.utc)
    pem = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
           .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
           .sign(key, hashes.SHA256())).public_bytes(serialization.Encoding.PEM)
    assert kubeadm.ca_hash(pem) == join.ca_cert_hash(pem)


def test_the_kubeconfig_it_writes_is_read_by_the_kubelet():
    text = kubeadm.kubeconfig("https://10.213.77.1:6443", "system:node:n1",
                              [("client-certificate", "/var/lib/kubelet/pki/kubelet-client-current.pem"),
                               ("client-key", "/var/lib/kubelet/pki/kubelet-client-current.pem")])
    got = agent.parse_kubeconfig(text)
    assert got["server"] == "https://10.213.77.1:6443" and got["ca_file"] == "/etc/kubernetes/pki/ca.crt"
    assert got["client_cert"] == got["client_key"] == "/var/lib/kubelet/pki/kubelet-client-current.pem"
    assert yaml.safe_load(text)["users"][0]["user"]["client-certificate"] == got["client_cert"]


def _ca_pem():
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ca")])
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256())).public_bytes(serialization.Encoding.PEM)


def _discovery(monkeypatch, answers):
    """discover() against a scripted API: each answer is an exception to raise or the cluster-info
    data to return; the last one repeats. Time passes only in discover()'s sleeps, so the number
    of tries does not depend on how busy the machine is. Returns the list of requests made."""
    monkeypatch.setattr(kubeadm, "DISCOVERY_RETRY_S", 0.01)
    clock = [0.0]
    monkeypatch.setattr(kubeadm, "time", types.SimpleNamespace(
        monotonic=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s)))
    seen = []

    def request(url, ctx, *a, **kw):
        seen.append(url)
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        return 200, {"data": answer}
    monkeypatch.setattr(kubeadm, "request", request)
    return seen


def test_discovery_tries_again_until_the_token_is_signed(monkeypatch):
    """As kubeadm does: the API not answering yet and cluster-info without the token's JWS (the
    bootstrap signer adds it shortly after the token is made) are tried again, not fatal."""
    ca = _ca_pem()
    content = identity.cluster_info_kubeconfig("https://10.213.77.1:6443", ca)
    signed = {"kubeconfig": content, "jws-kubeconfig-abcdef": identity.detached_jws(content, "abcdef", "0123456789abcdef")}
    seen = _discovery(monkeypatch, [urllib.error.URLError("timed out"), {"kubeconfig": content}, signed])
    boot = {"apiServerEndpoint": "10.213.77.1:6443", "token": TOKEN, "caCertHashes": [join.ca_cert_hash(ca)]}
    server, got = kubeadm.discover(boot, timeout=30)
    assert (server, got) == ("https://10.213.77.1:6443", ca)
    assert len(seen) == 4  # failed, unsigned, signed + the verified read


def test_discovery_gives_up_at_its_timeout_and_a_wrong_ca_fails_at_once(monkeypatch):
    ca = _ca_pem()
    content = identity.cluster_info_kubeconfig("https://10.213.77.1:6443", ca)
    boot = {"apiServerEndpoint": "10.213.77.1:6443", "token": TOKEN, "caCertHashes": [join.ca_cert_hash(ca)]}
    seen = _discovery(monkeypatch, [{"kubeconfig": content}])
    with pytest.raises(kubeadm.JoinError, match=r"gave up after 0.2s: there is no valid JWS signature for token abcdef"):
        kubeadm.discover(boot, timeout=0.2)
    assert len(seen) == 20  # at 0, 0.01, ... 0.19 s: one more sleep would pass the timeout
    signed = {"kubeconfig": content, "jws-kubeconfig-abcdef": identity.detached_jws(content, "abcdef", "0123456789abcdef")}
    seen = _discovery(monkeypatch, [signed])
    with pytest.raises(kubeadm.JoinError, match="not trusted"):
        kubeadm.discover(dict(boot, caCertHashes=["sha256:" + "0" * 64]), timeout=30)
    assert len(seen) == 1
