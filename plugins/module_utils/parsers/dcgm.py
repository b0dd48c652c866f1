# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers for DCGM outputs: dcgm-exporter's Prometheus text and ``dcgmi diag`` tables.

Pure Python 3 standard library.
"""

from __future__ import annotations

import re

__all__ = ["parse_prometheus", "exporter_summary", "parse_diag"]

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_XID_COUNTS = ("DCGM_FI_DEV_XID_ERRORS_ACTIVE", "DCGM_EXP_XID_ERRORS_COUNT")


def _unescape(value):
    return value.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def _value(text):
    try:
        return float(text)
    except ValueError:
        return None


def parse_prometheus(text):
    """Prometheus text exposition format.

    Returns {families: {name: {help, type}}, samples: [{name, labels, value, timestamp}],
    errors}. A sample whose name has no HELP/TYPE is kept (type then "untyped").
    """
    result = {"families": {}, "samples": [], "errors": []}
    for line in (text or "").replace("\r\n", "\n").split("\n"):
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                family = result["families"].setdefault(parts[2], {"help": None, "type": None})
                family["help" if parts[1] == "HELP" else "type"] = parts[3] if len(parts) > 3 else ""
            continue
        m = _SAMPLE.match(line)
        if not m:
            result["errors"].append("unparsed line: %r" % line[:200])
            continue
        labels = {}
        body = m.group(2) or ""
        pos = 0
        while pos < len(body):
            lm = _LABEL.match(body, pos)
            if not lm:
                result["errors"].append("bad labels in %r" % line[:200])
                break
            labels[lm.group(1)] = _unescape(lm.group(2))
            pos = lm.end()
        value = _value(m.group(3))
        if value is None:
            result["errors"].append("bad value %r in %r" % (m.group(3), line[:200]))
            continue
        result["samples"].append({"name": m.group(1), "labels": labels, "value": value,
                                  "timestamp": int(m.group(4)) if m.group(4) else None})
    return result


def exporter_summary(parsed):
    """What dcgm-exporter says about the node.

    Returns {gpus: [{gpu, uuid, model, device, pci_bus_id}], hosts, driver_versions,
    metrics (sorted metric names), untyped (metrics without TYPE), families_without_samples,
    mig_instances: [{gpu, gi_id, profile}], pods: [{namespace, pod, container, gpu, gi_id}],
    xid_last: {gpu: last XID value from DCGM_FI_DEV_XID_ERRORS (whole-GPU series)},
    xid_errors: [{gpu, xid, count}] from the XID count metrics (DCGM_FI_DEV_XID_ERRORS_ACTIVE /
    DCGM_EXP_XID_ERRORS_COUNT) with count > 0 plus nonzero DCGM_FI_DEV_XID_ERRORS,
    has_xid (bool)}.
    """
    gpus, hosts, drivers, mig, pods = {}, [], [], {}, []
    xid_last, xid_errors = {}, []
    names = set()
    for sample in parsed.get("samples", []):
        labels, name = sample["labels"], sample["name"]
        names.add(name)
        gpu = labels.get("gpu")
        if gpu is not None and gpu not in gpus:
            gpus[gpu] = {"gpu": gpu, "uuid": labels.get("UUID"), "model": labels.get("modelName"),
                         "device": labels.get("device"), "pci_bus_id": labels.get("pci_bus_id")}
        for value, bucket in ((labels.get("Hostname"), hosts), (labels.get("DCGM_FI_DRIVER_VERSION"), drivers)):
            if value and value not in bucket:
                bucket.append(value)
        gi = labels.get("GPU_I_ID")
        if gi is not None:
            mig.setdefault((gpu, gi), {"gpu": gpu, "gi_id": gi, "profile": labels.get("GPU_I_PROFILE")})
        if labels.get("pod"):
            entry = {"namespace": labels.get("namespace"), "pod": labels["pod"],
                     "container": labels.get("container"), "gpu": gpu, "gi_id": gi}
            if entry not in pods:
                pods.append(entry)
        if name == "DCGM_FI_DEV_XID_ERRORS":
            if gi is None:
                xid_last[gpu] = int(sample["value"])
            if sample["value"]:
                xid_errors.append({"gpu": gpu, "xid": int(sample["value"]), "count": None})
        elif name in _XID_COUNTS and sample["value"] > 0:
            xid_errors.append({"gpu": gpu, "xid": int(labels["xid"]) if labels.get("xid", "").isdigit() else None,
                               "count": int(sample["value"])})
    families = parsed.get("families", {})
    return {
        "gpus": [gpus[k] for k in sorted(gpus, key=lambda g: (len(g), g))],
        "hosts": hosts,
        "driver_versions": drivers,
        "metrics": sorted(names),
        "untyped": sorted(n for n in names if not (families.get(n) or {}).get("type")),
        "families_without_samples": sorted(n for n in families if n not in names),
        "mig_instances": sorted(mig.values(), key=lambda m: (m["gpu"] or "", int(m["gi_id"]) if m["gi_id"].isdigit() else 0)),
        "pods": pods,
        "xid_last": xid_last,
        "xid_errors": xid_errors,
        "has_xid": bool(xid_errors),
    }


# ---------------------------------------------------------------- dcgmi diag

_SECTION = re.compile(r"^[|+]-{3,}\s+(\S.*?)\s+-{2,}\+")
_STATUS = re.compile(r"^(Pass|Fail|Warn|Skip|Error)\b(?:\s*-\s*(.*))?$")
_STATUS_ORDER = {"Fail": 4, "Error": 4, "Warn": 3, "Pass": 2, "Skip": 1}
_MESSAGE_ROWS = ("Info", "Warning", "Error")
_METADATA = {"DCGM Version": "dcgm_version", "Driver Version Detected": "driver_version",
             "GPU Device IDs Detected": "gpu_device_ids"}


def _gpus(detail):
    if not detail:
        return None
    m = re.match(r"^GPUs?:\s*(.*)$", detail)
    if m:
        return [int(x) for x in re.findall(r"\d+", m.group(1))]
    return "all" if detail.strip() == "All" else None


def parse_diag(text):
    """Parse the ``dcgmi diag`` table.

    Wrapped cells are joined: a continuation that starts with a space continues after a
    word break, any other continuation continues a word cut mid-way (dcgmi wraps at a
    fixed width). A continuation that starts with a status word (``Fail - GPU: 0``) is a
    further result of the same test.

    Returns {ran (``Successfully ran diagnostic`` seen), metadata {dcgm_version,
    driver_version, gpu_device_ids (list)}, tests: [{section, name, status (worst),
    results: [{status, detail, gpus (list of ints, "all" or None)}]}],
    messages: [{section, test (the row above), kind (Info/Warning/Error), text}],
    sections (names in order), overall ("Fail"/"Warn"/"Pass"/None), errors}.
    """
    result = {"ran": False, "metadata": {}, "tests": [], "messages": [], "sections": [],
              "overall": None, "errors": []}
    section = None
    last = None  # ("test", entry) or ("message", entry) or ("meta", key)
    for line in (text or "").replace("\r\n", "\n").split("\n"):
        if not line.strip():
            continue
        if "Successfully ran diagnostic" in line:
            result["ran"] = True
            continue
        m = _SECTION.match(line)
        if m:
            section = m.group(1)
            result["sections"].append(section)
            last = None
            continue
        if not line.startswith("|"):
            continue
        parts = line.split("|")
        name = parts[1].strip() if len(parts) > 1 else ""
        raw = parts[2] if len(parts) > 2 else ""
        raw = raw[1:] if raw.startswith(" ") else raw
        value = raw.rstrip()
        if name in ("Diagnostic",) and value.strip() == "Result":
            continue
        if name:
            last = _new_row(result, section, name, value.strip(), last)
            continue
        # continuation line
        if last is None:
            result["errors"].append("continuation without a row: %r" % line)
            continue
        kind, entry = last
        status = _STATUS.match(value.strip())
        if kind == "test" and status:
            entry["results"].append({"status": status.group(1), "detail": status.group(2),
                                     "gpus": _gpus(status.group(2))})
            continue
        glue = " " if value.startswith(" ") else ""
        if kind == "test":
            tail = entry["results"][-1]
            tail["detail"] = (tail["detail"] or "") + glue + value.strip()
        elif kind == "message":
            entry["text"] += glue + value.strip()
        elif kind == "meta":
            result["metadata"][entry] += glue + value.strip()
    ids = result["metadata"].get("gpu_device_ids")
    if isinstance(ids, str):
        result["metadata"]["gpu_device_ids"] = [x.strip() for x in ids.split(",") if x.strip()]
    for test in result["tests"]:
        test["status"] = max((r["status"] for r in test["results"]),
                             key=lambda s: _STATUS_ORDER.get(s, 0), default=None)
    levels = [t["status"] for t in result["tests"] if t["status"]]
    levels += ["Fail" for msg in result["messages"] if msg["kind"] == "Error"]
    levels += ["Warn" for msg in result["messages"] if msg["kind"] == "Warning"]
    if levels:
        worst = max(levels, key=lambda s: _STATUS_ORDER.get(s, 0))
        result["overall"] = "Fail" if worst == "Error" else worst
    return result


def _new_row(result, section, name, value, last):
    if name in _METADATA:
        result["metadata"][_METADATA[name]] = value
        return ("meta", _METADATA[name])
    if name in _MESSAGE_ROWS:
        above = None
        if last is not None and last[0] == "test":
            above = last[1]["name"]
        elif last is not None and last[0] == "message":
            above = last[1]["test"]
        entry = {"section": section, "test": above, "kind": name, "text": value}
        result["messages"].append(entry)
        return ("message", entry)
    status = _STATUS.match(value)
    entry = {"section": section, "name": name, "status": None, "results": []}
    if status:
        entry["results"].append({"status": status.group(1), "detail": status.group(2),
                                 "gpus": _gpus(status.group(2))})
    else:
        entry["results"].append({"status": None, "detail": value, "gpus": None})
    result["tests"].append(entry)
    return ("test", entry)
