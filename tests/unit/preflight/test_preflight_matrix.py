"""Compatibility matrix: grouping, disagreements, version rules, wave and holds."""
import json

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import matrix
from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import version_rules

from lab_facts import lab

API = {"owned": "1.31.0", "cloud": "1.31.0"}


def _checks(result, rule):
    return {c["row"]: c["status"] for c in result["checks"] if c["rule"] == rule}


def test_grouping_and_cloud_row_last():
    result = matrix.build(lab(), job_image_cuda="12.2", api_server_versions=API)
    ids = [r["id"] for r in result["rows"]]
    assert ids == ["a100-535", "l40s-550", "cloud-h200-570"]
    assert result["rows"][0]["nodes"] == ["owned-a100-1", "owned-a100-2"]
    assert result["rows"][-1]["side"] == "cloud"
    assert result["rows"][1]["architecture"] == "ada"


def test_same_model_and_branch_but_other_kernel_is_its_own_row():
    nodes = lab()
    nodes[0]["kernel"] = "5.15.0-100-generic"
    ids = [r["id"] for r in matrix.build(nodes)["rows"]]
    assert ids == ["a100-535", "a100-535-2", "l40s-550", "cloud-h200-570"]


def test_disagreeing_columns():
    result = matrix.build(lab())
    assert result["disagreements"] == ["gpu_model", "gpu_count", "gpu_memory_mib",
                                       "driver_branch", "cuda_version"]
    assert "os" not in result["disagreements"]
    l40s = result["rows"][1]
    assert l40s["differs_from_cloud"] == ["gpu_model", "gpu_count", "gpu_memory_mib",
                                          "driver_branch", "cuda_version"]


def test_cuda_rule_fires_for_old_driver_only():
    result = matrix.build(lab(), job_image_cuda="12.4")
    assert _checks(result, "cuda-driver-minimum") == {
        "a100-535": "fail", "l40s-550": "pass", "cloud-h200-570": "pass"}
    (v,) = [v for v in result["violations"] if v["rule"] == "cuda-driver-minimum"]
    assert v["nodes"] == ["owned-a100-1", "owned-a100-2"]
    assert v["citation"]["url"].startswith("https://docs.nvidia.com/cuda/")
    assert "535.230.02 is older than 550.54.14" in v["message"]


def test_cuda_rule_not_firing_when_image_is_old_enough():
    result = matrix.build(lab(), job_image_cuda="12.2.2")
    assert set(_checks(result, "cuda-driver-minimum").values()) == {"pass"}


def test_cuda_minor_compat_mode_is_a_warning():
    result = matrix.build(lab(), job_image_cuda="12.4", cuda_compat="minor_compat")
    assert _checks(result, "cuda-driver-minimum")["a100-535"] == "warn"
    (v,) = [v for v in result["violations"] if v["rule"] == "cuda-driver-minimum"]
    assert v["severity"] == "warning"
    assert "minor version compatibility" in v["message"]
    # A 12.x image on an 11.x-era driver fails even in minor_compat mode.
    assert version_rules.check_cuda_driver("12.4", "520.61.05", mode="minor_compat")[0] == "fail"


def test_cuda_rule_falls_back_to_reported_cuda():
    assert version_rules.check_cuda_driver("12.4", None, node_cuda="12.2")[0] == "fail"
    assert version_rules.check_cuda_driver("12.4", None, node_cuda="12.8")[0] == "pass"
    assert version_rules.check_cuda_driver("12.7", "570.0")[0] == "not_evaluated"


@pytest.mark.parametrize("kubelet,api,status", [
    ("v1.31.2", "1.31.0", "pass"),
    ("1.28.4", "1.31.0", "pass"),      # three older is allowed since kubelet 1.25
    ("1.27.9", "1.31.0", "fail"),      # four older
    ("1.23.0", "1.26.0", "fail"),      # kubelet < 1.25: only two older
    ("1.24.0", "1.26.0", "pass"),
    ("1.32.0", "1.31.5", "fail"),      # kubelet newer than API server
    (None, "1.31.0", "not_evaluated"),
])
def test_kubelet_skew(kubelet, api, status):
    assert version_rules.check_kubelet_skew(kubelet, api)[0] == status


def test_skew_rule_in_matrix():
    nodes = lab()
    for n in nodes:
        if n["side"] == "owned":
            n["agent_version"] = "v1.27.3"
    result = matrix.build(nodes, api_server_versions={"cloud": "1.31.0"})
    checks = _checks(result, "kubelet-apiserver-skew")
    assert checks == {"a100-535": "fail", "l40s-550": "fail", "cloud-h200-570": "pass"}
    nodes[0]["agent_version"] = nodes[1]["agent_version"] = "v1.32.0"
    result = matrix.build(nodes, api_server_versions={"owned": "1.31.1", "cloud": "1.31.0"})
    msg = [v["message"] for v in result["violations"] if v["rows"] == ["a100-535"]]
    assert msg == ["kubelet v1.32.0 is newer than API server 1.31.1 (never allowed)"]


