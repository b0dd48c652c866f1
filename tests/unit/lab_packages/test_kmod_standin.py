"""The modprobe stand-in loads and unloads the lab driver's NVIDIA module as the kernel does,
and nvidia-smi reports the loaded module: NVML's version mismatch after a package change
until a reload, no driver when none is loaded."""
import json
import os
import subprocess
import sys

import pytest

from lab_packages_support import PACKAGES, node  # noqa: F401 (fixture)  pylint: disable=unused-import

MODPROBE = os.path.join(PACKAGES, "nvidia-kmod", "modprobe.py")
DRIVER_550 = {"branch": "550", "version": "550.163.01", "cuda": "12.4"}


@pytest.fixture
def kmod(node, tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    state = tmp_path / "run" / "nvidia-module.json"
    marker = tmp_path / "kmod.json"
    marker.write_text(json.dumps({"loaded_state": str(state)}))
    env = {"HGPU_DEV_DIR": str(dev), "HGPU_KMOD_STATE": str(state), "HGPU_KMOD_JSON": str(marker)}

    def modprobe(*args):
        return subprocess.run([sys.executable, MODPROBE] + list(args), env=node.env(**env),
                              capture_output=True, text=True, timeout=30, check=False)

    def smi(*args):
        return node.smi(*args, **env)
    return {"modprobe": modprobe, "smi": smi, "dev": dev, "state": state}


def version(kmod):
    return kmod["smi"]("--query-gpu=driver_version", "--format=csv,noheader").stdout.splitlines()[0]


def test_nothing_loaded_is_no_driver(kmod):
    res = kmod["smi"]("-L")
    assert res.returncode == 9 and "couldn't communicate with the NVIDIA driver" in res.stdout


def test_load_makes_devices_and_nvidia_smi_answers(kmod):
    assert kmod["modprobe"]("nvidia").returncode == 0
    assert sorted(os.listdir(kmod["dev"]))[:3] == ["nvidia-uvm", "nvidia-uvm-tools", "nvidia0"]
    assert "nvidia7" in os.listdir(kmod["dev"]) and "nvidiactl" in os.listdir(kmod["dev"])
    assert version(kmod) == "535.230.02"
    # loading again changes nothing
    assert kmod["modprobe"]("nvidia").returncode == 0


def test_package_change_gives_mismatch_until_reload(kmod, node):
    kmod["modprobe"]("nvidia")
    node.write(driver=DRIVER_550)
    res = kmod["smi"]("--query-gpu=driver_version", "--format=csv")
    assert res.returncode == 18
    assert res.stdout == "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.163\n"
    assert kmod["modprobe"]("-r", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia").returncode == 0
    assert os.listdir(kmod["dev"]) == [] and not kmod["state"].exists()
    assert kmod["modprobe"]("nvidia").returncode == 0
    assert version(kmod) == "550.163.01"


def test_unload_refused_while_a_device_is_open(kmod):
    kmod["modprobe"]("nvidia")
    with open(os.path.join(kmod["dev"], "nvidia0")):
        res = kmod["modprobe"]("-r", "nvidia_uvm", "nvidia")
    assert res.returncode == 1 and res.stderr == "modprobe: FATAL: Module nvidia_uvm is in use.\n"
    assert kmod["state"].exists()


def test_other_modules_are_not_found(kmod):
    res = kmod["modprobe"]("br_netfilter")
    assert res.returncode == 1 and "Module br_netfilter not found in directory /lib/modules/" in res.stderr
    assert kmod["modprobe"]("-q", "br_netfilter").returncode == 1
    assert kmod["modprobe"]("-q", "br_netfilter").stderr == ""


def test_load_without_a_driver_package(kmod, node):
    os.unlink(node.driver_path)
    res = kmod["modprobe"]("nvidia")
    assert res.returncode == 1 and "Module nvidia not found" in res.stderr
