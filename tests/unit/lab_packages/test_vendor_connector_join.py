"""The lab's vendor connector against an in-process API emulator on 127.0.0.1: its activation
token (a bootstrap token of the connector's group) drives the bundled lab kubeadm's discovery
and TLS bootstrap, the emulator approves the CSR itself (the service's control plane, not the
collection), and the node ends with a client certificate for system:node:<name> in the
connector's own folders. (Tokens of other groups are left to the collection: test_identity.py.)"""
import importlib.machinery
import importlib.util
import os
import secrets
import stat
import subprocess
import sys

import pytest

from lab_packages_support import PACKAGES, ROOT

LAB = os.path.join(ROOT, "tests", "lab")
if LAB not in sys.path:
    sys.path.insert(0, LAB)

import labpki  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import Kube  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import join  # noqa: E402

GROUP = "system:bootstrappers:vendor-connect"


def load_script(name, path):
    loader = importlib.machinery.SourceFileLoader(name, path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(module)
    return module


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
    srv = serve(cluster="connector", binds=["127.0.0.1"], port=0, cert=crt, key=key, token_file=tokens,
                node_grace=3600.0, client_ca=ca, signing_cert=ca, signing_key=ca_key, auto_approve_groups=[GROUP])
    kube = Kube({"host": srv.url, "api_key": admin, "ca_cert": ca, "request_timeout": 5}, retries=0, sleep=lambda s: None)
    yield {"kube": kube, "ca": ca, "url": srv.url}
    srv.stop()


@pytest.fixture
def connector(tmp_path, monkeypatch):
    mod = load_script("lab_vendor_connect_join", os.path.join(PACKAGES, "vendor-node-connector", "vendor-node-connect"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    systemctl.write_text("#!/bin/sh\necho systemctl \"$@\" >> %s/calls\n" % tmp_path)
    systemctl.chmod(systemctl.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(mod, "ETC", str(tmp_path / "etc"))
    monkeypatch.setattr(mod, "VAR", str(tmp_path / "var"))
    kubeadm = bin_dir / "kubeadm"  # the packaged file is executable; the source in git is not
    kubeadm.write_text("#!/bin/sh\nexec python3 %s \"$@\"\n" % os.path.join(PACKAGES, "kubeadm", "kubeadm.py"))
    kubeadm.chmod(0o755)
    monkeypatch.setattr(mod, "KUBEADM", str(kubeadm))
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ["PATH"])
    return mod, tmp_path


def _pin(ca):
    with open(ca, "rb") as fh:
        return join.ca_cert_hash(fh.read())


def test_activation_token_joins_and_the_service_approves(api, connector, monkeypatch):
    mod, tmp = connector
    token = join.new_token()
    api["kube"].create_secret("kube-system", join.token_secret(token, 600, [GROUP], "connector"))
    monkeypatch.setenv("VENDOR_ACTIVATION_TOKEN", token)
    assert mod.main(["--api-server", api["url"], "--node-name", "gpu-07", "--ca-cert-hash", _pin(api["ca"])]) == 0
    pem = tmp / "var" / "pki" / "kubelet-client-current.pem"
    subject = subprocess.run(["openssl", "x509", "-noout", "-subject", "-in", str(pem)], capture_output=True,
                             text=True, check=True).stdout
    assert "CN = system:node:gpu-07" in subject and "O = system:nodes" in subject
    conf = (tmp / "etc" / "kubelet.conf").read_text()
    assert str(pem) in conf and str(tmp / "etc" / "pki" / "ca.crt") in conf and token not in conf
    assert not (tmp / "etc" / "bootstrap-kubelet.conf").exists()
    csrs = [c for c in api["kube"].list_csrs() if c["spec"]["username"] == "system:bootstrap:" + token.split(".", maxsplit=1)[0]]
    assert [c["status"]["conditions"][0]["reason"] for c in csrs] == ["AutoApproved"]
    calls = (tmp / "calls").read_text()
    assert "restart vendor-node-connector.service" in calls and "enable --now vendor-node-connector.service" in calls
    # what the connector's unit starts from: the lab kubelet's settings and the kubeconfig it reads
    agent = load_script("lab_connector_agent", os.path.join(PACKAGES, "node-agent", "agent.py"))
    cfg = agent.load_config(path=str(tmp / "etc" / "agent.json"))
    assert (cfg["node_name"], cfg["state_dir"]) == ("gpu-07", str(tmp / "var"))
    got = agent.parse_kubeconfig(open(cfg["kubeconfig"]).read())
    assert (got["server"], got["client_cert"], got["ca_file"]) == (api["url"], str(pem), str(tmp / "etc" / "pki" / "ca.crt"))


def test_the_lab_pins_the_same_ca_hash_the_connector_is_given(api, monkeypatch):
    from lablib import k8s as labk8s
    monkeypatch.setattr(labk8s, "ca_path", lambda: api["ca"])
    assert labk8s.ca_cert_hash() == _pin(api["ca"])
