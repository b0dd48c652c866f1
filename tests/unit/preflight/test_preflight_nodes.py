"""From the role's gathered host facts and k8s_node_info results to the matrix's node input."""
import copy
import importlib

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import nodes as n
from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight.matrix import MatrixError

from lab_facts import lab


def _gpu_facts(node, agent=None):
    """gpu_facts' hybridgpu_gpu for a lab_facts node."""
    return {
        "count": node["gpu"]["count"], "model": node["gpu"]["model"], "memory_mib": node["gpu"]["memory_mib"],
        "mig_mode": node["gpu"]["mig_mode"], "driver_version": node["driver_version"],
        "cuda_version": node["cuda_version"], "kernel": {"release": node["kernel"], "machine": "x86_64"},
        "os": {"id": node["os"]["id"], "version_id": node["os"]["version_id"], "pretty_name": node["os"]["pretty"]},
        "image_id": node["image_id"], "container_runtime": None, "agent": agent,
    }


# k8s_node_info over {owned: onprem, cloud: cloud}: what the role registers.
K8S = [
    {"item": {"key": "owned", "value": "onprem"}, "server_version": "v1.31.2",
     "nodes": [{"name": "owned-a100-1", "kubelet_version": "v1.30.4"}]},
    {"item": {"key": "cloud", "value": "cloud"}, "server_version": "v1.31.2",
     "nodes": [{"name": "cloud-h200-1", "kubelet_version": "v1.31.2"}, {"name": "cloud-h200-2", "kubelet_version": "v1.31.2"}]},
]


def _hosts():
    return [{"hostname": node["hostname"], "node_group": node["node_group"], "gpu_facts": _gpu_facts(node)}
            for node in lab()]


def test_indexes_from_k8s_node_info():
    assert n.api_server_versions(K8S) == {"owned": "v1.31.2", "cloud": "v1.31.2"}
    assert n.kubelet_versions(K8S)["owned-a100-1"] == "v1.30.4"
    assert n.api_server_versions([]) == {} and n.kubelet_versions(None) == {}


@pytest.mark.parametrize("kubelet,agent,expected", [
    ("v1.30.4", {"kind": "kubelet", "version": "v1.29.0"}, "v1.30.4"),  # the API's Node wins
    (None, {"kind": "kubelet", "version": "v1.29.0"}, "v1.29.0"),       # else a kubelet binary on the node
    (None, {"kind": "hybridgpu-node-agent", "version": "0.3"}, None),   # another agent is no kubelet
    ("", None, None),
])
def test_agent_version(kubelet, agent, expected):
    node = n.node_from_gpu_facts("h", _gpu_facts(lab()[0], agent), kubelet_version=kubelet)
    assert node["agent_version"] == expected


def test_node_shape():
    facts = _gpu_facts(lab()[2])
    facts["container_runtime"] = {"name": "containerd", "version": "1.7.2"}
    facts["count"] = None
    node = n.node_from_gpu_facts("owned-l40s-1", facts, "owned", "owned")
    assert node["container_runtime"] == "containerd 1.7.2"
    assert node["gpu"]["count"] == 0
    assert node["kernel"] == "6.1.0-28-amd64"
    assert node["os"] == {"id": "debian", "version_id": "12", "pretty": "Debian GNU/Linux 12 (bookworm)"}


def test_gathered_hosts_give_the_same_matrix_as_shaped_nodes():
    mod = importlib.import_module("ansible_collections.hybridgpu.fleet.plugins.modules.compat_matrix")
    shaped = lab()
    for node in shaped:
        node["agent_version"] = n.kubelet_versions(K8S).get(node["hostname"])
    expected = mod.run({"nodes": shaped, "api_server_versions": {"owned": "v1.31.2", "cloud": "v1.31.2"},
                        "job_image_cuda": "12.4"})[0]
    cloud_hosts = [h["hostname"] for h in lab() if h["side"] == "cloud"]
    # These hosts' facts carry no stack; test_preflight_stack.py judges it.
    got = mod.run({"hosts": _hosts(), "cloud_hosts": cloud_hosts, "k8s_node_info": copy.deepcopy(K8S),
                   "job_image_cuda": "12.4", "stack_check": False})[0]
    assert got == expected
    assert [r["id"] for r in got["rows"]][-1].startswith("cloud-")


@pytest.mark.parametrize("hosts,error", [
    ([{"gpu_facts": {}}], "hosts[0]: no hostname"),
    ([{"hostname": "a", "gpu_facts": "none"}], "hosts[0] (a): gpu_facts must be the hybridgpu_gpu facts of gpu_facts"),
])
def test_bad_hosts(hosts, error):
    with pytest.raises(MatrixError) as info:
        n.nodes_from_hosts(hosts)
    assert str(info.value) == error
