"""The lab's kubeadm stand-in: its configuration reader on what Ansible writes, the cluster-info
JWS check against the emulator's signer, the CA pin against the collection's hash, and the
kubelet flags it hands on (read back by the kubelet stand-in)."""
import datetime
import os
import sys

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
