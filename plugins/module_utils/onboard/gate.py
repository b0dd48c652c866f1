# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The onboarding gate: which nodes of a wave may be changed, from the wave's preflight record,
the verified access boundary and signed override records.

A node is stopped when the boundary does not verify (unsigned, expired, or its signature is not
the pinned signer's), when there is no preflight record for the wave or the record does not
cover the node, when preflight holds it, or when a finding at or above the configured severity
concerns it. Findings and their ids:

- ``hold:<reason>``: a preflight hold of the node (air_gapped, hardware_generation_far, ...);
- ``violation:<rule>:<row>``: a matrix rule violation; it concerns the nodes of the row;
- ``path:<probe id>``: a failed path probe; it concerns the probe's source and destination;
- ``cidr_overlap:<a>~<b>``: overlapping address ranges; they concern every node;
- ``connection_direction:<verdict>``: the connection direction is not proven (fail: error,
  unverified: warning); it concerns every node.

A signed change record with action ``hold_override`` that names the node in its targets and
the finding id in ``overrides`` lets the node past that finding. The boundary, a missing
record and a node preflight did not see cannot be overridden.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import record_page

SEVERITIES = ("info", "warning", "error")
ACTION = "hold_override"
# The playbook a hold_override record names: the gate belongs to onboarding.
PLAYBOOK = "onboard.yml"
# Findings without their own severity (failed probes, overlaps).
DEFAULT_SEVERITY = "error"
DIRECTION_SEVERITY = {"fail": "error", "unverified": "warning"}


class GateError(ValueError):
    pass


def _rank(severity):
    try:
        return SEVERITIES.index(severity)
    except ValueError:
        return len(SEVERITIES)  # an unknown severity counts as the highest


def _probe_hosts(record, probe_id):
    hosts = set()
    for probe in (record.get("details") or {}).get("probes") or []:
        if isinstance(probe, dict) and probe.get("id") == probe_id:
            for key in ("source", "destination", "host", "node"):
                if isinstance(probe.get(key), str):
                    hosts.add(probe[key])
    return sorted(hosts) or None


def findings(record):
    """Every finding of a preflight record: {id, kind, severity, nodes (None: every node), message}.
    Holds have severity ``hold``: they stop a node whatever the configured severity."""
    verdicts = record.get("verdicts") or {}
    out = []
    for hold in verdicts.get("holds") or []:
        for reason in hold.get("reasons") or []:
            out.append({"id": "hold:%s" % reason["reason"], "kind": "hold", "severity": "hold",
                        "nodes": [hold["node"]],
                        "message": "held by preflight: %s (%s)" % (reason["reason"], reason.get("detail", ""))})
    for violation in (verdicts.get("matrix") or {}).get("violations") or []:
        row = (violation.get("rows") or ["?"])[0]
        out.append({"id": "violation:%s:%s" % (violation["rule"], row), "kind": "violation",
                    "severity": violation.get("severity") or DEFAULT_SEVERITY,
                    "nodes": list(violation.get("nodes") or []),
                    "message": "matrix rule %s (%s) on row %s: %s" % (violation["rule"], violation.get("severity"),
                                                                      row, violation.get("message", ""))})
    for probe_id, verdict in sorted((verdicts.get("paths") or {}).items()):
        if verdict == "fail":
            out.append({"id": "path:%s" % probe_id, "kind": "path", "severity": DEFAULT_SEVERITY,
                        "nodes": _probe_hosts(record, probe_id),
                        "message": "path probe %s failed" % probe_id})
    for pair in verdicts.get("cidr_overlaps") or []:
        out.append({"id": "cidr_overlap:%s~%s" % (pair["a"], pair["b"]), "kind": "cidr_overlap",
                    "severity": DEFAULT_SEVERITY, "nodes": None,
                    "message": "address ranges %s and %s overlap (%s)" % (pair["a"], pair["b"], pair.get("relation"))})
    direction = (verdicts.get("connection_direction") or {}).get("verdict", "unverified")
    if direction in DIRECTION_SEVERITY:
        reasons = (verdicts.get("connection_direction") or {}).get("reasons") or []
        out.append({"id": "connection_direction:%s" % direction, "kind": "connection_direction",
                    "severity": DIRECTION_SEVERITY[direction], "nodes": None,
                    "message": "connection direction %s%s" % (direction, (": " + "; ".join(reasons)) if reasons else "")})
    return out


def covered_nodes(record):
    """The owned nodes preflight judged: the nodes of its matrix rows and its holds."""
    seen = set()
    for row in ((record.get("details") or {}).get("matrix") or {}).get("rows") or []:
        seen.update(row.get("nodes") or [])
    seen.update(h["node"] for h in (record.get("verdicts") or {}).get("holds") or [])
    return seen


def concerning(record, node, min_severity):
    """The findings that stop ``node``: its holds and findings at or above ``min_severity``
    (``none``: holds only, for an estate whose operators accepted its findings)."""
    if min_severity not in SEVERITIES + ("none",):
        raise GateError("min_severity: %r is not one of %s, none" % (min_severity, ", ".join(SEVERITIES)))
    out = []
    for finding in findings(record):
        if finding["nodes"] is not None and node not in finding["nodes"]:
            continue
        if finding["kind"] == "hold" or (min_severity != "none" and _rank(finding["severity"]) >= _rank(min_severity)):
            out.append(finding)
    return out


def _override_for(approvals, node, finding_id):
    for approval in approvals:
        if node in approval["approved_targets"] and finding_id in (approval.get("overrides") or []):
            return approval
    return None


def decide(record, nodes, min_severity, boundary_problem=None, approvals=()):
    """{node: {decision: admitted|stopped|overridden, reasons, overridden}} for ``nodes``.

    ``record``: the preflight record (None when there is none); ``boundary_problem``: why the
    boundary does not verify (None when it does); ``approvals``: verified hold_override
    approvals (approval.check summaries with ``overrides``)."""
    result = {}
    seen = covered_nodes(record) if record is not None else set()
    for node in nodes:
        if boundary_problem:
            result[node] = _stopped(["boundary: %s (not overridable)" % boundary_problem])
        elif record is None:
            result[node] = _stopped(["no preflight record for this wave (run preflight.yml first; not overridable)"])
        elif node not in seen:
            result[node] = _stopped(["preflight did not judge this node (rerun preflight.yml with it; not overridable)"])
        else:
            result[node] = _judge(record, node, min_severity, approvals)
    return result


def _stopped(reasons):
    return {"decision": "stopped", "reasons": reasons, "overridden": []}


def _judge(record, node, min_severity, approvals):
    reasons = []
    overridden = []
    for finding in concerning(record, node, min_severity):
        approval = _override_for(approvals, node, finding["id"])
        if approval is None:
            reasons.append("%s: %s" % (finding["id"], finding["message"]))
        else:
            overridden.append({"finding": finding["id"], "message": finding["message"],
                               "change_id": approval["change_id"], "approver": approval["approver"],
                               "executor": approval.get("executor")})
    if reasons:
        return {"decision": "stopped", "reasons": reasons, "overridden": overridden}
    return {"decision": "overridden" if overridden else "admitted", "reasons": [], "overridden": overridden}


def used_change_ids(decisions):
    """The change ids that let at least one node past a finding."""
    return sorted({o["change_id"] for d in decisions.values() if d["decision"] == "overridden"
                   for o in d["overridden"]})


def render_page(body, json_name):
    """The page of a gate decision (wave_gate's ``dest``): who was admitted, who was stopped and
    why, which change let a node past which finding and who approved it."""
    nodes = body.get("nodes") or {}
    overrides = ["%s: %s by change %s (approved by %s)" % (node, o.get("finding"), o.get("change_id"), o.get("approver"))
                 for node, dec in sorted(nodes.items()) for o in dec.get("overridden") or []]
    summary = [("What", "onboarding gate: which nodes of the wave may be changed"),
               ("Verdict", record_page.verdict(not body.get("stopped"), "every node admitted", "nodes stopped")),
               ("Admitted", body.get("admitted") or "none"),
               ("Stopped", record_page.lines("%s: %s" % (n, r) for n, r in sorted((body.get("stopped") or {}).items()))),
               ("Overrides", record_page.lines(overrides)), ("Minimum severity", body.get("min_severity")),
               ("Preflight verdicts digest", body.get("verdicts_digest"))]
    rows = [{"node": node, "decision": record_page.verdict(dec.get("decision") != "stopped", dec.get("decision"),
                                                           dec.get("decision")),
             "reasons": record_page.lines(dec.get("reasons")), "overridden": dec.get("overridden") or []}
            for node, dec in sorted(nodes.items())]
    return record_page.render("Onboarding gate", summary, body, json_name,
                              sections=[("Nodes", record_page.table(rows, ("node", "decision", "reasons", "overridden")))],
                              skip=("nodes",))
