"""The GPU software stack check (validation step 1): each missing piece fails and names the
node and the piece; the inventory verdict of validation_check carries it."""
import copy

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate import stack_check
from ansible_collections.hybridgpu.fleet.plugins.modules import validation_check

NODE = "owned-a100-1"
FACTS = {
    "count": 8, "model": "NVIDIA A100-SXM4-80GB", "models": ["NVIDIA A100-SXM4-80GB"], "driver_version": "535.230.02",
    "stack": {
        "module": {"loaded": True, "version": "535.230.02", "flavor": None, "source": "proc"},
        "packages": {"nvidia-driver-535": "535.230.02-1", "nvidia-container-toolkit": "1.17.3-1"},
        "driver_package": {"name": "nvidia-driver-535", "version": "535.230.02-1", "upstream": "535.230.02"},
        "toolkit": {"installed": True, "version": "1.17.3", "source": "nvidia-ctk"},
        "containerd": {"present": True, "source": "containerd config dump", "default_runtime": "nvidia",
                       "runtimes": {"nvidia": {}, "runc": {}}, "nvidia_runtimes": ["nvidia"], "error": None},
        "fabricmanager": {"installed": True, "version": "535.230.02", "active": True, "nvswitch_count": 6},
    },
}
NODE_INFO = {"name": NODE, "gpu_capacity": 8, "gpu_allocatable": 8, "labels": {}}
DAEMONSETS = [{"name": "nvidia-device-plugin-daemonset", "namespace": "gpu-operator", "desired": 3, "ready": 3}]


def stale():
    """The package was upgraded, the old module (and the fabric manager matching it) still runs."""
    facts = broken(["stack", "module", "version"], "535.216.01")
    facts["stack"]["fabricmanager"]["version"] = "535.216.01"
    return facts


DEFAULT = object()


def verdict(facts=DEFAULT, node_info=DEFAULT, daemonsets=DEFAULT, **kw):
    return stack_check.stack_verdict(NODE, FACTS if facts is DEFAULT else facts, NODE_INFO if node_info is DEFAULT else node_info,
                                     DAEMONSETS if daemonsets is DEFAULT else daemonsets, "onprem", 8, **kw)


def broken(path, value):
    facts = copy.deepcopy(FACTS)
    where = facts
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    return facts


def test_stale_module_also_fails_the_fabric_manager_pinned_to_the_package():
    facts = broken(["stack", "module", "version"], "535.216.01")
    assert verdict(facts)["missing"] == ["driver module", "fabric manager"]


def test_complete_stack_passes():
    out = verdict()
    assert out["passed"] is True and out["reasons"] == [] and out["missing"] == []
    assert [c["piece"] for c in out["checks"]] == list(stack_check.PIECES)


@pytest.mark.parametrize("facts,piece,words", [
    (broken(["stack", "module"], {"loaded": False, "version": None, "flavor": None, "source": None}),
     "driver module", "NVIDIA kernel module not loaded"),
    (stale(), "driver module",
     "535.216.01 is loaded but package nvidia-driver-535"),
    (broken(["stack", "toolkit"], {"installed": False, "version": None, "source": None}),
     "container toolkit", "nvidia-container-toolkit not installed"),
    (broken(["stack", "containerd", "nvidia_runtimes"], []), "containerd runtime", "containerd has no nvidia runtime"),
    (broken(["stack", "containerd", "present"], False), "containerd runtime", "containerd not found"),
    (broken(["stack", "fabricmanager", "version"], "535.216.01"), "fabric manager",
     "nvidia-fabricmanager 535.216.01 does not match the driver 535.230.02"),
    (broken(["stack", "fabricmanager", "active"], False), "fabric manager", "nvidia-fabricmanager.service is not running"),
    (broken(["stack", "fabricmanager", "installed"], False), "fabric manager", "nvidia-fabricmanager not installed"),
])
def test_each_node_piece_fails_naming_node_and_piece(facts, piece, words):
    out = verdict(facts)
    assert out["passed"] is False and out["missing"] == [piece]
    assert len(out["reasons"]) == 1
    assert out["reasons"][0].startswith("node %s: " % NODE) and words in out["reasons"][0]


def test_no_device_plugin_fails():
    out = verdict(daemonsets=[{"name": "kube-proxy", "namespace": "kube-system"}])
    assert out["missing"] == ["device plugin"]
    assert out["reasons"][0].startswith("node %s: cluster onprem: no NVIDIA device plugin DaemonSet" % NODE)
    assert verdict(daemonsets=[{"name": "gpu-nvidia-device-plugin", "namespace": "nvidia"}])["passed"]


