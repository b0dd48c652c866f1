#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: validation_check
short_description: Judge one step of the onboarding validation sequence from collected evidence
version_added: "0.1.0"
description:
  - Turns the evidence a validation step collected (GPU facts and the Node, two reference job
    logs, all_reduce_perf output, scheduled Pods, Prometheus answers, a link-cut timeline) into
    a verdict with the reasons it failed, naming the node and the field that differed.
  - I(step=baseline) turns one or more all_reduce_perf outputs measured before onboarding into
    a baseline range instead.
  - Pure computation; changes nothing.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.attributes.read_only
options:
  step:
    description: Which step to judge.
    type: str
    required: true
    choices: [inventory, reference_job, collectives, placement, telemetry, link_interruption, baseline, health]
  node:
    description: Node the verdict is about (for messages and records).
    type: str
  evidence:
    description:
      - Step inputs.
      - C(inventory) - C(facts) (gpu_facts' C(hybridgpu_gpu)), C(node_obj) (the Node, or null),
        C(expected) (C(gpu_model), C(gpu_count), C(gpu_memory_mib), or a preflight matrix row),
        C(expected_labels); optionally C(stack) (C({cluster, daemonsets, fabricmanager, device_plugin_names})
        - the GPU software stack is then judged too; the kernel module loaded with the driver package's
        version, nvidia-container-toolkit, containerd's nvidia runtime, nvidia-fabricmanager with the
        driver's exact version on NVSwitch systems (C(fabricmanager) C(auto), C(always) or C(never)),
        an NVIDIA device plugin DaemonSet among C(daemonsets) (k8s_daemonset_info entries, names matched
        against C(device_plugin_names), default C(*nvidia-device-plugin*)) and C(nvidia.com/gpu)
        allocatable on C(node_obj) (a k8s_node_info entry) equal to the GPU count).
      - C(reference_job) - C(owned) and C(cloud), each C({node, image, log}); C(compare)
        (C(checksum) or C(metric)); C(tolerance).
      - C(collectives) - C(scope), C(output) (all_reduce_perf stdout), C(baseline) (C({low, high})).
      - C(placement) - C(runs), C(node_sides).
      - C(telemetry) - C(series_nodes), C(owned), C(cloud), C(existing_nodes), C(alerts),
        C(alert_name), C(fault_node); with I(exporter_text) also C(expected_gpus) (the matrix row's
        GPU count; null - the GPUs the page lists), C(exporter_metrics) (metric families every GPU must
        report; default C(DCGM_FI_DEV_GPU_TEMP), C(DCGM_FI_DEV_POWER_USAGE), C(DCGM_FI_DEV_GPU_UTIL),
        C(DCGM_FI_DEV_FB_USED), C(DCGM_FI_DEV_XID_ERRORS)) and C(exporter_error) (why the page could
        not be read); optionally C(dcgm_diag) (C({rc, stdout, msg}) of C(dcgmi diag) on the node, C(msg) its
        stderr; exit status 127 - C(dcgmi) is not installed, reported as not run); optionally C(logs)
        (C({source, identifier, path, results}), C(results) holding one C({side, node, marker, found, error}) per side;
        the reference job's log line must be found on both nodes where the site's logs go).
      - C(link_interruption) - C(timeline), C(window_s), C(max_rejoin_s); C(grace_period_s) and
        C(grace_source) (the node grace period the window was sized from) are copied into the verdict.
      - C(baseline) - C(outputs) (list of all_reduce_perf stdout), C(margin).
      - C(health) - C(dcgm_diag) (C({rc, stdout, msg}) of C(dcgmi diag) on the node), the gate before a node
        returns to service. A failed test or an error fails it; C(dcgmi) not installed (exit status 127)
        passes as not run.
    type: dict
    required: true
  exporter_text:
    description:
      - I(step=telemetry) only. The node's GPU exporter page (dcgm-exporter's Prometheus text, as
        C(/metrics) serves it). Every GPU of the matrix row must report the required metric families
        with the node's C(Hostname) label, and no GPU may report a non-zero Xid.
      - Not given - the page is not judged.
    type: str
  fail:
    description: Fail the task when the verdict is negative (the verdict is returned either way).
    type: bool
    default: true
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Inventory check against the matrix row
  hybridgpu.fleet.validation_check:
    step: inventory
    node: "{{ inventory_hostname }}"
    evidence:
      facts: "{{ ansible_facts.hybridgpu_gpu }}"
      node_obj: "{{ node_info.nodes[0] | default(None) }}"
      expected: {gpu_model: NVIDIA A100-SXM4-80GB, gpu_count: 8, gpu_memory_mib: 81920}

- name: NCCL all-reduce inside the node against the group's baseline
  hybridgpu.fleet.validation_check:
    step: collectives
    node: "{{ inventory_hostname }}"
    evidence:
      scope: intra-node
      output: "{{ nccl_run.stdout }}"
      baseline: {low: 200.0, high: 260.0}
"""

RETURN = r"""
verdict:
  description: C({step, passed, reasons, ...evidence}); for I(step=baseline) the baseline range.
  returned: always
  type: dict
passed:
  description: Whether the step passed.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate import gpu_health, log_check, stack_check, validation


