#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: wave_gate
short_description: Decide which nodes of a wave onboarding may change, from preflight and the boundary
version_added: "0.1.0"
description:
  - Runs on the control host, once per play, before any change on a node. Returns for every node
    of O(nodes) whether it is C(admitted), C(stopped) (with the reasons) or C(overridden) (let
    past its findings by signed C(hold_override) change records).
  - A node is stopped when the access boundary does not verify against the pinned boundary
    signers (unsigned, expired, tampered), when the wave has no preflight record or the record
    did not judge the node, when preflight holds the node (C(hold:<reason>)), or when a
    preflight finding at or above O(min_severity) concerns it. Matrix violations
    (C(violation:<rule>:<row>)) concern the nodes of their row; failed path probes
    (C(path:<probe id>)) their source and destination; CIDR overlaps (C(cidr_overlap:<a>~<b>))
    and an unproven connection direction (C(connection_direction:fail), error, or
    C(connection_direction:unverified), warning) every node.
  - An override is a change record with action C(hold_override) and playbook C(onboard.yml), the
    node(s) in C(targets) and the finding ids in C(overrides), signed by an approver of
    C(hold_override) in the boundary's C(change_rights). It is verified like
    M(hybridgpu.fleet.change_approval) (signature, approver, window, four eyes, executor); a
    record that lets a node past is claimed in the ledger C(<hgpu_records_dir>/approvals) (used
    once; the same run again resumes) and written to the audit log for each node it lets past.
  - The boundary, a missing preflight record and a node preflight did not judge cannot be
    overridden.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  preflight_record:
    description: Path of the wave's C(preflight.json); a missing file stops every node.
    type: path
    required: true
  boundary:
    description: Path of the access boundary; its signature is read from the same path with C(.sig) appended.
    type: path
    required: true
  nodes:
    description: The nodes to judge.
    type: list
    elements: str
    required: true
  min_severity:
    description:
      - Findings at or above this severity stop a node; holds stop it whatever this is.
      - C(none) lets every finding through (holds, an unverified boundary and a missing preflight
        record still stop the node), for an estate whose operators reviewed and accepted its findings.
    type: str
    choices: [info, warning, error, none]
    default: error
  overrides:
    description:
      - Signed C(hold_override) records, each with C(record_path) (signature at C(.sig)) or
        C(record_text) and C(signature) (AWX extra vars).
    type: list
    elements: dict
    default: []
  executor:
    description: Person id running onboarding; checked against the performers of C(hold_override) when an override is given.
    type: str
  audit_log:
    description: The audit log an override that lets a node past is written to.
    type: path
  dest:
    description:
      - Where the decision is written as JSON (for the wave record), with a self-contained page beside it
        (same base name, C(.html), showing who was admitted, who was stopped and why, which change let a node past
        which finding); not written in check mode.
    type: path
  now:
    description: Time to judge the boundary and the windows against (ISO 8601); defaults to now.
    type: str
  boundary_signers:
    description: Set by the action plugin from the pinned signers; a task may not set it.
    type: str
  ledger_dir:
    description: Set by the action plugin to C(<hgpu_records_dir>/approvals); a task may not set it.
    type: path
  awx_user:
    description: Set by the action plugin from the AWX job's C(awx_user_name); a task may not set it.
    type: str
  checkpoint_key:
    description:
      - Set by the action plugin from the pinned audit checkpoint key (C(hgpu_audit_checkpoint_key), else
        C(/etc/hybridgpu/audit_checkpoint_key) when it exists); a task may not set it. The override's claim
        and each C(hold_override) entry sign the audit head with it.
    type: path
attributes:
  check_mode:
    support: full
    details: Judges the same way; writes neither the ledger, the audit log nor O(dest).
  diff_mode:
    support: none
requirements:
  - ssh-keygen (OpenSSH 8.2 or later) on the control host
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Gate the nodes of the wave
  hybridgpu.fleet.wave_gate:
    preflight_record: "{{ hgpu_records_dir }}/wave1/preflight.json"
    boundary: "{{ hgpu_boundary_path }}"
    nodes: "{{ ansible_play_hosts_all }}"
    min_severity: error
    overrides:
      - record_path: /srv/changes/CHG-2025-0101.yml
    executor: ops-lead
  delegate_to: localhost
  run_once: true
  register: gate
"""

RETURN = r"""
nodes:
  description: Per node the decision, the reasons it stopped and the findings overridden.
  returned: always
  type: dict
  sample:
    dh1-a100-02: {decision: stopped, reasons: ["hold:air_gapped: held by preflight: air_gapped (no permitted outbound path)"], overridden: []}
    dh1-a100-03:
      decision: overridden
      reasons: []
      overridden: [{finding: "violation:os-image-match:owned-a100", change_id: CHG-2025-0101, approver: sec-owner}]
admitted:
  description: Nodes that may be changed (admitted or overridden).
  returned: always
  type: list
  elements: str
stopped:
  description: Stopped nodes and their reasons joined in one line.
  returned: always
  type: dict
override_problems:
  description: Why a given override record was not accepted, by record.
  returned: always
  type: dict
verdicts_digest:
  description: The digest of the preflight verdicts the decision was made on.
  returned: always
  type: str
