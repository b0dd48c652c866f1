# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Change approval: a YAML change record signed with ``ssh-keygen -Y sign``.

Trust starts at the pinned boundary signers (``hgpu_boundary_signers`` in the inventory's
group_vars, or /etc/hybridgpu/boundary_signers in the execution environment; never an extra
var): the access boundary file must carry a detached signature ``<boundary>.sig`` made by
the security owner under ``hybridgpu.fleet-boundary`` over its exact bytes, and its declared
status must be signed and unexpired (verify_boundary). Only then are the approvers' keys in
it trusted.

The record's signature covers the exact bytes of the record. It is checked with ``ssh-keygen
-Y verify`` against an allowed_signers file derived from the verified boundary: every
approver named in ``change_rights`` with keys under ``people[].ssh_keys``, principal = person
id, restricted to ``hybridgpu.fleet-change``. Then the gate checks that the signer may
approve the record's action, that the record names this playbook, the targets (and for a
revocation the member), the window (timezone given, at most MAX_WINDOW_HOURS long), four
eyes, and that the change id was not used for another run (ledger.claim, a ledger under
the records folder).

Approvers use it through ``bin/hgpu-sign-change`` (sign, sign-boundary, verify,
allowed-signers). Nothing prompts.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import os

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import ledger, schema as s
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.approval_signing import (
    NAMESPACE, ApprovalError, check_newest, read_text, sign_copy, verify_boundary, verify_signature)
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.boundary import ACTIONS, ID_PATTERN

# Namespace of the security owner's signature over the boundary file (<boundary>.sig).
# The longest window a record may approve.
MAX_WINDOW_HOURS = 24
# The one action each destructive playbook performs; a record names its playbook.
PLAYBOOK_ACTIONS = {
    "remove.yml": "remove",
    "revoke_member.yml": "revoke_member",
    "upgrade_rehearsal.yml": "driver_upgrade",
    "overflow_drill.yml": "overflow_drill",
}


def _aware_time(value):
    """An ISO 8601 date-time with a timezone (Z or +HH:MM), as aware UTC; no date-only, no local time."""
    parsed = s.parse_iso_datetime(value) if isinstance(value, (str, datetime.datetime)) else None
    if parsed is None:
        return value, "expected an ISO 8601 date-time with a timezone, got %r" % (value,)
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        return value, "%s has no timezone (write it as 2025-06-01T08:00:00Z or with +HH:MM)" % (value,)
    return parsed.astimezone(datetime.timezone.utc), None


