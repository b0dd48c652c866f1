"""The access boundary's own check: a test member holds, in both lab clusters, a
ServiceAccount with its token Secret, a ClusterRoleBinding and a bootstrap token, and an SSH
login key on a node; the signed boundary lists exactly these under people[test-member].access.
playbooks/revoke_member.yml revokes them (the objects through the API, the key over SSH) and
each path is tried again: the objects are gone, the bootstrap token gets 401 from both
emulators, SSH with the member's key is refused. A rerun changes nothing. Keys given by the
launcher are refused, and so is a run started past the approval task with a made-up change
naming the administrator's key. The lab is restored afterwards (the objects and the key
removed)."""
import base64
import json
import os
import secrets
import string
import subprocess

import pytest

from conftest import ROOT, node, ssh
from lifecycle_lab import approvers, kube, lab_lock, playbook, recap, signed_record  # noqa: F401  pylint: disable=unused-import

pytestmark = pytest.mark.lab

NODE = "owned-a100-1"
CLUSTERS = {"onprem": "https://10.213.77.1:6443", "cloud": "https://10.213.77.1:7443"}
CA = os.path.join(ROOT, ".lab", "pki", "ca.crt")
NS = "default"
SA = "hgpu-test-member"


def b64(text):
    return base64.b64encode(text.encode()).decode()


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


