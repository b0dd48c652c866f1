# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Version rules the compatibility matrix applies, each with its vendor source.

Rules:
- ``cuda-driver-minimum``: the node's driver must be at least the minimum Linux x86_64
  driver for the CUDA toolkit the job image was built against.
- ``kubelet-apiserver-skew``: kubelet must not be newer than kube-apiserver and may be at
  most three minor versions older (two when the kubelet is older than 1.25).
- ``os-image-match``: an owned row whose OS differs from the cloud row's OS image.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

CUDA_DRIVER_CITATION = {
    "title": "NVIDIA CUDA Toolkit Release Notes, Table 3 'CUDA Toolkit and Corresponding "
             "Driver Versions' (Toolkit Driver Version, Linux x86_64)",
    "url": "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html",
}
CUDA_MINOR_COMPAT_CITATION = {
    "title": "NVIDIA CUDA Toolkit Release Notes, Table 2 'CUDA Toolkit and Minimum Required "
             "Driver Version for CUDA Minor Version Compatibility'; CUDA Compatibility guide, "
             "'Minor Version Compatibility'",
    "url": "https://docs.nvidia.com/deploy/cuda-compatibility/index.html",
}
SKEW_CITATION = {
    "title": "Kubernetes Version Skew Policy, 'kubelet': kubelet must not be newer than "
             "kube-apiserver; it may be up to three minor versions older (kubelet < 1.25: two)",
    "url": "https://kubernetes.io/releases/version-skew-policy/",
}
OS_IMAGE_CITATION = {
    "title": "Seed 003 (GMI Cloud Managed GPU Cluster request): choose data centre, Kubernetes "
             "version, worker spec, node count and OS image (default Ubuntu 22.04 x86 64-bit) to "
             "sit close to the owned fleet so one image and one set of manifests cover both",
    "url": "https://docs.gmicloud.ai/",
}

# Minimum Linux x86_64 driver per CUDA toolkit release (GA rows of Table 3 of the CUDA
# Toolkit Release Notes, CUDA_DRIVER_CITATION). Keys are "major.minor"; a job image built
# against an update release (e.g. 12.4.1) is checked against its GA row, which is the
# floor; pass `cuda_driver_table` to the matrix to pin an update row when needed.
CUDA_MIN_DRIVER = {
    "11.0": "450.36.06",
    "11.1": "455.23",
    "11.2": "460.27.03",
    "11.3": "465.19.01",
    "11.4": "470.42.01",
    "11.5": "495.29.05",
    "11.6": "510.39.01",
    "11.7": "515.43.04",
    "11.8": "520.61.05",
    "12.0": "525.60.13",
    "12.1": "530.30.02",
    "12.2": "535.54.03",
    "12.3": "545.23.06",
    "12.4": "550.54.14",
    "12.5": "555.42.02",
    "12.6": "560.28.03",
    "12.8": "570.26",
    "12.9": "575.51.03",
    "13.0": "580.65.06",
}

# Minimum driver for CUDA minor version compatibility, per CUDA major (Table 2 of the same
# release notes, CUDA_MINOR_COMPAT_CITATION). With it an application built with any 12.x
# toolkit runs on a >= 525.60.13 driver, but features that need the newer driver (and PTX
# JIT of code newer than the driver) fail; the matrix reports such rows as warnings.
CUDA_MINOR_COMPAT_MIN_DRIVER = {
    "11": "450.80.02",
    "12": "525.60.13",
    "13": "580.65.06",
}


def parse_version(text):
    """'535.230.02' -> (535, 230, 2); None or garbage -> None."""
    if text is None:
        return None
    match = re.match(r"^\s*v?(\d+(?:\.\d+)*)", str(text))
    if not match:
        return None
    return tuple(int(p) for p in match.group(1).split("."))


def driver_branch(driver_version):
    parsed = parse_version(driver_version)
    return str(parsed[0]) if parsed else None


def cuda_key(cuda_version):
    """'12.4.1' -> '12.4'."""
    parsed = parse_version(cuda_version)
    if not parsed:
        return None
    return "%d.%d" % (parsed[0], parsed[1] if len(parsed) > 1 else 0)


def _cmp(a, b):
    """Compare version tuples, padding with zeros."""
    length = max(len(a), len(b))
    a = a + (0,) * (length - len(a))
    b = b + (0,) * (length - len(b))
    return (a > b) - (a < b)


def check_cuda_driver(image_cuda, driver_version, node_cuda=None, mode="strict", table=None):
    """Return (status, message). status: pass | warn | fail | not_evaluated.

    ``mode`` 'strict' needs the toolkit's own driver floor; 'minor_compat' accepts a driver
    that only meets the minor-version-compatibility floor of the same major, as a warning.
    Without a driver version the node's reported highest CUDA version is compared instead.
    """
    table = dict(CUDA_MIN_DRIVER, **(table or {}))
    key = cuda_key(image_cuda)
    if key is None:
        return "not_evaluated", "job image CUDA version %r is not a version" % (image_cuda,)
    drv = parse_version(driver_version)
    if drv is None:
        have = parse_version(node_cuda)
        if have is None:
            return "not_evaluated", "no driver or CUDA version reported"
        if _cmp(have, parse_version(key)) >= 0:
            return "pass", "driver supports CUDA %s (>= image CUDA %s)" % (node_cuda, key)
        return "fail", "driver supports at most CUDA %s; job image needs CUDA %s" % (node_cuda, key)
    need = table.get(key)
    if need is None:
        return "not_evaluated", "CUDA %s is not in the driver table; add it via cuda_driver_table" % key
    if _cmp(drv, parse_version(need)) >= 0:
        return "pass", "driver %s >= %s required by CUDA %s" % (driver_version, need, key)
    if mode == "minor_compat":
        floor = CUDA_MINOR_COMPAT_MIN_DRIVER.get(key.split(".")[0])
        if floor and _cmp(drv, parse_version(floor)) >= 0:
            return "warn", ("driver %s < %s for CUDA %s; runs only through minor version "
                            "compatibility (>= %s): no PTX JIT of newer code, newer-driver "
                            "features fail" % (driver_version, need, key, floor))
    return "fail", "driver %s is older than %s required by CUDA %s" % (driver_version, need, key)


