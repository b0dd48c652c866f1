"""kubectl_node beyond the real samples: full Node JSON and List forms."""
import json

from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import kubectl_node

NODE = {"kind": "Node", "metadata": {"name": "owned-a100-1", "labels": {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8"}},
    "status": {"capacity": {"nvidia.com/gpu": "8", "cpu": "2"}, "allocatable": {"nvidia.com/gpu": "8"},
               "addresses": [{"type": "InternalIP", "address": "10.213.77.11"}]}}


def test_node_and_list_json():
    for doc in (NODE, {"kind": "List", "items": [NODE]}):
        labels, errors = kubectl_node.parse_labels(json.dumps(doc))
        assert errors == [] and kubectl_node.gpu_info(labels)["count"] == 8
        status = kubectl_node.parse_status(json.dumps(doc))
        assert status["gpu_capacity"] == 8 and status["internal_ip"] == "10.213.77.11"


def test_bad_labels_and_quantities():
    assert kubectl_node.parse_labels("not json at all")[1]
    assert kubectl_node.parse_quantity("500m") == 0.5
    assert kubectl_node.parse_quantity("1Ki") == 1024
    assert kubectl_node.parse_quantity("lots") is None
