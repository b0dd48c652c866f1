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
eyes, and that the change id was not used for another run (claim, a ledger under the
records folder).

Approvers use it through ``bin/hgpu-sign-change`` (sign, sign-boundary, verify,
allowed-signers). Nothing prompts.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json
import os

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval_page, schema as s
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import audit, audit_anchor, files
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


# The fields that make a run the same run again (resume) under one change id.
CLAIM_KEYS = ("playbook", "action", "targets", "member", "executor")


def ledger_audit_log(folder):
    """The audit log that records each use of the ledger ``folder`` (``<records>/approvals``):
    ``<records>/audit/audit.jsonl``, the log the playbooks write."""
    return os.path.join(os.path.dirname(os.path.abspath(folder)), "audit", "audit.jsonl")


def ledger_folders(folder, change_id=None):
    """Create the ledger folder; refuse (ApprovalError) a records, ledger or audit folder that is
    a symbolic link, so nothing under the records folder is read or written through one."""
    records = os.path.dirname(os.path.abspath(folder))
    try:
        for path, what in ((records, "the records folder"), (folder, "the ledger folder"),
                           (os.path.dirname(ledger_audit_log(folder)), "the audit folder")):
            files.real_folder(path, what)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        files.real_folder(folder, "the ledger folder")
    except OSError as exc:
        raise ApprovalError(["change_id: %s; nothing was changed" % exc], change_id)


def _chain_uses(folder, change_id, checkpoint_key, every):
    """The claim and done marks the audit chain holds for ``change_id``: (claim entry or None,
    {target: done entry}). The chain, its anchors, its checkpoints (with a key) and the ledger's
    references must verify; otherwise nobody can say whether the change id was used."""
    log = ledger_audit_log(folder)
    entries = []
    res = audit.verify(log, checkpoint_key=checkpoint_key, checkpoint_every=every, ledger_dir=folder,
                       all_signatures=False, entries_out=entries, head_checkpoint=False)
    if not res["ok"] and res["first_bad"]["kind"] != "missing":
        raise ApprovalError(["change_id: the audit log %s does not verify (%s: %s), so the uses of change ids "
                             "cannot be checked; nothing was changed (bin/hgpu-audit-verify %s)"
                             % (log, res["first_bad"]["kind"], res["first_bad"]["problem"], log)], change_id)
    mine = [e for e in entries if e["change_id"] == change_id]
    first = next((e for e in mine if e["action"] == "change_claim"), None)
    done = dict((e["target"], e) for e in mine if e["action"] == "change_done")
    return first, done


def _from_chain(first, done):
    """The ledger entry the chain's claim and done marks say."""
    details = first["details"]
    entry = dict((k, details.get(k)) for k in CLAIM_KEYS)
    entry.update(change_id=first["change_id"], approver=first["approver"], first_used_at=details.get("first_used_at"),
                 audit={"seq": first["seq"], "hash": first["hash"]})
    if done:
        entry["done"] = dict((target, dict(e["details"].get("done") or {}, at=e["details"].get("at"),
                                           audit={"seq": e["seq"], "hash": e["hash"]}))
                             for target, e in done.items())
    return entry


def _read_ledger(path, change_id):
    """The ledger entry at ``path`` (None when missing); never through a symbolic link."""
    try:
        used = files.read_json_nofollow(path)
    except FileNotFoundError:
        return None
    except (IOError, OSError, ValueError) as exc:
        raise ApprovalError(["change_id: the ledger entry %s cannot be read (%s); the change id counts as used"
                             % (path, exc)], change_id)
    if not isinstance(used, dict):
        raise ApprovalError(["change_id: the ledger entry %s is not a JSON object; the change id counts as used"
                             % path], change_id)
    return used


