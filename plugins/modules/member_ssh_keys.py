#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: member_ssh_keys
short_description: Remove a member's SSH login keys from authorized_keys, under a verified change record
version_added: "0.5.0"
description:
  - Removes from C(~/.ssh/authorized_keys) of each account in O(users) every line that carries one
    of the member's login keys (the same key type and base64 body; options and comment do not
    matter). The account's home is read from the node's password database. Every other line stays
    as it is; the file is replaced in one step and keeps its owner and mode. An account the node
    lacks, or one without the file, has nothing to remove.
  - The keys are never a task option. Before anything runs on the node, the action plugin verifies
    the signed change record on the control host (the same check as
    M(hybridgpu.fleet.change_approval), action C(revoke_member), playbook C(revoke_member.yml),
    this O(member)) against the boundary signed by the pinned boundary signers, refuses a node that
    is not one of the play's hosts or not in the record's targets, and takes the keys from what the
    verified boundary lists for the member (C(people[].access.ssh_keys)).
  - Skipping a play-level approval task (C(--start-at-task)) does not skip this check. A run whose
    extra vars carry trust (the boundary, the records folder, a verified change, keys) is refused,
    and so is one whose extra vars name the node or where its connection goes (C(inventory_hostname),
    C(ansible_host), C(ansible_connection), C(ansible_port), the SSH arguments).
  - After a removal the action plugin appends a C(revoke_credential) entry under the verified
    change id to the audit log of the records folder (C(<hgpu_records_dir>/audit/audit.jsonl)) and
    sends the same event to the node's journal (C(logger -t hybridgpu-audit)). A rerun removes
    nothing and writes nothing.
extends_documentation_fragment:
  - hybridgpu.fleet.change_record
  - hybridgpu.fleet.attributes
