# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ssh-keygen signatures of change records and access boundaries: signing (bin/hgpu-sign-change)
and verifying them against allowed_signers text, each under its own namespace. The approval gate
(approval.py) decides what a verified record may do."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import hashlib
import json
import os
import shutil
import tempfile

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd, files
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import schema as s
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.boundary import load_boundary_text

NAMESPACE = "hybridgpu.fleet-change"
# Boundaries are signed under their own namespace, so a change record signature never passes as one.
BOUNDARY_NAMESPACE = "hybridgpu.fleet-boundary"


class ApprovalError(Exception):
    """The change may not go ahead; ``problems`` says each thing that is missing."""

    def __init__(self, problems, change_id=None):
        self.problems = list(problems)
        self.change_id = change_id
        head = "change %s is not approved" % change_id if change_id else "change is not approved"
        super(ApprovalError, self).__init__("%s: %s" % (head, "; ".join(self.problems)))


def keygen(args, data=None, timeout=30):
    """ssh-keygen under LANG=C; its Result, or cmd.CommandError naming its exit status and stderr."""
    exe = shutil.which("ssh-keygen")
    if not exe:
        raise ApprovalError(["ssh-keygen is not installed on the host running the check "
                             "(install openssh-client)"])
    return cmd.run([exe] + args, data=data, timeout=timeout)


def _find_signer(data, signature_text, signers_text, namespace, what, thing):
    """Return the principal whose key made ``signature_text`` over ``data`` under ``namespace``,
    or None when no key in ``signers_text`` made it.

    ``what`` and ``thing`` name the signature and the signed file in messages; raises
    ApprovalError when a signer's signature does not verify."""
    if "BEGIN SSH SIGNATURE" not in signature_text:
        raise ApprovalError(["%s: not an SSH signature (expected -----BEGIN SSH SIGNATURE-----)" % what])
    tmp = tempfile.mkdtemp(prefix="hgpu-approval-")
    try:
        sig = os.path.join(tmp, "signed.sig")
        signers = os.path.join(tmp, "allowed_signers")
        with open(sig, "w") as fh:
            fh.write(signature_text if signature_text.endswith("\n") else signature_text + "\n")
        with open(signers, "w") as fh:
            fh.write(signers_text)
        try:
            principals = keygen(["-Y", "find-principals", "-s", sig, "-f", signers, "-n", namespace]).out.split()
        except cmd.CommandError as err:
            if err.rc is None:
                raise
            principals = []
        if not principals:
            return None
        for principal in principals:
            try:
                keygen(["-Y", "verify", "-f", signers, "-I", principal, "-n", namespace, "-s", sig], data=data)
                return principal
            except cmd.CommandError as err:
                if err.rc is None:
                    raise
                stderr = err.err
            if "namespace does not match" in stderr:
                raise ApprovalError(["%s: made by %s under another namespace than %s "
                                     "(sign with -n %s)" % (what, principal, namespace, namespace)])
        raise ApprovalError(["%s: does not match %s (%s was changed after %s signed it)"
                             % (what, thing, thing, ", ".join(principals))])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def verify_signature(record_bytes, signature_text, signers_text):
    """Return the person id whose key made ``signature_text`` over ``record_bytes``.

    Raises ApprovalError when nobody in ``signers_text`` made it or it does not verify."""
    if not signature_text or not signature_text.strip():
        raise ApprovalError(["unsigned: no signature was given (sign the record with "
                             "bin/hgpu-sign-change or `ssh-keygen -Y sign -n %s`)" % NAMESPACE])
    if not signers_text.strip():
        raise ApprovalError(["signature: the boundary names no approver with an SSH key "
                             "(people[].ssh_keys), so no signature can be trusted"])
    principal = _find_signer(record_bytes, signature_text, signers_text, NAMESPACE, "signature", "the record")
    if principal is None:
        raise ApprovalError(["signature: made by a key that is not an approver's key in the "
                             "boundary (people[].ssh_keys of change_rights approvers), or under "
                             "another namespace than %s" % NAMESPACE])
    return principal


def verify_boundary(path, signers_text, now=None):
    """Load the boundary at ``path`` only when its detached signature ``<path>.sig`` verifies.

    ``signers_text`` is the pinned allowed_signers text of the boundary signers (principal =
    the security owner's person id). The signature must cover the exact bytes of the file,
    be made under BOUNDARY_NAMESPACE by the boundary's security owner, and the boundary's
    declared status must be signed by that owner and unexpired. Returns the Boundary;
    raises ApprovalError naming why it cannot be trusted."""
    name = os.path.basename(path)
    if not signers_text or not signers_text.strip():
        raise ApprovalError(["boundary: no pinned boundary signer (set hgpu_boundary_signers in the "
                             "inventory's group_vars or install /etc/hybridgpu/boundary_signers), so "
                             "no boundary and no approver key can be trusted"])
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except (IOError, OSError) as exc:
        raise ApprovalError(["boundary: cannot read %s: %s" % (path, exc.strerror or exc)])
    try:
        with open(path + ".sig", "r", encoding="utf-8") as fh:
            signature = fh.read()
    except (IOError, OSError):
        raise ApprovalError(["boundary: %s is unsigned: no signature file %s.sig (the security owner "
                             "signs it with bin/hgpu-sign-change sign-boundary %s --key KEY)"
                             % (name, name, name)])
    principal = _find_signer(data, signature, signers_text, BOUNDARY_NAMESPACE, "boundary: %s.sig" % name,
                             "the boundary")
    if principal is None:
        raise ApprovalError(["boundary: %s.sig was not made by a pinned boundary signer "
                             "(hgpu_boundary_signers) under the namespace %s" % (name, BOUNDARY_NAMESPACE)])
    try:
        boundary = load_boundary_text(data.decode("utf-8"), name)
    except (s.SchemaError, UnicodeDecodeError) as exc:
        raise ApprovalError(["boundary: %s is invalid: %s" % (name, exc)])
    problems = []
    owner = boundary.doc["security_owner"]
    if principal != owner:
        problems.append("boundary: %s is signed by %s, not by its security owner %s" % (name, principal, owner))
    status = boundary.status(now)
    if status["status"] != "signed":
        problems.append("boundary: %s is not in force: %s" % (name, "; ".join(status["reasons"])))
    if problems:
        raise ApprovalError(problems)
    boundary.sha256 = hashlib.sha256(data).hexdigest()
    return boundary


