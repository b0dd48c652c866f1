# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading and checking the hash-chained audit log (``audit``).

``verify`` walks the whole chain, then checks the log against its anchors (``audit_anchor``),
against the heads syslog kept where they can be read, and against the ledger of used change
ids beside it (``<records>/approvals``: each entry names the seq and hash of the audit entry
that claimed its change id). With a checkpoint key it requires a signed checkpoint at the head
and at least every ``checkpoint_every`` entries, so a rewrite without the key (an edited line,
the chain and the anchor heads recomputed, the later checkpoints dropped) fails. Nothing is
opened through a symbolic link.

CLI: ``bin/hgpu-audit-verify LOG [HEAD_HASH]``.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import tempfile

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import audit, audit_anchor, files


def ledger_contradiction(refs, hashes, path):
    """The first ledger reference the log contradicts, as (kind, line, seq, problem), or None."""
    count = len(hashes)
    for ref in sorted(refs, key=lambda r: r["seq"]):
        seq = ref["seq"]
        if 1 <= seq <= count and hashes[seq - 1] == ref["hash"]:
            continue
        kind = "rewritten" if 1 <= seq <= count else ("deleted" if count == 0 else "truncated")
        return (kind, min(max(seq, 1), count + 1), seq, "%s: the ledger entry %s (change %s) names the audit entry "
                "seq %d hash %s, but %s %s" % (kind, ref["file"], ref["change_id"], seq, ref["hash"], path,
                                               "has hash %s there" % hashes[seq - 1] if 1 <= seq <= count
                                               else "ends at seq %d (the log was deleted or cut short)" % count))
    return None


def _result(ok, count, prev_hash, bad=None, **extra):
    res = {"ok": ok, "entries": count, "head": prev_hash, "first_bad": bad}
    res.update(extra)
    return res


