# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ledger of used change ids: ``<records>/approvals/<change_id>.json``.

Each first use of a change id is a ``change_claim`` entry in the hash-chained audit log beside
the ledger (``<records>/audit/audit.jsonl``), and each target done is a ``change_done`` entry;
the ledger entry names those entries by seq and hash. What the chain says decides: a missing
ledger entry is written again from it, and one that says otherwise is refused. Nothing under
the records folder is read or written through a symbolic link.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json
import os

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval_page, audit, audit_anchor, audit_verify, files
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.approval_signing import ApprovalError


def _iso(value):
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value else None


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
    res = audit_verify.verify(log, checkpoint_key=checkpoint_key, checkpoint_every=every, ledger_dir=folder,
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
