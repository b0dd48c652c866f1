# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Anchors for the audit log's head, kept outside the log file.

Every append records the new head (seq and hash) in three places besides the log:
  - an anchors file (JSON lines, ``<log>.anchors`` unless the caller names another path);
    each line is ``{"type": "head", "seq", "hash", "time"}``;
  - the control host's syslog/journal (``/dev/log``, else ``logger``), tag ``hybridgpu-audit``;
  - every ``every`` entries, when an operator key is given, a signed checkpoint line in the
    anchors file: ``{"type": "checkpoint", "seq", "hash", "time", "signature"}``, the signature
    made by ``ssh-keygen -Y sign`` under the namespace ``hybridgpu.fleet-audit`` over
    ``checkpoint_message()``, checked by ``ssh-keygen -Y verify`` against an allowed_signers
    file (sshd(8) format, principal = person id, ``namespaces="hybridgpu.fleet-audit"``).

Whoever can rewrite the log can rewrite the head lines of the anchors file too; a signed
checkpoint they cannot forge, and the syslog copy they cannot reach from the log's folder.
``syslog_heads`` reads the heads syslog kept for a log back (the journal, or a syslog file), so
the verifier compares the log with them where they exist.

The signing key's path is a pinned setting (``DEFAULT_KEY`` unless the inventory names another);
its public half (``<key>.pub``) is what the checkpoints are verified against when no allowed
signers file is given. Signatures are made and checked with ``approval_signing.keygen``.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import shutil
import socket
import tempfile

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd, files
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.approval_signing import ApprovalError, keygen

NAMESPACE = "hybridgpu.fleet-audit"
TAG = "hybridgpu-audit"
SYSLOG_SOCKET = "/dev/log"
# user.notice
SYSLOG_PRIORITY = 13
# Where the checkpoint signing key is looked for when the inventory names none.
DEFAULT_KEY = "/etc/hybridgpu/audit_checkpoint_key"
# The most entries between signed checkpoints that verify allows.
CHECKPOINT_EVERY = 100
# Syslog files read for heads when the journal has none.
SYSLOG_FILES = ("/var/log/syslog", "/var/log/messages")
_HEAD_TEXT = re.compile(r"(?:^|\s)head log=(\S+) seq=(\d+) hash=([0-9a-f]{64})\s*$")


class AnchorError(Exception):
    pass


def default_path(log):
    return os.path.abspath(log) + ".anchors"


def read(path):
    """The anchor records of ``path`` in file order; ([], []) when it is missing.

    Returns (records, problems): a line that is not an anchor record is named in problems."""
    records, problems = [], []
    if not path or not os.path.lexists(path):
        return records, problems
    with os.fdopen(files.open_nofollow(path, os.O_RDONLY), "rb") as handle:
        for lineno, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8"))
                if rec.get("type") not in ("head", "checkpoint") or not isinstance(rec.get("seq"), int) \
                        or not isinstance(rec.get("hash"), str):
                    raise ValueError
            except (ValueError, AttributeError, UnicodeDecodeError):
                problems.append("%s line %d is not an anchor record" % (path, lineno))
                continue
            rec["line"] = lineno
            records.append(rec)
    return records, problems


def last(path):
    """The last anchor record of ``path`` (head or checkpoint), or None."""
    records = read(path)[0]
    return records[-1] if records else None