def test_os_mismatch_against_declared_cloud_row():
    owned = [n for n in lab() if n["side"] == "owned"]
    result = matrix.build(owned, cloud={"data_centre": "us-west", "kubernetes_version": "1.31",
                                        "node_count": 2})
    cloud = result["rows"][-1]
    assert cloud["source"] == "declared"
    assert cloud["values"]["os"] == "ubuntu 22.04"
    assert cloud["values"]["gpu_model"] == "NVIDIA H200"
    assert _checks(result, "os-image-match") == {"a100-535": "fail", "l40s-550": "fail"}
    owned[0]["os"] = owned[1]["os"] = {"id": "ubuntu", "version_id": "22.04"}
    result = matrix.build(owned)
    assert _checks(result, "os-image-match")["a100-535"] == "pass"


def test_wave_one_per_row_plus_spare():
    wave = matrix.build(lab())["wave"]
    assert wave["nodes"] == [
        {"node": "owned-a100-1", "row": "a100-535", "purpose": "row_representative"},
        {"node": "owned-l40s-1", "row": "l40s-550", "purpose": "row_representative"},
        {"node": "owned-a100-2", "row": "a100-535", "purpose": "rehearsal_spare"},
    ]


def test_wave_skips_held_nodes_and_reports_uncovered_rows():
    result = matrix.build(lab(), holds={"owned-a100-1": {"air_gapped": True},
                                        "owned-l40s-1": {"shared_non_ai_production": True}})
    wave = result["wave"]
    assert [p["node"] for p in wave["nodes"]] == ["owned-a100-2"]
    assert wave["spare"] is None
    assert wave["uncovered_rows"] == [{"row": "l40s-550", "reason": "every node in the row is held"}]


def _reasons(result):
    return {h["node"]: [r["reason"] for r in h["reasons"]] for h in result["holds"]}


def test_hold_reasons():
    nodes = lab()
    nodes.append(dict(nodes[0], hostname="owned-v100-1",
                      gpu={"model": "Tesla V100-SXM2-32GB", "count": 8, "memory_mib": 32768,
                           "mig_mode": None}))
    holds = {"owned-a100-1": {"air_gapped": True},
             "owned-a100-2": {"shared_non_ai_production": True, "security_signoff": False}}
    result = matrix.build(nodes, holds=holds)
    assert _reasons(result) == {
        "owned-a100-1": ["air_gapped"],
        "owned-a100-2": ["shared_non_ai_production", "unsigned_boundary"],
        "owned-v100-1": ["hardware_generation_far"],
    }
    # Configurable distance: A100 (ampere) is 2 from H200 (hopper).
    result = matrix.build(lab(), max_generation_distance=1)
    assert _reasons(result) == {"owned-a100-1": ["hardware_generation_far"],
                                "owned-a100-2": ["hardware_generation_far"]}


def test_unsigned_boundary_holds_covered_nodes():
    status = {"status": "unsigned", "reasons": ["not signed"],
              "applies_to": {"nodes": ["owned-l40s-1"], "groups": []}}
    assert _reasons(matrix.build(lab(), boundary_status=status)) == {"owned-l40s-1": ["unsigned_boundary"]}
    status["applies_to"] = {"nodes": [], "groups": ["owned"]}
    assert len(_reasons(matrix.build(lab(), boundary_status=status))) == 3
    status["status"] = "signed"
    assert _reasons(matrix.build(lab(), boundary_status=status)) == {}


def test_unknown_gpu_is_held_not_guessed():
    nodes = lab()
    nodes[2]["gpu"]["model"] = "Mystery Accelerator 9000"
    assert _reasons(matrix.build(nodes))["owned-l40s-1"] == ["hardware_generation_unknown"]


def test_architecture_table():
    assert version_rules.gpu_architecture("NVIDIA A100-SXM4-80GB")["architecture"] == "ampere"
    assert version_rules.gpu_architecture("NVIDIA A10")["compute_capability"] == "8.6"
    assert version_rules.gpu_architecture("NVIDIA L40S")["architecture"] == "ada"
    assert version_rules.gpu_architecture("NVIDIA GH200 480GB")["architecture"] == "hopper"
    assert version_rules.gpu_architecture("NVIDIA B200")["generation"] == 6
    assert version_rules.gpu_architecture("NVIDIA RTX 6000 Ada Generation")["architecture"] == "ada"
    assert version_rules.gpu_architecture(None) is None


def test_output_is_stable_and_json_able():
    a = matrix.build(lab(), job_image_cuda="12.4", api_server_versions=API)
    shuffled = list(reversed(lab()))
    b = matrix.build(shuffled, job_image_cuda="12.4", api_server_versions=API)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize("nodes,needle", [
    ([{"gpu": {}}], "nodes[0]: no hostname"),
    ([{"hostname": "x", "gpu": {"count": "8"}}], "nodes[0] (x): gpu.count must be an integer"),
    ([{"hostname": "x", "side": "edge"}], "side 'edge' is not owned or cloud"),
    ([{"hostname": "x"}, {"hostname": "x"}], "hostname 'x' appears twice"),
    ("nope", "nodes: expected a list"),
])
def test_bad_input_names_node_and_field(nodes, needle):
    with pytest.raises(matrix.MatrixError) as info:
        matrix.build(nodes)
    assert needle in str(info.value)


def test_unknown_hold_marker():
    with pytest.raises(matrix.MatrixError, match="holds.owned-a100-1: unknown marker"):
        matrix.build(lab(), holds={"owned-a100-1": {"airgapped": True}})
