# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""From what the preflight role gathers to the matrix's per-node input.

The role gathers, per host, its name, its node group and the ``hybridgpu_gpu`` facts of
``gpu_facts``, plus the ``k8s_node_info`` results of every Kubernetes context. This turns
them into the node dicts ``matrix.normalise`` reads and the API server version per side.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight.matrix import MatrixError


def kubelet_versions(k8s_results):
    """Node name -> kubelet version over every context's Nodes (a later context wins)."""
    out = {}
    for result in k8s_results or []:
        for node in result.get("nodes") or []:
            out[node.get("name")] = node.get("kubelet_version")
    return out


def api_server_versions(k8s_results):
    """Side (the context's key in preflight_k8s_contexts) -> kube-apiserver version."""
    return {(result.get("item") or {}).get("key"): result.get("server_version")
            for result in k8s_results or []}


def _sub(facts, key):
    value = facts.get(key)
    return value if isinstance(value, dict) else {}


def node_from_gpu_facts(hostname, facts, side="owned", node_group=None, kubelet_version=None):
    """One host's gpu_facts -> the matrix node dict.

    The kubelet version the Node reports through the API wins; else the version of a kubelet
    binary gpu_facts found on the node; else none.
    """
    agent = _sub(facts, "agent")
    runtime = facts.get("container_runtime")
    os_facts = _sub(facts, "os")
    count = facts.get("count")
    return {
        "hostname": hostname,
        "side": side,
        "node_group": node_group,
        "gpu": {
            "model": facts.get("model"),
            "count": int(count) if count is not None else 0,
            "memory_mib": facts.get("memory_mib"),
            "mig_mode": facts.get("mig_mode"),
        },
        "driver_version": facts.get("driver_version"),
        "cuda_version": facts.get("cuda_version"),
        "kernel": _sub(facts, "kernel").get("release"),
        "os": {
            "id": os_facts.get("id"),
            "version_id": os_facts.get("version_id"),
            "pretty": os_facts.get("pretty_name"),
        },
        "image_id": facts.get("image_id"),
        "container_runtime": "%s %s" % (runtime.get("name"), runtime.get("version")) if runtime else None,
        "agent_version": kubelet_version or (agent.get("version") if agent.get("kind") == "kubelet" else None),
    }


def nodes_from_hosts(hosts, cloud_hosts=None, k8s_results=None):
    """Each ``{hostname, node_group, gpu_facts}`` -> a matrix node; hosts in ``cloud_hosts``
    are the cloud side, every other host is owned."""
    cloud = set(cloud_hosts or [])
    kubelets = kubelet_versions(k8s_results)
    out = []
    for i, host in enumerate(hosts or []):
        name = host.get("hostname") if isinstance(host, dict) else None
        if not name:
            raise MatrixError("hosts[%d]: no hostname" % i)
        if not isinstance(host.get("gpu_facts"), dict):
            raise MatrixError("hosts[%d] (%s): gpu_facts must be the hybridgpu_gpu facts of gpu_facts" % (i, name))
        out.append(node_from_gpu_facts(name, host["gpu_facts"], "cloud" if name in cloud else "owned",
                                       host.get("node_group"), kubelets.get(name)))
    return out
