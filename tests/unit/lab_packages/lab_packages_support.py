"""Shared constants and helpers of the lab package tests (a uniquely named module,
so test files can import it without clashing with other conftest.py files)."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
PACKAGES = os.path.join(ROOT, "tests", "lab", "packages")
NVIDIA_SMI = os.path.join(PACKAGES, "nvidia-smi", "nvidia_smi.py")
ALL_REDUCE = os.path.join(PACKAGES, "nccl-tests", "all_reduce_perf.py")
AGENT_DIR = os.path.join(PACKAGES, "node-agent")

A100_SPEC = {
    "model": "NVIDIA A100-SXM4-80GB", "count": 8, "memory_mib": 81920,
    "pci_base": "00000000:10:00.0", "uuid_seed": "owned-a100-1",
    "mig": "Disabled", "compute_cap": "8.0", "power_limit_w": 400,
    "nccl": {"busbw_gbps": 230.0, "algbw_ratio": 0.5357, "latency_us": 25.0},
    "faults": {"xid": [], "hide_gpus": 0, "nccl_wrong": 0, "nccl_busbw_factor": 1.0},
}
REAL_OUTPUTS = os.environ.get(
    "HGPU_REAL_OUTPUTS", os.path.join(os.path.dirname(ROOT), "shared", "testdata", "real-outputs"))
DRIVER_535 = {"branch": "535", "version": "535.230.02", "cuda": "12.2"}


class Node:
    """A fake node's spec + driver files in a tmp dir, and a runner for the stand-ins."""

    def __init__(self, tmp_path):
        self.spec_path = tmp_path / "gpu-spec.json"
        self.driver_path = tmp_path / "driver.json"
        self.write(A100_SPEC, DRIVER_535)

    def write(self, spec=None, driver=None):
        if spec is not None:
            self.spec_path.write_text(json.dumps(spec))
        if driver is not None:
            self.driver_path.write_text(json.dumps(driver))

    def env(self, **extra):
        env = dict(os.environ, HGPU_GPU_SPEC=str(self.spec_path),
                   HGPU_DRIVER_JSON=str(self.driver_path))
        env.pop("HGPU_NCCL_NODES", None)
        env.update(extra)
        return env

    def run(self, script, *args, **extra_env):
        return subprocess.run([sys.executable, script] + list(args), env=self.env(**extra_env),
                              capture_output=True, text=True, timeout=30, check=False)

    def smi(self, *args, **extra_env):
        return self.run(NVIDIA_SMI, *args, **extra_env)

    def nccl(self, *args, **extra_env):
        return self.run(ALL_REDUCE, *args, **extra_env)


def load_module(name, path):
    """Import a lab script (not a package module) by path."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Fixtures: test modules import them by name.
@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


@pytest.fixture
def a100_spec():
    return json.loads(json.dumps(A100_SPEC))


@pytest.fixture
def real_output():
    """Read one file of ../shared/testdata/real-outputs."""
    def read(*parts):
        with open(os.path.join(REAL_OUTPUTS, *parts), encoding="utf-8") as handle:
            return handle.read()
    return read


@pytest.fixture(scope="session")
def build_module():
    return load_module("hgpu_lab_build", os.path.join(PACKAGES, "build.py"))