def grant(cluster):
    """The member's objects in one cluster; returns (boundary entries, bootstrap token)."""
    k = kube(cluster)
    alphabet = string.ascii_lowercase + string.digits
    token_id = "".join(secrets.choice(alphabet) for _index in range(6))
    token_secret = "".join(secrets.choice(alphabet) for _index in range(16))
    k.call("create sa", k.core.create_namespaced_service_account, NS, {"metadata": {"name": SA}})
    k.create_secret(NS, {"metadata": {"name": SA + "-token", "annotations": {"kubernetes.io/service-account.name": SA}},
                         "type": "kubernetes.io/service-account-token"})
    k.call("create crb", k.rbac.create_cluster_role_binding, {
        "metadata": {"name": SA}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": NS}]})
    k.create_secret("kube-system", {
        "metadata": {"name": "bootstrap-token-" + token_id}, "type": "bootstrap.kubernetes.io/token",
        "data": {"token-id": b64(token_id), "token-secret": b64(token_secret),
                 "usage-bootstrap-authentication": b64("true")}})
    entries = [{"context": cluster, "kind": "ServiceAccount", "namespace": NS, "name": SA},
               {"context": cluster, "kind": "ClusterRoleBinding", "name": SA},
               {"context": cluster, "kind": "BootstrapToken", "name": token_id}]
    return entries, "%s.%s" % (token_id, token_secret)


def clean(cluster, entries):
    k = kube(cluster)
    k.call_or_none("delete sa", k.core.delete_namespaced_service_account, SA, NS)
    k.delete_secret(NS, SA + "-token")
    k.call_or_none("delete crb", k.rbac.delete_cluster_role_binding, SA)
    for item in entries:
        if item["kind"] == "BootstrapToken":
            k.delete_secret("kube-system", "bootstrap-token-" + item["name"])


@pytest.fixture(scope="module")
def member(lab_lock, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("revoke")
    key = str(tmp / "member-key")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "hgpu-test-member", "-f", key], check=True)
    pub = open(key + ".pub").read().strip()
    ssh(NODE, "echo '%s' >> /root/.ssh/authorized_keys" % pub)
    granted = {c: grant(c) for c in CLUSTERS}
    access = {"ssh_keys": [pub], "kubernetes": [e for entries, dummy in granted.values() for e in entries]}
    try:
        yield {"tmp": tmp, "tokens": {c: t for c, (dummy, t) in granted.items()}, "key": key, "pub": pub,
               "appr": approvers(tmp / "appr", members={"test-member": access})}
    finally:
        for c, (entries, dummy) in granted.items():
            clean(c, entries)
        ssh(NODE, "sed -i '/hgpu-test-member/d' /root/.ssh/authorized_keys", check=False)


def objects_left(cluster):
    k = kube(cluster)
    return [what for what, obj in (
        ("sa", k.call_or_none("get sa", k.core.read_namespaced_service_account, SA, NS)),
        ("token secret", k.get_secret(NS, SA + "-token")),
        ("crb", k.call_or_none("get crb", k.rbac.read_cluster_role_binding, SA))) if obj is not None]


def revoke(member, record, *args, **extra):
    ev = {"revoke_member": "test-member", "revoke_executor": "ops-lead", "revoke_hosts": NODE,
          "revoke_ssh_proof_key": member["key"]}
    if record:
        ev["change_record_path"] = record
    ev.update(extra)
    return playbook("revoke_member.yml", *args, extra=ev, tmp_path=member["tmp"],
                    site={"hgpu_boundary_path": member["appr"]["boundary"], "hgpu_records_dir": str(member["tmp"] / "records")})


def audit_entries(member):
    log = member["tmp"] / "records" / "audit" / "audit.jsonl"
    return [json.loads(line) for line in open(str(log))] if log.exists() else []


def test_every_path_of_a_revoked_member_is_denied(member):
    # before: the member's token authenticates at both API servers, the key logs in over SSH
    for c, server in CLUSTERS.items():
        assert api_status(server, member["tokens"][c]) != 401
        assert objects_left(c) == ["sa", "token secret", "crb"]
    assert member_ssh(member["key"]).returncode == 0

    record = signed_record(member["appr"], member["tmp"], "chg-revoke.yml", change_id="CHG-REVOKE-LAB",
                           action="revoke_member", member="test-member", targets=[NODE], requester="ops-lead",
                           reason="member left")
    res = revoke(member, record)
    assert res.returncode == 0, res.out[-5000:]
    assert "No object of the member is left in any context (read again)" in res.out

    # every path again, from the test itself
    for c, server in CLUSTERS.items():
        assert api_status(server, member["tokens"][c]) == 401, c
        assert objects_left(c) == [], c
    denied = member_ssh(member["key"])
    assert denied.returncode != 0 and "Permission denied" in denied.stderr
    # the admin and the lab key still work
    assert kube("onprem").get_node(NODE) is not None and kube("cloud").list_nodes()
    ssh(NODE, "true")

    # the revocation is audited, on the control host and in the node's journal
    log = str(member["tmp"] / "records" / "audit" / "audit.jsonl")
    ok = subprocess.run([os.path.join(ROOT, "bin", "hgpu-audit-verify"), log], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    text = open(log).read()
    assert text.count('"revoke_credential"') == 3  # two clusters, one host
    # written by the tasks that revoked, under the verified change id
    assert sorted((e["change_id"], e["target"]) for e in audit_entries(member) if e["action"] == "revoke_credential") == [
        ("CHG-REVOKE-LAB", NODE), ("CHG-REVOKE-LAB", "test-member@cloud"), ("CHG-REVOKE-LAB", "test-member@onprem")]
    assert "CHG-REVOKE-LAB" in ssh(NODE, "journalctl -t hybridgpu-audit --no-pager -o cat").stdout

    # a rerun changes nothing and still proves every path refused
    again = revoke(member, record)
    assert again.returncode == 0, again.out[-4000:]
    assert recap(again.out)[NODE]["changed"] == 0, again.out[-3000:]
    assert open(log).read().count('"revoke_credential"') == 3


def test_unsigned_record_revokes_nothing(member):
    keys = ssh(NODE, "cat /root/.ssh/authorized_keys").stdout
    left = {c: objects_left(c) for c in CLUSTERS}
    record = signed_record(member["appr"], member["tmp"], "unsigned.yml", signer=None,
                           change_id="CHG-REVOKE-BAD", action="revoke_member", member="test-member", targets=[NODE],
                           requester="ops-lead")
    res = revoke(member, record)
    assert res.returncode != 0 and "signature" in res.out
    assert {c: objects_left(c) for c in CLUSTERS} == left
    assert ssh(NODE, "cat /root/.ssh/authorized_keys").stdout == keys


def test_keys_from_the_launcher_revoke_nothing(member):
    keys = ssh(NODE, "cat /root/.ssh/authorized_keys").stdout
    left = {c: objects_left(c) for c in CLUSTERS}
    record = signed_record(member["appr"], member["tmp"], "launcher.yml", change_id="CHG-REVOKE-KEY",
                           action="revoke_member", member="test-member", targets=[NODE], requester="ops-lead")
    res = revoke(member, record, revoke_ssh_keys=[member["pub"]])
    assert res.returncode != 0 and "are not inputs" in res.out and "nothing was changed" in res.out
    assert {c: objects_left(c) for c in CLUSTERS} == left
    assert ssh(NODE, "cat /root/.ssh/authorized_keys").stdout == keys


def test_a_run_started_past_the_approval_removes_no_key(member):
    """--start-at-task at the key removal, with a made-up change naming the administrator's key,
    its home folder and keys: the task verifies on its own and refuses; no key is removed and no
    audit entry or journal line names the made-up change."""
    keys = ssh(NODE, "cat /root/.ssh/authorized_keys").stdout
    admin = next(line for line in keys.splitlines() if line.strip() and "hgpu-test-member" not in line)
    change = {"change_id": "CHG-MADE-UP-LAB", "approved": True, "approver": "sec-owner", "executor": "ops-lead",
              "member": "test-member", "member_access": {"ssh_keys": [admin], "kubernetes": []}}
    res = revoke(member, None, "--start-at-task", "Remove the member's public keys from authorized_keys",
                 revoke_change=change, revoke_approval={"approval": change}, revoke_keys=[admin],
                 revoke_home_of={"root": "/root"})
    assert res.returncode != 0 and "given as an extra var" in res.out
    assert ssh(NODE, "cat /root/.ssh/authorized_keys").stdout == keys
    assert not [e for e in audit_entries(member) if e["change_id"] == "CHG-MADE-UP-LAB"]
    assert "CHG-MADE-UP-LAB" not in ssh(NODE, "journalctl -t hybridgpu-audit --no-pager -o cat").stdout