def write(path, record):
    """Append one record (a dict) to the anchors file and fsync it."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    files.real_folder(directory, "the anchors folder")
    fd = files.open_nofollow(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o640)
    with os.fdopen(fd, "r+b") as handle:
        data = (json.dumps(record, sort_keys=True, ensure_ascii=True) + "\n").encode("utf-8")
        handle.seek(0, os.SEEK_END)
        if handle.tell():
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                # A record cut short stays on its own line (read() names it) and this one stays whole.
                data = b"\n" + data
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def head_record(seq, hash_, when):
    return {"type": "head", "seq": seq, "hash": hash_, "time": when}


def checkpoint_message(seq, hash_, when):
    """The exact bytes a checkpoint signature covers."""
    return ("%s checkpoint\nseq %d\nhash %s\ntime %s\n" % (NAMESPACE, seq, hash_, when)).encode("ascii")


def checkpoint_due(path, seq, every):
    """True when no checkpoint in ``path`` is within ``every`` entries of ``seq``."""
    done = [r["seq"] for r in read(path)[0] if r["type"] == "checkpoint"]
    return seq - (max(done) if done else 0) >= max(1, int(every))


def _keygen(args, data=None, timeout=30):
    """ssh-keygen (approval_signing.keygen); its Result whatever its exit status."""
    try:
        return keygen(args, data=data, timeout=timeout)
    except ApprovalError as exc:
        raise AnchorError(str(exc))
    except cmd.CommandError as exc:
        if exc.rc is None:
            raise
        return exc


def sign(key, message):
    """Sign ``message`` with the private key (or agent-held key's public file) ``key``."""
    if not os.path.exists(key):
        raise AnchorError("checkpoint key %s does not exist" % key)
    res = _keygen(["-Y", "sign", "-q", "-f", key, "-n", NAMESPACE], data=message)
    if res.rc != 0 or "BEGIN SSH SIGNATURE" not in (res.out or ""):
        raise AnchorError("ssh-keygen -Y sign with %s failed: %s" % (key, (res.err or "").strip() or "no signature"))
    return res.out


def configured_key(key=None):
    """The checkpoint key to sign with: ``key`` when given, else DEFAULT_KEY when it exists,
    else None."""
    if key:
        return key
    return DEFAULT_KEY if os.path.isfile(DEFAULT_KEY) else None


def key_signers(key, folder):
    """Write an allowed_signers file for the public half of ``key`` (``<key>.pub``) into
    ``folder``; returns its path. AnchorError when there is no public key."""
    pub = key if key.endswith(".pub") else key + ".pub"
    try:
        with open(pub, "r", encoding="utf-8") as fh:
            fields = fh.read().split()
    except (IOError, OSError) as exc:
        raise AnchorError("the checkpoint key's public half %s cannot be read: %s" % (pub, exc))
    if len(fields) < 2:
        raise AnchorError("%s is not an SSH public key" % pub)
    path = os.path.join(folder, "checkpoint_signers")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write('checkpoint-key namespaces="%s" %s %s\n' % (NAMESPACE, fields[0], fields[1]))
    return path


def checkpoint_record(key, seq, hash_, when):
    rec = {"type": "checkpoint", "seq": seq, "hash": hash_, "time": when}
    rec["signature"] = sign(key, checkpoint_message(seq, hash_, when))
    return rec


def verify_checkpoint(record, allowed_signers):
    """The principal whose key signed the checkpoint; AnchorError saying why not."""
    signature = record.get("signature") or ""
    if "BEGIN SSH SIGNATURE" not in signature:
        raise AnchorError("no SSH signature")
    if not os.path.exists(allowed_signers):
        raise AnchorError("allowed signers file %s does not exist" % allowed_signers)
    message = checkpoint_message(record["seq"], record["hash"], record.get("time"))
    tmp = tempfile.mkdtemp(prefix="hgpu-audit-")
    try:
        sig = os.path.join(tmp, "checkpoint.sig")
        with open(sig, "w") as fh:
            fh.write(signature if signature.endswith("\n") else signature + "\n")
        found = _keygen(["-Y", "find-principals", "-s", sig, "-f", allowed_signers, "-n", NAMESPACE])
        principals = found.out.split()
        if found.rc != 0 or not principals:
            raise AnchorError("made by a key that is not in %s under the namespace %s" % (allowed_signers, NAMESPACE))
        for principal in principals:
            res = _keygen(["-Y", "verify", "-f", allowed_signers, "-I", principal, "-n", NAMESPACE, "-s", sig],
                          data=message)
            if res.rc == 0:
                return principal
        raise AnchorError("does not match seq %d, hash %s (signed by %s over other content)"
                          % (record["seq"], record["hash"], ", ".join(principals)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def syslog_text(log, seq, hash_):
    return "head log=%s seq=%d hash=%s" % (os.path.abspath(log), seq, hash_)


def send_syslog(message, socket_path=SYSLOG_SOCKET):
    """Send ``message`` to syslog under the tag hybridgpu-audit; AnchorError saying why not.

    Writes to the syslog socket; on the default socket falls back to ``logger``."""
    data = ("<%d>%s: %s" % (SYSLOG_PRIORITY, TAG, message)).encode("utf-8")
    errors = []
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.settimeout(5)
        sock.connect(socket_path)
        sock.send(data)
        return
    except (OSError, socket.error) as exc:
        errors.append("%s: %s" % (socket_path, exc))
    finally:
        sock.close()
    if socket_path == SYSLOG_SOCKET:
        exe = shutil.which("logger")
        if not exe:
            errors.append("logger is not installed")
        else:
            try:
                cmd.run([exe, "-t", TAG, "--", message], timeout=10)
                return
            except cmd.CommandError as exc:
                errors.append("logger: %s" % exc)
    raise AnchorError("; ".join(errors))


def _heads_in(lines, log):
    """The (seq, hash) heads of ``log`` among syslog lines (text)."""
    want = os.path.abspath(log)
    heads = []
    for line in lines:
        if TAG not in line and not line.startswith("head log="):
            continue
        found = _HEAD_TEXT.search(line.rstrip("\n"))
        if found and found.group(1) == want:
            heads.append((int(found.group(2)), found.group(3)))
    return heads


def _journal_lines():
    exe = shutil.which("journalctl")
    if not exe:
        return None
    try:
        res = cmd.run([exe, "-t", TAG, "-o", "cat", "--no-pager", "-q"], timeout=60, ok=cmd.ANY_STATUS)
    except cmd.CommandError:
        return None
    return res.out.splitlines() if res.rc == 0 else None


def _file_lines(path):
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            return [line for line in handle if TAG in line]
    except (IOError, OSError):
        return None


def syslog_heads(log, source="auto"):
    """The heads syslog kept for ``log``: ([(seq, hash), ...], where they were read).

    ``source``: ``auto`` (the journal, else the first readable of SYSLOG_FILES), ``journal``, a
    syslog file's path, or None (not read). Where nothing can be read: ([], None)."""
    if not source:
        return [], None
    if source in ("auto", "journal"):
        lines = _journal_lines()
        if lines is not None and (_heads_in(lines, log) or source == "journal"):
            return _heads_in(lines, log), "journal"
        if source == "journal":
            return [], None
        for path in SYSLOG_FILES:
            lines = _file_lines(path)
            if lines is not None:
                return _heads_in(lines, log), path
        return [], None
    lines = _file_lines(source)
    if lines is None:
        raise AnchorError("the syslog file %s cannot be read" % source)
    return _heads_in(lines, log), source


def syslog_contradiction(heads, hashes, source, log):
    """The first syslog head the log contradicts, as (kind, line, seq, problem), or None."""
    count = len(hashes)
    for seq, hash_ in heads:
        if 1 <= seq <= count and hashes[seq - 1] != hash_:
            return ("rewritten", seq, seq, "rewritten: line %d has hash %s but syslog (%s) kept the head seq %d "
                    "hash %s for %s (the log was rewritten, or deleted and started again)"
                    % (seq, hashes[seq - 1], source, seq, hash_, log))
    top = max(heads) if heads else None
    if top and top[0] > count:
        kind = "deleted" if count == 0 else "truncated"
        return (kind, count + 1, count + 1, "%s: syslog (%s) kept the head seq %d (hash %s) for %s but the log ends "
                "at seq %d" % (kind, source, top[0], top[1], log, count))
    return None


def _cover(checkpoints, count, every):
    """The checkpoints whose signatures vouch for the log: walking from seq 0, the furthest
    checkpoint within ``every`` entries each step, ending at the head's."""
    by_seq = {}
    for rec in checkpoints:
        by_seq.setdefault(rec["seq"], rec)
    seqs = sorted(by_seq)
    picked, at = [], 0
    while seqs and at < count:
        reach = [q for q in seqs if at < q <= at + every]
        if not reach:
            break
        at = reach[-1]
        picked.append(by_seq[at])
    if by_seq.get(count) is not None and (not picked or picked[-1]["seq"] != count):
        picked.append(by_seq[count])
    return picked


def missing_checkpoint(records, count, every, anchors_path, at_head=True):
    """Where the log lacks the checkpoints it must carry, as (kind, line, seq, problem), or None.

    From its first checkpoint on, checkpoints at most ``every`` entries apart (the first one
    vouches for the entries before it, written before there was a key), and one at the head.
    With ``at_head`` false (the check before an append that signs its own head), a log with no
    checkpoint yet passes and the head may be up to ``every`` entries past the last one."""
    if count == 0:
        return None
    seqs = sorted(set(r["seq"] for r in records if r["type"] == "checkpoint" and r["seq"] <= count))
    if not at_head and not seqs:
        return None
    last_seq = seqs[-1] if seqs else 0
    if count != last_seq and (at_head or count - last_seq > every):
        return ("rewritten", last_seq + 1, count, "rewritten: no signed checkpoint at the head seq %d in %s (the last "
                "is at seq %d): the checkpoints after it were dropped, or the entries after it were written or "
                "rewritten without the checkpoint key" % (count, anchors_path, last_seq))
    for prev, seq in zip(seqs, seqs[1:]):
        if seq - prev > every:
            return ("rewritten", prev + 1, prev + 1, "rewritten: no signed checkpoint between seq %d and seq %d in %s "
                    "(at most %d entries apart): checkpoints were dropped or the log was rewritten"
                    % (prev, seq, anchors_path, every))
    return None


def contradiction(records, hashes, anchors_path, allowed_signers, every=100, required=False, all_signatures=True,
                  at_head=True):
    """The first anchor the log contradicts, as (kind, line, seq, problem), and the signers seen.

    ``required``: the log must carry a signed checkpoint at its head (with ``at_head`` false:
    within ``every`` entries of it) and at least every ``every`` entries. ``allowed_signers``: the file checkpoint signatures are checked against;
    every checkpoint's with ``all_signatures``, else those of ``_cover`` (one per ``every``
    entries and the head's: the chain links everything before each)."""
    count = len(hashes)
    signers = []
    for rec in records:
        seq = rec["seq"]
        if 1 <= seq <= count and hashes[seq - 1] != rec["hash"]:
            return ("rewritten", seq, seq, "rewritten: line %d has hash %s but %s line %d anchored %s at %s (the log "
                    "was rewritten)" % (seq, hashes[seq - 1], anchors_path, rec["line"], rec["hash"], rec.get("time"))), signers
    top = max(records, key=lambda r: r["seq"]) if records else None
    if top and top["seq"] > count:
        return ("truncated", count + 1, count + 1, "truncated: %s line %d anchored the head at seq %d (hash %s) "
                "but the log ends at seq %d (lines were cut off the end)"
                % (anchors_path, top["line"], top["seq"], top["hash"], count)), signers
    if required:
        found = missing_checkpoint(records, count, every, anchors_path, at_head)
        if found:
            return found, signers
    checkpoints = [r for r in records if r["type"] == "checkpoint"]
    if allowed_signers:
        for rec in checkpoints if all_signatures else _cover(checkpoints, count, max(1, int(every))):
            try:
                signers.append(verify_checkpoint(rec, allowed_signers))
            except (AnchorError, OSError, cmd.CommandError) as exc:
                seq = rec["seq"]
                return ("rewritten", min(seq, count + 1), seq, "rewritten: the checkpoint at seq %d (%s line %d) "
                        "does not verify against %s: %s" % (seq, anchors_path, rec["line"], allowed_signers, exc)), signers
    return None, signers
