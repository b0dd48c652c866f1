"""The access boundary's own check: remove a test member, revoke that member's
cluster and host credentials with playbooks/revoke_member.yml (driven by the boundary's
credential revocation steps) and try each path again: 401 from both emulators, SSH with the
member's key refused. A rerun changes nothing. The lab is restored afterwards (token files
as they were, the member's key gone from the node)."""
import os
import subprocess

import pytest

from conftest import ROOT, node, ssh
from lifecycle_lab import approvers, lab_lock, playbook, recap, signed_record  # noqa: F401  pylint: disable=unused-import

pytestmark = pytest.mark.lab

NODE = "owned-a100-1"
CLUSTERS = {"onprem": "https://10.213.77.1:6443", "cloud": "https://10.213.77.1:7443"}
CA = os.path.join(ROOT, ".lab", "pki", "ca.crt")


def token_file(cluster):
    return os.path.join(ROOT, ".lab", "k8s", cluster, "tokens.csv")


def member_token(text):
    return next(line.split(",")[0] for line in text.splitlines() if line.split(",")[1:2] == ["test-member"])


def api_status(server, token):
    """HTTP status the API answers to the token (200/403/404 mean: it authenticates)."""
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError, Kube
    try:
        Kube({"host": server, "api_key": token, "ca_cert": CA}, retries=0).list_nodes()
        return 200
    except K8sError as err:
        return err.status


def member_ssh(key):
    return subprocess.run(["ssh", "-i", key, "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                           "-o", "ControlPath=none", "-o", "StrictHostKeyChecking=no",
                           "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10",
                           "root@" + node(NODE)["ip"], "true"], capture_output=True, text=True, timeout=30, check=False)


@pytest.fixture(scope="module")
def member(lab_lock, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("revoke")
    saved = {c: open(token_file(c)).read() for c in CLUSTERS}
    tokens = {c: member_token(t) for c, t in saved.items()}
    key = str(tmp / "member-key")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "hgpu-test-member", "-f", key], check=True)
    pub = open(key + ".pub").read().strip()
    ssh(NODE, "echo '%s' >> /root/.ssh/authorized_keys" % pub)
    try:
        yield {"tmp": tmp, "tokens": tokens, "key": key, "pub": pub, "appr": approvers(tmp / "appr")}
    finally:
        # restore: the token files byte for byte (the emulators re-read them), the key gone
        for c, text in saved.items():
            with open(token_file(c) + ".restore", "w") as fh:
                fh.write(text)
            os.chmod(token_file(c) + ".restore", 0o600)
            os.replace(token_file(c) + ".restore", token_file(c))
        ssh(NODE, "sed -i '/hgpu-test-member/d' /root/.ssh/authorized_keys", check=False)


def revoke(member, record, keys_text=None):
    """keys_text: give the keys as the AWX survey does (a textarea, one key per line)."""
    ev = {"revoke_member": "test-member", "revoke_executor": "ops-lead", "revoke_hosts": NODE,
          "revoke_boundary": member["appr"]["boundary"], "change_record_path": record,
          "revoke_ssh_proof_key": member["key"], "revoke_records_dir": str(member["tmp"] / "records")}
    if keys_text is None:
        ev["revoke_ssh_keys"] = [member["pub"]]
    else:
        ev["revoke_ssh_keys_text"] = keys_text
    return playbook("revoke_member.yml", extra=ev, tmp_path=member["tmp"])


def test_every_path_of_a_revoked_member_is_denied(member):
    # before: the member authenticates at both API servers and logs in over SSH
    for c, server in CLUSTERS.items():
        assert api_status(server, member["tokens"][c]) != 401
    assert member_ssh(member["key"]).returncode == 0

    record = signed_record(member["appr"], member["tmp"], "chg-revoke.yml", change_id="CHG-REVOKE-LAB",
                           action="revoke_member", member="test-member", targets=[NODE], requester="ops-lead",
                           reason="member left")
    # the keys as AWX passes them: text, one per line (blank lines and padding ignored)
    res = revoke(member, record, keys_text="\n  %s  \n\n" % member["pub"].strip())
    assert res.returncode == 0, res.out[-5000:]
    assert "The member's token gets 401 from every API server" in res.out

    # every path again, from the test itself
    for c, server in CLUSTERS.items():
        assert api_status(server, member["tokens"][c]) == 401, c
        assert "test-member" not in open(token_file(c)).read()
    denied = member_ssh(member["key"])
    assert denied.returncode != 0 and "Permission denied" in denied.stderr
    # the admin and the lab key still work
    from lifecycle_lab import kube
    assert kube("onprem").get_node(NODE) is not None and kube("cloud").list_nodes()
    ssh(NODE, "true")

    # the revocation is audited, on the control host and in the node's journal
    log = str(member["tmp"] / "records" / "audit" / "audit.jsonl")
    ok = subprocess.run([os.path.join(ROOT, "bin", "hgpu-audit-verify"), log], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    text = open(log).read()
    assert text.count('"revoke_credential"') == 3  # two clusters, one host
    assert "CHG-REVOKE-LAB" in ssh(NODE, "journalctl -t hybridgpu-audit --no-pager -o cat").stdout

    # a rerun changes nothing and still proves every path refused
    again = revoke(member, record)
    assert again.returncode == 0, again.out[-4000:]
    assert recap(again.out)[NODE]["changed"] == 0, again.out[-3000:]
    assert open(log).read().count('"revoke_credential"') == 3


def test_unsigned_record_revokes_nothing(member):
    before = {c: open(token_file(c)).read() for c in CLUSTERS}
    keys = ssh(NODE, "cat /root/.ssh/authorized_keys").stdout
    record = signed_record(member["appr"], member["tmp"], "unsigned.yml", signer=None,
                           change_id="CHG-REVOKE-BAD", action="revoke_member", member="test-member", targets=[NODE],
                           requester="ops-lead")
    res = revoke(member, record)
    assert res.returncode != 0 and "signature" in res.out
    assert {c: open(token_file(c)).read() for c in CLUSTERS} == before
    assert ssh(NODE, "cat /root/.ssh/authorized_keys").stdout == keys


def test_a_line_that_is_not_a_key_revokes_nothing(member):
    before = {c: open(token_file(c)).read() for c in CLUSTERS}
    keys = ssh(NODE, "cat /root/.ssh/authorized_keys").stdout
    record = signed_record(member["appr"], member["tmp"], "badkey.yml", change_id="CHG-REVOKE-KEY",
                           action="revoke_member", member="test-member", targets=[NODE], requester="ops-lead")
    res = revoke(member, record, keys_text="%s\nalice's laptop key\n" % member["pub"].strip())
    assert res.returncode != 0 and "not an SSH public key" in res.out and "nothing was changed" in res.out
    assert {c: open(token_file(c)).read() for c in CLUSTERS} == before
    assert ssh(NODE, "cat /root/.ssh/authorized_keys").stdout == keys
