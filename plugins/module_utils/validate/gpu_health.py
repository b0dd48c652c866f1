# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health evidence for the validation steps: the Node's GPU feature discovery labels against
the matrix row (inventory), the node's dcgm-exporter page and its DCGM diagnostic (telemetry).
Verdict parts as plain, JSON-able dicts; the parsers live in parsers/dcgm.py and kubectl_node.py."""

from __future__ import annotations

import re

from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import dcgm, kubectl_node


def int_or_none(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _product_key(name):
    """A GPU model name as comparable text: lower case, '-' for blanks, no 'nvidia-' prefix
    (the labels spell 'NVIDIA A100-SXM4-80GB' as 'NVIDIA-A100-SXM4-80GB', older ones as
    'A100-SXM4-80GB')."""
    key = re.sub(r"\s+", "-", str(name or "").strip()).lower()
    return key[len("nvidia-"):] if key.startswith("nvidia-") else key


def labelled_gpus(labels, expected, expected_labels=None):
    """Compare the GPU feature discovery labels of a Node (kubectl_node.gpu_info) with the
    matrix row: the product (without the -SHARED or -MIG-<profile> suffix) with gpu_model, and
    gpu.count with gpu_count. Under the single MIG strategy gpu.count counts MIG devices, so it
    is not compared; nor when expected_labels already checks nvidia.com/gpu.count.

    Returns {state ("labelled", "not labelled" or "not registered"), product, count,
    mig_strategy, shared, compared (fields), note, differences}."""
    if labels is None:
        return {"state": "not registered", "product": None, "count": None, "mig_strategy": None,
                "shared": None, "compared": [], "note": None, "differences": []}
    info = kubectl_node.gpu_info(labels)
    out = {"state": "labelled" if info["product"] else "not labelled", "product": info["product"],
           "count": info["count"], "mig_strategy": info["mig_strategy"], "shared": info["shared"],
           "compared": [], "note": None, "differences": []}
    if not info["product"]:
        out["note"] = "GPU product not labelled (no nvidia.com/gpu.product): labels not compared"
        return out
    product = info["product"]
    mig_single = "-MIG-" in product
    base = re.sub(r"-MIG-.*$", "", product)
    base = base[:-len("-SHARED")] if base.endswith("-SHARED") else base
    if "gpu_model" in expected:
        out["compared"].append("gpu_model")
        if _product_key(base) != _product_key(expected["gpu_model"]):
            out["differences"].append({"field": "gpu_model", "source": "labels",
                                       "expected": expected["gpu_model"], "observed": product})
    want = int_or_none(expected.get("gpu_count"))
    if mig_single:
        out["note"] = "single MIG strategy: gpu.count counts MIG devices, not compared with gpu_count"
    elif want is not None and "nvidia.com/gpu.count" not in (expected_labels or {}):
        out["compared"].append("gpu_count")
        if info["count"] != want:
            out["differences"].append({"field": "gpu_count", "source": "labels", "expected": want,
                                       "observed": info["count"]})
    return out


# Metric families every GPU must report on the node's exporter page (dcgm-exporter's defaults).
EXPORTER_FAMILIES = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_UTIL",
                     "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS")


def _same_host(hostname, node):
    return bool(hostname) and hostname.split(".", maxsplit=1)[0].lower() == str(node).split(".", maxsplit=1)[0].lower()


def exporter_verdict(node, text, expected_gpus=None, families=EXPORTER_FAMILIES, error=None):
    """Judge one node's GPU exporter page (dcgm-exporter's Prometheus text).

    Every GPU 0..expected_gpus-1 (the node's matrix row; None: the GPUs the page lists) must
    report every metric family in ``families`` with the node's Hostname label; a non-zero Xid
    on any GPU is a failure. ``error``: why the page could not be read.
    Returns {passed, reasons, gpus, hosts, missing: [{gpu, metric}], xid_errors, error}."""
    reasons = []
    if error or not (text or "").strip():
        reason = "GPU exporter page of node %s could not be read: %s" % (node, error or "empty page")
        return {"passed": False, "reasons": [reason], "gpus": [], "hosts": [], "missing": [],
                "xid_errors": [], "error": error or "empty page"}
    parsed = dcgm.parse_prometheus(text)
    summary = dcgm.exporter_summary(parsed)
    listed = [g["gpu"] for g in summary["gpus"]]
    if expected_gpus is None:
        wanted = listed
        if not wanted:
            reasons.append("GPU exporter of node %s lists no GPU" % node)
    else:
        wanted = [str(i) for i in range(int(expected_gpus))]
    seen = {}
    for sample in parsed["samples"]:
        seen.setdefault(sample["name"], set()).add(sample["labels"].get("gpu"))
    missing = []
    for gpu in wanted:
        if gpu not in listed:
            missing.append({"gpu": gpu, "metric": None})
            reasons.append("GPU %s of node %s is missing from the GPU exporter page (%d GPUs in the matrix row, "
                           "the page lists %s)" % (gpu, node, len(wanted), ", ".join(listed) or "none"))
            continue
        absent = [name for name in families if gpu not in seen.get(name, ())]
        for name in absent:
            missing.append({"gpu": gpu, "metric": name})
        if absent:
            reasons.append("GPU %s of node %s does not report %s" % (gpu, node, ", ".join(absent)))
    foreign = [h for h in summary["hosts"] if not _same_host(h, node)]
    unlabelled = [s["name"] for s in parsed["samples"] if s["labels"].get("gpu") is not None
                  and not s["labels"].get("Hostname")]
    if foreign:
        reasons.append("GPU exporter page of node %s carries Hostname %s" % (node, ", ".join(foreign)))
    elif unlabelled or not summary["hosts"]:
        reasons.append("GPU exporter page of node %s has GPU series without a Hostname label" % node)
    for err in summary["xid_errors"]:
        reason = ("GPU %s of node %s reports Xid %s%s" % (
            err["gpu"], node, err["xid"] if err["xid"] is not None else "(code not labelled)",
            " (%d times)" % err["count"] if err["count"] else ""))
        if reason not in reasons:
            reasons.append(reason)
    return {"passed": not reasons, "reasons": reasons, "gpus": listed, "hosts": summary["hosts"],
            "missing": missing, "xid_errors": summary["xid_errors"], "error": None}


def diag_verdict(node, output, rc=0, error=None):
    """Judge ``dcgmi diag`` on the node. ``rc`` 127 or an ``error`` (stderr, or why the command
    did not start) saying the file is missing: dcgmi is not installed, and the diagnostic is
    "not run" (neither passed nor failed).

    Returns {state ("not run", "pass", "warn", "fail"), reasons, overall, failed_tests, note}."""
    if rc == 127 or (error and "No such file" in error):
        return {"state": "not run", "reasons": [], "overall": None, "failed_tests": [],
                "note": "dcgmi not installed"}
    parsed = dcgm.parse_diag(output or "")
    failed = []
    for test in parsed["tests"]:
        if test["status"] in ("Fail", "Error"):
            bad = [r for r in test["results"] if r["status"] in ("Fail", "Error")]
            failed.append("%s (%s)" % (test["name"], "; ".join(r["detail"] or r["status"] for r in bad)))
    failed += ["%s: %s" % (m["section"] or m["test"], m["text"]) for m in parsed["messages"] if m["kind"] == "Error"]
    if failed:
        return {"state": "fail", "overall": parsed["overall"], "failed_tests": failed, "note": None,
                "reasons": ["DCGM diagnostic on node %s failed: %s" % (node, ", ".join(failed))]}
    if not parsed["tests"] and not parsed["ran"]:
        first = next((line.strip() for line in (output or error or "").splitlines() if line.strip()), "no output")
        return {"state": "fail", "overall": None, "failed_tests": [], "note": None,
                "reasons": ["DCGM diagnostic on node %s did not run (rc %s): %s" % (node, rc, first)]}
    state = "warn" if parsed["overall"] == "Warn" else "pass"
    return {"state": state, "reasons": [], "overall": parsed["overall"], "failed_tests": [], "note": None}
