# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Append-only, hash-chained audit log of administrative actions (JSON lines).

Each line is one event with ``seq``, ``prev`` (the previous line's ``hash``, or GENESIS) and
``hash`` = sha256 of the canonical JSON of every other field. Changing, deleting or
reordering a line breaks the chain from that line on; ``verify`` names the first bad one.

The chain is unkeyed, so its head is anchored outside the file (``audit_anchor``): every
append writes the new head to an anchors file beside the log (and, when asked, to syslog and
as a checkpoint signed with an operator's SSH key). ``verify`` checks the log against those
anchors and names a truncation, a rewrite or a deletion. Appends refuse to start a fresh
chain where anchors exist, and to write after a torn last line (a write cut short), which
only ``repair_torn_tail`` (``bin/hgpu-audit-verify --repair-torn-tail LOG``) moves aside.
After each append the readable page ``<log>.html`` (``audit.html``) is written again
(audit_page: a view of the newest entries; it checks nothing).

CLI: ``bin/hgpu-audit-verify LOG [HEAD_HASH]``.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import fcntl
import hashlib
import json
import os

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import audit_anchor, audit_page, cmd

GENESIS = "0" * 64
FIELDS = ("change_id", "approver", "executor", "target", "action", "result")
ACTIONS = ("label", "unlabel", "cordon", "uncordon", "drain", "driver_upgrade", "reboot",
           "remove", "delete_node", "revoke_credential", "remove_ssh_key", "remove_agent",
           "firewall", "restore_standalone", "validate", "approval", "audit_repair",
           "hold_override", "approve_csr", "close_api_path")
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


def _last_line(handle, end=None):
    """The last non-empty line of an open binary file, or of its first ``end`` bytes (reads
    backwards in blocks)."""
    handle.seek(0, os.SEEK_END)
    pos = handle.tell() if end is None else end
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


def _is_json(raw):
    try:
        json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return False
    return True


def _tail(handle):
    """The end of an open binary log: size, last line, whether it ends in a newline, and
    ``torn`` (a last line with no newline that is not JSON: a write cut short)."""
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    newline = True
    if size:
        handle.seek(size - 1)
        newline = handle.read(1) == b"\n"
    line = _last_line(handle) if size else None
    torn = bool(size) and not newline and line is not None and not _is_json(line)
    handle.seek(0)
    lineno = sum(1 for _line in handle) if torn else None
    return {"size": size, "line": line, "newline": newline, "torn": torn,
            "offset": size - len(line) if torn else None, "lineno": lineno}


def repair_command(path):
    return "bin/hgpu-audit-verify --repair-torn-tail %s" % path


def _torn_message(path, tail):
    return ("%s: line %d is torn (%d bytes with no newline, not JSON: a write was cut short); nothing is "
            "appended after it. Repair it with `%s` (moves the bytes aside and audits the repair)"
            % (path, tail["lineno"], tail["size"] - tail["offset"], repair_command(path)))


def _next_link(path, last, anchors_path):
    """(seq, prev) of the entry that follows the line ``last`` (None: no entry yet); refuses a
    last line that is not an entry, a fresh chain over existing anchors and a log whose head is
    behind its anchors."""
    if last:
        try:
            prev = json.loads(last.decode("utf-8"))
            seq, prev_hash = int(prev["seq"]) + 1, prev["hash"]
        except (ValueError, KeyError, TypeError):
            raise AuditError("%s: the last line is not an audit entry; run the verifier "
                             "before appending" % path)
    else:
        seq, prev_hash = 1, GENESIS
    anchored = audit_anchor.last(anchors_path) if anchors_path else None
    if anchored and seq == 1:
        raise AuditError("refusing to start a fresh chain in %s: the anchors file %s records a head at seq %d "
                         "(hash %s), so the log was deleted or emptied. Restore the log, and run "
                         "bin/hgpu-audit-verify %s" % (path, anchors_path, anchored["seq"], anchored["hash"], path))
    if anchored and (anchored["seq"] >= seq or (anchored["seq"] == seq - 1 and anchored["hash"] != prev_hash)):
        raise AuditError("refusing to append to %s: its head is seq %d but the anchors file %s records seq %d "
                         "(hash %s), so the log was truncated or rewritten. Run bin/hgpu-audit-verify %s"
                         % (path, seq - 1, anchors_path, anchored["seq"], anchored["hash"], path))
    return seq, prev_hash


def _append_locked(handle, path, event, anchors_path):
    """Append under the caller's lock; refuses a torn tail and whatever ``_next_link`` refuses."""
    tail = _tail(handle)
    if tail["torn"]:
        raise AuditError(_torn_message(path, tail))
    seq, prev_hash = _next_link(path, tail["line"], anchors_path)
    entry = dict(event, seq=seq, prev=prev_hash)
    entry["hash"] = entry_hash(entry)
    handle.seek(0, os.SEEK_END)
    data = (json.dumps(entry, sort_keys=True, ensure_ascii=True) + "\n").encode("utf-8")
    if not tail["newline"]:
        data = b"\n" + data
    handle.write(data)
    handle.flush()
    os.fsync(handle.fileno())
    return entry


def _anchor_locked(path, entry, anchors_path, checkpoint_key, checkpoint_every, syslog_socket):
    """Record the new head outside the log; returns (checkpoint record or None, syslog sent, warnings).

    The anchors file must take the head (AuditError otherwise); a checkpoint or syslog that
    cannot be written is a warning."""
    warnings = []
    seq, hash_ = entry["seq"], entry["hash"]
    checkpoint = None
    if anchors_path:
        try:
            audit_anchor.write(anchors_path, audit_anchor.head_record(seq, hash_, entry["time"]))
        except OSError as exc:
            raise AuditError("%s: entry seq %d was appended but its head could not be written to the anchors "
                             "file %s: %s" % (path, seq, anchors_path, exc))
        if checkpoint_key and audit_anchor.checkpoint_due(anchors_path, seq, checkpoint_every):
            try:
                checkpoint = audit_anchor.checkpoint_record(checkpoint_key, seq, hash_, _now())
                audit_anchor.write(anchors_path, checkpoint)
            except (audit_anchor.AnchorError, OSError, cmd.CommandError) as exc:
                checkpoint = None
                warnings.append("audit head seq %d was not checkpointed in %s: %s" % (seq, anchors_path, exc))
    sent = False
    if syslog_socket:
        try:
            audit_anchor.send_syslog(audit_anchor.syslog_text(path, seq, hash_), syslog_socket)
            sent = True
        except (audit_anchor.AnchorError, OSError, cmd.CommandError) as exc:
            warnings.append("audit head seq %d (hash %s) was not sent to syslog: %s" % (seq, hash_, exc))
    return checkpoint, sent, warnings


def _append_anchored(handle, path, event, anchors_path, checkpoint_key, checkpoint_every, syslog_socket):
    """Append under the held lock, then anchor the new head; the write() result."""
    entry = _append_locked(handle, path, event, anchors_path)
    checkpoint, sent, warnings = _anchor_locked(path, entry, anchors_path, checkpoint_key,
                                                checkpoint_every, syslog_socket)
    warnings += audit_page.refresh(path, handle)  # the readable page beside the log
    return {"entry": entry, "head": {"seq": entry["seq"], "hash": entry["hash"]}, "anchors": anchors_path,
            "checkpoint": checkpoint, "syslog": sent, "warnings": warnings}


def _open_locked(path):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o640)
    handle = os.fdopen(fd, "r+b")
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def write(path, event, anchors=None, checkpoint_key=None, checkpoint_every=100, syslog_socket=None):
    """Append one event under an exclusive lock and anchor the new head.

    ``anchors``: the anchors file (default ``<log>.anchors``); ``checkpoint_key``: an operator's
    SSH key that signs a checkpoint every ``checkpoint_every`` entries; ``syslog_socket``: send
    the head to syslog there (None: not at all). Returns {entry, head: {seq, hash}, anchors,
    checkpoint, syslog, warnings}."""
    anchors_path = anchors or audit_anchor.default_path(path)
    handle = _open_locked(path)
    try:
        result = _append_anchored(handle, path, event, anchors_path, checkpoint_key, checkpoint_every,
                                  syslog_socket)
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
    return result


def append(path, event, **anchoring):
    """Append one event (see ``write`` for the anchoring options); returns the written entry."""
    return write(path, event, **anchoring)["entry"]


def current_head(path):
    """The last entry's {seq, hash}, or None for a missing or empty log (no chain check)."""
    if not os.path.exists(path):
        return None
    with open(path, "rb") as handle:
        last = _last_line(handle)
    try:
        entry = json.loads(last.decode("utf-8")) if last else None
        return {"seq": entry["seq"], "hash": entry["hash"]} if entry else None
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def repair_torn_tail(path, executor, change_id="audit-repair", approver=None, anchors=None,
                     checkpoint_key=None, checkpoint_every=100, syslog_socket=None):
    """Move a torn last line aside and audit the repair.

    Touches only a last line with no newline that is not JSON: its bytes go to
    ``<log>.torn-<time>`` beside the log, the log is cut back to the line before, and an
    ``audit_repair`` event with the bytes' sha256 is appended. Returns write()'s result plus
    {moved_to, bytes, sha256, line}."""
    if not os.path.exists(path):
        raise AuditError("%s does not exist; there is no torn tail to repair" % path)
    anchors_path = anchors or audit_anchor.default_path(path)
    handle = _open_locked(path)
    try:
        tail = _tail(handle)
        if not tail["torn"]:
            raise AuditError("%s: the last line is not torn (it %s); nothing was changed"
                             % (path, "ends with a newline" if tail["newline"] else "is valid JSON"))
        handle.seek(tail["offset"])
        torn = handle.read()
        digest = hashlib.sha256(torn).hexdigest()
        stamp = _now().replace(":", "").replace("-", "")
        aside = "%s.torn-%s" % (os.path.abspath(path), stamp)
        event = make_event(change_id, approver or executor, executor, os.path.abspath(path), "audit_repair",
                           "changed", {"repair": "torn_tail", "line": tail["lineno"], "bytes": len(torn),
                                       "sha256": digest, "moved_to": aside})
        # Everything the append after the cut would refuse is refused before anything is touched.
        _next_link(path, _last_line(handle, tail["offset"]), anchors_path)
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
        with os.fdopen(fd, "wb") as out:
            out.write(torn)
            out.flush()
            os.fsync(out.fileno())
        handle.truncate(tail["offset"])
        handle.flush()
        os.fsync(handle.fileno())
        result = _append_anchored(handle, path, event, anchors_path, checkpoint_key, checkpoint_every,
                                  syslog_socket)
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
    result.update({"moved_to": aside, "bytes": len(torn), "sha256": digest, "line": tail["lineno"]})
    return result


def _result(ok, count, prev_hash, bad=None, **extra):
    res = {"ok": ok, "entries": count, "head": prev_hash, "first_bad": bad}
    res.update(extra)
    return res


def verify(path, head=None, anchors=None, allowed_signers=None):
    """Check the whole chain, then the log against its anchors.

    Returns {'ok', 'entries', 'head', 'first_bad': {line, seq, problem, kind}, 'anchors': {path,
    heads, checkpoints, signers}, 'warnings'}. ``kind`` names what was found: broken (a line of
    the chain), torn (a last line cut short), truncated, rewritten or deleted. ``anchors``: the
    anchors file (default ``<log>.anchors``); ``allowed_signers``: the file the checkpoints'
    signatures are checked against (without it they are counted, not checked)."""
    anchors_path = anchors or audit_anchor.default_path(path)
    records, warnings = audit_anchor.read(anchors_path)
    summary = {"path": anchors_path, "heads": sum(1 for r in records if r["type"] == "head"),
               "checkpoints": sum(1 for r in records if r["type"] == "checkpoint"), "signers": []}
    extra = {"anchors": summary, "warnings": warnings}
    if summary["checkpoints"] and not allowed_signers:
        warnings.append("%d signed checkpoints in %s were not checked (no allowed signers file given)"
                        % (summary["checkpoints"], anchors_path))
    absent = not os.path.exists(path)
    if absent or os.path.getsize(path) == 0:
        if records:
            top = max(records, key=lambda r: r["seq"])
            return _result(False, 0, None, {
                "line": 0, "seq": None, "kind": "deleted",
                "problem": "deleted: %s is %s but %s anchored a head at seq %d (hash %s)"
                           % (path, "missing" if absent else "empty", anchors_path, top["seq"], top["hash"])}, **extra)
        if absent:
            return _result(False, 0, None, {"line": 0, "seq": None, "kind": "missing",
                                            "problem": "%s does not exist" % path}, **extra)
    prev_hash, expect_seq, hashes = GENESIS, 1, []
    with open(path, "rb") as handle:
        for lineno, raw in enumerate(handle, 1):
            count = len(hashes)

            def bad(problem, seq=None, kind="broken"):
                return _result(False, count, prev_hash,
                               {"line": lineno, "seq": seq, "problem": problem, "kind": kind}, **extra)
            try:
                entry = json.loads(raw.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                if not raw.endswith(b"\n"):
                    extra["torn"] = {"line": lineno, "bytes": len(raw)}
                    return bad("torn: line %d is the last line, %d bytes with no newline and not JSON (a write was "
                               "cut short); repair with `%s`" % (lineno, len(raw), repair_command(path)), kind="torn")
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
            prev_hash, expect_seq = entry["hash"], expect_seq + 1
            hashes.append(prev_hash)
    count = len(hashes)
    found, summary["signers"] = audit_anchor.contradiction(records, hashes, anchors_path, allowed_signers)
    if found:
        kind, line, seq, problem = found
        return _result(False, count, prev_hash, {"line": line, "seq": seq, "problem": problem, "kind": kind}, **extra)
    if head and head != prev_hash:
        return _result(False, count, prev_hash, {
            "line": count + 1, "seq": count + 1, "kind": "truncated",
            "problem": "the log ends before the recorded head %s (lines were cut off the end)" % head}, **extra)
    return _result(True, count, prev_hash, **extra)


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
