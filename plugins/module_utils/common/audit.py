# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Append-only, hash-chained audit log of administrative actions (JSON lines).

Each line is one event with ``seq``, ``prev`` (the previous line's ``hash``, or GENESIS) and
``hash`` = sha256 of the canonical JSON of every other field. Changing, deleting or
reordering a line breaks the chain from that line on; ``audit_verify.verify`` names the first bad one.

The chain is unkeyed, so its head is anchored outside the file (``audit_anchor``): every
append writes the new head to an anchors file beside the log (and, when asked, to syslog and
as a checkpoint signed with the checkpoint key). ``audit_verify`` checks the log against those
anchors, syslog's heads and the ledger of used change ids beside it (``<records>/approvals``).
Appends refuse to start a fresh chain where anchors or ledger references exist, and to write
after a torn last line (a write cut short), which only ``repair_torn_tail``
(``bin/hgpu-audit-verify --repair-torn-tail LOG``) moves aside. The log, its folder and its
anchors are never opened through a symbolic link.
After each append the readable page ``<log>.html`` (``audit.html``) is written again
(audit_page: a view of the newest entries; it checks nothing).

CLI: ``bin/hgpu-audit-verify LOG [HEAD_HASH]``.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import stat

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import audit_anchor, audit_page, cmd, files

GENESIS = "0" * 64
FIELDS = ("change_id", "approver", "executor", "target", "action", "result")
ACTIONS = ("label", "unlabel", "cordon", "uncordon", "drain", "driver_upgrade", "reboot",
           "remove", "delete_node", "revoke_credential", "remove_ssh_key", "remove_agent",
           "firewall", "restore_standalone", "validate", "approval", "audit_repair",
           "hold_override", "approve_csr", "close_api_path", "change_claim", "change_done")
RESULTS = ("started", "ok", "changed", "failed", "refused", "skipped")
# Written only by ledger.claim and ledger.mark_done (the uses of change ids), never by a task.
LEDGER_ACTIONS = ("change_claim", "change_done")


class AuditError(Exception):
    pass


def default_ledger(path):
    """The ledger folder that goes with the log ``path``: ``<records>/approvals`` for a log at
    ``<records>/audit/<name>``, else None."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.basename(folder) != "audit":
        return None
    return os.path.join(os.path.dirname(folder), "approvals")


def ledger_refs(folder):
    """The audit entries the ledger ``folder`` names: ([{file, seq, hash, change_id}], problems).

    Each ledger entry (``<change_id>.json``) names the audit entry that claimed it and those
    that noted it done (``audit: {seq, hash}``). A symbolic link or an unreadable entry is a
    problem (the ledger is refused); an entry without a reference is skipped."""
    refs, problems = [], []
    if not folder or not os.path.lexists(folder):
        return refs, problems
    try:
        files.real_folder(folder, "the ledger folder")
        names = sorted(os.listdir(folder))
    except OSError as exc:
        return refs, [str(exc)]
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        path = os.path.join(folder, name)
        try:
            doc = files.read_json_nofollow(path)
        except (OSError, ValueError) as exc:
            problems.append("the ledger entry %s cannot be read: %s" % (path, exc))
            continue
        if not isinstance(doc, dict):
            problems.append("the ledger entry %s is not a JSON object" % path)
            continue
        marks = [doc.get("audit")] + [d.get("audit") for d in (doc.get("done") or {}).values() if isinstance(d, dict)]
        for mark in marks:
            if isinstance(mark, dict) and isinstance(mark.get("seq"), int) and isinstance(mark.get("hash"), str):
                refs.append({"file": path, "seq": mark["seq"], "hash": mark["hash"], "change_id": doc.get("change_id")})
    return refs, problems


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


def last_line(handle, end=None):
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
    line = last_line(handle) if size else None
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
    last line that is not an entry, a fresh chain over existing anchors or ledger references,
    and a log whose head is behind its anchors."""
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
    if seq == 1:
        refs = ledger_refs(default_ledger(path))[0]
        if refs:
            raise AuditError("refusing to start a fresh chain in %s: the ledger entry %s names its audit entry at seq %d "
                             "(hash %s), so the log was deleted or emptied. Restore the log, and run "
                             "bin/hgpu-audit-verify %s" % (path, refs[0]["file"], refs[0]["seq"], refs[0]["hash"], path))
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
    """Append under the caller's lock; refuses a torn tail, an anchors file that is a symbolic
    link and whatever ``_next_link`` refuses."""
    if anchors_path and os.path.islink(anchors_path):
        raise AuditError("the anchors file %s is a symbolic link; it is not followed and nothing was appended"
                         % anchors_path)
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


def _anchor_locked(path, entry, anchors_path, checkpoint_key, checkpoint_every, syslog_socket,
                   checkpoint_required=False):
    """Record the new head outside the log; returns (checkpoint record or None, syslog sent, warnings).

    The anchors file must take the head (AuditError otherwise); a checkpoint or syslog that
    cannot be written is a warning, and a checkpoint is an AuditError with
    ``checkpoint_required``."""
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
                if checkpoint_required:
                    raise AuditError("%s: entry seq %d was appended but its head could not be signed into %s: %s"
                                     % (path, seq, anchors_path, exc))
                warnings.append("audit head seq %d was not checkpointed in %s: %s" % (seq, anchors_path, exc))
    sent = False
    if syslog_socket:
        try:
            audit_anchor.send_syslog(audit_anchor.syslog_text(path, seq, hash_), syslog_socket)
            sent = True
        except (audit_anchor.AnchorError, OSError, cmd.CommandError) as exc:
            warnings.append("audit head seq %d (hash %s) was not sent to syslog: %s" % (seq, hash_, exc))
    return checkpoint, sent, warnings


def _append_anchored(handle, path, event, anchors_path, checkpoint_key, checkpoint_every, syslog_socket,
                     checkpoint_required=False):
    """Append under the held lock, then anchor the new head; the write() result."""
    entry = _append_locked(handle, path, event, anchors_path)
    checkpoint, sent, warnings = _anchor_locked(path, entry, anchors_path, checkpoint_key,
                                                checkpoint_every, syslog_socket, checkpoint_required)
    warnings += audit_page.refresh(path, handle)  # the readable page beside the log
    return {"entry": entry, "head": {"seq": entry["seq"], "hash": entry["hash"]}, "anchors": anchors_path,
            "checkpoint": checkpoint, "syslog": sent, "warnings": warnings}


def check_folders(path):
    """Refuse a log whose folder, or the records folder above an ``audit`` folder, is a
    symbolic link (files.LinkError)."""
    folder = os.path.dirname(os.path.abspath(path))
    files.real_folder(folder, "the audit folder")
    if os.path.basename(folder) == "audit":
        files.real_folder(os.path.dirname(folder), "the records folder")


def _open_locked(path):
    directory = os.path.dirname(os.path.abspath(path))
    check_folders(path)
    os.makedirs(directory, mode=0o750, exist_ok=True)
    check_folders(path)
    fd = files.open_nofollow(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o640)
    handle = os.fdopen(fd, "r+b")
    if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
        handle.close()
        raise AuditError("%s is not a regular file" % path)
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


@contextlib.contextmanager
def locked(path):
    """Hold the log's exclusive lock (the one every append takes) and yield its open handle, so
    a caller can read the log and append with ``append_held`` without another append between."""
    handle = _open_locked(path)
    try:
        yield handle
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def append_held(handle, path, event, anchors=None, checkpoint_key=None, checkpoint_every=100, syslog_socket=None,
                checkpoint_required=False):
    """Append under a lock held with ``locked``; the write() result."""
    return _append_anchored(handle, path, event, anchors or audit_anchor.default_path(path), checkpoint_key,
                            checkpoint_every, syslog_socket, checkpoint_required)


def write(path, event, anchors=None, checkpoint_key=None, checkpoint_every=100, syslog_socket=None,
          checkpoint_required=False):
    """Append one event under an exclusive lock and anchor the new head.

    ``anchors``: the anchors file (default ``<log>.anchors``); ``checkpoint_key``: the SSH key
    that signs a checkpoint when the head is ``checkpoint_every`` entries past the last one
    (1: every head); ``checkpoint_required``: a checkpoint that cannot be signed is an
    AuditError, not a warning; ``syslog_socket``: send the head to syslog there (None: not at
    all). Returns {entry, head: {seq, hash}, anchors, checkpoint, syslog, warnings}."""
    with locked(path) as handle:
        return append_held(handle, path, event, anchors, checkpoint_key, checkpoint_every, syslog_socket,
                           checkpoint_required)


def append(path, event, **anchoring):
    """Append one event (see ``write`` for the anchoring options); returns the written entry."""
    return write(path, event, **anchoring)["entry"]


def repair_torn_tail(path, executor, change_id="audit-repair", approver=None, anchors=None,
                     checkpoint_key=None, checkpoint_every=100, syslog_socket=None, checkpoint_required=False):
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
        _next_link(path, last_line(handle, tail["offset"]), anchors_path)
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
        with os.fdopen(fd, "wb") as out:
            out.write(torn)
            out.flush()
            os.fsync(out.fileno())
        handle.truncate(tail["offset"])
        handle.flush()
        os.fsync(handle.fileno())
        result = _append_anchored(handle, path, event, anchors_path, checkpoint_key, checkpoint_every,
                                  syslog_socket, checkpoint_required)
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
    result.update({"moved_to": aside, "bytes": len(torn), "sha256": digest, "line": tail["lineno"]})
    return result


def journal_line(entry):
    """The text sent to the node's journal (``logger -t hybridgpu-audit``)."""
    keep = dict((k, entry.get(k)) for k in FIELDS + ("time", "seq", "hash"))
    return "hybridgpu-audit " + json.dumps(keep, sort_keys=True, separators=(",", ":"))