def _chain(path, extra):
    """Walk the chain of the log ``path``: (hashes, entries, None) or (hashes, entries, bad result)."""
    prev_hash, expect_seq, hashes, entries = audit.GENESIS, 1, [], []
    with os.fdopen(files.open_nofollow(path, os.O_RDONLY), "rb") as handle:
        for lineno, raw in enumerate(handle, 1):
            count = len(hashes)

            def bad(problem, seq=None, kind="broken"):
                return hashes, entries, _result(False, count, prev_hash,
                                                {"line": lineno, "seq": seq, "problem": problem, "kind": kind}, **extra)
            try:
                entry = json.loads(raw.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                if not raw.endswith(b"\n"):
                    extra["torn"] = {"line": lineno, "bytes": len(raw)}
                    return bad("torn: line %d is the last line, %d bytes with no newline and not JSON (a write was "
                               "cut short); repair with `%s`" % (lineno, len(raw), audit.repair_command(path)), kind="torn")
                return bad("not a JSON object")
            if not isinstance(entry, dict):
                return bad("not a JSON object")
            seq = entry.get("seq")
            if seq != expect_seq:
                return bad("seq %r where %d was expected (a line was removed or reordered)"
                           % (seq, expect_seq), seq)
            if entry.get("prev") != prev_hash:
                return bad("prev does not match the hash of the line before", seq)
            if entry.get("hash") != audit.entry_hash(entry):
                return bad("hash does not match the content (the line was edited)", seq)
            missing = [k for k in audit.FIELDS + ("time",) if not entry.get(k)]
            if missing:
                return bad("missing %s" % ", ".join(missing), seq)
            prev_hash, expect_seq = entry["hash"], expect_seq + 1
            hashes.append(prev_hash)
            entries.append(entry)
    return hashes, entries, None


def _signers_file(allowed_signers, checkpoint_key, folder):
    """The allowed_signers file checkpoints are checked against: the one given, else one made
    in ``folder`` from the checkpoint key's public half; None when there is neither."""
    if allowed_signers:
        return allowed_signers
    if checkpoint_key:
        return audit_anchor.key_signers(checkpoint_key, folder)
    return None


def _missing_log(path, records, refs, anchors_path, extra):
    """The result for a missing or empty log: deleted when anchors or ledger references say it
    held entries, missing when it does not exist; None for an empty log nothing vouches for."""
    absent = not os.path.exists(path)
    if records:
        top = max(records, key=lambda r: r["seq"])
        return _result(False, 0, None, {
            "line": 0, "seq": None, "kind": "deleted",
            "problem": "deleted: %s is %s but %s anchored a head at seq %d (hash %s)"
                       % (path, "missing" if absent else "empty", anchors_path, top["seq"], top["hash"])}, **extra)
    found = ledger_contradiction(refs, [], path)
    if found:
        return _result(False, 0, None, {"line": 0, "seq": found[2], "kind": found[0], "problem": found[3]}, **extra)
    if absent:
        return _result(False, 0, None, {"line": 0, "seq": None, "kind": "missing",
                                        "problem": "%s does not exist" % path}, **extra)
    return None


def _anchors_contradiction(records, hashes, anchors_path, extra, options):
    """audit_anchor.contradiction with the allowed signers the options name (a temporary file
    made from the checkpoint key's public half when needed); raises AnchorError."""
    summary = extra["anchors"]
    tmp = tempfile.mkdtemp(prefix="hgpu-audit-verify-")
    try:
        signers = _signers_file(options["allowed_signers"], options["checkpoint_key"], tmp)
        if summary["checkpoints"] and not signers:
            extra["warnings"].append("%d signed checkpoints in %s were not checked (no allowed signers file given)"
                                     % (summary["checkpoints"], anchors_path))
        found, summary["signers"] = audit_anchor.contradiction(
            records, hashes, anchors_path, signers, summary["every"], summary["required"],
            options["all_signatures"], options["head_checkpoint"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return found


def _outside_contradiction(path, records, refs, hashes, anchors_path, extra, options):
    """The first thing outside the log that contradicts it (anchors, checkpoints, ledger, syslog
    heads), as (kind, line, seq, problem), or None; raises AnchorError."""
    found = _anchors_contradiction(records, hashes, anchors_path, extra, options)
    if not found:
        found = ledger_contradiction(refs, hashes, path)
    if not found and options["syslog"]:
        heads, source = audit_anchor.syslog_heads(path, options["syslog"])
        extra["syslog"] = {"source": source, "heads": len(heads)}
        found = audit_anchor.syslog_contradiction(heads, hashes, source, path)
    return found


def verify(path, head=None, anchors=None, allowed_signers=None, checkpoint_every=audit_anchor.CHECKPOINT_EVERY,
           checkpoint_key=None,
           require_checkpoints=None, ledger_dir=None, syslog=None, all_signatures=True, entries_out=None,
           head_checkpoint=True):
    """Check the whole chain, then the log against its anchors, its ledger and syslog's heads.

    Returns {'ok', 'entries', 'head', 'first_bad': {line, seq, problem, kind}, 'anchors': {path,
    heads, checkpoints, signers}, 'ledger': {path, references}, 'syslog': {source, heads},
    'warnings'}. ``kind`` names what was found: broken (a line of the chain), torn (a last line
    cut short), truncated, rewritten, deleted, missing or refused (a symbolic link).

    ``anchors``: the anchors file (default ``<log>.anchors``). ``allowed_signers``: the file the
    checkpoints' signatures are checked against; without it, the public half of
    ``checkpoint_key`` (without either they are counted, not checked). ``require_checkpoints``
    (default: whether ``checkpoint_key`` is given): the log must carry a signed checkpoint at
    its head (with ``head_checkpoint`` false: within ``checkpoint_every`` entries of it) and at
    least every ``checkpoint_every`` entries, else it was rewritten.
    ``all_signatures``: check every checkpoint's signature, else one per ``checkpoint_every``
    entries and the head's. ``ledger_dir``: the ledger whose references the log must hold
    (default ``audit.default_ledger``). ``syslog``: where to read the heads syslog kept
    (audit_anchor.syslog_heads; None: not read). ``entries_out``: a list that receives the
    entries of a log that verifies."""
    anchors_path = anchors or audit_anchor.default_path(path)
    extra = {"anchors": {"path": anchors_path, "heads": 0, "checkpoints": 0, "signers": [], "required": False,
                         "every": checkpoint_every}, "warnings": [],
             "ledger": {"path": None, "references": 0}, "syslog": {"source": None, "heads": 0}}

    def refused(problem):
        return _result(False, 0, None, {"line": 0, "seq": None, "kind": "refused", "problem": problem}, **extra)
    try:
        audit.check_folders(path)
        records, warnings = audit_anchor.read(anchors_path)
    except OSError as exc:
        return refused("refused: %s" % exc)
    extra["anchors"].update(heads=sum(1 for r in records if r["type"] == "head"),
                            checkpoints=sum(1 for r in records if r["type"] == "checkpoint"),
                            required=bool(checkpoint_key) if require_checkpoints is None else bool(require_checkpoints),
                            every=max(1, int(checkpoint_every or 100)))
    extra["warnings"] = warnings
    ledger = ledger_dir if ledger_dir is not None else audit.default_ledger(path)
    refs, ledger_problems = audit.ledger_refs(ledger)
    extra["ledger"] = {"path": ledger, "references": len(refs)}
    if ledger_problems:
        return refused("refused: %s" % "; ".join(ledger_problems))
    if os.path.islink(path):
        return refused("refused: %s is a symbolic link; it is not followed" % path)
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        res = _missing_log(path, records, refs, anchors_path, extra)
        if res:
            return res
    hashes, entries, bad = _chain(path, extra)
    if bad:
        return bad
    count = len(hashes)
    prev_hash = hashes[-1] if hashes else audit.GENESIS
    options = {"allowed_signers": allowed_signers, "checkpoint_key": checkpoint_key, "syslog": syslog,
               "all_signatures": all_signatures, "head_checkpoint": head_checkpoint}
    try:
        found = _outside_contradiction(path, records, refs, hashes, anchors_path, extra, options)
    except audit_anchor.AnchorError as exc:
        return refused("refused: %s" % exc)
    if found:
        kind, line, seq, problem = found
        return _result(False, count, prev_hash, {"line": line, "seq": seq, "problem": problem, "kind": kind}, **extra)
    if head and head != prev_hash:
        return _result(False, count, prev_hash, {
            "line": count + 1, "seq": count + 1, "kind": "truncated",
            "problem": "the log ends before the recorded head %s (lines were cut off the end)" % head}, **extra)
    if entries_out is not None:
        entries_out.extend(entries)
    return _result(True, count, prev_hash, **extra)


def current_head(path):
    """The last entry's {seq, hash}, or None for a missing or empty log (no chain check)."""
    if not os.path.exists(path):
        return None
    with os.fdopen(files.open_nofollow(path, os.O_RDONLY), "rb") as handle:
        last = audit.last_line(handle)
    try:
        entry = json.loads(last.decode("utf-8")) if last else None
        return {"seq": entry["seq"], "hash": entry["hash"]} if entry else None
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def read(path, change_id=None, target=None):
    out = []
    if not os.path.exists(path):
        return out
    with os.fdopen(files.open_nofollow(path, os.O_RDONLY), "rb") as handle:
        for raw in handle:
            entry = json.loads(raw.decode("utf-8"))
            if change_id and entry.get("change_id") != change_id:
                continue
            if target and entry.get("target") != target:
                continue
            out.append(entry)
    return out
