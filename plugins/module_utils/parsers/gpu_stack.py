# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers for the node-side GPU software stack: the loaded NVIDIA kernel module's version
(/sys/module/nvidia/version, /proc/driver/nvidia/version), ``nvidia-ctk --version``,
``nv-fabricmanager --version``, ``dpkg-query -W`` lines and the containerd configuration
(/etc/containerd/config.toml or ``containerd config dump``) with its runtimes.

Pure Python standard library.
"""

from __future__ import annotations

import re

__all__ = ["parse_nvrm_version", "parse_ctk_version", "parse_fabricmanager_version",
           "upstream_version", "parse_dpkg_query", "DPKG_FORMAT", "parse_containerd_config",
           "nvidia_runtimes"]

# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ..." (proprietary)
# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build ..." (open)
_NVRM = re.compile(r"^NVRM version:\s+NVIDIA UNIX\s+(?:(?!Open\b)(\S+)\s+)?(Open\s+)?Kernel Module(?:\s+for\s+(\S+))?\s+(\d+(?:\.\d+)+)")
_CTK = re.compile(r"^NVIDIA Container Toolkit CLI version\s+v?(\d+(?:\.\d+)+\S*)")
_FM = re.compile(r"Fabric\s*Manager version is\s*:\s*(\d+(?:\.\d+)+)", re.IGNORECASE)
_UPSTREAM = re.compile(r"^(?:\d+:)?(\d+(?:\.\d+)+)")


def parse_nvrm_version(text):
    """The first line of /proc/driver/nvidia/version.

    Returns {version, flavor ("open" or "proprietary"), arch} or None when the text is not
    that file (the module is not loaded: the file does not exist)."""
    for line in (text or "").splitlines():
        match = _NVRM.match(line.strip())
        if match:
            return {"version": match.group(4), "flavor": "open" if match.group(2) else "proprietary",
                    "arch": match.group(3) or match.group(1)}
    return None


def parse_ctk_version(text):
    """``nvidia-ctk --version``: ``NVIDIA Container Toolkit CLI version 1.12.0`` then a
    ``commit:`` line. Returns the version or None."""
    for line in (text or "").splitlines():
        match = _CTK.match(line.strip())
        if match:
            return match.group(1)
    return None


def parse_fabricmanager_version(text):
    """``nv-fabricmanager --version``: ``Fabric Manager version is : 535.104.05``."""
    match = _FM.search(text or "")
    return match.group(1) if match else None


def upstream_version(version):
    """The upstream part of a package version: ``535.230.02-1`` and
    ``535.183.01-0ubuntu1`` give ``535.230.02`` / ``535.183.01``; ``1:2.3-4`` gives ``2.3``."""
    match = _UPSTREAM.match(str(version or "").strip())
    return match.group(1) if match else None


# What gpu_facts passes to dpkg-query -W -f.
DPKG_FORMAT = "${Package}\\t${Version}\\t${db:Status-Abbrev}\\n"


def parse_dpkg_query(text):
    """Lines of ``dpkg-query -W -f='${Package}\\t${Version}\\t${db:Status-Abbrev}\\n' PATTERN...``.

    Returns {package: version} for the installed packages (status ``ii`` or ``hi``); lines of
    packages that are only known (removed, config-files) are left out."""
    found = {}
    for line in (text or "").splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or not parts[0].strip():
            continue
        status = parts[2].strip()
        if len(status) >= 2 and status[1] == "i" and parts[1].strip():
            found[parts[0].strip()] = parts[1].strip()
    return found


# ---------------------------------------------------------------- containerd

def _key_path(text):
    """Split a TOML dotted key (``plugins."io.containerd.grpc.v1.cri".containerd``) into parts."""
    parts, cur, quote, pos = [], "", None, 0
    while pos < len(text):
        char = text[pos]
        if quote:
            if char == quote:
                quote = None
            elif char == "\\" and quote == '"' and pos + 1 < len(text):
                pos += 1
                cur += text[pos]
            else:
                cur += char
        elif char in "\"'":
            quote = char
        elif char == ".":
            parts.append(cur.strip())
            cur = ""
        else:
            cur += char
        pos += 1
    if quote:
        return None
    parts.append(cur.strip())
    return parts


def _scalar(text):
    text = text.strip()
    if text[:1] in ("'", '"'):
        end = text.find(text[0], 1)
        return text[1:end] if end > 0 else text[1:]
    text = text.split("#", 1)[0].strip()
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        return text


def parse_containerd_config(text):
    """The parts of a containerd configuration (TOML, config versions 2 and 3) that say how
    pods get a runtime.

    Returns {version, default_runtime, runtimes: {name: {runtime_type, binary_name}},
    imports, errors}. Runtimes come from tables ``[plugins.<cri plugin>.containerd.runtimes.<name>]``
    (``io.containerd.grpc.v1.cri`` in version 2, ``io.containerd.cri.v1.runtime`` in version 3)
    and their ``.options`` table's ``BinaryName``; ``default_runtime_name`` from the
    ``containerd`` table. Only top-level tables and ``key = value`` lines are read, which is
    how containerd and ``nvidia-ctk runtime configure`` write the file."""
    result = {"version": None, "default_runtime": None, "runtimes": {}, "imports": [], "errors": []}
    table = []
    for number, raw in enumerate((text or "").replace("\r\n", "\n").split("\n"), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[[") or (line.startswith("[") and "=" not in line.split("]", 1)[0]):
            inner = line.lstrip("[").split("]", 1)[0]
            path = _key_path(inner)
            if path is None:
                result["errors"].append("line %d: bad table header %r" % (number, line[:120]))
                table = []
            else:
                table = path
                _runtime_entry(result, table)
            continue
        if "=" not in line:
            continue
        key, value = line.split("=", 1)
        key = key.strip().strip("\"'")
        if not table and key == "version":
            result["version"] = _scalar(value)
        elif not table and key == "imports":
            result["imports"] = re.findall(r"[\"']([^\"']+)[\"']", value)
        elif table[-1:] == ["containerd"] and key == "default_runtime_name":
            result["default_runtime"] = _scalar(value)
        else:
            entry = _runtime_entry(result, table)
            if entry is not None and key == "runtime_type" and len(table) >= 1 and table[-1] != "options":
                entry["runtime_type"] = _scalar(value)
            elif entry is not None and key == "BinaryName" and table[-1] == "options":
                entry["binary_name"] = _scalar(value)
    return result


def _runtime_entry(result, table):
    """The runtimes entry a table belongs to (``...containerd.runtimes.<name>[.options]``)."""
    if "runtimes" not in table or table[:1] != ["plugins"]:
        return None
    idx = table.index("runtimes")
    if idx < 1 or table[idx - 1] != "containerd" or len(table) <= idx + 1:
        return None
    if len(table) > idx + 2 and table[idx + 2] != "options":
        return None
    return result["runtimes"].setdefault(table[idx + 1], {"runtime_type": None, "binary_name": None})


def nvidia_runtimes(config):
    """Names of the runtimes whose binary is the NVIDIA container runtime
    (``nvidia-container-runtime``, also its ``.cdi`` / ``.legacy`` modes)."""
    names = []
    for name, entry in sorted((config or {}).get("runtimes", {}).items()):
        binary = str(entry.get("binary_name") or "").rsplit("/", 1)[-1]
        if binary.startswith("nvidia-container-runtime"):
            names.append(name)
    return names
