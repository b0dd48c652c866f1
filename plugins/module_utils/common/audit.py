# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Append-only, hash-chained audit log of administrative actions (JSON lines).

Each line is one event with ``seq``, ``prev`` (the previous line's ``hash``, or GENESIS) and
``hash`` = sha256 of the canonical JSON of every other field. Changing, deleting or
reordering a line breaks the chain from that line on; ``verify`` names the first bad one.
Cutting lines off the end is only detectable against a copy of the last hash (``head``),
which callers may keep elsewhere (the audit_log module returns it).

CLI: ``bin/hgpu-audit-verify LOG [HEAD_HASH]``.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import fcntl
import hashlib
import json
import os

GENESIS = "0" * 64
FIELDS = ("change_id", "approver", "executor", "target", "action", "result")
ACTIONS = ("label", "unlabel", "cordon", "uncordon", "drain", "driver_upgrade", "reboot",
           "remove", "delete_node", "revoke_credential", "remove_ssh_key", "remove_agent",
           "firewall", "restore_standalone", "validate", "approval")
RESULTS = ("started", "ok", "changed", "failed", "refused", "skipped")


class AuditError(Exception):
    pass


def _canonical(entry):
    body = dict((k, v) for k, v in entry.items() if k != "hash")
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def entry_hash(entry):
    return hashlib.sha256(_canonical(entry).encode("utf-8")).hexdigest()


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def make_event(change_id, approver, executor, target, action, result, details=None, when=None):
    """Validate the fields of one event; returns a dict without seq/prev/hash."""
    event = {"change_id": change_id, "approver": approver, "executor": executor,
             "target": target, "action": action, "result": result}
    missing = [k for k in FIELDS if not event.get(k)]
    if missing:
        raise AuditError("audit event is missing %s" % ", ".join(missing))
    if action not in ACTIONS:
        raise AuditError("audit action %r is not one of %s" % (action, ", ".join(ACTIONS)))
    if result not in RESULTS:
        raise AuditError("audit result %r is not one of %s" % (result, ", ".join(RESULTS)))
    event["time"] = when or _now()
    event["details"] = details or {}
    return event


def _last_line(handle):
    """The last non-empty line of an open binary file (reads backwards in blocks)."""
    handle.seek(0, os.SEEK_END)
    pos = handle.tell()
    buf = b""
    while pos > 0:
        step = min(4096, pos)
        pos -= step
        handle.seek(pos)
        buf = handle.read(step) + buf
        stripped = buf.rstrip(b"\n")
        if b"\n" in stripped:
            return stripped.rsplit(b"\n", 1)[1]
    return buf.rstrip(b"\n") or None


def append(path, event):
    """Append one event under an exclusive lock; returns the written entry."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o640)
    with os.fdopen(fd, "r+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            last = _last_line(handle)
            if last:
                try:
                    prev = json.loads(last.decode("utf-8"))
                    seq, prev_hash = int(prev["seq"]) + 1, prev["hash"]
                except (ValueError, KeyError, TypeError):
                    raise AuditError("%s: the last line is not an audit entry; run the verifier "
                                     "before appending" % path)
            else:
                seq, prev_hash = 1, GENESIS
            entry = dict(event, seq=seq, prev=prev_hash)
            entry["hash"] = entry_hash(entry)
            handle.seek(0, os.SEEK_END)
            handle.write((json.dumps(entry, sort_keys=True, ensure_ascii=True) + "\n").encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    return entry


def verify(path, head=None):
    """Check the whole chain. Returns {'ok', 'entries', 'head', 'first_bad': {line, seq, problem}}."""
    if not os.path.exists(path):
        return {"ok": False, "entries": 0, "head": None,
                "first_bad": {"line": 0, "seq": None, "problem": "%s does not exist" % path}}
    prev_hash, expect_seq, count = GENESIS, 1, 0
    with open(path, "rb") as handle:
        for lineno, raw in enumerate(handle, 1):
            def bad(problem, seq=None):
                return {"ok": False, "entries": count, "head": prev_hash,
                        "first_bad": {"line": lineno, "seq": seq, "problem": problem}}
            try:
                entry = json.loads(raw.decode("utf-8"))
            except ValueError:
                return bad("not a JSON object")
            if not isinstance(entry, dict):
                return bad("not a JSON object")
            seq = entry.get("seq")
            if seq != expect_seq:
                return bad("seq %r where %d was expected (a line was removed or reordered)"
                           % (seq, expect_seq), seq)
            if entry.get("prev") != prev_hash:
                return bad("prev does not match the hash of the line before", seq)
            if entry.get("hash") != entry_hash(entry):
                return bad("hash does not match the content (the line was edited)", seq)
            missing = [k for k in FIELDS + ("time",) if not entry.get(k)]
            if missing:
                return bad("missing %s" % ", ".join(missing), seq)
            prev_hash, expect_seq, count = entry["hash"], expect_seq + 1, count + 1
    if head and head != prev_hash:
        return {"ok": False, "entries": count, "head": prev_hash,
                "first_bad": {"line": count + 1, "seq": count + 1,
                              "problem": "the log ends before the recorded head %s (lines were "
                                         "cut off the end)" % head}}
    return {"ok": True, "entries": count, "head": prev_hash, "first_bad": None}


def read(path, change_id=None, target=None):
    out = []
    if not os.path.exists(path):
        return out
    with open(path, "rb") as handle:
        for raw in handle:
            entry = json.loads(raw.decode("utf-8"))
            if change_id and entry.get("change_id") != change_id:
                continue
            if target and entry.get("target") != target:
                continue
            out.append(entry)
    return out


def journal_line(entry):
    """The text sent to the node's journal (``logger -t hybridgpu-audit``)."""
    keep = dict((k, entry.get(k)) for k in FIELDS + ("time", "seq", "hash"))
    return "hybridgpu-audit " + json.dumps(keep, sort_keys=True, separators=(",", ":"))