def check_kubelet_skew(kubelet_version, apiserver_version):
    """Return (status, message) for one kubelet against one kube-apiserver."""
    kubelet = parse_version(kubelet_version)
    api = parse_version(apiserver_version)
    if kubelet is None or api is None:
        missing = "kubelet" if kubelet is None else "API server"
        return "not_evaluated", "no %s version" % missing
    if len(kubelet) < 2 or len(api) < 2:
        return "not_evaluated", "versions need major.minor"
    if kubelet[0] != api[0]:
        return "fail", "kubelet %s and API server %s differ in major version" % (
            kubelet_version, apiserver_version)
    allowed = 3 if kubelet[1] >= 25 else 2
    diff = api[1] - kubelet[1]
    if diff < 0:
        return "fail", "kubelet %s is newer than API server %s (never allowed)" % (
            kubelet_version, apiserver_version)
    if diff > allowed:
        return "fail", "kubelet %s is %d minor versions older than API server %s (max %d)" % (
            kubelet_version, diff, apiserver_version, allowed)
    return "pass", "kubelet %s within %d minor versions of API server %s" % (
        kubelet_version, allowed, apiserver_version)


def check_os_match(row_os, cloud_os):
    """Compare 'id version_id' strings such as 'ubuntu 22.04'."""
    if not row_os or not cloud_os:
        return "not_evaluated", "OS unknown on one side"
    if row_os == cloud_os:
        return "pass", "OS %s matches the cloud row" % row_os
    return "fail", "OS %s differs from the cloud row's %s" % (row_os, cloud_os)


RULES = {
    "cuda-driver-minimum": {"severity": "error", "citation": CUDA_DRIVER_CITATION},
    "kubelet-apiserver-skew": {"severity": "error", "citation": SKEW_CITATION},
    "os-image-match": {"severity": "warning", "citation": OS_IMAGE_CITATION},
}

# GPU model -> (architecture, compute capability). Order of ARCH_ORDER defines the
# generation distance used for holds. Sources: NVIDIA "CUDA GPUs - Compute Capability"
# (https://developer.nvidia.com/cuda-gpus) and the CUDA C++ Programming Guide,
# 'Compute Capabilities'.
ARCH_CITATION = {
    "title": "NVIDIA CUDA GPUs - Compute Capability table",
    "url": "https://developer.nvidia.com/cuda-gpus",
}
ARCH_ORDER = ["pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell"]
# Longest match wins, so "A100" does not swallow "A10".
GPU_MODELS = [
    ("P100", "pascal", "6.0"), ("P40", "pascal", "6.1"), ("P4", "pascal", "6.1"),
    ("V100", "volta", "7.0"),
    ("T4", "turing", "7.5"), ("RTX 8000", "turing", "7.5"), ("RTX 6000", "turing", "7.5"),
    ("A100", "ampere", "8.0"), ("A30", "ampere", "8.0"), ("A800", "ampere", "8.0"),
    ("A10", "ampere", "8.6"), ("A16", "ampere", "8.6"), ("A2", "ampere", "8.6"),
    ("A40", "ampere", "8.6"), ("RTX A6000", "ampere", "8.6"),
    ("L4", "ada", "8.9"), ("L40", "ada", "8.9"), ("L40S", "ada", "8.9"),
    ("L20", "ada", "8.9"), ("RTX 6000 Ada", "ada", "8.9"),
    ("H100", "hopper", "9.0"), ("H800", "hopper", "9.0"), ("H200", "hopper", "9.0"),
    ("H20", "hopper", "9.0"), ("GH200", "hopper", "9.0"),
    ("B100", "blackwell", "10.0"), ("B200", "blackwell", "10.0"), ("GB200", "blackwell", "10.0"),
    ("B300", "blackwell", "10.3"), ("GB300", "blackwell", "10.3"),
    ("RTX PRO 6000 Blackwell", "blackwell", "12.0"),
]


def gpu_architecture(model):
    """'NVIDIA A100-SXM4-80GB' -> {'architecture': 'ampere', 'compute_capability': '8.0',
    'generation': 3}; unknown -> None."""
    if not model:
        return None
    text = " " + re.sub(r"[-_/,()]", " ", str(model)).upper() + " "
    best = None
    for name, arch, cap in GPU_MODELS:
        if " %s " % name.upper() in text and (best is None or len(name) > len(best[0])):
            best = (name, arch, cap)
    if best is None:
        return None
    return {"architecture": best[1], "compute_capability": best[2],
            "generation": ARCH_ORDER.index(best[1])}