@pytest.mark.parametrize("node_info,words", [
    (dict(NODE_INFO, gpu_allocatable=6), "allocatable 6, the node has 8 GPUs"),
    (None, "not registered"),
])
def test_allocatable_below_count_fails(node_info, words):
    out = verdict(node_info=node_info)
    assert out["missing"] == ["allocatable GPUs"] and words in out["reasons"][0] and NODE in out["reasons"][0]


def test_fabricmanager_needed_only_on_nvswitch_systems():
    pcie = copy.deepcopy(FACTS)
    pcie.update(model="NVIDIA L40S", models=["NVIDIA L40S"], count=4)
    pcie["stack"]["fabricmanager"] = {"installed": False, "version": None, "active": None, "nvswitch_count": 0}
    out = stack_check.stack_verdict(NODE, pcie, dict(NODE_INFO, gpu_allocatable=4), DAEMONSETS, "onprem", 4)
    assert out["passed"] and [c["ok"] for c in out["checks"] if c["piece"] == "fabric manager"] == [None]
    assert stack_check.needs_fabricmanager(pcie, "always") is True
    sxm_no_switch_dir = broken(["stack", "fabricmanager", "nvswitch_count"], 0)
    assert stack_check.needs_fabricmanager(sxm_no_switch_dir) is True   # 8x SXM: HGX board
    assert stack_check.needs_fabricmanager(sxm_no_switch_dir, "never") is False


def test_no_stack_facts_fails():
    facts = dict(FACTS)
    facts.pop("stack")
    assert "no GPU stack facts" in verdict(facts)["reasons"][0]


def test_inventory_step_carries_the_stack():
    ev = {"facts": broken(["stack", "toolkit", "installed"], False),
          "node_obj": dict(NODE_INFO, labels={"nvidia.com/gpu.count": "8"}),
          "expected": {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_count": 8},
          "stack": {"cluster": "onprem", "daemonsets": DAEMONSETS}}
    ev["facts"]["memory_mib"] = 81920
    out = validation_check.judge("inventory", NODE, ev)
    assert out["passed"] is False and out["stack"]["missing"] == ["container toolkit"]
    assert any("nvidia-container-toolkit not installed" in r for r in out["reasons"])
    ev["facts"] = dict(FACTS, memory_mib=81920)
    assert validation_check.judge("inventory", NODE, ev)["stack"]["passed"] is True


# -- logs from both sides (step 5) ---------------------------------------------------------

def _telemetry_ev(results):
    return {"series_nodes": [NODE, "cloud-h200-1"], "owned": [NODE], "cloud": ["cloud-h200-1"],
            "existing_nodes": [NODE], "alerts": [], "alert_name": "GPUXidError", "fault_node": "",
            "logs": {"source": "journal", "identifier": "hgpu-validate", "path": "", "results": results}}


def test_log_line_found_on_both_sides_passes():
    results = [{"side": "owned", "node": NODE, "marker": "m1", "found": True, "error": ""},
               {"side": "cloud", "node": "cloud-h200-1", "marker": "m2", "found": True, "error": ""}]
    out = validation_check.judge("telemetry", NODE, _telemetry_ev(results))
    assert out["passed"] and out["logs"]["state"] == "pass"


def test_missing_log_line_fails_naming_node_and_place():
    results = [{"side": "owned", "node": NODE, "marker": "m1", "found": True, "error": ""},
               {"side": "cloud", "node": "cloud-h200-1", "marker": "m2", "found": False, "error": "non-zero return code"}]
    out = validation_check.judge("telemetry", NODE, _telemetry_ev(results))
    assert out["passed"] is False and out["logs"]["state"] == "fail"
    assert out["reasons"] == ["log line of the reference job on cloud node cloud-h200-1 not found in the journal "
                              "(journalctl -t hgpu-validate) on cloud-h200-1: non-zero return code"]


def test_no_reference_run_means_logs_not_run():
    out = validation_check.judge("telemetry", NODE, _telemetry_ev([]))
    assert out["passed"] and out["logs"]["state"] == "not run"


def test_reference_job_logs_its_marker_and_still_prints_its_result():
    import os
    import subprocess
    import sys
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate import validation
    from hgpu_testenv import ROOT
    env = dict(os.environ, REF_DEVICE="cpu", REF_SAMPLES="16", REF_STEPS="3", REF_LOG_MARKER="hgpu-validate-log t owned n1 run1",
               REF_LOG_IDENT="hgpu-validate-test")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "roles", "validate", "files", "reference_job.py")],
                          env=env, capture_output=True, text=True, timeout=60, check=True)
    assert "hgpu-validate-log t owned n1 run1" in proc.stdout.splitlines()
    assert validation.parse_reference_log(proc.stdout)["samples"] == 16