"""

import datetime
import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval, audit, ledger, schema
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.approval_signing import ApprovalError, verify_boundary
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import record_page
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import gate


def _read_record(path):
    try:
        with open(path, "r", encoding="utf-8") as handle:
            return json.load(handle)
    except (IOError, OSError):
        return None
    except ValueError as exc:
        raise gate.GateError("preflight_record: %s is not JSON (%s)" % (path, exc))


def _boundary_problem(params, now):
    try:
        verify_boundary(params["boundary"], params.get("boundary_signers") or "", now)
    except ApprovalError as exc:
        return "; ".join(exc.problems)
    except schema.SchemaError as exc:
        return "%s is invalid: %s" % (params["boundary"], "; ".join(exc.errors))
    return None


def _verify(params, item, now):
    """The verified approval of one override record (without claiming it)."""
    unknown = sorted(set(item) - {"record_path", "record_text", "signature_path", "signature"})
    if unknown or not (item.get("record_path") or item.get("record_text")):
        raise ApprovalError(["overrides: give record_path or record_text (and signature); unknown keys: %s"
                             % (", ".join(unknown) or "none")])
    text = approval.read_text(item["record_path"], "record") if item.get("record_path") else item["record_text"]
    record = approval.parse_record(text, item.get("record_path") or "record_text")
    if not set(record["targets"]) & set(params["nodes"]):
        raise ApprovalError(["targets: the record names none of this run's nodes"], record["change_id"])
    # Checked and claimed for all its targets, so the members play, every onboarding batch and a
    # rerun claim the same entry (the same run again) while only this run's nodes are judged.
    args = dict(item, boundary=params["boundary"], boundary_signers=params.get("boundary_signers"),
                action=gate.ACTION, playbook=gate.PLAYBOOK, targets=list(record["targets"]), executor=params.get("executor"),
                awx_user=params.get("awx_user"), ledger_dir=None)
    return approval.gate(args, now=now)


def _claim_used(params, decisions, approvals, problems, check_mode, now):
    """Claim the approvals that let a node past; drop any the ledger refuses. Returns the claimed."""
    claimed = []
    for cid in gate.used_change_ids(decisions):
        found = next(a for a in approvals if a["change_id"] == cid)
        if check_mode or not params.get("ledger_dir"):
            claimed.append(found)
            continue
        try:
            found["ledger"] = ledger.claim(params["ledger_dir"], found, now, checkpoint_key=params.get("checkpoint_key"))
            claimed.append(found)
        except ApprovalError as exc:
            problems[cid] = exc.problems
            approvals.remove(found)
    return claimed


def _audit(params, decisions, record):
    for node in sorted(decisions):
        for item in decisions[node]["overridden"] if decisions[node]["decision"] == "overridden" else []:
            event = audit.make_event(item["change_id"], item["approver"], item.get("executor") or "unknown",
                                     node, gate.ACTION, "ok",
                                     details={"finding": item["finding"], "message": item["message"],
                                              "verdicts_digest": record.get("verdicts_digest")})
            key = params.get("checkpoint_key")
            audit.append(params["audit_log"], event, checkpoint_key=key, checkpoint_every=1 if key else 100,
                         checkpoint_required=bool(key))


def run(params, check_mode):
    now = schema.parse_timestamp(params["now"]) if params.get("now") else None
    if params.get("now") and now is None:
        raise gate.GateError("now: %r is not an ISO 8601 time" % params["now"])
    now = now or datetime.datetime.now(datetime.timezone.utc)
    record = _read_record(params["preflight_record"])
    boundary_problem = _boundary_problem(params, now)
    approvals, problems = [], {}
    if not boundary_problem:
        for index, item in enumerate(params["overrides"]):
            try:
                approvals.append(_verify(params, item, now))
            except ApprovalError as exc:
                problems[exc.change_id or item.get("record_path") or "overrides[%d]" % index] = exc.problems
    while True:
        decisions = gate.decide(record, params["nodes"], params["min_severity"], boundary_problem, approvals)
        before = len(approvals)
        claimed = _claim_used(params, decisions, approvals, problems, check_mode, now)
        if len(approvals) == before:
            break
    if not check_mode and params.get("audit_log") and record is not None:
        _audit(params, decisions, record)
    result = {
        "nodes": decisions,
        "admitted": sorted(n for n, d in decisions.items() if d["decision"] != "stopped"),
        "stopped": dict((n, "; ".join(d["reasons"])) for n, d in decisions.items() if d["decision"] == "stopped"),
        "override_problems": problems,
        "min_severity": params["min_severity"],
        "verdicts_digest": (record or {}).get("verdicts_digest"),
        "changed": any(not (a.get("ledger") or {}).get("resumed", True) for a in claimed),
    }
    if params.get("dest") and not check_mode:
        body = dict((k, result[k]) for k in ("nodes", "admitted", "stopped", "override_problems", "min_severity", "verdicts_digest"))
        text = json.dumps(body, indent=2, sort_keys=True) + "\n"
        # the page beside the JSON (gate.html), rendered from the same decision
        record_page.write_pair(params["dest"], text, gate.render_page(json.loads(text), os.path.basename(params["dest"])),
                               mode=None)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            preflight_record=dict(type="path", required=True),
            boundary=dict(type="path", required=True),
            nodes=dict(type="list", elements="str", required=True),
            min_severity=dict(type="str", default="error", choices=list(gate.SEVERITIES) + ["none"]),
            overrides=dict(type="list", elements="dict", default=[]),
            executor=dict(type="str"),
            audit_log=dict(type="path"),
            dest=dict(type="path"),
            now=dict(type="str"),
            boundary_signers=dict(type="str"),
            ledger_dir=dict(type="path"),
            awx_user=dict(type="str"),
            checkpoint_key=dict(type="path", no_log=False),
        ),
        supports_check_mode=True,
    )
    try:
        result = run(dict(module.params), module.check_mode)
    except (gate.GateError, audit.AuditError) as exc:
        module.fail_json(msg="%s; no node was judged" % exc)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
