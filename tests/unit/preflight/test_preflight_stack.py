"""Preflight judges the GPU software stack from the gpu_facts it gathers (validation's stack_check):
each missing piece is a matrix violation of severity error that names the node and the piece, on
the failing node only, and the wave gate and preflight_fail_on_findings act on it."""
import copy

import pytest
import yaml

from hgpu_testenv import ROOT

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import records
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import gate
from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import stack
from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate import stack_check
from ansible_collections.hybridgpu.fleet.plugins.modules import compat_matrix

CONTAINERD_RUNTIMES = {"nvidia": {"runtime_type": "io.containerd.runc.v2",
                                  "options": {"BinaryName": "/usr/bin/nvidia-container-runtime"}},
                       "runc": {"runtime_type": "io.containerd.runc.v2"}}


def gpu_facts(model, count, memory, driver, cuda, package, nvswitches, fabric=True, host="node"):
    """ansible_facts.hybridgpu_gpu as gpu_facts returns it with stack=true (the default)."""
    branch = driver.split(".", 1)[0]
    packages = {package: driver + "-0ubuntu1", "nvidia-container-toolkit": "1.17.3-1", "kubelet": "1.30.4-1.1"}
    if fabric:
        packages["nvidia-fabricmanager-" + branch] = driver + "-1"
    return {
        "count": count, "model": model, "models": [model], "memory_mib": memory, "mig_mode": "Disabled",
        "gpus": [{"index": str(i), "name": model, "uuid": "GPU-%s-%d" % (host, i)} for i in range(count)],
        "driver_version": driver, "cuda_version": cuda, "cuda_source": "table",
        "kernel": {"release": "6.8.0-51-generic", "version": "#52-Ubuntu SMP PREEMPT_DYNAMIC", "machine": "x86_64"},
        "os": {"pretty_name": "Ubuntu 22.04.5 LTS", "id": "ubuntu", "version_id": "22.04"},
        "image_id": None,
        "container_runtime": {"name": "containerd", "version": "1.7.24"},
        "container_runtimes": [{"name": "containerd", "version": "1.7.24", "path": "/usr/bin/containerd"}],
        "agent": {"kind": "kubelet", "version": "1.30.4"},
        "stack": {
            "module": {"loaded": True, "version": driver, "flavor": "open", "source": "proc"},
            "packages": packages,
            "driver_package": {"name": package, "version": driver + "-0ubuntu1", "upstream": driver},
            "toolkit": {"installed": True, "version": "1.17.3", "source": "nvidia-ctk"},
            "containerd": {"present": True, "source": "containerd config dump", "default_runtime": "nvidia",
                           "runtimes": CONTAINERD_RUNTIMES, "nvidia_runtimes": ["nvidia"], "error": None},
            "fabricmanager": {"installed": fabric, "version": driver if fabric else None, "active": True if fabric else None,
                              "nvswitch_count": nvswitches},
        },
        "commands_run": 9,
    }


def hgx(host):
    """An HGX H100 board: 8 SXM GPUs behind 4 NVSwitches, so the fabric manager is required."""
    return gpu_facts("NVIDIA H100 80GB HBM3", 8, 81559, "565.57.01", "12.7", "nvidia-driver-565-open", 4, host=host)


def pcie(host):
    """A PCIe L40S node: no NVSwitch, no fabric manager."""
    return gpu_facts("NVIDIA L40S", 4, 46068, "565.57.01", "12.7", "nvidia-driver-565-open", 0, fabric=False, host=host)


def h200(host):
    return gpu_facts("NVIDIA H200", 8, 143771, "570.172.08", "12.8", "nvidia-driver-570-server", 0, fabric=False, host=host)


def api_node(name, allocatable):
    return {"name": name, "ready": "True", "unschedulable": False, "labels": {}, "taints": [],
            "gpu_capacity": allocatable, "gpu_allocatable": allocatable, "kubelet_version": "v1.30.4"}


def hosts():
    return [{"hostname": "owned-h100-1", "node_group": "hgx", "gpu_facts": hgx("owned-h100-1")},
            {"hostname": "owned-h100-2", "node_group": "hgx", "gpu_facts": hgx("owned-h100-2")},
            {"hostname": "owned-l40s-1", "node_group": "pcie", "gpu_facts": pcie("owned-l40s-1")},
            {"hostname": "cloud-h200-1", "gpu_facts": h200("cloud-h200-1")}]


