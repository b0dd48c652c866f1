# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Change approval: a YAML change record signed with ``ssh-keygen -Y sign``.

The signature covers the exact bytes of the record. It is checked with ``ssh-keygen -Y
verify`` against an allowed_signers file derived from the access boundary: every approver
named in ``change_rights`` with keys under ``people[].ssh_keys``, principal = person id,
restricted to this collection's namespace. Then the gate checks that the signer may approve
the record's action, the targets, the window and four eyes.

Approvers use it through ``bin/hgpu-sign-change`` (sign, verify, allowed-signers). Nothing prompts.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import os
import shutil
import tempfile

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import schema as s
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.boundary import ACTIONS, ID_PATTERN

NAMESPACE = "hybridgpu.fleet-change"


def _window_time(value):
    """A window bound: an ISO 8601 date-time with a time zone, as an aware UTC datetime. A
    bound without one would be read as UTC on one host and local time by the person who wrote it."""
    dt = None
    if isinstance(value, datetime.datetime):
        dt = value
    elif isinstance(value, str):
        text = value.strip()
        try:
            dt = datetime.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        except ValueError:
            dt = None
    if dt is None:
        return value, "expected an ISO 8601 date-time like 2025-03-01T08:00:00Z, got %r" % (value,)
    if dt.tzinfo is None:
        return value, "%r has no time zone; write it in UTC with Z (2025-03-01T08:00:00Z) or with an offset" % (value,)
    return dt.astimezone(datetime.timezone.utc), None


RECORD_SPEC = s.Map({
    "change_id": s.Field(s.Str(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", hint="a change id like CHG-2025-0042")),
    "action": s.Field(s.Enum(ACTIONS)),
    "targets": s.Field(s.ListOf(s.Str(), min_items=1, unique=True)),
    "window": s.Field(s.Map({
        "start": s.Field(s.Custom(_window_time)),
        "end": s.Field(s.Custom(_window_time)),
    })),
    "requester": s.Field(s.Str(ID_PATTERN, hint="a person id")),
    "reason": s.Field(s.Str()),
    # Free text for the reviewer (ticket link, rollback plan); not checked.
    "notes": s.Field(s.Str(nonempty=False), required=False),
})


class ApprovalError(Exception):
    """The change may not go ahead; ``problems`` says each thing that is missing."""

    def __init__(self, problems, change_id=None):
        self.problems = list(problems)
        self.change_id = change_id
        head = "change %s is not approved" % change_id if change_id else "change is not approved"
        super(ApprovalError, self).__init__("%s: %s" % (head, "; ".join(self.problems)))


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


def _keygen(args, data=None, timeout=30):
    """ssh-keygen under LANG=C; its Result, or cmd.CommandError naming its exit status and stderr."""
    exe = shutil.which("ssh-keygen")
    if not exe:
        raise ApprovalError(["ssh-keygen is not installed on the host running the check "
                             "(install openssh-client)"])
    return cmd.run([exe] + args, data=data, timeout=timeout)


def verify_signature(record_bytes, signature_text, signers_text):
    """Return the person id whose key made ``signature_text`` over ``record_bytes``.

    Raises ApprovalError when nobody in ``signers_text`` made it or it does not verify."""
    if not signature_text or not signature_text.strip():
        raise ApprovalError(["unsigned: no signature was given (sign the record with "
                             "bin/hgpu-sign-change or `ssh-keygen -Y sign -n %s`)" % NAMESPACE])
    if "BEGIN SSH SIGNATURE" not in signature_text:
        raise ApprovalError(["signature: not an SSH signature (expected -----BEGIN SSH SIGNATURE-----)"])
    if not signers_text.strip():
        raise ApprovalError(["signature: the boundary names no approver with an SSH key "
                             "(people[].ssh_keys), so no signature can be trusted"])
    tmp = tempfile.mkdtemp(prefix="hgpu-approval-")
    try:
        sig = os.path.join(tmp, "record.sig")
        signers = os.path.join(tmp, "allowed_signers")
        with open(sig, "w") as fh:
            fh.write(signature_text if signature_text.endswith("\n") else signature_text + "\n")
        with open(signers, "w") as fh:
            fh.write(signers_text)
        try:
            principals = _keygen(["-Y", "find-principals", "-s", sig, "-f", signers, "-n", NAMESPACE]).out.split()
        except cmd.CommandError as err:
            if err.rc is None:
                raise
            principals = []
        if not principals:
            raise ApprovalError(["signature: made by a key that is not an approver's key in the "
                                 "boundary (people[].ssh_keys of change_rights approvers), or under "
                                 "another namespace than %s" % NAMESPACE])
        for principal in principals:
            try:
                _keygen(["-Y", "verify", "-f", signers, "-I", principal, "-n", NAMESPACE, "-s", sig],
                        data=record_bytes)
                return principal
            except cmd.CommandError as err:
                if err.rc is None:
                    raise
                stderr = err.err
            if "namespace does not match" in stderr:
                raise ApprovalError(["signature: made by %s under another namespace than %s "
                                     "(sign with -n %s)" % (principal, NAMESPACE, NAMESPACE)])
        raise ApprovalError(["signature: does not match the record (the record was changed after "
                             "%s signed it)" % ", ".join(principals)])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _variants(text):
    """The exact text first; then with one trailing newline (AWX extra vars may drop it)."""
    out = [text]
    norm = text.rstrip("\n") + "\n"
    if norm != text:
        out.append(norm)
    return out


def check(boundary, record_text, signature_text, action, targets, now=None, executor=None,
          filename="change record"):
    """Run every check; return the approval summary or raise ApprovalError listing all problems.

    ``action`` and ``targets`` are what the playbook is about to do; ``executor`` (optional)
    must be a performer of the action in the boundary."""
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
    if now < start:
        problems.append("window: opens at %s, it is now %s" % (_iso(start), _iso(now)))
    elif now >= end:
        problems.append("window: expired at %s, it is now %s" % (_iso(end), _iso(now)))
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


# --- CLI for approvers -----------------------------------------------------------------
def sign_file(record_path, key_path, out_path=None):
    """Sign ``record_path`` with the private key; returns the signature path."""
    with open(record_path, "r", encoding="utf-8") as fh:
        parse_record(fh.read(), os.path.basename(record_path))
    out_path = out_path or record_path + ".sig"
    tmp = tempfile.mkdtemp(prefix="hgpu-sign-")
    try:
        copy = os.path.join(tmp, "record")
        shutil.copyfile(record_path, copy)
        try:
            _keygen(["-Y", "sign", "-f", key_path, "-n", NAMESPACE, copy])
        except cmd.CommandError as err:
            if err.rc is None:
                raise
            raise ApprovalError(["ssh-keygen -Y sign with %s failed: %s" % (key_path, err.err.strip())])
        shutil.copyfile(copy + ".sig", out_path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_path