# The newest boundary a records folder has trusted (beside the ledger of change ids).
SEEN_FILE = "boundary-seen.json"


def _stamp(value):
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def check_newest(folder, boundary, now=None, check_mode=False):
    """Refuse a verified boundary older than the newest one this records folder has trusted.

    ``folder`` is the ledger folder (<records>/approvals). The first boundary trusted, and each
    newer one, is recorded there (its signed_at, SHA-256 and when it was first used); a boundary
    signed earlier than the one recorded is refused, so a rotated-out approver's key cannot come
    back with an older signed copy. The security owner gives every new version a later signed_at
    (it is part of the signed bytes). The record is read without following a symbolic link and
    replaced through a new file. Returns the record of the newest boundary."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    sig = boundary.doc["signature"]
    signed_at = _stamp(sig["signed_at"].astimezone(datetime.timezone.utc))
    path = os.path.join(folder, SEEN_FILE)
    try:
        seen = files.read_json_nofollow(path)
    except FileNotFoundError:
        seen = None
    except (IOError, OSError, ValueError) as exc:
        raise ApprovalError(["boundary: the record of the newest boundary trusted, %s, cannot be read (%s); "
                             "nothing is trusted until it is restored" % (path, exc)])
    if seen is not None and not isinstance(seen, dict):
        raise ApprovalError(["boundary: the record of the newest boundary trusted, %s, is not a JSON object; "
                             "nothing is trusted until it is restored" % path])
    mine = {"signed_at": signed_at, "sha256": getattr(boundary, "sha256", None), "file": boundary.filename}
    if seen:
        if signed_at < seen.get("signed_at", ""):
            raise ApprovalError(["boundary: %s was signed at %s, before the newest boundary already trusted here "
                                 "(signed at %s, first used at %s, %s); an older boundary may list approvers "
                                 "whose keys were rotated out"
                                 % (boundary.filename, signed_at, seen.get("signed_at"), seen.get("first_used_at"), path)])
        if signed_at <= seen.get("signed_at", ""):
            return seen
    mine["first_used_at"] = _stamp(now)
    if not check_mode:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        files.write(path, json.dumps(mine, indent=2, sort_keys=True) + "\n", mode=0o600)
    return mine


def read_text(path, what):
    try:
        with open(path, "r", encoding="utf-8") as fh:
            return fh.read()
    except (IOError, OSError) as exc:
        raise ApprovalError(["%s: cannot read %s: %s" % (what, path, exc.strerror or exc)])


# --- CLI for approvers -----------------------------------------------------------------
def sign_copy(path, key_path, namespace, out_path=None):
    """Sign the exact bytes of ``path`` with the private key under ``namespace`` (ssh-keygen signs
    a copy in a private folder, so nothing is written beside the file but ``out_path``, by default
    ``<path>.sig``); returns the signature path."""
    out_path = out_path or path + ".sig"
    tmp = tempfile.mkdtemp(prefix="hgpu-sign-")
    try:
        copy = os.path.join(tmp, "document")
        shutil.copyfile(path, copy)
        try:
            keygen(["-Y", "sign", "-f", key_path, "-n", namespace, copy])
        except cmd.CommandError as err:
            if err.rc is None:
                raise
            raise ApprovalError(["ssh-keygen -Y sign with %s failed: %s" % (key_path, err.err.strip())])
        shutil.copyfile(copy + ".sig", out_path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_path


def sign_boundary(boundary_path, key_path, out_path=None):
    """The security owner signs the exact bytes of the boundary; returns ``<boundary>.sig``."""
    with open(boundary_path, "r", encoding="utf-8") as fh:
        load_boundary_text(fh.read(), os.path.basename(boundary_path))
    return sign_copy(boundary_path, key_path, BOUNDARY_NAMESPACE, out_path)


def boundary_signers_line(person_id, public_key):
    """The allowed_signers line that pins ``public_key`` as the boundary signer ``person_id``."""
    return '%s namespaces="%s" %s\n' % (person_id, BOUNDARY_NAMESPACE, " ".join(public_key.split()[:3]))