def k8s(owned=None):
    """What the role registers from k8s_node_info over {owned: onprem, cloud: cloud}: both HGX nodes
    have joined, owned-l40s-1 has not."""
    nodes = owned if owned is not None else [api_node("owned-h100-1", 8), api_node("owned-h100-2", 8)]
    return [{"item": {"key": "owned", "value": "onprem"}, "server_version": "v1.31.2", "nodes": nodes},
            {"item": {"key": "cloud", "value": "cloud"}, "server_version": "v1.31.2",
             "nodes": [api_node("cloud-h200-1", 8)]}]


def run(host_list=None, k8s_results=None, **params):
    args = {"hosts": host_list if host_list is not None else hosts(), "cloud_hosts": ["cloud-h200-1"],
            "k8s_node_info": k8s_results if k8s_results is not None else k8s(),
            "cloud": {"kubernetes_version": "1.31.2"}}
    args.update(params)
    return compat_matrix.run(args)[0]


def stack_violations(matrix):
    return [v for v in matrix["violations"] if v["rule"].startswith("gpu-stack-")]


def record(matrix):
    return records.build_record("w1", matrix, probes=[], direction={"verdict": "pass"},
                                boundary_status={"status": "signed"})


def broken(host, path, value):
    out = hosts()
    where = next(h for h in out if h["hostname"] == host)["gpu_facts"]
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    return out


def test_complete_stack_gives_no_finding_and_passing_checks():
    matrix = run()
    assert stack_violations(matrix) == []
    checks = {(c["rule"], c["row"]): c for c in matrix["checks"] if c["rule"].startswith("gpu-stack-")}
    rows = {r["id"]: r for r in matrix["rows"]}
    hgx_row = next(r["id"] for r in rows.values() if "owned-h100-1" in r["nodes"])
    l40s_row = next(r["id"] for r in rows.values() if "owned-l40s-1" in r["nodes"])
    assert rows[hgx_row]["nodes"] == ["owned-h100-1", "owned-h100-2"]
    for rule in stack.RULES:
        assert checks[(rule, hgx_row)]["status"] == "pass", checks[(rule, hgx_row)]
    assert "nvidia-fabricmanager 565.57.01 running" in checks[("gpu-stack-fabric-manager", hgx_row)]["message"]
    # No NVSwitch on the PCIe node: the fabric manager is not needed there.
    assert checks[("gpu-stack-fabric-manager", l40s_row)]["status"] == "not_evaluated"
    assert "fabric manager not needed" in checks[("gpu-stack-fabric-manager", l40s_row)]["message"]
    assert checks[("gpu-stack-allocatable-gpus", hgx_row)]["message"].startswith("owned-h100-1: nvidia.com/gpu allocatable 8")
    assert checks[("gpu-stack-allocatable-gpus", l40s_row)]["status"] == "not_evaluated"
    assert gate.concerning(record(matrix), "owned-h100-1", "error") == []


@pytest.mark.parametrize("path,value,rule,words", [
    (["stack", "module"], {"loaded": False, "version": None, "flavor": None, "source": None},
     "gpu-stack-driver-module", "NVIDIA kernel module not loaded (driver package nvidia-driver-565-open"),
    (["stack", "toolkit"], {"installed": False, "version": None, "source": None},
     "gpu-stack-container-toolkit", "nvidia-container-toolkit not installed"),
    (["stack", "containerd", "nvidia_runtimes"], [],
     "gpu-stack-containerd-runtime", "containerd has no nvidia runtime (runtimes in containerd config dump: nvidia, runc)"),
    (["stack", "containerd", "present"], False, "gpu-stack-containerd-runtime", "containerd not found"),
    (["stack", "fabricmanager"], {"installed": False, "version": None, "active": None, "nvswitch_count": 4},
     "gpu-stack-fabric-manager", "nvidia-fabricmanager not installed on an NVSwitch system (driver 565.57.01)"),
    (["stack", "fabricmanager", "version"], "565.57.02",
     "gpu-stack-fabric-manager", "nvidia-fabricmanager 565.57.02 does not match the driver 565.57.01 exactly"),
    (["stack", "fabricmanager", "active"], False, "gpu-stack-fabric-manager", "nvidia-fabricmanager.service is not running"),
])
def test_each_missing_piece_is_an_error_finding_naming_node_and_piece(path, value, rule, words):
    matrix = run(broken("owned-h100-2", path, value))
    found = stack_violations(matrix)
    assert [(v["rule"], v["severity"], v["nodes"]) for v in found] == [(rule, "error", ["owned-h100-2"])]
    assert found[0]["message"].startswith("node owned-h100-2: ") and words in found[0]["message"]
    assert found[0]["citation"]["url"].startswith("https://")
    # The record's verdicts carry it (preflight_fail_on_findings counts them) and the wave gate stops
    # the failing node at the default severity, not the healthy node of the same row.
    rec = record(matrix)
    assert [v["rule"] for v in rec["verdicts"]["matrix"]["violations"]] == [rule]
    stopped = gate.decide(rec, ["owned-h100-1", "owned-h100-2"], "error")
    assert stopped["owned-h100-2"]["decision"] == "stopped"
    assert any(rule in reason for reason in stopped["owned-h100-2"]["reasons"])
    assert stopped["owned-h100-1"]["decision"] == "admitted"


