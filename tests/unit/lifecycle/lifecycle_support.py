"""Approver keys, a boundary that names them, and signed change records for tests.

Keys are generated per test run (never committed). Also used by the lab integration tests
and the Molecule scenarios (they import this file by path).
"""
import datetime
import hashlib
import json
import os
import subprocess
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LAB_BOUNDARY = os.path.join(REPO, "inventories", "lab", "preflight", "boundary.yml")
SIGN = os.path.join(REPO, "bin", "hgpu-sign-change")
PEOPLE = ("sec-owner", "ops-lead", "ops-oncall", "provider-sre")
# The playbook each action's record names (approval.PLAYBOOK_ACTIONS, reversed).
PLAYBOOKS = {"remove": "remove.yml", "revoke_member": "revoke_member.yml", "driver_upgrade": "upgrade_rehearsal.yml"}
# Where the lab keeps the security owner's boundary-signing key and the pinned signers
# (inventories/lab/group_vars/all.yml reads <lab dir>/approvers/boundary_signers).
LAB_APPROVERS = os.path.join(os.path.abspath(os.environ.get("HGPU_LAB_DIR", os.path.join(REPO, ".lab"))), "approvers")


def keygen(path, comment):
    if not os.path.exists(path):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
                       check=True)
    with open(path + ".pub") as fh:
        return fh.read().strip()


def boundary_signer(directory):
    """The security owner's boundary-signing key in ``directory`` (made once) and the pinned
    allowed_signers file naming it: (private key path, signers path)."""
    os.makedirs(directory, exist_ok=True)
    key = os.path.join(directory, "boundary-signer")
    pub = keygen(key, "sec-owner boundary signer")
    signers = os.path.join(directory, "boundary_signers")
    line = 'sec-owner namespaces="hybridgpu.fleet-boundary" %s\n' % pub
    if not os.path.exists(signers) or open(signers).read() != line:
        with open(signers, "w") as fh:
            fh.write(line)
    return key, signers


def lab_boundary_signer():
    """The lab's pinned boundary signer (under .lab/approvers), as a site's security owner has one."""
    return boundary_signer(LAB_APPROVERS)


def sign_boundary(path, key):
    """Sign the boundary as its security owner does: `ssh-keygen -Y sign -n
    hybridgpu.fleet-boundary` over the file's exact bytes, the signature in PATH.sig (what
    `bin/hgpu-sign-change sign-boundary` runs)."""
    if os.path.exists(path + ".sig"):
        os.unlink(path + ".sig")
    subprocess.run(["ssh-keygen", "-Y", "sign", "-f", key, "-n", "hybridgpu.fleet-boundary", path],
                   check=True, capture_output=True, text=True)
    return path + ".sig"


def make_approvers(directory, people=PEOPLE, boundary_src=LAB_BOUNDARY, signer=None, members=None):
    """Generate a key per person, write boundary.yml naming the public keys and sign it with
    the boundary signer (``signer``: (key, signers file); a new one in ``directory`` when None).
    ``members``: {person id: access} added as people (what revoke_member may revoke).

    Returns {"boundary": path, "keys": {person: private key path}, "signers": pinned
    allowed_signers text, "signers_file": its path, "boundary_key": the signing key}."""
    os.makedirs(directory, exist_ok=True)
    with open(boundary_src) as fh:
        doc = yaml.safe_load(fh)
    keys = {}
    for person in doc["people"]:
        if person["id"] in people:
            key = os.path.join(directory, "key-%s" % person["id"])
            person["ssh_keys"] = [keygen(key, person["id"])]
            keys[person["id"]] = key
    for person, access in (members or {}).items():
        doc["people"].append({"id": person, "access": access})
    path = os.path.join(directory, "boundary.yml")
    with open(path, "w") as fh:
        yaml.safe_dump(doc, fh, sort_keys=False)
    bkey, signers = signer or boundary_signer(directory)
    sign_boundary(path, bkey)
    with open(signers) as fh:
        signers_text = fh.read()
    return {"boundary": path, "keys": keys, "dir": directory, "signers": signers_text,
            "signers_file": signers, "boundary_key": bkey}


def iso(dt):
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def record_text(change_id="CHG-TEST-1", action="driver_upgrade", targets=("owned-a100-2",),
                requester="ops-oncall", start=None, end=None, reason="rehearsal", playbook=None,
                member=None, manifests=None):
    """A change record's text. ``manifests``: {target: onboarding manifest document or its path}
    for a remove record; each is named by its digest (bin/hgpu-sign-change manifest-digest)."""
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    start = start or now - datetime.timedelta(minutes=5)
    end = end or now + datetime.timedelta(hours=2)
    doc = {"change_id": change_id, "action": action,
           "playbook": playbook or PLAYBOOKS.get(action, "%s.yml" % action), "targets": list(targets)}
    if member is not None:
        doc["member"] = member
    if manifests:
        doc["manifests"] = dict((node, manifest_digest(m)) for node, m in manifests.items())
    doc.update({"window": {"start": start if isinstance(start, str) else iso(start),
                           "end": end if isinstance(end, str) else iso(end)},
                "requester": requester, "reason": reason})
    return yaml.safe_dump(doc, sort_keys=False)


def manifest_digest(doc_or_path):
    """The SHA-256 a remove record names for an onboarding manifest (a document or a file): of
    the document in canonical JSON, as `bin/hgpu-sign-change manifest-digest` prints it."""
    if isinstance(doc_or_path, str):
        with open(doc_or_path) as fh:
            doc_or_path = json.load(fh)
    text = json.dumps(doc_or_path, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


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


def emulator(work, cluster):
    """An in-process API emulator on 127.0.0.1 (its own CA and an admin token), for the attack
    tests that assert an object still exists. Returns (server, {"host", "api_key", "ca_cert"});
    the caller stops the server."""
    import secrets  # pylint: disable=import-outside-toplevel
    sys.path.insert(0, os.path.join(REPO, "tests", "lab"))
    import labpki  # pylint: disable=import-outside-toplevel
    from k8s_emulator import serve  # pylint: disable=import-outside-toplevel
    ca, dummy = labpki.make_ca(work)
    crt, key = labpki.make_server_cert(work, work, ["127.0.0.1", "localhost"])
    admin = secrets.token_hex(16)
    tokens = os.path.join(work, "tokens.csv")
    with open(tokens, "w") as fh:
        fh.write('%s,admin,admin-uid,"system:masters"\n' % admin)
    srv = serve(cluster=cluster, binds=["127.0.0.1"], port=0, cert=crt, key=key, token_file=tokens, node_grace=3600.0)
    return srv, {"host": srv.url, "api_key": admin, "ca_cert": ca}
