"""The lab's GPU stack stand-ins print what the product's parsers read on real nodes:
dcgmi diag tables (judged by the DCGM parser, faults from the GPU spec), nvidia-ctk's version
and its containerd configuration, nv-fabricmanager's version line (overridable per node)."""
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import dcgm, gpu_stack
from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate import gpu_health
from hgpu_testenv import REAL_OUTPUTS, ROOT

PKGS = os.path.join(ROOT, "tests", "lab", "packages")


@pytest.fixture
def spec(tmp_path):
    doc = {"model": "NVIDIA A100-SXM4-80GB", "count": 8, "faults": {"xid": [], "hide_gpus": 0, "dcgm_diag": []},
           "stack": {}}
    (tmp_path / "driver.json").write_text(json.dumps({"branch": "535", "version": "535.230.02", "cuda": "12.2"}))
    (tmp_path / "fm.json").write_text(json.dumps({"version": "535.230.02"}))

    def run(tool, *args, **changes):
        doc.update(changes)
        (tmp_path / "spec.json").write_text(json.dumps(doc))
        env = dict(os.environ, HGPU_GPU_SPEC=str(tmp_path / "spec.json"), HGPU_DRIVER_JSON=str(tmp_path / "driver.json"),
                   HGPU_FABRICMANAGER_JSON=str(tmp_path / "fm.json"))
        return subprocess.run([sys.executable, os.path.join(PKGS, tool)] + list(args), env=env,
                              capture_output=True, text=True, timeout=30, check=False)
    run.dir = tmp_path
    return run


def test_dcgmi_diag_level1_passes_and_matches_the_real_layout(spec):
    res = spec("dcgm/dcgmi.py", "diag", "-r", "1")
    assert res.returncode == 0
    parsed = dcgm.parse_diag(res.stdout)
    assert parsed["ran"] and parsed["overall"] == "Pass" and parsed["sections"] == ["Metadata", "Deployment"]
    assert parsed["metadata"]["driver_version"] == "535.230.02"
    assert parsed["metadata"]["gpu_device_ids"] == ["20b2"] * 8
    real = open(os.path.join(REAL_OUTPUTS, "dcgmi-diag", "r2_p4de-a100-80gb-x8_dcgm3.3.3_drv535_all-pass.txt")).read()
    # same borders, header and Deployment rows as a real dcgmi 3.3 capture
    for line in res.stdout.splitlines()[1:]:
        if "Version" in line or "Detected" in line:
            continue
        assert line in real.splitlines(), line
    assert gpu_health.diag_verdict("owned-a100-1", res.stdout, res.returncode)["state"] == "pass"


def test_dcgmi_diag_fault_fails_naming_node_and_test(spec):
    fault = {"test": "Page Retirement/Row Remap", "gpu": 3,
             "message": "GPU 3 has uncorrectable memory errors and row remappings are pending"}
    res = spec("dcgm/dcgmi.py", "diag", "-r", "1", faults={"dcgm_diag": [fault]})
    assert res.returncode != 0
    real = open(os.path.join(REAL_OUTPUTS, "dcgmi-diag",
                             "deployment-error_uncorrectable-memory-row-remap-pending_excerpt.txt")).read()
    assert "\n".join(real.splitlines()[-2:]) in res.stdout  # wrapped like the real Error row
    verdict = gpu_health.diag_verdict("owned-a100-2", res.stdout, res.returncode)
    assert verdict["state"] == "fail"
    assert verdict["reasons"][0].startswith("DCGM diagnostic on node owned-a100-2 failed: Page Retirement/Row Remap")
    level2 = dcgm.parse_diag(spec("dcgm/dcgmi.py", "diag", "-r", "2", faults={"dcgm_diag": [
        {"test": "GPU Memory", "gpu": 0}]}).stdout)
    memory = next(t for t in level2["tests"] if t["name"] == "GPU Memory")
    assert memory["status"] == "Fail" and [r["gpus"] for r in memory["results"]] == [[1, 2, 3, 4, 5, 6, 7], [0]]


def test_nvidia_ctk_version_and_containerd_runtime(spec):
    res = spec("container-toolkit/nvidia_ctk.py", "--version")
    assert gpu_stack.parse_ctk_version(res.stdout) == "1.17.3"
    config = spec.dir / "config.toml"
    for dummy in range(2):  # idempotent, like the real command
        res = spec("container-toolkit/nvidia_ctk.py", "runtime", "configure", "--runtime=containerd",
                   "--config=%s" % config)
        assert res.returncode == 0, res.stderr
    parsed = gpu_stack.parse_containerd_config(config.read_text())
    assert gpu_stack.nvidia_runtimes(parsed) == ["nvidia"] and sorted(parsed["runtimes"]) == ["nvidia", "runc"]
    assert parsed["default_runtime"] == "runc" and parsed["errors"] == []


def test_fabricmanager_version_follows_package_unless_spec_overrides(spec):
    res = spec("fabricmanager/nv_fabricmanager.py", "--version")
    assert gpu_stack.parse_fabricmanager_version(res.stdout) == "535.230.02"
    res = spec("fabricmanager/nv_fabricmanager.py", "--version", stack={"fabricmanager_version": "535.216.01"})
    assert gpu_stack.parse_fabricmanager_version(res.stdout) == "535.216.01"
    res = spec("fabricmanager/nv_fabricmanager.py", "-c", "/dev/null", stack={"fabricmanager_version": "535.216.01"})
    assert res.returncode == 1 and "doesn't match with driver version 535.230.02" in res.stderr