def test_stale_module_after_an_upgrade_fails_module_and_fabric_manager():
    """The package went to 565.57.02 with its fabric manager; the old module still runs."""
    host_list = broken("owned-h100-1", ["stack", "driver_package"],
                       {"name": "nvidia-driver-565-open", "version": "565.57.02-0ubuntu1", "upstream": "565.57.02"})
    fabric = next(h for h in host_list if h["hostname"] == "owned-h100-1")["gpu_facts"]["stack"]["fabricmanager"]
    fabric["version"] = "565.57.02"
    found = {v["rule"]: v for v in stack_violations(run(host_list))}
    assert sorted(found) == ["gpu-stack-driver-module", "gpu-stack-fabric-manager"]
    assert "NVIDIA kernel module 565.57.01 is loaded but package nvidia-driver-565-open is 565.57.02" in \
        found["gpu-stack-driver-module"]["message"]


def test_two_nodes_missing_the_same_piece_give_one_finding_naming_both():
    host_list = broken("owned-h100-1", ["stack", "toolkit", "installed"], False)
    next(h for h in host_list if h["hostname"] == "owned-h100-2")["gpu_facts"]["stack"]["toolkit"]["installed"] = False
    found = stack_violations(run(host_list))
    assert len(found) == 1 and found[0]["nodes"] == ["owned-h100-1", "owned-h100-2"]
    assert "node owned-h100-1: nvidia-container-toolkit" in found[0]["message"]
    assert "node owned-h100-2: nvidia-container-toolkit" in found[0]["message"]


def test_joined_node_with_wrong_allocatable_is_a_finding():
    matrix = run(k8s_results=k8s([api_node("owned-h100-1", 0), api_node("owned-h100-2", 8)]))
    found = stack_violations(matrix)
    assert [(v["rule"], v["nodes"]) for v in found] == [("gpu-stack-allocatable-gpus", ["owned-h100-1"])]
    assert found[0]["message"] == ("node owned-h100-1: Node advertises nvidia.com/gpu allocatable 0, "
                                   "the node has 8 GPUs")


def test_unjoined_node_is_not_failed_for_allocatable():
    """owned-l40s-1 has no Node object; with no Node at all on the owned side neither is any."""
    for results in (k8s(), k8s([])):
        matrix = run(k8s_results=results)
        assert stack_violations(matrix) == []
    judged = {j["node"]: j for j in stack.judge(stack_check, hosts(), ["cloud-h200-1"], k8s())}
    alloc = [c for c in judged["owned-l40s-1"]["checks"] if c["piece"] == "allocatable GPUs"]
    assert alloc == [{"piece": "allocatable GPUs", "ok": None, "detail": "no Node yet (not joined): judged after the join"}]
    # No Kubernetes context read: allocatable is not judged, the node-side pieces still are.
    host_list = broken("owned-h100-2", ["stack", "toolkit", "installed"], False)
    found = stack_violations(run(host_list, k8s_results=[]))
    assert [v["rule"] for v in found] == ["gpu-stack-container-toolkit"]


def test_switch_off_judges_nothing():
    host_list = broken("owned-h100-2", ["stack", "toolkit", "installed"], False)
    matrix = run(host_list, k8s_results=k8s([api_node("owned-h100-1", 0)]), stack_check=False)
    assert stack_violations(matrix) == []
    assert [c for c in matrix["checks"] if c["rule"].startswith("gpu-stack-")] == []


