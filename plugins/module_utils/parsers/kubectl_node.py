# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read GPU facts from Kubernetes Node objects as kubectl prints them.

Accepts ``kubectl get node -o json`` (a Node or a List), a labels object
(``jq .metadata.labels``), label fragments (``"key": "value",`` lines with or without
braces, a trailing comma, as ``grep`` leaves them) and the ``status:`` YAML excerpt
(``allocatable``/``capacity``/``addresses``). Pure Python 3 standard library: the YAML
reader here only understands that excerpt's simple block layout.
"""

from __future__ import annotations

import json
import re

__all__ = ["parse_labels", "parse_status", "gpu_info", "parse_quantity"]

_MIG_PROFILE = re.compile(r"^nvidia\.com/mig-(\d+g\.\d+gb)\.(.+)$")


def parse_labels(text):
    """Return (labels dict, errors list) from any of the accepted label forms."""
    text = (text or "").strip()
    errors = []
    data = None
    try:
        data = json.loads(text)
    except ValueError:
        body = text
        if body.startswith("{"):
            body = body[1:]
        if body.endswith("}"):
            body = body[:-1]
        body = body.strip().rstrip(",")
        try:
            data = json.loads("{" + body + "}")
        except ValueError as exc:
            errors.append("labels do not parse as JSON or as a label fragment: %s" % exc)
            return {}, errors
    if isinstance(data, dict) and data.get("kind") == "List" or (isinstance(data, dict) and "items" in data):
        items = data.get("items") or []
        data = items[0] if items else {}
        if len(items) > 1:
            errors.append("%d nodes in the list; only the first was read" % len(items))
    if isinstance(data, dict) and isinstance(data.get("metadata"), dict):
        data = data["metadata"].get("labels") or {}
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        errors.append("labels are not a map of strings")
        return {}, errors
    return data, errors


def parse_quantity(value):
    """Kubernetes quantity to a number (``"1"`` -> 1, ``3920m`` -> 3.92, ``28748580Ki`` -> bytes)."""
    if value is None:
        return None
    value = str(value).strip().strip('"')
    m = re.match(r"^([0-9.]+)(m|k|Ki|Mi|Gi|Ti|Pi|Ei|M|G|T|P|E)?$", value)
    if not m:
        return None
    number = float(m.group(1))
    scale = {None: 1, "m": 0.001, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
             "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}[m.group(2)]
    result = number * scale
    return int(result) if result == int(result) else result


def _status_from_yaml(text):
    """The ``status:`` excerpt: returns {allocatable, capacity, addresses}."""
    out = {"allocatable": {}, "capacity": {}, "addresses": []}
    block, block_indent = None, None
    address = None
    for line in text.replace("\r\n", "\n").split("\n"):
        if not line.strip() or line.strip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        stripped = line.strip()
        if block is not None and indent <= block_indent and not stripped.startswith("- "):
            block = None
        if stripped in ("allocatable:", "capacity:", "addresses:"):
            block, block_indent = stripped[:-1], indent
            continue
        if block in ("allocatable", "capacity") and ":" in stripped:
            key, dummy, value = stripped.partition(":")
            out[block][key.strip()] = value.strip().strip('"')
        elif block == "addresses":
            if stripped.startswith("- "):
                address = {}
                out["addresses"].append(address)
                stripped = stripped[2:]
            if address is not None and ":" in stripped:
                key, dummy, value = stripped.partition(":")
                address[key.strip()] = value.strip().strip('"')
    return out


def parse_status(text):
    """Node status from ``-o json`` (Node or List) or the ``status:`` YAML excerpt.

    Returns {allocatable, capacity (maps of text), gpu_allocatable, gpu_capacity (ints or
    None), cpu_allocatable (cores, float), hostname, internal_ip, errors}.
    """
    errors = []
    status = None
    try:
        data = json.loads(text)
        if isinstance(data, dict) and "items" in data:
            data = (data.get("items") or [{}])[0]
        status = data.get("status", data) if isinstance(data, dict) else None
        status = {"allocatable": status.get("allocatable") or {}, "capacity": status.get("capacity") or {},
                  "addresses": status.get("addresses") or []}
    except (ValueError, AttributeError):
        status = _status_from_yaml(text or "")
    if not status["allocatable"] and not status["capacity"]:
        errors.append("no allocatable/capacity found")
    addresses = dict((a.get("type"), a.get("address")) for a in status["addresses"] if isinstance(a, dict))
    gpu_alloc = parse_quantity(status["allocatable"].get("nvidia.com/gpu"))
    gpu_cap = parse_quantity(status["capacity"].get("nvidia.com/gpu"))
    return {
        "allocatable": status["allocatable"],
        "capacity": status["capacity"],
        "gpu_allocatable": int(gpu_alloc) if gpu_alloc is not None else None,
        "gpu_capacity": int(gpu_cap) if gpu_cap is not None else None,
        "cpu_allocatable": parse_quantity(status["allocatable"].get("cpu")),
        "hostname": addresses.get("Hostname"),
        "internal_ip": addresses.get("InternalIP"),
        "errors": errors,
    }


def _int(value):
    return int(value) if value is not None and re.match(r"^\d+$", value) else None


def gpu_info(labels):
    """GPU facts from GPU Feature Discovery / GPU Operator labels.

    Returns {product, count, memory_mib (``gpu.memory`` as published; GFD publishes MiB),
    memory_suspect (True when the value is too large to be MiB, e.g. bytes), replicas,
    sharing_strategy, shared (time-slicing: product ends in -SHARED or replicas > 1),
    mig_capable, mig_strategy, mig_config, mig_config_state, mig_profiles
    {profile: {count, memory_mib, product}}, driver_version (major.minor.rev),
    cuda_runtime (major.minor), compute_cap, family, machine, present}.
    """
    def g(key):
        return labels.get("nvidia.com/" + key)

    memory = _int(g("gpu.memory"))
    replicas = _int(g("gpu.replicas"))
    product = g("gpu.product")
    driver = g("cuda.driver-version.full")
    if driver is None and g("cuda.driver.major") is not None:
        driver = ".".join(p for p in (g("cuda.driver.major"), g("cuda.driver.minor"), g("cuda.driver.rev")) if p)
    cuda = g("cuda.runtime-version.full")
    if cuda is None and g("cuda.runtime.major") is not None:
        cuda = "%s.%s" % (g("cuda.runtime.major"), g("cuda.runtime.minor") or "0")
    compute = None
    if g("gpu.compute.major") is not None:
        compute = "%s.%s" % (g("gpu.compute.major"), g("gpu.compute.minor") or "0")
    profiles = {}
    for key, value in labels.items():
        m = _MIG_PROFILE.match(key)
        if not m:
            continue
        entry = profiles.setdefault(m.group(1), {"count": None, "memory_mib": None, "product": None})
        if m.group(2) == "count":
            entry["count"] = _int(value)
        elif m.group(2) == "memory":
            entry["memory_mib"] = _int(value)
        elif m.group(2) == "product":
            entry["product"] = value
    present = g("gpu.present")
    return {
        "product": product,
        "count": _int(g("gpu.count")),
        "memory_mib": memory,
        "memory_suspect": memory is not None and memory > 10 ** 7,
        "replicas": replicas,
        "sharing_strategy": g("gpu.sharing-strategy"),
        "shared": bool((product or "").endswith("-SHARED") or (replicas or 0) > 1),
        "mig_capable": None if g("mig.capable") is None else g("mig.capable") == "true",
        "mig_strategy": g("mig.strategy"),
        "mig_config": g("mig.config"),
        "mig_config_state": g("mig.config.state"),
        "mig_profiles": profiles,
        "driver_version": driver,
        "cuda_runtime": cuda,
        "compute_cap": compute,
        "family": g("gpu.family"),
        "machine": g("gpu.machine"),
        "present": None if present is None else present == "true",
    }
