"""node_summary reports the GPU feature discovery facts of real kubectl Node outputs: the labels
and status excerpts are parsed, built into a Node and summarised as k8s_node_info returns it."""
import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import k8s
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import kubectl_node

import realsamples

TOOL = "kubectl-node"


def node_from_samples(labels_name=None, status_name=None):
    labels, status = {}, {}
    if labels_name:
        labels, errors = kubectl_node.parse_labels(realsamples.read_sample(TOOL, labels_name))
        assert errors == []
    if status_name:
        parsed = kubectl_node.parse_status(realsamples.read_sample(TOOL, status_name))
        status = {"allocatable": parsed["allocatable"], "capacity": parsed["capacity"]}
    return {"metadata": {"name": "n1", "labels": labels}, "status": status}


@pytest.mark.parametrize("name", [n for n in realsamples.sample_names(TOOL) if "labels" in n])
def test_gpu_facts_are_gpu_info_of_the_labels(name):
    node = node_from_samples(labels_name=name)
    summary = k8s.node_summary(node)
    assert summary["gpu"] == kubectl_node.gpu_info(node["metadata"]["labels"])
    # every fact the expected table pins for the sample shows up in the summary
    for path, value in realsamples.load_expected(TOOL)[name].items():
        if path.startswith("gpu/"):
            assert realsamples.walk(summary, path) == value, path
        elif path.startswith("#gpu/"):
            assert len(realsamples.walk(summary, path[1:])) == value, path


def test_mig_mixed_h100_facts():
    s = k8s.node_summary(node_from_samples("h100-80gb-hbm3_labels-json_mig-mixed-all-balanced_drv550.txt"))
    gpu = s["gpu"]
    assert (gpu["product"], gpu["count"], gpu["memory_mib"]) == ("NVIDIA-H100-80GB-HBM3", 1, 81559)
    assert gpu["mig_strategy"] == "mixed" and gpu["mig_config"] == "all-balanced"
    assert gpu["mig_profiles"]["1g.10gb"] == {"count": 2, "memory_mib": 9984, "product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}
    assert (gpu["driver_version"], gpu["cuda_runtime"]) == ("550.54.15", "12.4")
    assert s["gpu_capacity"] == 0 and s["gpu_allocatable"] == 0  # no status in a labels sample


def test_time_sliced_t4_and_mig_single_a100():
    t4 = k8s.node_summary(node_from_samples("tesla-t4-shared_time-slicing-replicas8_openshift_labels-partial.txt"))["gpu"]
    assert t4["shared"] and t4["replicas"] == 8 and t4["memory_suspect"]
    a100 = k8s.node_summary(node_from_samples("a100-pcie-40gb_mig-1g.5gb_labels-partial.txt"))["gpu"]
    assert a100["mig_strategy"] == "single" and a100["count"] == 7 and a100["driver_version"] == "460.73.01"


@pytest.mark.parametrize("name", [n for n in realsamples.sample_names(TOOL) if n.startswith("status-")])
def test_gpu_quantities_from_real_status(name):
    s = k8s.node_summary(node_from_samples(status_name=name))
    assert s["gpu_capacity"] == 1 and s["gpu_allocatable"] == 1
    assert s["gpu"]["product"] is None  # a status excerpt carries no labels


def test_quantities_go_through_parse_quantity():
    node = {"metadata": {"name": "n1"}, "status": {"capacity": {"nvidia.com/gpu": "8"},
                                                   "allocatable": {"nvidia.com/gpu": "1k"}}}
    s = k8s.node_summary(node)
    assert (s["gpu_capacity"], s["gpu_allocatable"]) == (8, 1000)
    assert k8s.to_int(None) == 0 and k8s.to_int("lots") == 0