def judge(step, node, ev, exporter_text=None):
    """The verdict dict of one step (raises ValidationError or KeyError on bad evidence)."""
    if step == "inventory":
        expected = validation.expected_from_matrix_row(ev.get("expected") or {})
        node_obj = ev.get("node_obj")
        if isinstance(node_obj, dict) and "metadata" not in node_obj and "labels" in node_obj:
            # a k8s_node_info summary: rebuild the parts the verdict reads
            node_obj = {"metadata": {"labels": node_obj["labels"]},
                        "status": {"capacity": {"nvidia.com/gpu": node_obj.get("gpu_capacity")}}}
        verdict = validation.inventory_verdict(node, ev.get("facts"), node_obj or None, expected,
                                               ev.get("expected_labels"))
        if ev.get("stack"):
            verdict = _with_stack(verdict, node, ev)
        return verdict
    if step == "reference_job":
        sides, missing = {}, []
        for side in ("owned", "cloud"):
            run = ev[side]
            try:
                result = validation.parse_reference_log(run.get("log"))
            except validation.ValidationError as exc:
                result = None
                missing.append("no result from the %s run on %s (pod phase %s): %s"
                               % (side, run.get("node"), run.get("phase"), exc))
            sides[side] = {"node": run.get("node"), "image": run.get("image"), "result": result}
        if missing:
            return {"step": "reference_job", "passed": False, "reasons": missing,
                    "owned": sides["owned"], "cloud": sides["cloud"]}
        return validation.reference_verdict(sides["owned"], sides["cloud"], ev.get("compare", "checksum"),
                                            float(ev.get("tolerance", 1e-6)))
    if step == "collectives":
        return validation.nccl_verdict(ev.get("scope", "intra-node"), validation.nccl_summary(ev.get("output")),
                                       ev.get("baseline"))
    if step == "placement":
        return validation.placement_verdict(list(ev["runs"]), dict(ev.get("node_sides") or {}))
    if step == "telemetry":
        exporter = diag = None
        if exporter_text is not None or ev.get("exporter_error"):
            expected = ev.get("expected_gpus")
            exporter = gpu_health.exporter_verdict(
                node, exporter_text, int(expected) if expected not in (None, "") else None,
                tuple(ev.get("exporter_metrics") or gpu_health.EXPORTER_FAMILIES), ev.get("exporter_error"))
        if ev.get("dcgm_diag"):
            run = ev["dcgm_diag"]
            diag = gpu_health.diag_verdict(node, run.get("stdout"), run.get("rc"), run.get("msg") if run.get("rc") else None)
        verdict = validation.telemetry_verdict(ev.get("series_nodes") or [], ev.get("owned") or [],
                                               ev.get("cloud") or [], ev.get("existing_nodes") or [],
                                               ev.get("alerts") or [], ev.get("alert_name"), ev.get("fault_node"),
                                               exporter, diag)
        if ev.get("logs"):
            logs = ev["logs"]
            part = log_check.logs_verdict(logs.get("results") or [], logs.get("source"), logs.get("identifier"),
                                          logs.get("path"))
            verdict = dict(verdict, logs=part, reasons=list(verdict["reasons"]) + part["reasons"])
            verdict["passed"] = not verdict["reasons"]
        return verdict
    if step == "link_interruption":
        verdict = validation.interruption_verdict(dict(ev["timeline"]), ev.get("window_s"),
                                                  float(ev.get("max_rejoin_s", 60)))
        grace = ev.get("grace_period_s")
        verdict.update(grace_period_s=float(grace) if grace not in (None, "", "None") else None,
                       grace_source=ev.get("grace_source"))
        return verdict
    if step == "baseline":
        base = validation.baseline_from_summaries([validation.nccl_summary(o) for o in ev["outputs"]],
                                                  float(ev.get("margin", 0.10)))
        base.update(step="baseline", passed=True, reasons=[])
        return base
    if step == "health":
        run = ev["dcgm_diag"]
        diag = gpu_health.diag_verdict(node, run.get("stdout"), run.get("rc"), run.get("msg") if run.get("rc") else None)
        return {"step": "health", "passed": not diag["reasons"], "reasons": list(diag["reasons"]), "dcgm_diag": diag}
    raise validation.ValidationError("unknown step %r" % step)


def _with_stack(verdict, node, ev):
    """Add the GPU software stack pieces (stack_check) to the inventory verdict."""
    opts = ev["stack"]
    info = ev.get("node_obj") if isinstance(ev.get("node_obj"), dict) and "gpu_allocatable" in ev["node_obj"] else None
    count = (verdict.get("expected") or {}).get("gpu_count")
    stack = stack_check.stack_verdict(node, ev.get("facts"), info, opts.get("daemonsets"), opts.get("cluster"),
                                      count, opts.get("fabricmanager", "auto"),
                                      opts.get("device_plugin_names") or stack_check.DEVICE_PLUGIN_NAMES)
    verdict = dict(verdict, stack=stack, reasons=list(verdict["reasons"]) + stack["reasons"])
    verdict["passed"] = not verdict["reasons"]
    return verdict


def main():
    module = AnsibleModule(argument_spec=dict(
        step=dict(type="str", required=True, choices=list(validation.STEPS) + ["baseline", "health"]),
        node=dict(type="str"),
        evidence=dict(type="dict", required=True),
        exporter_text=dict(type="str"),
        fail=dict(type="bool", default=True),
    ), supports_check_mode=True)
    p = module.params
    try:
        verdict = judge(p["step"], p["node"], p["evidence"], p["exporter_text"])
    except (validation.ValidationError, KeyError, TypeError, ValueError) as exc:
        module.fail_json(msg="validation step %s on node %s: bad evidence: %s" % (
            p["step"], p["node"], exc if not isinstance(exc, KeyError) else "missing %s" % exc))
    if p["node"]:
        verdict.setdefault("node", p["node"])
    if not verdict["passed"] and p["fail"]:
        module.fail_json(msg="validation step %s failed on node %s: %s" % (
            p["step"], p["node"], "; ".join(verdict["reasons"])), verdict=verdict, passed=False)
    module.exit_json(changed=False, verdict=verdict, passed=verdict["passed"])


if __name__ == "__main__":
    main()
