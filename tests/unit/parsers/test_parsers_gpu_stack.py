"""Node-side GPU stack outputs: /proc/driver/nvidia/version, nvidia-ctk, nv-fabricmanager,
dpkg-query and containerd configurations (versions 2 and 3, as nvidia-ctk writes them)."""
import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import gpu_stack

# Lines quoted in public bug reports: nix-community/nixGL#186 (open module), nixGL#121 (open,
# Arch), NVIDIA/open-gpu-kernel-modules README (proprietary form), nvidia-container-toolkit#50.
NVRM = [
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  (dvs-builder@U16-A24-9-2)  "
     "Thu Oct 10 12:15:00 UTC 2024\nGCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n",
     {"version": "565.57.01", "flavor": "open", "arch": "x86_64"}),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  525.60.11  Release Build  (archlinux-builder@localhost)  \n"
     "GCC version:  gcc version 12.2.0 (GCC) \n",
     {"version": "525.60.11", "flavor": "open", "arch": "x86_64"}),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n",
     {"version": "535.104.05", "flavor": "proprietary", "arch": "x86_64"}),
]


@pytest.mark.parametrize("text,want", NVRM)
def test_nvrm_version(text, want):
    assert gpu_stack.parse_nvrm_version(text) == want


def test_nvrm_version_absent_or_other_text():
    assert gpu_stack.parse_nvrm_version(None) is None
    assert gpu_stack.parse_nvrm_version("cat: /proc/driver/nvidia/version: No such file or directory") is None


def test_ctk_and_fabricmanager_versions():
    assert gpu_stack.parse_ctk_version(
        "NVIDIA Container Toolkit CLI version 1.12.0\ncommit: 62bd015475656ef795cb0d59cc4030a6bd4a9526\n") == "1.12.0"
    assert gpu_stack.parse_ctk_version("bash: nvidia-ctk: command not found") is None
    assert gpu_stack.parse_fabricmanager_version("Fabric Manager version is : 535.104.05\n") == "535.104.05"
    assert gpu_stack.parse_fabricmanager_version("") is None


@pytest.mark.parametrize("deb,want", [("535.230.02-1", "535.230.02"), ("535.183.01-0ubuntu1", "535.183.01"),
                                      ("1:2.3-4", "2.3"), ("", None), (None, None)])
def test_upstream_version(deb, want):
    assert gpu_stack.upstream_version(deb) == want


def test_dpkg_query_keeps_installed_only():
    text = ("nvidia-driver-535\t535.230.02-1\tii \n"
            "nvidia-container-toolkit\t1.17.3-1\trc \n"
            "kubelet\t1.30.4-1.1\thi \n"
            "nvidia-fabricmanager-535\t\tun \n")
    assert gpu_stack.parse_dpkg_query(text) == {"nvidia-driver-535": "535.230.02-1", "kubelet": "1.30.4-1.1"}


V2 = """version = 2
imports = ["/etc/containerd/conf.d/*.toml"]
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "nvidia"  # set by nvidia-ctk --set-as-default
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          privileged_without_host_devices = false
          runtime_engine = ""
          runtime_root = ""
          runtime_type = "io.containerd.runc.v2"
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
            SystemdCgroup = true
"""
V3 = """version = 3
[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'runc'
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia-cdi]
  runtime_type = 'io.containerd.runc.v2'
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia-cdi.options]
  BinaryName = '/usr/bin/nvidia-container-runtime.cdi'
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'
"""


def test_containerd_v2_with_nvidia_runtime():
    cfg = gpu_stack.parse_containerd_config(V2)
    assert cfg["version"] == 2 and cfg["default_runtime"] == "nvidia"
    assert cfg["imports"] == ["/etc/containerd/conf.d/*.toml"]
    assert cfg["runtimes"]["nvidia"] == {"runtime_type": "io.containerd.runc.v2",
                                         "binary_name": "/usr/bin/nvidia-container-runtime"}
    assert cfg["runtimes"]["runc"]["binary_name"] is None
    assert gpu_stack.nvidia_runtimes(cfg) == ["nvidia"]
    assert cfg["errors"] == []


def test_containerd_v3_single_quoted_keys():
    cfg = gpu_stack.parse_containerd_config(V3)
    assert cfg["version"] == 3 and cfg["default_runtime"] == "runc"
    assert gpu_stack.nvidia_runtimes(cfg) == ["nvidia-cdi"]


def test_containerd_without_nvidia_runtime():
    plain = V2.replace("/usr/bin/nvidia-container-runtime", "/usr/bin/runc")
    assert gpu_stack.nvidia_runtimes(gpu_stack.parse_containerd_config(plain)) == []
    assert gpu_stack.nvidia_runtimes(gpu_stack.parse_containerd_config("")) == []
    bad = gpu_stack.parse_containerd_config('[plugins."io.containerd\n')
    assert bad["errors"]
