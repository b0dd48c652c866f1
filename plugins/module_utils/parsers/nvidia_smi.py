# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers for nvidia-smi output: ``--query-gpu`` CSV, the default table and ``-q -x`` XML.

Pure Python 3 standard library, so the same code runs inside a module on a node.
The parsers report what the tool printed; they do not look anything up (no
driver-to-CUDA tables here).

Values nvidia-smi prints when it has no number (``[N/A]``, ``N/A``,
``[Not Supported]``, ``[Unknown Error]``, ``[Requested functionality has been
deprecated]`` ...) become ``None``; the printed text is kept next to it.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

__all__ = [
    "NvidiaSmiParseError",
    "parse_query_csv",
    "parse_table",
    "parse_xml",
    "summarize_gpus",
    "convert_value",
]


class NvidiaSmiParseError(ValueError):
    """Raised when text is not nvidia-smi output of the expected kind."""


# Fields whose values look numeric but are identifiers or versions: never converted.
STRING_FIELDS = frozenset([
    "driver_version", "kmd_version", "vbios_version", "compute_cap", "name", "gpu_name",
    "serial", "uuid", "gpu_uuid", "pci.bus_id", "gpu_bus_id", "pci.domain", "pci.bus",
    "pci.device", "pci.device_id", "pci.sub_device_id", "pci.baseClass", "pci.subClass",
    "timestamp", "pstate", "inforom.img", "inforom.oem", "inforom.ecc", "inforom.pwr",
    "mig.mode.current", "mig.mode.pending", "cuda_version",
])

# Field name prefixes whose values are numbers even when printed without a unit.
NUMERIC_PREFIXES = (
    "index", "count", "memory.", "temperature.", "utilization.", "fan.speed", "power.",
    "clocks.", "clocks_max.", "enforced.power", "pcie.link.", "encoder.stats.",
    "accounting.buffer_size", "ecc.errors.", "retired_pages.", "protected_memory.",
    "platform.", "module.",
)

_NO_VALUE = re.compile(r"^\[.*\]$")
_NUMBER_UNIT = re.compile(r"^(-?\d+(?:\.\d+)?)\s*([A-Za-z%]+)?$")
_HEADER_UNIT = re.compile(r"^(.*?)\s*\[([^\]]+)\]$")


def _is_no_value(text):
    """True for the placeholders nvidia-smi prints instead of a value."""
    return text == "" or text == "N/A" or bool(_NO_VALUE.match(text))


def _to_number(text):
    if re.match(r"^-?\d+$", text):
        return int(text)
    return float(text)


def convert_value(field, raw, unit=None):
    """Convert one CSV cell. Returns the value (None when the tool printed a placeholder).

    ``field`` is the query field name without its unit, ``unit`` the unit the
    header declared (``[MiB]``) if any. A value that carries its unit (``40960 MiB``,
    ``0 %``) is converted to the number. Identifiers and versions stay strings.
    """
    text = raw.strip()
    if _is_no_value(text):
        return None
    if field in STRING_FIELDS:
        return text
    match = _NUMBER_UNIT.match(text)
    if not match:
        return text
    number, suffix = match.group(1), match.group(2)
    named = field is not None and not field.startswith("col")
    numeric_field = named and field.startswith(NUMERIC_PREFIXES)
    if suffix or unit or numeric_field or (not named and re.match(r"^-?\d+$", text)):
        if suffix and unit and suffix != unit:
            # e.g. "[us]" header with "0 us" value is fine; a different unit is kept raw
            return text
        return _to_number(number)
    return text


def _split_line(line):
    return [cell.strip() for cell in line.split(",")]


def _looks_like_header(cells, fields):
    if fields and [_HEADER_UNIT.sub(r"\1", c) for c in cells] == list(fields):
        return True
    # a header cell is a dotted/underscored lowercase name, optionally with [unit]
    name = re.compile(r"^[a-z][a-zA-Z0-9_.]*(\s*\[[^\]]+\])?$")
    return all(name.match(c) for c in cells) and any(("." in c or "_" in c or c == "name" or c == "index") for c in cells)