def _agrees(path, used, chain_entry, change_id, log):
    """Refuse a ledger entry that says otherwise than the chain; True when it lacks only done
    marks the chain holds (a write cut short after the chain took them)."""
    keys = CLAIM_KEYS + ("change_id", "approver", "first_used_at", "audit")
    differs = [k for k in keys if used.get(k) != chain_entry.get(k)]
    have, want = used.get("done") or {}, chain_entry.get("done") or {}
    differs += ["done.%s" % t for t in sorted(set(have) | set(want)) if t in have and have[t] != want.get(t)]
    if differs:
        raise ApprovalError(["change_id: the ledger entry %s does not match the audit log %s (seq %d) in %s; the "
                             "records folder was changed, and the change id counts as used as the audit log says; "
                             "nothing was changed" % (path, log, chain_entry["audit"]["seq"], ", ".join(differs))],
                            change_id)
    return set(want) - set(have)


def _write_ledger(path, entry, create=False):
    data = json.dumps(entry, indent=2, sort_keys=True) + "\n"
    if create:
        fd = files.open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        files.sync_folder(os.path.dirname(os.path.abspath(path)))
    else:
        files.write(path, data, mode=0o600)


def _syslog_socket():
    return audit_anchor.SYSLOG_SOCKET if os.path.exists(audit_anchor.SYSLOG_SOCKET) else None


def _ledger_entry(folder, change_id, checkpoint_key, every=audit_anchor.CHECKPOINT_EVERY):
    """Under the audit log's lock (the caller holds it): (ledger path, the entry the chain says
    or None), after checking that the ledger file agrees with it (a missing file or missing done
    marks are written again from the chain)."""
    path = os.path.join(folder, "%s.json" % change_id)
    log = ledger_audit_log(folder)
    first, done = _chain_uses(folder, change_id, checkpoint_key, every)
    used = _read_ledger(path, change_id)
    if first is None:
        if used is not None:
            raise ApprovalError(["change_id: the ledger entry %s has no claim in the audit log %s (the log or the "
                                 "entry was changed); the change id counts as used; nothing was changed"
                                 % (path, log)], change_id)
        return path, None
    chain_entry = _from_chain(first, done)
    if used is None or _agrees(path, used, chain_entry, change_id, log):
        _write_ledger(path, chain_entry)
        chain_entry["restored"] = True
    return path, chain_entry


