"""build.py builds the lab's .deb packages and a flat apt repository apt can use."""
import hashlib
import os
import subprocess

import pytest
from lab_packages_support import build_module  # noqa: F401 (fixture)  pylint: disable=unused-import

DEBS = {
    "nvidia-driver-535_535.230.02-1_all.deb", "nvidia-driver-535_535.247.01-1_all.deb",
    "nvidia-driver-550_550.163.01-1_all.deb", "nvidia-driver-570_570.172.08-1_all.deb",
    "nccl-tests_2.13.11-1_all.deb", "hybridgpu-node-agent_0.1.0-1_all.deb",
    "kubeadm_1.30.4-1.1_all.deb", "kubelet_1.30.4-1.1_all.deb", "vendor-node-connector_0.3.0-1_all.deb",
    "hybridgpu-lab-mpirun_4.1.4-1_all.deb",
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory, build_module):
    out = tmp_path_factory.mktemp("apt")
    result = build_module.build_all(str(out))
    assert result["built"]
    return out


def _info(deb):
    return subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True).stdout


def _contents(deb):
    out = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1]: line.split()[0] for line in out.splitlines()}


def test_all_packages_and_index(repo):
    assert DEBS <= set(os.listdir(repo))
    packages = (repo / "Packages").read_text()
    for deb in DEBS:
        assert "Filename: ./%s\n" % deb in packages
    assert (repo / "Packages.gz").exists() and (repo / "Release").exists()


def test_driver_package_fields(repo):
    info = _info(repo / "nvidia-driver-550_550.163.01-1_all.deb")
    assert "Architecture: all" in info
    assert "Provides: nvidia-driver (= 550.163.01)" in info
    assert "Conflicts: nvidia-driver-535, nvidia-driver-570" in info
    assert "Replaces: nvidia-driver-535, nvidia-driver-570" in info
    files = _contents(repo / "nvidia-driver-550_550.163.01-1_all.deb")
    assert files["./usr/bin/nvidia-smi"] == "-rwxr-xr-x"
    assert "./usr/lib/hybridgpu-lab/driver.json" in files
    out = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(repo / "nvidia-driver-570_570.172.08-1_all.deb")],
                         capture_output=True, check=True).stdout
    assert b'{"branch": "570", "cuda": "12.8", "version": "570.172.08"}' in out


def test_nccl_and_agent_packages(repo):
    assert _contents(repo / "nccl-tests_2.13.11-1_all.deb")["./usr/bin/all_reduce_perf"] == "-rwxr-xr-x"
    deb = repo / "hybridgpu-node-agent_0.1.0-1_all.deb"
    files = _contents(deb)
    assert "./usr/lib/hybridgpu-node-agent/agent.py" in files
    assert "./lib/systemd/system/hybridgpu-node-agent.service" in files
    assert "Depends: python3" in _info(deb)
    # The unit must not be enabled or started by the package itself.
    ctrl = subprocess.run(["dpkg-deb", "-I", str(deb)], capture_output=True, text=True, check=True).stdout
    assert "postinst" not in ctrl


def test_kubeadm_and_kubelet_packages(repo):
    kubeadm = _contents(repo / "kubeadm_1.30.4-1.1_all.deb")
    assert kubeadm["./usr/bin/kubeadm"] == "-rwxr-xr-x"
    assert "./lib/systemd/system/kubelet.service.d/10-kubeadm.conf" in kubeadm
    assert "Depends: python3, openssl, kubelet" in _info(repo / "kubeadm_1.30.4-1.1_all.deb")
    kubelet = _contents(repo / "kubelet_1.30.4-1.1_all.deb")
    assert kubelet["./usr/bin/kubelet"] == "-rwxr-xr-x" and "./lib/systemd/system/kubelet.service" in kubelet


def test_vendor_connector_package(repo):
    deb = repo / "vendor-node-connector_0.3.0-1_all.deb"
    files = _contents(deb)
    for path in ("./usr/bin/vendor-node-connect", "./usr/bin/vendor-node-disconnect",
                 "./usr/lib/vendor-node-connector/kubeadm", "./usr/lib/vendor-node-connector/kubelet"):
        assert files[path] == "-rwxr-xr-x", path
    assert "./lib/systemd/system/vendor-node-connector.service" in files
    # self-contained: it does not pull in the kubeadm or kubelet packages, and enables nothing itself
    assert "Depends: python3, openssl\n" in _info(deb)
    ctrl = subprocess.run(["dpkg-deb", "-I", str(deb)], capture_output=True, text=True, check=True).stdout
    assert "postinst" not in ctrl


def test_rebuild_skipped_and_deterministic(tmp_path, build_module):
    build = build_module
    first, second = tmp_path / "a", tmp_path / "b"
    assert build.build_all(str(first))["built"]
    assert not build.build_all(str(first))["built"]
    assert build.build_all(str(second), force=True)["built"]
    for deb in DEBS:
        assert hashlib.sha256((first / deb).read_bytes()).digest() == \
            hashlib.sha256((second / deb).read_bytes()).digest()
    assert (first / "Packages").read_text() == (second / "Packages").read_text()


def test_apt_replaces_branch_in_one_transaction(repo, tmp_path):
    """apt (simulated, private state dirs) swaps 535 for 550 and upgrades within 535."""
    (tmp_path / "lists" / "partial").mkdir(parents=True)
    (tmp_path / "cache" / "archives" / "partial").mkdir(parents=True)
    (tmp_path / "prefs").mkdir()
    (tmp_path / "sources.list").write_text("deb [trusted=yes] file:%s ./\n" % repo)
    (tmp_path / "status").write_text(
        "Package: python3\nStatus: install ok installed\nArchitecture: all\nVersion: 3.11.2-1\n"
        "Maintainer: x <x@x.invalid>\nDescription: fake\n\n"
        "Package: nvidia-driver-535\nStatus: install ok installed\nArchitecture: all\n"
        "Version: 535.230.02-1\nProvides: nvidia-driver (= 535.230.02)\n"
        "Conflicts: nvidia-driver-550, nvidia-driver-570\nMaintainer: x <x@x.invalid>\nDescription: fake\n\n")
    opts = []
    for key, value in (("Dir::Etc::SourceList", tmp_path / "sources.list"),
                       ("Dir::Etc::SourceParts", tmp_path / "none"),
                       ("Dir::Etc::Preferences", tmp_path / "none"),
                       ("Dir::Etc::PreferencesParts", tmp_path / "prefs"),
                       ("Dir::State::Lists", tmp_path / "lists"),
                       ("Dir::State::status", tmp_path / "status"),
                       ("Dir::Cache", tmp_path / "cache"), ("Debug::NoLocking", "1")):
        opts += ["-o", "%s=%s" % (key, value)]
    env = dict(os.environ, LC_ALL="C")
    subprocess.run(["apt-get"] + opts + ["-q", "update"], check=True, capture_output=True, env=env)
    swap = subprocess.run(["apt-get"] + opts + ["-s", "install", "nvidia-driver-550"],
                          check=True, capture_output=True, text=True, env=env).stdout
    assert "Remv nvidia-driver-535 [535.230.02-1]" in swap
    assert "Inst nvidia-driver-550 (550.163.01-1" in swap
    upgrade = subprocess.run(["apt-get"] + opts + ["-s", "install", "nvidia-driver-535"],
                             check=True, capture_output=True, text=True, env=env).stdout
    assert "Inst nvidia-driver-535 [535.230.02-1] (535.247.01-1" in upgrade
