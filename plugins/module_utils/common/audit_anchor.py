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
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import socket
import tempfile

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd

NAMESPACE = "hybridgpu.fleet-audit"
TAG = "hybridgpu-audit"
SYSLOG_SOCKET = "/dev/log"
# user.notice
SYSLOG_PRIORITY = 13


class AnchorError(Exception):
    pass


def default_path(log):
    return os.path.abspath(log) + ".anchors"


def read(path):
    """The anchor records of ``path`` in file order; ([], []) when it is missing.

    Returns (records, problems): a line that is not an anchor record is named in problems."""
    records, problems = [], []
    if not path or not os.path.exists(path):
        return records, problems
    with open(path, "rb") as handle:
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
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o640)
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
    exe = shutil.which("ssh-keygen")
    if not exe:
        raise AnchorError("ssh-keygen is not installed on the control host (install openssh-client)")
    return cmd.run([exe] + args, data=data, timeout=timeout, ok=cmd.ANY_STATUS)


def sign(key, message):
    """Sign ``message`` with the private key (or agent-held key's public file) ``key``."""
    if not os.path.exists(key):
        raise AnchorError("checkpoint key %s does not exist" % key)
    res = _keygen(["-Y", "sign", "-q", "-f", key, "-n", NAMESPACE], data=message)
    if res.rc != 0 or "BEGIN SSH SIGNATURE" not in res.out:
        raise AnchorError("ssh-keygen -Y sign with %s failed: %s" % (key, res.err.strip() or "no signature"))
    return res.out


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


def contradiction(records, hashes, anchors_path, allowed_signers):
    """The first anchor the log contradicts, as (kind, line, seq, problem), and the signers seen."""
    count = len(hashes)
    signers = []
    for rec in records:
        seq = rec["seq"]
        if 1 <= seq <= count and hashes[seq - 1] != rec["hash"]:
            return ("rewritten", seq, seq, "rewritten: line %d has hash %s but %s line %d anchored %s at %s (the log "
                    "was rewritten)" % (seq, hashes[seq - 1], anchors_path, rec["line"], rec["hash"], rec.get("time"))), signers
    for rec in records:
        if rec["type"] != "checkpoint" or not allowed_signers:
            continue
        try:
            signers.append(verify_checkpoint(rec, allowed_signers))
        except (AnchorError, OSError, cmd.CommandError) as exc:
            seq = rec["seq"]
            return ("rewritten", min(seq, count + 1), seq, "rewritten: the checkpoint at seq %d (%s line %d) "
                    "does not verify against %s: %s" % (seq, anchors_path, rec["line"], allowed_signers, exc)), signers
    top = max(records, key=lambda r: r["seq"]) if records else None
    if top and top["seq"] > count:
        return ("truncated", count + 1, count + 1, "truncated: %s line %d anchored the head at seq %d (hash %s) "
                "but the log ends at seq %d (lines were cut off the end)"
                % (anchors_path, top["line"], top["seq"], top["hash"], count)), signers
    return None, signers
