"""What the revoke_member.yml tests share: real keys, a boundary that lists the member's login
key, a throwaway local account whose authorized_keys holds an administrator's key, the member's
key and another key, and ansible-playbook runs on localhost (json callback)."""
import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lifecycle_support as ls  # noqa: E402

REPO = ls.REPO
BOOK = os.path.join(REPO, "playbooks", "revoke_member.yml")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
REMOVE_TASK = "Remove the member's public keys from authorized_keys"


def keys(directory):
    """Public key lines: the member's (listed in the boundary), an administrator's and another
    person's (listed nowhere under access)."""
    os.makedirs(directory, exist_ok=True)
    return {who: ls.keygen(os.path.join(directory, who), who) for who in ("member", "admin", "other")}


def people(directory, pub):
    return ls.make_approvers(os.path.join(directory, "approvers"), members={"test-member": {"ssh_keys": [pub["member"]]}})


class Account(object):
    """A local account with its home under ``base`` and an authorized_keys file holding ``lines``;
    ``remove()`` deletes the account."""

    def __init__(self, base, lines):
        self.name = "hgpu-t-" + secrets.token_hex(4)
        self.home = os.path.join(str(base), "home")
        subprocess.run(["useradd", "-M", "-d", self.home, "-s", "/usr/sbin/nologin", self.name],
                       check=True, capture_output=True, text=True)
        os.makedirs(os.path.join(self.home, ".ssh"))
        self.path = os.path.join(self.home, ".ssh", "authorized_keys")
        with open(self.path, "w") as fh:
            fh.write("".join(line + "\n" for line in lines))
        ent = pwd.getpwnam(self.name)
        for path in (self.home, os.path.dirname(self.path), self.path):
            os.chown(path, ent.pw_uid, ent.pw_gid)
        os.chmod(self.path, 0o600)
        self.before = self.text()

    def text(self):
        with open(self.path) as fh:
            return fh.read()

    def remove(self):
        subprocess.run(["userdel", self.name], check=False, capture_output=True)
        shutil.rmtree(self.home, ignore_errors=True)


def inventory(tmp_path, appr, host="localhost", hostvars=None):
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {host: hostvars or {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {"hgpu_boundary_signers": appr["signers"], "hgpu_records_dir": str(tmp_path / "records"),
                 "hgpu_boundary_path": appr["boundary"]}}}))
    return str(path)


def record(tmp_path, appr, change_id="CHG-RV-1", targets=("localhost",), member="test-member"):
    return ls.write_record(str(tmp_path), change_id + ".yml", ls.record_text(
        change_id=change_id, action="revoke_member", member=member, targets=targets, requester="ops-lead"),
        appr["keys"]["sec-owner"])


def playbook(tmp_path, appr, book=BOOK, extra=None, options=(), host="localhost", hostvars=None):
    """Run ``book`` on ``host`` (on localhost unless ``hostvars`` say otherwise); (process, json
    callback document or None)."""
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    cmd = [ANSIBLE_PLAYBOOK, "-i", inventory(tmp_path, appr, host, hostvars), str(book)] + list(options)
    if extra:
        cmd += ["-e", json.dumps(extra)]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    try:
        return out, json.loads(out.stdout)
    except ValueError:
        return out, None


def revoke_vars(account, rec=None, **extra):
    ev = {"revoke_member": "test-member", "revoke_executor": "ops-lead", "revoke_hosts": "localhost",
          "revoke_ssh_users": [account.name]}
    if rec:
        ev["change_record_path"] = rec
    ev.update(extra)
    return ev


def tasks(doc, host="localhost"):
    """{task name: the host's result} of the first play (the last result of a name)."""
    return {t["task"]["name"]: t["hosts"].get(host, {}) for t in doc["plays"][0]["tasks"]}


def audit_entries(tmp_path):
    log = tmp_path / "records" / "audit" / "audit.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