options:
  member:
    description: Person id of the member (C(people[].id) in the boundary); must be the record's C(member).
    type: str
    required: true
  users:
    description: Accounts whose C(~/.ssh/authorized_keys) are cleaned (POSIX user names).
    type: list
    elements: str
    default: [root]
  keys:
    description:
      - Set by the action plugin from the verified boundary (the member's C(access.ssh_keys)); a task
        may not set it.
    type: list
    elements: str
attributes:
  check_mode:
    support: full
    details: Reads every file and reports what would be removed; the record is verified without using its change id.
  diff_mode:
    support: full
    details: The lines removed from each file.
notes:
  - Only the file C(~/.ssh/authorized_keys) is cleaned; keys listed in another file named by
    C(AuthorizedKeysFile) in C(sshd_config) are not.
  - A file or C(.ssh) folder that is a symbolic link is refused (nothing is written through it).
seealso:
  - module: hybridgpu.fleet.change_approval
  - module: hybridgpu.fleet.k8s_member_access
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Remove the member's public keys from authorized_keys
  hybridgpu.fleet.member_ssh_keys:
    member: test-member
    users: [root, ops]
    record_path: /srv/changes/CHG-90.yml
    executor: ops-lead
"""

RETURN = r"""
removed:
  description: The lines removed (in check mode, that would be removed).
  returned: always
  type: list
  elements: dict
  contains:
    user:
      description: The account.
      type: str
    path:
      description: Its authorized_keys file.
      type: str
    key:
      description: The key, as its type and the last 16 characters of its base64 body.
      type: str
missing_users:
  description: Accounts in O(users) the node does not have.
  returned: always
  type: list
  elements: str
files:
  description: The authorized_keys files read, by account (an account without the file is not listed).
  returned: always
  type: dict
change_id:
  description: The verified change id the removal ran under (set by the action plugin).
  returned: success
  type: str
audit:
  description: The audit entry the action plugin wrote after a removal (seq, hash, change id).
  returned: changed
  type: dict
revocation_steps:
  description: The verified boundary's credential revocation steps, by kind (C(ssh_key), C(kubernetes), C(bmc), C(service_token)).
  returned: success
  type: dict
"""

import base64
import errno
import os
import pwd
import re
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule

# A POSIX account name (useradd's default rule).
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}\$?$")
KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ssh-dss", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
             "ecdsa-sha2-nistp521", "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com")

ARGUMENT_SPEC = dict(
    member=dict(type="str", required=True),
    users=dict(type="list", elements="str", default=["root"]),
    keys=dict(type="list", elements="str", no_log=False),
    record_path=dict(type="path"),
    record_text=dict(type="str"),
    signature=dict(type="str"),
    executor=dict(type="str"),
)


def parse_key(line):
    """(type, base64 body) of a public key line; ValueError when it is not one."""
    parts = line.split()
    if len(parts) < 2 or parts[0] not in KEY_TYPES:
        raise ValueError("%r is not an SSH public key line (type base64 [comment])" % (line[:40],))
    try:
        base64.b64decode(parts[1], validate=True)
    except (ValueError, TypeError):
        raise ValueError("%r: the key body is not base64" % (line[:40],))
    return parts[0], parts[1]


def carries(line, keys):
    """The key of ``keys`` (a set of (type, body)) that the authorized_keys ``line`` carries, or None.
    The key is a type followed by its body anywhere in the line, so options before it count too."""
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    tokens = text.split()
    for first, second in zip(tokens, tokens[1:]):
        if (first, second) in keys:
            return (first, second)
    return None


def label(key):
    return "%s ...%s" % (key[0], key[1][-16:])


def _read(path):
    """The file's bytes and stat, never through a symbolic link; (None, None) when it is missing."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None, None
        if exc.errno == errno.ELOOP:
            raise OSError("%s is a symbolic link; nothing is written through it" % path)
        raise
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError("%s is not a regular file" % path)
        return fh.read(), st


def _write(path, data, st):
    """Replace ``path`` with ``data`` in one step (a new file in the same folder, renamed), with the
    old file's owner and mode."""
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".authorized_keys.", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchown(fh.fileno(), st.st_uid, st.st_gid)
            os.fchmod(fh.fileno(), stat.S_IMODE(st.st_mode))
            os.fsync(fh.fileno())
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def clean(user, home, keys, check_mode):
    """Remove the lines of ``home``/.ssh/authorized_keys that carry one of ``keys``; returns
    (path or None, removed entries, diff or None)."""
    folder = os.path.join(home, ".ssh")
    if os.path.islink(folder):
        raise OSError("%s is a symbolic link; nothing is written through it" % folder)
    path = os.path.join(folder, "authorized_keys")
    data, st = _read(path)
    if data is None:
        return None, [], None
    text = data.decode("utf-8", "surrogateescape")
    kept, removed = [], []
    for line in text.splitlines(True):
        key = carries(line, keys)
        if key is None:
            kept.append(line)
        else:
            removed.append({"user": user, "path": path, "key": label(key)})
    if not removed:
        return path, [], None
    after = "".join(kept)
    if not check_mode:
        _write(path, after.encode("utf-8", "surrogateescape"), st)
        again, dummy = _read(path)
        left = [line for line in (again or b"").decode("utf-8", "surrogateescape").splitlines() if carries(line, keys)]
        if left:
            raise OSError("%s still holds %d of the member's keys after the write" % (path, len(left)))
    return path, removed, {"before_header": path, "after_header": path, "before": text, "after": after}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    bad = [u for u in p["users"] if not USER_NAME.match(u or "")]
    if bad:
        module.fail_json(msg="users: %s is not an account name (POSIX user name); nothing was changed" % ", ".join(bad))
    if not p["keys"]:
        module.fail_json(msg="keys: no key given; the action plugin gives the keys the verified boundary lists "
                             "for %s; nothing was changed" % p["member"])
    try:
        keys = set(parse_key(k) for k in p["keys"])
    except ValueError as exc:
        module.fail_json(msg="keys: %s; nothing was changed" % exc)
    removed, missing, found, diffs = [], [], {}, []
    for user in p["users"]:
        try:
            home = pwd.getpwnam(user).pw_dir
        except KeyError:
            missing.append(user)
            continue
        try:
            path, gone, diff = clean(user, home, keys, module.check_mode)
        except (IOError, OSError) as exc:
            module.fail_json(msg="%s: account %s: %s; keys removed so far: %d" % (p["member"], user, exc, len(removed)),
                             removed=removed, missing_users=missing, files=found)
        if path:
            found[user] = path
        removed.extend(gone)
        if diff:
            diffs.append(diff)
    result = dict(changed=bool(removed), removed=removed, missing_users=missing, files=found)
    if module._diff and diffs:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
