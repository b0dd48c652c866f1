"""Approver keys, a boundary that names them, and signed change records for tests.

Keys are generated per test run (never committed). Also used by the lab integration tests
and the Molecule scenarios (they import this file by path).
"""
import datetime
import os
import subprocess
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LAB_BOUNDARY = os.path.join(REPO, "inventories", "lab", "preflight", "boundary.yml")
SIGN = os.path.join(REPO, "bin", "hgpu-sign-change")
PEOPLE = ("sec-owner", "ops-lead", "ops-oncall", "provider-sre")


def keygen(path, comment):
    if not os.path.exists(path):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
                       check=True)
    with open(path + ".pub") as fh:
        return fh.read().strip()


def make_approvers(directory, people=PEOPLE, boundary_src=LAB_BOUNDARY):
    """Generate a key per person and write boundary.yml naming the public keys.

    Returns {"boundary": path, "keys": {person: private key path}}."""
    os.makedirs(directory, exist_ok=True)
    with open(boundary_src) as fh:
        doc = yaml.safe_load(fh)
    keys = {}
    for person in doc["people"]:
        if person["id"] in people:
            key = os.path.join(directory, "key-%s" % person["id"])
            person["ssh_keys"] = [keygen(key, person["id"])]
            keys[person["id"]] = key
    path = os.path.join(directory, "boundary.yml")
    with open(path, "w") as fh:
        yaml.safe_dump(doc, fh, sort_keys=False)
    return {"boundary": path, "keys": keys, "dir": directory}


def iso(dt):
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def record_text(change_id="CHG-TEST-1", action="driver_upgrade", targets=("owned-a100-2",),
                requester="ops-oncall", start=None, end=None, reason="rehearsal"):
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    start = start or now - datetime.timedelta(minutes=5)
    end = end or now + datetime.timedelta(hours=2)
    return yaml.safe_dump({
        "change_id": change_id, "action": action, "targets": list(targets),
        "window": {"start": iso(start), "end": iso(end)},
        "requester": requester, "reason": reason}, sort_keys=False)


def write_record(directory, name, text, signer_key=None):
    """Write RECORD (and RECORD.sig when a key is given) with the signing CLI."""
    path = os.path.join(directory, name)
    with open(path, "w") as fh:
        fh.write(text)
    if os.path.exists(path + ".sig"):
        os.unlink(path + ".sig")
    if signer_key:
        subprocess.run([sys.executable, SIGN, "sign", path, "--key", signer_key], check=True,
                       capture_output=True, text=True)
    return path