def parse_query_csv(text, fields=None):
    """Parse ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]``.

    ``fields``: the query field names in order; needed to name the columns of
    ``noheader`` output (without it they are named ``col0``, ``col1`` ...).
    With a header, the header names win and ``fields`` is only checked.

    Returns a dict:
      ``fields``   list of field names (unit brackets removed),
      ``units``    {field: unit from the header, or None},
      ``header``   True when the text had a header line,
      ``rows``     list of {field: value} (numbers converted, placeholders None),
      ``raw``      list of {field: text as printed},
      ``unavailable`` list of {"row": i, "field": f, "raw": text} for placeholders,
      ``errors``   list of strings (rows with a wrong cell count, field mismatch).
    CRLF line endings and blank lines are accepted.
    """
    if text is None:
        raise NvidiaSmiParseError("no nvidia-smi CSV output (None)")
    lines = [ln for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n") if ln.strip()]
    result = {"fields": [], "units": {}, "header": False, "rows": [], "raw": [],
              "unavailable": [], "errors": []}
    if not lines:
        return result
    first = _split_line(lines[0])
    if _looks_like_header(first, fields):
        result["header"] = True
        names = []
        for cell in first:
            m = _HEADER_UNIT.match(cell)
            name, unit = (m.group(1), m.group(2)) if m else (cell, None)
            names.append(name)
            result["units"][name] = unit
        if fields and list(fields) != names:
            result["errors"].append("header fields %s differ from the requested fields %s" % (names, list(fields)))
        lines = lines[1:]
    else:
        if fields:
            names = list(fields)
        else:
            names = ["col%d" % i for i in range(len(first))]
        for name in names:
            result["units"][name] = None
    result["fields"] = names
    for number, line in enumerate(lines):
        cells = _split_line(line)
        if len(cells) != len(names):
            result["errors"].append("row %d has %d cells, expected %d: %r" % (number, len(cells), len(names), line[:120]))
            continue
        raw = dict(zip(names, cells))
        row = {}
        for name in names:
            value = convert_value(name, raw[name], result["units"].get(name))
            row[name] = value
            if value is None:
                result["unavailable"].append({"row": number, "field": name, "raw": raw[name]})
        result["rows"].append(row)
        result["raw"].append(raw)
    return result


# ---------------------------------------------------------------- default table

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
    return [p.strip() for p in parts[1:-1]]


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
    banner = next((ln for ln in lines if re.search(r"NVIDIA-SMI\s+\d", ln)), None)
    if banner is None:
        raise NvidiaSmiParseError("not an nvidia-smi table (no 'NVIDIA-SMI <version>' banner): %r"
                                  % text.strip()[:200])
    m = _BANNER_SMI.search(banner)
    result["smi_version"] = m.group(1) if m else None
    m = _BANNER_DRIVER.search(banner)
    if m:
        result["driver_label"], result["driver_version"] = m.group(1), m.group(2)
    m = _BANNER_CUDA.search(banner)
    result["cuda_version"] = m.group(1) if m else None
    if result["smi_version"] and result["driver_version"]:
        result["version_mismatch"] = result["smi_version"] != result["driver_version"]

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
            body = " ".join(cells)
            if not body or "No running processes" in body:
                continue
            pm = _PROCESS.match(body)
            if pm:
                name = pm.group(6)
                result["processes"].append({
                    "gpu": int(pm.group(1)),
                    "gi_id": _int_or_none(pm.group(2) or ""),
                    "ci_id": _int_or_none(pm.group(3) or ""),
                    "pid": int(pm.group(4)),
                    "type": pm.group(5),
                    "name": name,
                    "name_truncated": name.startswith("..."),
                    "memory_mib": _strip_unit(pm.group(7), "MiB"),
                })
            elif not re.search(r"\bGPU\b.*\bPID\b|\bID\b.*Usage", body):
                result["errors"].append("unparsed process line: %r" % stripped)
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
    sm = first[2].split() if len(first) > 2 else []
    dev["sm"] = _int_or_none(sm[0]) if sm else None
    result["mig_devices"].append(dev)


# ---------------------------------------------------------------- XML (-q -x)

def _text(elem, path):
    if elem is None:
        return None
    found = elem.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return None if _is_no_value(value) else value


def _mib(text):
    if text is None:
        return None
    m = re.match(r"^(\d+)\s*MiB$", text)
    return int(m.group(1)) if m else None


def parse_xml(text):
    """Parse ``nvidia-smi -q -x``.

    Returns a dict: ``driver_version``, ``cuda_version``, ``attached_gpus`` (int,
    as declared; may exceed ``len(gpus)`` in an excerpt), ``gpus``: list of
    {id (PCI id attribute), index (minor_number), product_name, product_architecture,
    uuid, serial, pci_bus_id, memory_total_mib, memory_used_mib, mig_mode,
    mig_pending, mig_devices: [{index, gi_id, ci_id, memory_total_mib, sm}]},
    ``errors``. Placeholders (N/A, [N/A]) become None.
    """
    if text is None:
        raise NvidiaSmiParseError("no nvidia-smi XML output (None)")
    try:
        root = ET.fromstring(text.encode("utf-8") if isinstance(text, str) else text)
    except ET.ParseError as exc:
        raise NvidiaSmiParseError("nvidia-smi XML does not parse: %s" % exc)
    if root.tag != "nvidia_smi_log":
        raise NvidiaSmiParseError("root element is <%s>, expected <nvidia_smi_log>" % root.tag)
    attached = _text(root, "attached_gpus")
    result = {
        "driver_version": _text(root, "driver_version"),
        "cuda_version": _text(root, "cuda_version"),
        "attached_gpus": int(attached) if attached and attached.isdigit() else None,
        "gpus": [],
        "errors": [],
    }
    for gpu in root.findall("gpu"):
        minor = _text(gpu, "minor_number")
        entry = {
            "id": gpu.get("id"),
            "index": int(minor) if minor and minor.isdigit() else None,
            "product_name": _text(gpu, "product_name"),
            "product_architecture": _text(gpu, "product_architecture"),
            "uuid": _text(gpu, "uuid"),
            "serial": _text(gpu, "serial"),
            "pci_bus_id": _text(gpu, "pci/pci_bus_id"),
            "memory_total_mib": _mib(_text(gpu, "fb_memory_usage/total")),
            "memory_used_mib": _mib(_text(gpu, "fb_memory_usage/used")),
            "mig_mode": _text(gpu, "mig_mode/current_mig"),
            "mig_pending": _text(gpu, "mig_mode/pending_mig"),
            "mig_devices": [],
        }
        for dev in gpu.findall("mig_devices/mig_device"):
            idx = _text(dev, "index")
            gi = _text(dev, "gpu_instance_id")
            ci = _text(dev, "compute_instance_id")
            sm = _text(dev, "device_attributes/shared/multiprocessor_count")
            entry["mig_devices"].append({
                "index": int(idx) if idx and idx.isdigit() else None,
                "gi_id": int(gi) if gi and gi.isdigit() else None,
                "ci_id": int(ci) if ci and ci.isdigit() else None,
                "memory_total_mib": _mib(_text(dev, "fb_memory_usage/total")),
                "sm": int(sm) if sm and sm.isdigit() else None,
            })
        result["gpus"].append(entry)
    if result["attached_gpus"] is not None and result["attached_gpus"] != len(result["gpus"]):
        result["errors"].append("attached_gpus says %d but %d <gpu> elements are present"
                                % (result["attached_gpus"], len(result["gpus"])))
    return result


# ---------------------------------------------------------------- summary

def summarize_gpus(rows):
    """Summarise per-GPU rows (dicts with name, memory_mib, mig_mode) for a facts view.

    Returns {count, models (sorted unique names), model (the one name, or None when
    mixed), memory_mib (the smallest per-GPU memory, so a mixed node is judged by
    its weakest GPU), mig_mode ("Enabled" if any GPU has MIG on, "Disabled" if all
    report Disabled, None when the tool reports N/A for all)}.
    """
    names = sorted(set(r.get("name") for r in rows if r.get("name")))
    memories = [r.get("memory_mib") for r in rows if isinstance(r.get("memory_mib"), int)]
    modes = [r.get("mig_mode") for r in rows]
    if any(m == "Enabled" for m in modes):
        mig = "Enabled"
    elif modes and all(m == "Disabled" for m in modes):
        mig = "Disabled"
    elif any(m == "Disabled" for m in modes):
        mig = "Disabled"
    else:
        mig = None
    return {
        "count": len(rows),
        "models": names,
        "model": names[0] if len(names) == 1 else None,
        "memory_mib": min(memories) if memories else None,
        "mig_mode": mig,
    }
