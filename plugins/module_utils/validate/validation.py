# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The six-step onboarding validation: verdicts as plain, JSON-able dicts.

Pure Python 3 standard library (plus the collection's own parsers), so every verdict
is unit-testable without Ansible, a cluster or a node. Each ``*_verdict`` returns
``{"step", "passed", "reasons", ...evidence}``; ``reasons`` is empty when the step passed
and otherwise says, in words, what differed from what was expected.
"""
from __future__ import annotations

import json
import re

from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import nccl
from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate.gpu_health import int_or_none, labelled_gpus

SCHEMA_VERSION = 1
STEPS = ("inventory", "reference_job", "collectives", "placement", "telemetry", "link_interruption")


class ValidationError(ValueError):
    """Bad input (not a failed check); the message names the field."""


def _verdict(step, reasons, **evidence):
    out = {"step": step, "passed": not reasons, "reasons": list(reasons)}
    out.update(evidence)
    return out


# -- step 1: inventory -------------------------------------------------------------------

def expected_from_matrix_row(row):
    """Expected GPU model/count/memory from a preflight matrix row (``values`` dict) or a
    plain dict with the same keys."""
    values = row.get("values", row) if isinstance(row, dict) else {}
    out = {}
    for key, alias in (("gpu_model", "model"), ("gpu_count", "count"), ("gpu_memory_mib", "memory_mib")):
        val = values.get(key, values.get(alias))
        if val not in (None, ""):
            out[key] = val
    return out


def inventory_verdict(node, facts, node_obj, expected, expected_labels=None):
    """Compare what the node reports (gpu_facts over SSH and the Node through the API) with
    the matrix. ``expected``: {gpu_model, gpu_count, gpu_memory_mib}; ``expected_labels``:
    {key: value} that must be on the Node (value None: the key must exist)."""
    if not expected:
        raise ValidationError("no matrix row to compare node %s with (expected is empty)" % node)
    facts = facts or {}
    reasons = []
    observed = {"gpu_model": facts.get("model"), "gpu_count": int_or_none(facts.get("count")),
                "gpu_memory_mib": int_or_none(facts.get("memory_mib"))}
    differences = []
    for key in ("gpu_model", "gpu_count", "gpu_memory_mib"):
        if key not in expected:
            continue
        want = expected[key]
        have = observed[key]
        if key != "gpu_model":
            want = int_or_none(want)
        if want != have:
            differences.append({"field": key, "source": "ssh", "expected": want, "observed": have})
    if node_obj is None:
        reasons.append("node %s is not registered in the cluster" % node)
        labels = {}
        api_gpus = None
    else:
        labels = (node_obj.get("metadata") or {}).get("labels") or {}
        api_gpus = int_or_none(((node_obj.get("status") or {}).get("capacity") or {}).get("nvidia.com/gpu"))
        want = int_or_none(expected.get("gpu_count"))
        if want is not None and api_gpus != want:
            differences.append({"field": "gpu_count", "source": "api", "expected": want,
                                "observed": api_gpus})
    for key, want in sorted((expected_labels or {}).items()):
        have = labels.get(key)
        if node_obj is None:
            continue
        if (want is None and key not in labels) or (want is not None and str(want) != have):
            differences.append({"field": "label " + key, "source": "api", "expected": want,
                                "observed": have})
    gpu_labels = labelled_gpus(labels if node_obj is not None else None, expected, expected_labels)
    differences.extend(gpu_labels.pop("differences"))
    for diff in differences:
        source = diff["source"] if diff["source"] != "labels" else "labels on node %s" % node
        reasons.append("%s (%s): expected %s, observed %s" % (diff["field"], source,
                                                              diff["expected"], diff["observed"]))
    return _verdict("inventory", reasons, node=node, expected=dict(expected),
                    expected_labels=dict(expected_labels or {}), observed=observed,
                    api_gpu_capacity=api_gpus, gpu_labels=gpu_labels, differences=differences)


# -- step 2: reference job ---------------------------------------------------------------

# The reference job itself is roles/validate/files/reference_job.py; it prints one line
# starting with REF_MARK followed by JSON (checksum, loss, the inputs it used and, on a GPU,
# its check against the CPU; or an error when it could not run).
REF_MARK = "HGPU_REF "


def reference_env(settings):
    """Job env from the reference settings (seed, samples, features, steps, lr, precision, device)."""
    keys = ("seed", "samples", "features", "steps", "lr", "precision", "device")
    return [{"name": "REF_" + k.upper(), "value": str(settings[k])} for k in keys if k in settings]


def parse_reference_log(text):
    """The result line of the reference job, as a dict; ValidationError when missing."""
    for line in reversed((text or "").splitlines()):
        line = line.strip()
        if line.startswith(REF_MARK):
            try:
                return json.loads(line[len(REF_MARK):])
            except ValueError as exc:
                raise ValidationError("reference job result line is not JSON: %s" % exc)
    raise ValidationError("reference job log has no %r line" % REF_MARK.strip())


def reference_verdict(owned, cloud, compare="checksum", tolerance=1e-6):
    """Compare two reference results {node, result, image}.

    compare=checksum: the weights, rounded to 9 significant digits, must be identical.
    compare=metric: |loss_owned - loss_cloud| / max(|loss_cloud|, 1e-12) <= tolerance.
    The inputs (seed, samples, features, steps, lr, precision) and the image must match,
    otherwise the comparison would not mean anything.
    """
    if compare not in ("checksum", "metric"):
        raise ValidationError("compare must be checksum or metric, got %r" % compare)
    reasons = []
    owned_result, cloud_result = owned["result"], cloud["result"]
    # A run that could not do its work (no CUDA device, no PyTorch) or whose GPU result
    # disagreed with the CPU says so in its line.
    for side in (owned, cloud):
        res = side["result"]
        if res.get("error"):
            reasons.append("reference job on %s: %s" % (side["node"], res["error"]))
        gpu = res.get("gpu") or {}
        if gpu.get("check") == "fail":
            reasons.append("reference job on %s: the GPU's result (%s) differs from the CPU's by %.3g "
                           "(relative), above %.3g" % (side["node"], gpu.get("name"),
                                                       float(gpu.get("max_rel_diff_vs_cpu", 0)),
                                                       float(gpu.get("tolerance", 0))))
    if reasons:
        return _verdict("reference_job", reasons, compare=compare, tolerance=tolerance,
                        checksum_match=False, relative_loss_difference=None, owned=owned, cloud=cloud)
    for key in ("seed", "samples", "features", "steps", "lr", "precision", "device"):
        if owned_result.get(key) != cloud_result.get(key):
            reasons.append("input %s differs: %s on %s, %s on %s" % (key, owned_result.get(key), owned["node"],
                                                                     cloud_result.get(key), cloud["node"]))
    if owned.get("image") != cloud.get("image"):
        reasons.append("image differs: %s vs %s" % (owned.get("image"), cloud.get("image")))
    loss_a, loss_b = float(owned_result["loss"]), float(cloud_result["loss"])
    rel = abs(loss_a - loss_b) / max(abs(loss_b), 1e-12)
    same_checksum = owned_result.get("checksum") == cloud_result.get("checksum")
    if compare == "checksum" and not same_checksum:
        reasons.append("checksum differs: %s on %s, %s on %s" % (owned_result.get("checksum"), owned["node"],
                                                                 cloud_result.get("checksum"), cloud["node"]))
    if compare == "metric" and rel > tolerance:
        reasons.append("loss differs by %.3g (relative), above tolerance %.3g: %.9g on %s, %.9g on %s"
                       % (rel, tolerance, loss_a, owned["node"], loss_b, cloud["node"]))
    return _verdict("reference_job", reasons, compare=compare, tolerance=tolerance,
                    checksum_match=same_checksum, relative_loss_difference=rel,
                    owned=owned, cloud=cloud)


# -- step 3: collectives -----------------------------------------------------------------

def nccl_summary(text):
    """Parse all_reduce_perf output and keep what the verdict and the records need."""
    parsed = nccl.parse(text or "")
    summary = nccl.summarize(parsed)
    summary["hosts"] = parsed.get("hosts", [])
    summary["ranks"] = parsed.get("ranks", 0)
    return summary


def baseline_from_summaries(summaries, margin=0.10):
    """Baseline range from runs measured before onboarding: [min*(1-margin), max*(1+margin)]
    of the average bus bandwidth. Refuses failed runs (they are not a baseline)."""
    if not summaries:
        raise ValidationError("no NCCL runs to build a baseline from")
    values = []
    for i, summary in enumerate(summaries):
        if not summary.get("passed") or summary.get("avg_busbw") is None:
            raise ValidationError("baseline run %d did not pass (wrong=%s, error=%s)"
                                  % (i, summary.get("total_wrong"), summary.get("error")))
        values.append(float(summary["avg_busbw"]))
    return {"metric": "avg_busbw_gbps", "low": round(min(values) * (1 - margin), 3),
            "high": round(max(values) * (1 + margin), 3), "measured": values, "margin": margin}


def nccl_verdict(scope, summary, baseline):
    """scope: 'intra-node' or 'multi-node'. baseline: {low, high} in GB/s (avg bus bw)."""
    if not baseline or baseline.get("low") is None:
        raise ValidationError("no NCCL baseline for the %s test: run the baseline first" % scope)
    reasons = []
    avg = summary.get("avg_busbw")
    if not summary.get("rows"):
        reasons.append("no result rows in all_reduce_perf output (error: %s)" % summary.get("error"))
    if summary.get("total_wrong"):
        reasons.append("#wrong is %s (must be 0)" % summary["total_wrong"])
    if summary.get("error"):
        reasons.append("all_reduce_perf reported: %s" % summary["error"])
    if avg is not None:
        if avg < float(baseline["low"]):
            reasons.append("avg bus bandwidth %.2f GB/s below baseline range %.2f-%.2f"
                           % (avg, baseline["low"], baseline["high"]))
        elif baseline.get("high") is not None and avg > float(baseline["high"]):
            reasons.append("avg bus bandwidth %.2f GB/s above baseline range %.2f-%.2f (hardware "
                           "changed since the baseline?)" % (avg, baseline["low"], baseline["high"]))
    elif summary.get("rows"):
        reasons.append("no bus bandwidth in the output")
    return _verdict("collectives", reasons, scope=scope, avg_busbw=avg,
                    max_busbw=summary.get("max_busbw"), total_wrong=summary.get("total_wrong"),
                    hosts=summary.get("hosts"), ranks=summary.get("ranks"), baseline=baseline)


# -- step 4: placement -------------------------------------------------------------------

def placement_verdict(runs, node_sides):
    """runs: [{cluster, job, restricted, node (or None: not scheduled), phase}].
    node_sides: {node_name: 'owned'|'cloud'}; unknown nodes count as cloud (fail closed).

    A restricted job must be scheduled only on owned nodes: scheduled on any other node is
    a failure; left unscheduled is correct where no owned node exists (the cloud cluster).
    An unmarked job must be scheduled on a node whose side is in its ``allowed_sides``."""
    reasons = []
    for run in runs:
        node = run.get("node")
        side = node_sides.get(node, "cloud") if node else None
        run["side"] = side
        where = "%s job %s in cluster %s" % ("restricted" if run.get("restricted") else "unmarked",
                                             run.get("job"), run.get("cluster"))
        if run.get("restricted"):
            if node and side != "owned":
                reasons.append("%s was scheduled on %s node %s" % (where, side, node))
            if not node and run.get("expect_scheduled"):
                reasons.append("%s was not scheduled (no owned node carries the restricted label?)"
                               % where)
        else:
            allowed = run.get("allowed_sides") or ["owned", "cloud"]
            if not node:
                reasons.append("%s was not scheduled" % where)
            elif side not in allowed:
                reasons.append("%s landed on %s node %s; policy allows %s"
                               % (where, side, node, ", ".join(allowed)))
        if node and run.get("phase") == "Failed":
            reasons.append("%s failed on %s" % (where, node))
    return _verdict("placement", reasons, runs=runs)


# -- step 5: telemetry -------------------------------------------------------------------

def telemetry_verdict(series_nodes, owned, cloud, existing_nodes, alerts, alert_name, fault_node,
                      exporter=None, diag=None):
    """series_nodes: nodes with GPU metrics in the shared Prometheus; existing_nodes: nodes
    the existing monitoring job still scrapes; alerts: /api/v1/alerts entries; exporter: the
    node's exporter_verdict; diag: the node's diag_verdict (both optional)."""
    reasons = []
    missing = sorted((set(owned) | set(cloud)) - set(series_nodes))
    if missing:
        reasons.append("no GPU metrics from %s" % ", ".join(missing))
    lost = sorted(set(owned) - set(existing_nodes))
    if lost:
        reasons.append("existing monitoring no longer receives data from %s" % ", ".join(lost))
    fired = [a for a in alerts or [] if (a.get("labels") or {}).get("alertname") == alert_name
             and a.get("state") == "firing" and fault_node in _alert_nodes(a)]
    if fault_node and not fired:
        reasons.append("alert %s did not fire for %s" % (alert_name, fault_node))
    evidence = {}
    for key, part in (("exporter", exporter), ("dcgm_diag", diag)):
        if part is not None:
            reasons.extend(part["reasons"])
            evidence[key] = part
    return _verdict("telemetry", reasons, gpu_metric_nodes=sorted(series_nodes),
                    existing_monitoring_nodes=sorted(existing_nodes), alert=alert_name,
                    fault_node=fault_node, fired=fired, **evidence)


def _alert_nodes(alert):
    labels = alert.get("labels") or {}
    return {labels.get("node"), labels.get("Hostname"), labels.get("instance", "").split(":")[0]}


# -- step 6: management link interruption --------------------------------------------------

def interruption_verdict(timeline, window_s, max_rejoin_s):
    """timeline: {cut_at, restored_at, not_ready_at (None: never reported), not_ready_status,
    ready_again_at (None: never), job_phase, job_succeeded, pod_node} in epoch seconds."""
    reasons = []
    cut, restored = timeline.get("cut_at"), timeline.get("restored_at")
    nr, back = timeline.get("not_ready_at"), timeline.get("ready_again_at")
    report = {"window_s": window_s, "max_rejoin_s": max_rejoin_s}
    report["reported_after_s"] = round(nr - cut, 1) if nr and cut else None
    report["rejoin_s"] = round(back - restored, 1) if back and restored else None
    report["job_continued"] = bool(timeline.get("job_succeeded"))
    if nr is None:
        reasons.append("the node was never reported as not Ready during the %ss cut" % window_s)
    if back is None:
        reasons.append("the node did not rejoin (Ready=True) within %ss after the link came back"
                       % max_rejoin_s)
    elif report["rejoin_s"] is not None and report["rejoin_s"] > max_rejoin_s:
        reasons.append("rejoin took %ss, more than %ss" % (report["rejoin_s"], max_rejoin_s))
    if not timeline.get("job_succeeded"):
        reasons.append("the job running during the cut did not complete (phase %s)"
                       % timeline.get("job_phase"))
    report.update(timeline)
    return _verdict("link_interruption", reasons, **report)


# -- per-node record -----------------------------------------------------------------------

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def node_record(node, side, group, steps, run=None):
    """One node's validation record: every step verdict it ran, and an overall verdict."""
    ordered = sorted(steps, key=lambda s: STEPS.index(s["step"]) if s["step"] in STEPS else 99)
    failed = [s["step"] for s in ordered if not s.get("passed")]
    return {"schema_version": SCHEMA_VERSION, "kind": "node_validation", "node": node,
            "side": side, "node_group": group, "passed": not failed and bool(ordered),
            "failed_steps": failed, "steps": ordered, "run": run or {}}


def record_filename(node):
    return "validate-%s.json" % _SAFE.sub("_", node)
