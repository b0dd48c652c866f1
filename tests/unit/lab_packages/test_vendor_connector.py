"""The lab's vendor connector: vendor-node-connect hands the lab kubeadm a JoinConfiguration
(token from the environment only, CA pinned, the connector's own folders and unit) and starts
its unit; an activated node is not activated again; vendor-node-disconnect removes what it wrote."""
import importlib.machinery
import importlib.util
import json
import os
import stat
import subprocess

import pytest
from lab_packages_support import PACKAGES

DIR = os.path.join(PACKAGES, "vendor-node-connector")
TOKEN = "abcdef.0123456789abcdef"


def load_script(name, path):
    """Import a script without a .py suffix."""
    loader = importlib.machinery.SourceFileLoader(name, path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(module)
    return module


@pytest.fixture
def connector(tmp_path, monkeypatch):
    mod = load_script("lab_vendor_connect", os.path.join(DIR, "vendor-node-connect"))
    etc, var, log = tmp_path / "etc", tmp_path / "var", tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # a kubeadm that keeps its configuration and environment, and writes the kubeconfig as the real one does
    kubeadm = bin_dir / "kubeadm"
    kubeadm.write_text("#!/bin/sh\ncp \"$3\" %s/config.json\nenv > %s/kubeadm-env\necho \"$@\" >> %s\n"
                       "touch \"$KUBEADM_ETC/kubelet.conf\"\n" % (tmp_path, tmp_path, log))
    systemctl = bin_dir / "systemctl"
    systemctl.write_text("#!/bin/sh\necho systemctl \"$@\" >> %s\n" % log)
    for path in (kubeadm, systemctl):
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(mod, "ETC", str(etc))
    monkeypatch.setattr(mod, "VAR", str(var))
    monkeypatch.setattr(mod, "KUBEADM", str(kubeadm))
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ["PATH"])
    return mod, tmp_path


def test_connect_joins_through_kubeadm_with_the_token_from_the_environment(connector, monkeypatch):
    mod, tmp = connector
    args = ["--api-server", "https://10.213.77.1:6443", "--node-name", "owned-l40s-1", "--ca-cert-hash", "sha256:ab"]
    monkeypatch.delenv("VENDOR_ACTIVATION_TOKEN", raising=False)
    assert mod.main(args) == 2 and not (tmp / "calls").exists()   # no token: nothing happens
    monkeypatch.setenv("VENDOR_ACTIVATION_TOKEN", TOKEN)
    assert mod.main(args) == 0
    cfg = json.loads((tmp / "config.json").read_text())
    boot = cfg["discovery"]["bootstrapToken"]
    assert (cfg["kind"], boot["apiServerEndpoint"], boot["token"], boot["caCertHashes"]) == (
        "JoinConfiguration", "10.213.77.1:6443", TOKEN, ["sha256:ab"])
    assert cfg["nodeRegistration"]["name"] == "owned-l40s-1"
    env = (tmp / "kubeadm-env").read_text()
    assert "KUBEADM_ETC=%s" % (tmp / "etc") in env and "KUBEADM_VAR=%s" % (tmp / "var") in env
    assert "KUBEADM_KUBELET_UNIT=vendor-node-connector.service" in env and TOKEN not in env
    calls = (tmp / "calls").read_text()
    assert TOKEN not in calls and "systemctl enable --now vendor-node-connector.service" in calls
    assert not [n for n in os.listdir(tmp / "etc") if n.startswith("connect-")]   # the configuration went
    agent = json.loads((tmp / "etc" / "agent.json").read_text())
    assert agent["kubeconfig"] == str(tmp / "etc" / "kubelet.conf") and agent["node_name"] == "owned-l40s-1"
    assert agent["state_dir"] == str(tmp / "var")  # the lab kubelet keeps its pods under <state_dir>/pods
    # activated: kubeadm is not run again, the unit is only started
    assert mod.main(args) == 0
    assert (tmp / "calls").read_text().count("join --config") == 1


def test_the_unit_runs_the_bundled_kubelet_on_the_connector_config():
    unit = open(os.path.join(DIR, "vendor-node-connector.service")).read()
    assert "ConditionPathExists=/etc/vendor-node-connector/kubelet.conf" in unit
    assert "HGPU_AGENT_CONFIG=/etc/vendor-node-connector/agent.json" in unit
    assert "ExecStart=/usr/bin/python3 -u /usr/lib/vendor-node-connector/kubelet" in unit


def test_disconnect_removes_the_activation(tmp_path):
    text = open(os.path.join(DIR, "vendor-node-disconnect")).read()
    fake = tmp_path / "disconnect"
    fake.write_text(text.replace("/etc/vendor-node-connector", str(tmp_path / "etc"))
                    .replace("/var/lib/vendor-node-connector", str(tmp_path / "var"))
                    .replace("systemctl ", "echo systemctl "))
    for d in ("etc/pki", "var/pki"):
        (tmp_path / d).mkdir(parents=True)
    res = subprocess.run(["sh", str(fake)], capture_output=True, text=True, check=True)
    assert "systemctl disable --now vendor-node-connector.service" in res.stdout
    assert not (tmp_path / "etc").exists() and not (tmp_path / "var").exists()
