# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers for nvidia-smi output: ``--query-gpu`` CSV and ``-q -x`` XML (the default table: ``nvidia_smi_table``).

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
            match = _HEADER_UNIT.match(cell)
            name, unit = (match.group(1), match.group(2)) if match else (cell, None)
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
    match = re.match(r"^(\d+)\s*MiB$", text)
    return int(match.group(1)) if match else None


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
            mig_index = _text(dev, "index")
            gi_id = _text(dev, "gpu_instance_id")
            ci_id = _text(dev, "compute_instance_id")
            sm_count = _text(dev, "device_attributes/shared/multiprocessor_count")
            entry["mig_devices"].append({
                "index": int(mig_index) if mig_index and mig_index.isdigit() else None,
                "gi_id": int(gi_id) if gi_id and gi_id.isdigit() else None,
                "ci_id": int(ci_id) if ci_id and ci_id.isdigit() else None,
                "memory_total_mib": _mib(_text(dev, "fb_memory_usage/total")),
                "sm": int(sm_count) if sm_count and sm_count.isdigit() else None,
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
    names = sorted(set(row.get("name") for row in rows if row.get("name")))
    memories = [row.get("memory_mib") for row in rows if isinstance(row.get("memory_mib"), int)]
    modes = [row.get("mig_mode") for row in rows]
    if any(mode == "Enabled" for mode in modes):
        mig = "Enabled"
    elif modes and all(mode == "Disabled" for mode in modes):
        mig = "Disabled"
    elif any(mode == "Disabled" for mode in modes):
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
