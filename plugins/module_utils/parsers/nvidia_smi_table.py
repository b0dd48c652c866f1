# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parser for the default ``nvidia-smi`` table (the command run without arguments).

Pure Python 3 standard library, so the same code runs inside a module on a node.
The CSV and XML outputs are read by ``nvidia_smi``, which also holds the error class.
"""

from __future__ import annotations

import re

from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers.nvidia_smi import NvidiaSmiParseError

__all__ = ["parse_table"]

_BANNER_SMI = re.compile(r"NVIDIA-SMI\s+(\S+)")
_BANNER_DRIVER = re.compile(r"(Driver|KMD) Version:\s*(\S+)")
_BANNER_CUDA = re.compile(r"CUDA(?: UMD)? Version:\s*(\S+)")
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_MIB_PAIR = re.compile(r"(\d+)\s*MiB\s*/\s*(\d+)\s*MiB")
_PROCESS = re.compile(
    r"^\s*(\d+)\s+(?:(\S+)\s+(\S+)\s+)?(\d+)\s+(C\+G|C|G|M|M\+C)\s+(.*?)\s+(\d+MiB|N/A)\s*$")


def _cells(line):
    """Cells between the ``|`` separators of one table line."""
    parts = line.split("|")
    if len(parts) < 3:
        return []
    return [part.strip() for part in parts[1:-1]]


def _int_or_none(text):
    text = text.strip()
    return int(text) if re.match(r"^-?\d+$", text) else None


def _strip_unit(text, unit):
    text = text.strip()
    if text.endswith(unit) and _int_or_none(text[: -len(unit)]) is not None:
        return int(text[: -len(unit)])
    return None


def parse_table(text):
    """Parse the default ``nvidia-smi`` table (no arguments).

    Handles the pre-530 79-column layout, the 530 transitional layout, the
    current 89-column layout, the ``KMD Version`` / ``CUDA UMD Version`` banner,
    Windows (WDDM/TCC driver model column), MIG device sub-tables, processes with
    truncated names (``...python``) and CRLF endings.

    Returns a dict:
      ``smi_version``, ``driver_version``, ``cuda_version`` (strings or None),
      ``driver_label`` ("Driver" or "KMD"), ``version_mismatch`` (True when the
      nvidia-smi banner version differs from the driver version, e.g. WSL),
      ``timestamp`` (first line if it is not part of the table),
      ``gpus``: list of {index, name, name_truncated, persistence_mode or
      driver_model, bus_id, display_active, ecc, fan_percent, temperature_c,
      perf_state, power_w, power_cap_w, memory_used_mib, memory_total_mib,
      utilization_percent, compute_mode, mig_mode},
      ``mig_devices``: list of {gpu, gi_id, ci_id, mig_dev, memory_used_mib,
      memory_total_mib, bar1_used_mib, bar1_total_mib, sm},
      ``processes``: list of {gpu, gi_id, ci_id, pid, type, name,
      name_truncated, memory_mib},
      ``errors``: list of strings.
    """
    if text is None:
        raise NvidiaSmiParseError("no nvidia-smi table output (None)")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    result = {"smi_version": None, "driver_version": None, "driver_label": None,
              "cuda_version": None, "version_mismatch": False, "timestamp": None,
              "gpus": [], "mig_devices": [], "processes": [], "errors": []}
    first = lines[0].strip() if lines else ""
    if first and not first.startswith(("+", "|")):
        result["timestamp"] = first
    banner = _read_banner(lines, text, result)
    section = None  # gpus, mig, processes
    pending = []    # lines of the record being read
    for line in lines:
        stripped = line.strip()
        if line is banner:
            section = "gpus"
            continue
        if "MIG devices:" in line:
            section, pending = "mig", []
            continue
        if "Processes:" in line:
            section, pending = "processes", []
            continue
        if not stripped.startswith("|"):
            # borders (+---+) and blank lines end a record
            if pending:
                _flush(section, pending, result)
                pending = []
            continue
        if stripped.startswith("|==") or stripped.startswith("|--"):
            pending = []
            continue
        cells = _cells(stripped)
        if section == "processes":
            _process_line(cells, stripped, result)
            continue
        if section in ("gpus", "mig"):
            # header rows of a section have no digit in the first cell
            if cells and cells[0] and not re.match(r"^\d", cells[0]) and not pending:
                continue
            if cells and re.match(r"^\d", cells[0]) and pending and section == "mig":
                _flush(section, pending, result)
                pending = []
            pending.append(cells)
    if pending:
        _flush(section, pending, result)
    return result


def _read_banner(lines, text, result):
    """Read the versions from the ``NVIDIA-SMI <version>`` banner line; returns that line."""
    banner = next((ln for ln in lines if re.search(r"NVIDIA-SMI\s+\d", ln)), None)
    if banner is None:
        raise NvidiaSmiParseError("not an nvidia-smi table (no 'NVIDIA-SMI <version>' banner): %r"
                                  % text.strip()[:200])
    match = _BANNER_SMI.search(banner)
    result["smi_version"] = match.group(1) if match else None
    match = _BANNER_DRIVER.search(banner)
    if match:
        result["driver_label"], result["driver_version"] = match.group(1), match.group(2)
    match = _BANNER_CUDA.search(banner)
    result["cuda_version"] = match.group(1) if match else None
    if result["smi_version"] and result["driver_version"]:
        result["version_mismatch"] = result["smi_version"] != result["driver_version"]
    return banner


def _process_line(cells, line, result):
    """One row of the Processes section (header rows and "No running processes" are skipped)."""
    body = " ".join(cells)
    if not body or "No running processes" in body:
        return
    match = _PROCESS.match(body)
    if match:
        name = match.group(6)
        result["processes"].append({
            "gpu": int(match.group(1)),
            "gi_id": _int_or_none(match.group(2) or ""),
            "ci_id": _int_or_none(match.group(3) or ""),
            "pid": int(match.group(4)),
            "type": match.group(5),
            "name": name,
            "name_truncated": name.startswith("..."),
            "memory_mib": _strip_unit(match.group(7), "MiB"),
        })
    elif not re.search(r"\bGPU\b.*\bPID\b|\bID\b.*Usage", body):
        result["errors"].append("unparsed process line: %r" % line)


def _flush(section, record, result):
    if section == "gpus":
        _gpu_record(record, result)
    elif section == "mig":
        _mig_record(record, result)


def _gpu_record(record, result):
    if len(record) < 2 or len(record[0]) < 3 or len(record[1]) < 3:
        result["errors"].append("incomplete GPU record: %r" % (record,))
        return
    first, second = record[0], record[1]
    tokens = first[0].split()
    if not tokens or not tokens[0].isdigit():
        result["errors"].append("GPU record without index: %r" % (first,))
        return
    index = int(tokens[0])
    mode = tokens[-1] if len(tokens) > 2 else None
    name = " ".join(tokens[1:-1]) if len(tokens) > 2 else " ".join(tokens[1:])
    bus = first[1].split()
    gpu = {
        "index": index,
        "name": name,
        "name_truncated": name.endswith("..."),
        "persistence_mode": mode if mode in ("On", "Off") else None,
        "driver_model": mode if mode in ("WDDM", "TCC", "MCDM") else None,
        "bus_id": bus[0] if bus and _BUS_ID.match(bus[0]) else None,
        "display_active": bus[1] if len(bus) > 1 else None,
        "ecc": first[2] or None,
    }
    top = second[0].split()
    # Fan Temp Perf Pwr:Usage/Cap
    gpu["fan_percent"] = _strip_unit(top[0], "%") if top else None
    gpu["temperature_c"] = _strip_unit(top[1], "C") if len(top) > 1 else None
    gpu["perf_state"] = top[2] if len(top) > 2 and top[2].startswith("P") else None
    power = re.search(r"(\d+W|N/A)\s*/\s*(\d+W|N/A)", second[0])
    gpu["power_w"] = _strip_unit(power.group(1), "W") if power else None
    gpu["power_cap_w"] = _strip_unit(power.group(2), "W") if power else None
    mem = _MIB_PAIR.search(second[1])
    gpu["memory_used_mib"] = int(mem.group(1)) if mem else None
    gpu["memory_total_mib"] = int(mem.group(2)) if mem else None
    util = second[2].split()
    gpu["utilization_percent"] = _strip_unit(util[0], "%") if util else None
    gpu["compute_mode"] = util[1] if len(util) > 1 else None
    mig = None
    if len(record) > 2 and len(record[2]) >= 3:
        mig = record[2][2] or None
    gpu["mig_mode"] = None if mig == "N/A" else mig
    result["gpus"].append(gpu)


def _mig_record(record, result):
    first = record[0]
    ids = first[0].split()
    if len(ids) < 4 or not all(i.isdigit() for i in ids[:4]):
        result["errors"].append("MIG record without ids: %r" % (first,))
        return
    dev = {"gpu": int(ids[0]), "gi_id": int(ids[1]), "ci_id": int(ids[2]), "mig_dev": int(ids[3])}
    mem = _MIB_PAIR.search(first[1]) if len(first) > 1 else None
    dev["memory_used_mib"] = int(mem.group(1)) if mem else None
    dev["memory_total_mib"] = int(mem.group(2)) if mem else None
    bar1 = _MIB_PAIR.search(record[1][1]) if len(record) > 1 and len(record[1]) > 1 else None
    dev["bar1_used_mib"] = int(bar1.group(1)) if bar1 else None
    dev["bar1_total_mib"] = int(bar1.group(2)) if bar1 else None
    sm_words = first[2].split() if len(first) > 2 else []
    dev["sm"] = _int_or_none(sm_words[0]) if sm_words else None
    result["mig_devices"].append(dev)
