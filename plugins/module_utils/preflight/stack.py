# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU software stack in preflight, judged with validation's checks (``stack_check``, which the
module hands in as ``checker`` so the two capabilities stay apart) from what preflight already
gathered: each host's gpu_facts (``stack``) and the Nodes that ``k8s_node_info`` listed per side.

Node side: the NVIDIA kernel module loaded with the driver package's version, the container
toolkit, containerd's nvidia runtime, and the fabric manager with the driver's exact version on
NVSwitch systems. Cluster side: a node that already has a Node object must advertise
``nvidia.com/gpu`` allocatable equal to its GPU count; a node without one (not joined yet) is
not judged for it. The device plugin DaemonSet needs a DaemonSet list preflight does not read;
validation step 1 checks it.

Owned hosts are always judged; a cloud host only when its facts carry ``stack`` (the cloud side
runs its own nodes). The matrix turns each failure into a violation of the piece's rule.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

FABRICMANAGER_MODES = ("auto", "always", "never")

_TOOLKIT_CITATION = {
    "title": "NVIDIA Container Toolkit, Installation Guide: install nvidia-container-toolkit and configure "
             "containerd with the nvidia runtime (nvidia-ctk runtime configure --runtime=containerd)",
    "url": "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html",
}

# Rule per piece of stack_check; every one stops the node at the default gate severity.
RULES = {
    "gpu-stack-driver-module": {
        "piece": "driver module", "severity": "error",
        "citation": {"title": "NVIDIA Driver Installation Guide: the loaded kernel module and the installed driver "
                              "must be one version (after a package upgrade, reload the module or reboot)",
                     "url": "https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/index.html"}},
    "gpu-stack-container-toolkit": {"piece": "container toolkit", "severity": "error", "citation": _TOOLKIT_CITATION},
    "gpu-stack-containerd-runtime": {"piece": "containerd runtime", "severity": "error", "citation": _TOOLKIT_CITATION},
    "gpu-stack-fabric-manager": {
        "piece": "fabric manager", "severity": "error",
        "citation": {"title": "NVIDIA Fabric Manager User Guide: NVSwitch systems (HGX, DGX) need the fabric manager "
                              "running, with the same version as the driver",
                     "url": "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html"}},
    "gpu-stack-allocatable-gpus": {
        "piece": "allocatable GPUs", "severity": "error",
        "citation": {"title": "Kubernetes, Schedule GPUs: the vendor's device plugin advertises the GPUs as the "
                              "extended resource nvidia.com/gpu that pods request",
                     "url": "https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/"}},
}
RULE_OF_PIECE = dict((spec["piece"], rule) for rule, spec in RULES.items())


def nodes_by_side(k8s_results):
    """Side (the context's key) -> {Node name: k8s_node_info entry}; sides without a result are absent."""
    out = {}
    for result in k8s_results or []:
        side = (result.get("item") or {}).get("key")
        out.setdefault(side, {}).update((node.get("name"), node) for node in result.get("nodes") or [])
    return out


def judge_host(checker, name, facts, side, api_nodes, fabricmanager="auto"):
    """The checks of one host: {node, side, checks: [{piece, ok (True, False, None: not judged), detail}]}.

    ``checker``: validation's stack_check (node_checks, allocatable_check). ``api_nodes``: the Nodes
    of the host's side by name, or None when that side's API was not read (then the allocatable
    piece is not judged either)."""
    checks = checker.node_checks(name, facts, fabricmanager)
    if api_nodes is None:
        checks.append({"piece": "allocatable GPUs", "ok": None, "detail": "the %s API was not read" % side})
    elif name not in api_nodes:
        checks.append({"piece": "allocatable GPUs", "ok": None,
                       "detail": "no Node yet (not joined): judged after the join"})
    else:
        count = (facts or {}).get("count")
        checks.append(checker.allocatable_check(name, api_nodes[name], int(count) if count is not None else None))
    return {"node": name, "side": side, "checks": checks}


def judge(checker, hosts, cloud_hosts=None, k8s_results=None, fabricmanager="auto"):
    """Every judged host of ``hosts`` (``{hostname, gpu_facts}``), sorted by name; ``checker`` as in judge_host."""
    if fabricmanager not in FABRICMANAGER_MODES:
        raise ValueError("fabricmanager: %r is not one of %s" % (fabricmanager, ", ".join(FABRICMANAGER_MODES)))
    cloud = set(cloud_hosts or [])
    api = nodes_by_side(k8s_results)
    out = []
    for host in sorted(hosts or [], key=lambda h: h.get("hostname") or ""):
        name = host.get("hostname")
        facts = host.get("gpu_facts") or {}
        side = "cloud" if name in cloud else "owned"
        if side == "cloud" and not facts.get("stack"):
            continue
        out.append(judge_host(checker, name, facts, side, api.get(side), fabricmanager))
    return out


def row_checks(row, judged):
    """One check per rule for a matrix row from the judged hosts: {rule, row, status, message, nodes}.

    ``status``: fail when a node of the row failed the piece (``nodes``: those nodes), pass when
    some node passed it and none failed, not_evaluated when it was judged on none."""
    members = [j for j in judged if j["node"] in row["nodes"]]
    if not members:
        return []
    out = []
    for rule, spec in RULES.items():
        failed, passed, skipped = [], [], []
        for member in members:
            for check in member["checks"]:
                if check["piece"] != spec["piece"]:
                    continue
                if check["ok"] is False:
                    failed.append((member["node"], check["detail"]))
                elif check["ok"]:
                    passed.append((member["node"], check["detail"]))
                else:
                    skipped.append((member["node"], check["detail"]))
        if failed:
            status, message = "fail", "; ".join(detail for dummy, detail in failed)
        elif passed:
            status, message = "pass", "; ".join("%s: %s" % item for item in passed + skipped)
        else:
            status, message = "not_evaluated", "; ".join("%s: %s" % item for item in skipped)
        out.append({"rule": rule, "row": row["id"], "status": status, "message": message,
                    "nodes": [node for node, dummy in failed]})
    return out


def checks(rows, judged):
    """row_checks over every matrix row, in row order (``judged`` None or empty: none)."""
    return [check for row in rows for check in row_checks(row, judged or [])]