def claim(folder, approval, now=None, checkpoint_key=None, checkpoint_every=audit_anchor.CHECKPOINT_EVERY):
    """Record the first use of ``approval['change_id']`` in the ledger ``folder``
    (``<records>/approvals/<change_id>.json``) and, first, in the audit log beside it
    (``<records>/audit/audit.jsonl``, a ``change_claim`` entry the ledger entry names by seq
    and hash).

    A change id is used once: a later run with the same id is refused unless it is the same
    run again (same playbook, action, targets, member and executor), which resumes or
    re-checks an interrupted or finished run. What the audit chain says decides: a missing
    ledger entry is written again from it, and a ledger entry that says otherwise, or that the
    chain does not hold, is refused. The chain must verify (with the checkpoint key, its
    signed checkpoints too); a records, ledger or audit folder that is a symbolic link is
    refused. ``checkpoint_key``: signs the claim's head (default: audit_anchor.DEFAULT_KEY
    when it exists); ``checkpoint_every``: the most entries the chain may carry between signed
    checkpoints. Returns the ledger entry with ``resumed``."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    cid = approval["change_id"]
    key = audit_anchor.configured_key(checkpoint_key)
    ledger_folders(folder, cid)
    log = ledger_audit_log(folder)
    entry = {
        "change_id": cid,
        "playbook": approval["playbook"],
        "action": approval["action"],
        "targets": sorted(approval["targets"]),
        "member": approval.get("member"),
        "executor": approval.get("executor"),
        "approver": approval.get("approver"),
        "first_used_at": _iso(now),
    }
    try:
        with audit.locked(log) as handle:
            path, used = _ledger_entry(folder, cid, key, checkpoint_every)
            if used is not None:
                differs = [k for k in CLAIM_KEYS if used.get(k) != entry[k]]
                if differs:
                    raise ApprovalError(["change_id: %s was already used at %s by %s for %s on [%s]%s; a change "
                                         "record is used once (this run differs in %s; ask for a new record)"
                                         % (cid, used.get("first_used_at"), used.get("executor"),
                                            used.get("playbook"), ", ".join(used.get("targets") or []),
                                            " member %s" % used["member"] if used.get("member") else "",
                                            ", ".join(differs))], cid)
                used["resumed"] = True
            else:
                details = dict((k, entry[k]) for k in CLAIM_KEYS)
                details.update(first_used_at=entry["first_used_at"], ledger=path)
                event = audit.make_event(cid, entry["approver"] or "unknown", entry["executor"] or "unknown",
                                         ",".join(entry["targets"]), "change_claim", "started", details)
                res = audit.append_held(handle, log, event, checkpoint_key=key, checkpoint_every=1,
                                        syslog_socket=_syslog_socket(), checkpoint_required=bool(key))
                entry["audit"] = {"seq": res["entry"]["seq"], "hash": res["entry"]["hash"]}
                _write_ledger(path, entry, create=True)
                used = dict(entry, resumed=False)
    except (audit.AuditError, OSError) as exc:
        raise ApprovalError(["change_id: %s; nothing was changed" % exc], cid)
    approval_page.refresh(path)  # the page beside the entry
    return used


def mark_done(folder, change_id, target, details=None, now=None, checkpoint_key=None):
    """Note that the change of ``change_id`` was carried out on ``target``: a ``change_done``
    entry in the audit log, then ``done.<target>`` in the ledger entry (naming that entry), so a
    later run under the same id resumes around it but does not repeat it. The ledger entry and
    the chain must agree (claim's checks); the entry is replaced through a new file, never
    written through a symbolic link. Returns the entry."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    key = audit_anchor.configured_key(checkpoint_key)
    ledger_folders(folder, change_id)
    log = ledger_audit_log(folder)
    try:
        with audit.locked(log) as handle:
            path, entry = _ledger_entry(folder, change_id, key)
            if entry is None:
                raise ApprovalError(["change_id: %s has no claim in the audit log %s (ledger %s); nothing was noted"
                                     % (change_id, log, folder)], change_id)
            entry.pop("restored", None)
            event = audit.make_event(change_id, entry.get("approver") or "unknown", entry.get("executor") or "unknown",
                                     target, "change_done", "changed",
                                     {"done": dict(details or {}), "at": _iso(now), "ledger": path})
            res = audit.append_held(handle, log, event, checkpoint_key=key, checkpoint_every=1,
                                    syslog_socket=_syslog_socket(), checkpoint_required=bool(key))
            entry.setdefault("done", {})[target] = dict(details or {}, at=_iso(now),
                                                        audit={"seq": res["entry"]["seq"], "hash": res["entry"]["hash"]})
            _write_ledger(path, entry)
    except (audit.AuditError, OSError) as exc:
        raise ApprovalError(["change_id: %s" % exc], change_id)
    approval_page.refresh(path)
    return entry


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
    max_window_hours, require_executor (default true). Returns the approval summary (with
    ``ledger`` when ledger_dir is set)."""
    boundary = verify_boundary(params["boundary"], params.get("boundary_signers") or "", now)
    if params.get("ledger_dir"):
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
        result["ledger"] = claim(params["ledger_dir"], result, now)
    return result


# --- CLI for approvers -----------------------------------------------------------------
def sign_file(record_path, key_path, out_path=None):
    """Sign ``record_path`` with the private key; returns the signature path."""
    with open(record_path, "r", encoding="utf-8") as fh:
        parse_record(fh.read(), os.path.basename(record_path))
    return sign_copy(record_path, key_path, NAMESPACE, out_path)
