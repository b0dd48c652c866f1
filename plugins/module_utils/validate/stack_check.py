# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node needs to run GPU pods, judged from the node's gpu_facts (``stack``), its Node
object and the cluster's DaemonSets: the NVIDIA kernel module loaded with the version the
driver package says, the container toolkit installed and containerd configured with the
NVIDIA runtime, the fabric manager running with the driver's exact version on NVSwitch
systems, the NVIDIA device plugin (or the GPU Operator's) present in the cluster, and the
Node advertising ``nvidia.com/gpu`` allocatable equal to the GPU count.

Every failure names the node and the missing piece."""

from __future__ import annotations

import fnmatch

# DaemonSet names that run the NVIDIA device plugin: the static manifest and the GPU
# Operator name theirs nvidia-device-plugin-daemonset, the Helm chart <release>-nvidia-device-plugin.
DEVICE_PLUGIN_NAMES = ("*nvidia-device-plugin*",)
PIECES = ("driver module", "container toolkit", "containerd runtime", "fabric manager",
          "device plugin", "allocatable GPUs")


def needs_fabricmanager(facts, mode="auto"):
    """Whether the node needs nvidia-fabricmanager. ``auto``: NVSwitch devices are listed in
    /proc/driver/nvidia-nvswitch/devices, or the node has 8 or more SXM GPUs (HGX/DGX boards
    connect 8 SXM GPUs through NVSwitches); ``always`` / ``never`` override."""
    if mode in ("always", "never"):
        return mode == "always"
    stack = (facts or {}).get("stack") or {}
    if ((stack.get("fabricmanager") or {}).get("nvswitch_count") or 0) > 0:
        return True
    models = " ".join((facts or {}).get("models") or [(facts or {}).get("model") or ""])
    return "SXM" in models.upper() and int((facts or {}).get("count") or 0) >= 8


def _check(checks, piece, ok, detail, node):
    checks.append({"piece": piece, "ok": ok, "detail": detail if ok is not False else "node %s: %s" % (node, detail)})


def node_checks(node, facts, fabricmanager="auto"):
    """The node-side pieces from gpu_facts. Returns a list of {piece, ok (True, False or None:
    not applicable), detail}."""
    facts = facts or {}
    stack = facts.get("stack")
    checks = []
    if not stack:
        _check(checks, "driver module", False, "no GPU stack facts (gpu_facts ran with stack=false or failed)", node)
        return checks
    module = stack.get("module") or {}
    package = stack.get("driver_package") or {}
    if not module.get("loaded"):
        _check(checks, "driver module", False, "NVIDIA kernel module not loaded%s" % (
            " (driver package %s %s installed)" % (package["name"], package["version"]) if package else ""), node)
    elif package and package.get("upstream") and package["upstream"] != module.get("version"):
        _check(checks, "driver module", False,
               "NVIDIA kernel module %s is loaded but package %s is %s (reload the module or reboot)"
               % (module.get("version"), package["name"], package["version"]), node)
    else:
        _check(checks, "driver module", True, "NVIDIA kernel module %s loaded (%s)%s" % (
            module.get("version"), module.get("source"),
            "" if package else "; no driver package found, version not compared"), node)
    toolkit = stack.get("toolkit") or {}
    if toolkit.get("installed"):
        _check(checks, "container toolkit", True, "nvidia-container-toolkit %s" % toolkit.get("version"), node)
    else:
        _check(checks, "container toolkit", False, "nvidia-container-toolkit not installed (no package, no nvidia-ctk)", node)
    containerd = stack.get("containerd") or {}
    if not containerd.get("present"):
        _check(checks, "containerd runtime", False, "containerd not found (no containerd on PATH, no %s)"
               % "/etc/containerd/config.toml", node)
    elif not containerd.get("nvidia_runtimes"):
        _check(checks, "containerd runtime", False, "containerd has no nvidia runtime (runtimes in %s: %s)%s" % (
            containerd.get("source"), ", ".join(sorted(containerd.get("runtimes") or {})) or "none",
            "; " + containerd["error"] if containerd.get("error") else ""), node)
    else:
        _check(checks, "containerd runtime", True, "containerd runtimes %s use nvidia-container-runtime (default %s)"
               % (", ".join(containerd["nvidia_runtimes"]), containerd.get("default_runtime")), node)
    checks.append(_fabric_check(node, facts, stack, fabricmanager))
    return checks


def _fabric_check(node, facts, stack, mode):
    fabric = stack.get("fabricmanager") or {}
    if not needs_fabricmanager(facts, mode):
        return {"piece": "fabric manager", "ok": None, "detail": "no NVSwitch: fabric manager not needed"}
    driver = (stack.get("module") or {}).get("version") or facts.get("driver_version")
    problem = None
    if not fabric.get("installed"):
        problem = "nvidia-fabricmanager not installed on an NVSwitch system (driver %s)" % driver
    elif fabric.get("version") != driver:
        problem = "nvidia-fabricmanager %s does not match the driver %s exactly" % (fabric.get("version"), driver)
    elif not fabric.get("active"):
        problem = "nvidia-fabricmanager.service is not running"
    if problem:
        return {"piece": "fabric manager", "ok": False, "detail": "node %s: %s" % (node, problem)}
    return {"piece": "fabric manager", "ok": True, "detail": "nvidia-fabricmanager %s running" % fabric.get("version")}


def device_plugin_check(cluster, daemonsets, names=DEVICE_PLUGIN_NAMES):
    """The NVIDIA device plugin (or the GPU Operator's) among the cluster's DaemonSets
    (dicts with name, namespace, desired, ready). Returns one check."""
    found = [d for d in daemonsets or [] if any(fnmatch.fnmatch(d.get("name") or "", pat) for pat in names)]
    if not found:
        return {"piece": "device plugin", "ok": False,
                "detail": "cluster %s: no NVIDIA device plugin DaemonSet (none named %s among %d DaemonSets)"
                % (cluster, " or ".join(names), len(daemonsets or []))}
    return {"piece": "device plugin", "ok": True, "detail": "DaemonSet %s" % ", ".join(
        "%s/%s (%s/%s ready)" % (d.get("namespace"), d.get("name"), d.get("ready"), d.get("desired")) for d in found)}


def allocatable_check(node, node_info, gpu_count):
    """The Node's ``nvidia.com/gpu`` allocatable against the GPU count (the matrix row's,
    else what nvidia-smi lists). ``node_info``: a k8s_node_info entry or None."""
    if node_info is None:
        return {"piece": "allocatable GPUs", "ok": False, "detail": "node %s: not registered in the cluster" % node}
    have = node_info.get("gpu_allocatable")
    if have != gpu_count:
        return {"piece": "allocatable GPUs", "ok": False,
                "detail": "node %s: Node advertises nvidia.com/gpu allocatable %s, the node has %s GPUs"
                % (node, have, gpu_count)}
    return {"piece": "allocatable GPUs", "ok": True, "detail": "nvidia.com/gpu allocatable %s" % have}


def stack_verdict(node, facts, node_info, daemonsets, cluster, gpu_count=None, fabricmanager="auto",
                  device_plugin_names=DEVICE_PLUGIN_NAMES):
    """All pieces for one node. ``gpu_count`` None: the count nvidia-smi lists.
    Returns {passed, reasons, checks, missing (pieces that failed)}."""
    count = gpu_count if gpu_count not in (None, "") else (facts or {}).get("count")
    checks = node_checks(node, facts, fabricmanager)
    plugin = device_plugin_check(cluster, daemonsets, tuple(device_plugin_names or DEVICE_PLUGIN_NAMES))
    if plugin["ok"] is False:
        plugin["detail"] = "node %s: %s" % (node, plugin["detail"])
    checks.append(plugin)
    checks.append(allocatable_check(node, node_info, int(count) if count not in (None, "") else None))
    failed = [c for c in checks if c["ok"] is False]
    return {"passed": not failed, "reasons": [c["detail"] for c in failed], "checks": checks,
            "missing": [c["piece"] for c in failed]}