def test_owned_node_without_stack_facts_fails_the_driver_module():
    host_list = hosts()
    del host_list[2]["gpu_facts"]["stack"]
    found = stack_violations(run(host_list))
    assert [(v["rule"], v["nodes"]) for v in found] == [("gpu-stack-driver-module", ["owned-l40s-1"])]
    assert "no GPU stack facts" in found[0]["message"]


def test_cloud_row_judged_only_with_facts():
    host_list = hosts()
    del host_list[3]["gpu_facts"]["stack"]
    assert stack_violations(run(host_list)) == []
    assert stack.judge(stack_check, host_list, ["cloud-h200-1"], k8s())[-1]["node"] == "owned-l40s-1"
    host_list = broken("cloud-h200-1", ["stack", "containerd", "nvidia_runtimes"], [])
    found = stack_violations(run(host_list))
    assert [(v["rule"], v["nodes"], v["rows"][0].startswith("cloud-")) for v in found] == \
        [("gpu-stack-containerd-runtime", ["cloud-h200-1"], True)]
    # A declared cloud row (no cloud hosts) is never judged.
    matrix = run(hosts()[:3])
    assert matrix["rows"][-1]["source"] == "declared"
    assert not [c for c in matrix["checks"] if c["row"] == matrix["rows"][-1]["id"] and c["rule"].startswith("gpu-stack-")]


@pytest.mark.parametrize("mode,host,expected", [
    ("always", "owned-l40s-1", ["gpu-stack-fabric-manager"]),  # required even without NVSwitch
    ("never", "owned-h100-1", []),                             # not required even on an HGX board
    ("auto", "owned-h100-1", ["gpu-stack-fabric-manager"]),
    ("auto", "owned-l40s-1", []),
])
def test_fabric_manager_mode(mode, host, expected):
    host_list = broken(host, ["stack", "fabricmanager"], {"installed": False, "version": None, "active": None,
                                                          "nvswitch_count": 4 if "h100" in host else 0})
    found = [v for v in stack_violations(run(host_list, fabricmanager=mode)) if v["nodes"] == [host]]
    assert [v["rule"] for v in found] == expected


def test_fail_on_violation_includes_the_stack():
    host_list = broken("owned-h100-2", ["stack", "toolkit", "installed"], False)
    result, failure = compat_matrix.run({"hosts": host_list, "cloud_hosts": ["cloud-h200-1"], "k8s_node_info": k8s(),
                                         "fail_on_violation": True})
    assert failure and "gpu-stack-container-toolkit" in failure and "node owned-h100-2" in failure


def test_bad_fabricmanager_mode():
    with pytest.raises(ValueError) as info:
        stack.judge(stack_check, hosts(), fabricmanager="sometimes")
    assert "fabricmanager: 'sometimes'" in str(info.value)


def test_role_passes_the_switch_and_the_mode():
    """The role's compat_matrix task takes both variables; defaults and argument specs agree."""
    tasks = yaml.safe_load(open(ROOT + "/roles/preflight/tasks/main.yml", encoding="utf-8"))
    build = next(t for t in tasks if "hybridgpu.fleet.compat_matrix" in t)["hybridgpu.fleet.compat_matrix"]
    assert build["stack_check"] == "{{ preflight_stack_check | bool }}"
    assert build["fabricmanager"] == "{{ preflight_fabricmanager }}"
    defaults = yaml.safe_load(open(ROOT + "/roles/preflight/defaults/main.yml", encoding="utf-8"))
    specs = yaml.safe_load(open(ROOT + "/roles/preflight/meta/argument_specs.yml", encoding="utf-8"))
    options = specs["argument_specs"]["main"]["options"]
    assert defaults["preflight_stack_check"] is True and options["preflight_stack_check"]["default"] is True
    assert defaults["preflight_fabricmanager"] == options["preflight_fabricmanager"]["default"] == "auto"
    assert options["preflight_fabricmanager"]["choices"] == list(stack.FABRICMANAGER_MODES)


def test_matrix_result_does_not_change_the_input():
    host_list = hosts()
    before = copy.deepcopy(host_list)
    run(host_list)
    assert host_list == before