RECORD_SPEC = s.Map({
    "change_id": s.Field(s.Str(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", hint="a change id like CHG-2025-0042")),
    "action": s.Field(s.Enum(ACTIONS)),
    # The playbook the record approves (its file name, e.g. remove.yml); any other refuses it.
    "playbook": s.Field(s.Str(r"^[A-Za-z0-9_.-]+\.ya?ml$", hint="a playbook file name like remove.yml")),
    "targets": s.Field(s.ListOf(s.Str(), min_items=1, unique=True)),
    # The member a revoke_member record revokes; required for that action.
    "member": s.Field(s.Str(), required=False),
    # The preflight findings a hold_override record lets its targets past (finding ids as the
    # onboarding gate names them, e.g. hold:air_gapped); required for that action.
    "overrides": s.Field(s.ListOf(s.Str(), min_items=1, unique=True), required=False),
    "window": s.Field(s.Map({
        "start": s.Field(s.Custom(_aware_time)),
        "end": s.Field(s.Custom(_aware_time)),
    })),
    "requester": s.Field(s.Str(ID_PATTERN, hint="a person id")),
    "reason": s.Field(s.Str()),
    # Free text for the reviewer (ticket link, rollback plan); not checked.
    "notes": s.Field(s.Str(nonempty=False), required=False),
    # remove: the SHA-256 of each target's onboarding manifest (bin/hgpu-sign-change
    # manifest-digest), so the removal undoes exactly the manifest the approver reviewed.
    "manifests": s.Field(s.MapOf(s.Str(r"^[0-9a-f]{64}$", hint="a SHA-256 in lower-case hex")), required=False),
})


def _iso(value):
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value else None


def parse_record(text, filename="change record"):
    """Validate the record text; raise ApprovalError naming every bad field."""
    try:
        data = s.load_yaml_text(text, filename)
        doc, errors = s.collect(data, RECORD_SPEC, filename)
    except s.SchemaError as exc:
        raise ApprovalError(exc.errors)
    if not errors and doc["window"]["end"] <= doc["window"]["start"]:
        errors.append("%s: window.end: is not after window.start" % filename)
    if not errors and doc["action"] == "revoke_member" and not doc.get("member"):
        errors.append("%s: member: is required for action revoke_member (the member it revokes)" % filename)
    if not errors and doc["action"] == "hold_override" and not doc.get("overrides"):
        errors.append("%s: overrides: is required for action hold_override (the findings it overrides)" % filename)
    if not errors and doc.get("manifests"):
        errors.extend("%s: manifests.%s: is not one of the targets" % (filename, node)
                      for node in sorted(set(doc["manifests"]) - set(doc["targets"])))
    if errors:
        cid = data.get("change_id") if isinstance(data, dict) else None
        raise ApprovalError(errors, cid)
    return doc


def allowed_signers_text(boundary, action=None):
    """allowed_signers lines (sshd(8) format) for the approvers of ``action`` (all when None)."""
    lines = []
    for person, keys in sorted(boundary.signing_keys(action).items()):
        for key in keys:
            lines.append('%s namespaces="%s" %s' % (person, NAMESPACE, key))
    return "\n".join(lines) + ("\n" if lines else "")


def _variants(text):
    """The exact text first; then with one trailing newline (AWX extra vars may drop it)."""
    out = [text]
    norm = text.rstrip("\n") + "\n"
    if norm != text:
        out.append(norm)
    return out


def _window_problems(start, end, now, max_window_hours):
    problems = []
    if max_window_hours and end - start > datetime.timedelta(hours=max_window_hours):
        problems.append("window: %s to %s is longer than the %d h a record may approve"
                        % (_iso(start), _iso(end), max_window_hours))
    if now < start:
        problems.append("window: opens at %s, it is now %s" % (_iso(start), _iso(now)))
    elif now >= end:
        problems.append("window: expired at %s, it is now %s" % (_iso(end), _iso(now)))
    return problems


def _member_access(boundary, record, member, problems):
    """What the boundary lists for ``member`` (None without one); adds the member problems."""
    if record.get("member") != member:
        problems.append("member: the record approves revoking %s, this run revokes %s"
                        % (record.get("member") or "no member", member or "no member"))
    if member is None:
        return None
    access = boundary.access_of(member)
    if access is None:
        problems.append("member: %s is no person in the boundary (people[].id); only what the signed "
                        "boundary lists for a member can be revoked" % member)
    return access


def check(boundary, record_text, signature_text, action, targets, now=None, executor=None,
          filename="change record", playbook=None, member=None, max_window_hours=MAX_WINDOW_HOURS):
    """Run every check; return the approval summary or raise ApprovalError listing all problems.

    ``action``, ``targets``, ``playbook`` and ``member`` are what this run is about to do (a
    record names its playbook, and for revoke_member its member; each must match). ``executor``
    (optional) must be a performer of the action in the boundary. ``boundary`` must come
    from verify_boundary: its approver keys are trusted as they are."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    if now.tzinfo is None:
        now = now.replace(tzinfo=datetime.timezone.utc)
    record = parse_record(record_text, filename)
    cid = record["change_id"]
    problems = []
    approver = None
    signers = allowed_signers_text(boundary)
    last = None
    for variant in _variants(record_text):
        try:
            approver = verify_signature(variant.encode("utf-8"), signature_text, signers)
            break
        except ApprovalError as exc:
            last = exc
    if approver is None:
        problems.extend(last.problems)
    if record["action"] != action:
        problems.append("action: the record approves %r, this run does %r" % (record["action"], action))
    if playbook is not None:
        run_playbook = os.path.basename(playbook)
        if PLAYBOOK_ACTIONS.get(run_playbook, action) != action:
            problems.append("playbook: %s performs %s, not %s" % (run_playbook, PLAYBOOK_ACTIONS[run_playbook], action))
        if record["playbook"] != run_playbook:
            problems.append("playbook: the record approves %s, this run is %s" % (record["playbook"], run_playbook))
    access = _member_access(boundary, record, member, problems)
    approvers = boundary.approvers_for(record["action"])
    if approver and approver not in approvers:
        problems.append("approver: %s may not approve %s (boundary change_rights.%s.approvers: %s)"
                        % (approver, record["action"], record["action"], ", ".join(approvers) or "nobody"))
    extra = sorted(set(targets) - set(record["targets"]))
    if not targets:
        problems.append("targets: this run names no target host")
    if extra:
        problems.append("targets: %s not in the approved targets [%s]"
                        % (", ".join(extra), ", ".join(record["targets"])))
    start, end = record["window"]["start"], record["window"]["end"]
    problems.extend(_window_problems(start, end, now, max_window_hours))
    if approver and boundary.four_eyes(record["action"]) and approver == record["requester"]:
        problems.append("four eyes: %s both requested and approved %s; another approver must sign"
                        % (approver, record["action"]))
    if executor:
        performers = boundary.performers_for(record["action"])
        if executor not in performers:
            problems.append("executor: %s may not perform %s (boundary change_rights.%s.performers: %s)"
                            % (executor, record["action"], record["action"], ", ".join(performers)))
        elif boundary.four_eyes(record["action"]) and executor == approver:
            problems.append("four eyes: %s may not execute a change they approved" % executor)
    if problems:
        raise ApprovalError(problems, cid)
    return {
        "approved": True,
        "change_id": cid,
        "action": record["action"],
        "playbook": record["playbook"],
        "member": record.get("member"),
        # What the verified boundary lists for the member (revoke_member revokes exactly this).
        "member_access": access,
        "overrides": record.get("overrides"),
        # remove: {target: SHA-256 of the onboarding manifest the approver reviewed}
        "manifests": record.get("manifests") or {},
        "approver": approver,
        "requester": record["requester"],
        "executor": executor,
        "targets": list(targets),
        "approved_targets": list(record["targets"]),
        "window": {"start": _iso(start), "end": _iso(end)},
        "reason": record["reason"],
        "four_eyes": boundary.four_eyes(record["action"]),
        "checked_at": _iso(now),
    }


def resolve_executor(boundary, executor, awx_user):
    """The person id of who runs the change.

    Under AWX (``awx_user`` set from the user name AWX injects into the job) that is the person
    whose id or ``awx_user`` is the AWX user; a different ``executor`` given by the launcher is
    refused. Outside AWX the ``executor`` given on the command line is used."""
    if not awx_user:
        return executor
    person = next((p["id"] for p in boundary.doc["people"]
                   if p.get("awx_user") == awx_user or p["id"] == awx_user), None)
    if person is None:
        raise ApprovalError(["executor: the AWX user %s who launched this job is no person in the "
                             "boundary (people[].id or people[].awx_user)" % awx_user])
    if executor and executor != person:
        raise ApprovalError(["executor: the job was launched by %s (AWX user %s), not by %s; the "
                             "executor is the launching user" % (person, awx_user, executor)])
    return person


def gate(params, now=None):
    """The full check the destructive modules run: verified boundary, record, ledger.

    ``params``: boundary, boundary_signers, record_path | record_text, signature_path |
    signature, action, targets, playbook, member, executor, awx_user, ledger_dir,
    max_window_hours, require_executor (default true), checkpoint_key (the pinned key that
    signs the claim's audit head; None: audit_anchor.DEFAULT_KEY when it exists). Returns the
    approval summary (with ``ledger`` when ledger_dir is set)."""
    boundary = verify_boundary(params["boundary"], params.get("boundary_signers") or "", now)
    if params.get("ledger_dir"):
        ledger.ledger_folders(params["ledger_dir"])
        check_newest(params["ledger_dir"], boundary, now)
    if params.get("record_path"):
        text = read_text(params["record_path"], "record")
        name = params["record_path"]
    else:
        text = params.get("record_text") or ""
        name = "record_text"
    signature = params.get("signature")
    if signature is None:
        sig_path = params.get("signature_path") or (params.get("record_path") or "") + ".sig"
        if params.get("record_path") or params.get("signature_path"):
            try:
                signature = read_text(sig_path, "signature")
            except ApprovalError:
                raise ApprovalError(["unsigned: no signature file %s (an approver signs with "
                                     "bin/hgpu-sign-change sign RECORD --key KEY)" % sig_path])
    executor = resolve_executor(boundary, params.get("executor"), params.get("awx_user"))
    if not executor and params.get("require_executor", True):
        raise ApprovalError(["executor: nobody is named as running the change (give the person id; "
                             "under AWX it is the launching user)"])
    max_hours = params.get("max_window_hours")
    result = check(boundary, text, signature or "", params["action"], params["targets"], now=now,
                   executor=executor, filename=name, playbook=params["playbook"],
                   member=params.get("member"),
                   max_window_hours=MAX_WINDOW_HOURS if max_hours is None else max_hours)
    result["authenticated_by"] = "awx" if params.get("awx_user") else "command line"
    result["boundary_signer"] = boundary.doc["security_owner"]
    if params.get("ledger_dir"):
        result["ledger"] = ledger.claim(params["ledger_dir"], result, now, checkpoint_key=params.get("checkpoint_key"))
    return result


# --- CLI for approvers -----------------------------------------------------------------
def sign_file(record_path, key_path, out_path=None):
    """Sign ``record_path`` with the private key; returns the signature path."""
    with open(record_path, "r", encoding="utf-8") as fh:
        parse_record(fh.read(), os.path.basename(record_path))
    return sign_copy(record_path, key_path, NAMESPACE, out_path)
