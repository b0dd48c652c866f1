"""Change-managed removal of owned-a100-2 (a kubeadm join) against the lab: refused change records
stop before any change, an interrupted removal reports its phases and finishes on rerun,
the node ends standalone with its kubeadm join reversed (Node, CSRs, bootstrap token, kubelet
credentials and packages gone; the client certificate's residual validity recorded) and every
credential path refused, a second run changes nothing,
and a tampered line of the audit log the run wrote is detected. The node is RE-ONBOARDED at
the end (onboard.yml limited to it), so the lab is left as it was found.

The removal works on a temporary records folder holding a copy of the node's manifest plus
one SSH key the test installs and records as an onboarding artefact (onboarding itself
installs none today), so the key path is exercised for real."""
import json
import os
import subprocess

import pytest
import yaml

from conftest import ROOT, guard_members, ssh
from lifecycle_lab import approvers, kube, lab_lock, node_state, playbook, recap, signed_record  # noqa: F401  pylint: disable=unused-import

pytestmark = pytest.mark.lab

NODE = "owned-a100-2"  # a kubeadm node (the l40s group joins with command: test_command_join.py)
IP = "10.213.77.12"


def key_ssh(key, command="true"):
    return subprocess.run(["ssh", "-i", key, "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                           "-o", "ControlPath=none", "-o", "StrictHostKeyChecking=no",
                           "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10",
                           "root@" + IP, command], capture_output=True, text=True, timeout=30, check=False)


def assert_joined():
    """The precondition, re-checked under the lock: the node is onboarded and Ready."""
    node = kube().get_node(NODE)
    assert node is not None, "%s must be joined to onprem (onboard.yml --limit %s)" % (NODE, NODE)
    ready = [c for c in node["status"].get("conditions", []) if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True", ready
    assert ssh(NODE, "systemctl is-active kubelet", check=False).stdout.strip() == "active"


@pytest.fixture(scope="module")
def setup(lab_lock, tmp_path_factory):
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import manifest as mf
    assert_joined()
    tmp = tmp_path_factory.mktemp("removal")
    appr = approvers(tmp / "appr")
    rec = tmp / "records"
    (rec / "manifests").mkdir(parents=True)
    doc = mf.load(os.path.join(ROOT, "records", "manifests", NODE + ".json"))
    assert doc and doc.get("pre_onboarding"), "%s must be onboarded first (onboard.yml)" % NODE
    key = str(tmp / "onboard-key")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "hgpu-removal-test", "-f", key], check=True)
    pub = open(key + ".pub").read().strip()
    ssh(NODE, "echo '%s' >> /root/.ssh/authorized_keys" % pub)
    doc = mf.merge(doc, NODE, "access", [{"kind": "key", "path": "/root/.ssh/authorized_keys",
                                          "public_key": pub, "private_key": key, "user": "root"}])
    mf.write(str(rec / "manifests" / (NODE + ".json")), doc)
    assert key_ssh(key).returncode == 0, "the test key must work before the removal"
    # a copy of the kubelet's client certificate and key, to retry the API with it afterwards
    cert = str(tmp / "kubelet-client.pem")
    with open(cert, "w") as fh:
        fh.write(ssh(NODE, "cat /var/lib/kubelet/pki/kubelet-client-current.pem").stdout)
    os.chmod(cert, 0o600)
    yield {"tmp": tmp, "appr": appr, "rec": str(rec), "key": key, "pub": pub, "cert": cert, "manifest": doc}
    # leave the lab as found: the key gone, the node joined again. The removal ran on a copy
    # of the manifest; the one in records/ lists what it removed, so it goes aside first, as
    # a removal's finish moves it (the re-onboarding records the standalone node afresh).
    ssh(NODE, "sed -i '/hgpu-removal-test/d' /root/.ssh/authorized_keys", check=False)
    main = os.path.join(ROOT, "records", "manifests", NODE + ".json")
    if os.path.exists(main):
        os.replace(main, str(tmp / (NODE + ".manifest-before-removal.json")))
    res = playbook("onboard.yml", "--limit", NODE, timeout=1200)
    assert res.returncode == 0, "re-onboarding %s failed:\n%s" % (NODE, res.out[-5000:])
    # onboarding let the node through the API guard again
    assert IP in (guard_members() or []), guard_members()
    again = retry_from_node(cert)
    assert again.startswith("status"), "the re-onboarded node must reach the API: %s" % again


def cert_status(cert, path):
    """HTTP status of a GET with a client certificate (cert and key in one PEM file)."""
    import ssl
    import urllib.error
    import urllib.request
    ctx = ssl.create_default_context(cafile=os.path.join(ROOT, ".lab", "pki", "ca.crt"))
    ctx.load_cert_chain(cert)
    try:
        with urllib.request.urlopen("https://10.213.77.1:6443" + path, context=ctx, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


# From the node: an HTTPS request to the onprem API with a client certificate copied onto it.
RETRY = """import socket, ssl, sys, urllib.error, urllib.request
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
ctx.load_cert_chain(sys.argv[1])
try:
    urllib.request.urlopen("https://10.213.77.1:6443/api/v1/nodes/%s", context=ctx, timeout=5)
    print("status 200")
except urllib.error.HTTPError as err:
    print("status %%d" %% err.code)
except (OSError, socket.timeout) as err:
    print("no connection: %%r" %% err)
""" % NODE


def retry_from_node(cert):
    """What the node gets when it retries the API with ``cert``: 'status N' or 'no connection: ...'."""
    podman = subprocess.run(["podman", "cp", cert, NODE + ":/root/hgpu-retry.pem"], capture_output=True, text=True, check=False)
    assert podman.returncode == 0, podman.stderr
    try:
        res = ssh(NODE, "cat > /root/hgpu-retry.py <<'EOF'\n%sEOF\ntimeout 20 python3 /root/hgpu-retry.py /root/hgpu-retry.pem" % RETRY,
                  check=False)
        return res.stdout.strip() or res.stderr.strip()
    finally:
        ssh(NODE, "rm -f /root/hgpu-retry.pem /root/hgpu-retry.py", check=False)


def remove(setup, record, *args, **extra):
    ev = {"remove_targets": NODE, "remove_executor": "ops-lead", "change_record_path": record}
    ev.update(extra)
    return playbook("remove.yml", *args, extra=ev, tmp_path=setup["tmp"],
                    site={"hgpu_boundary_path": setup["appr"]["boundary"], "hgpu_records_dir": setup["rec"]})


def manifest_path(setup):
    return os.path.join(setup["rec"], "manifests", NODE + ".json")


def events_of(setup):
    with open(os.path.join(setup["rec"], "audit", "audit.jsonl")) as fh:
        return [json.loads(x) for x in fh]


def state_file(setup, change):
    path = os.path.join(setup["rec"], "removals", NODE, change + ".json")
    return json.load(open(path)) if os.path.exists(path) else None


@pytest.mark.parametrize("case", ["unsigned", "expired", "wrong_target"])
def test_refused_record_changes_nothing(setup, case):
    import datetime
    now = datetime.datetime.now(datetime.timezone.utc)
    kw = dict(change_id="CHG-RM-BAD-" + case, action="remove", targets=[NODE], requester="ops-lead",
              manifests={NODE: manifest_path(setup)})
    signer = "sec-owner"
    if case == "unsigned":
        signer = None
    elif case == "expired":
        kw.update(start=now - datetime.timedelta(hours=3), end=now - datetime.timedelta(hours=1))
    else:
        kw.update(targets=["owned-a100-1"], manifests=None)
    record = signed_record(setup["appr"], setup["tmp"], "bad-%s.yml" % case, signer=signer, **kw)
    before = node_state(NODE)
    res = remove(setup, record)
    assert res.returncode != 0
    assert "change_approval" in res.out or "Verify the signed change record" in res.out
    expect = {"unsigned": "signature", "expired": "window", "wrong_target": NODE}[case]
    assert expect in res.out, res.out[-3000:]
    assert node_state(NODE) == before
    assert state_file(setup, kw["change_id"]) is None
    assert key_ssh(setup["key"]).returncode == 0


def test_interrupted_removal_reports_and_finishes(setup):
    # the approver signs the digest of the manifest the removal undoes
    record = signed_record(setup["appr"], setup["tmp"], "chg.yml", change_id="CHG-RM-LAB",
                           action="remove", targets=[NODE], requester="ops-lead",
                           manifests={NODE: manifest_path(setup)})
    # one run with the API unreachable (a kubeconfig pointing at a closed loopback port)
    bad = yaml.safe_load(open(os.path.join(ROOT, ".lab", "k8s", "kubeconfig")))
    for c in bad["clusters"]:
        c["cluster"]["server"] = "https://127.0.0.1:9"
    bad_path = str(setup["tmp"] / "bad.kubeconfig")
    yaml.safe_dump(bad, open(bad_path, "w"))
    assert_joined()
    first = remove(setup, record, remove_kubeconfig=bad_path)
    assert first.returncode != 0
    assert "REMOVAL INTERRUPTED" in first.out and "done [approval]" in first.out, first.out[-4000:]
    st = state_file(setup, "CHG-RM-LAB")
    assert list(st["steps"]) == ["approval"] and not st["finished_at"]
    assert kube().get_node(NODE) is not None, "nothing past the approval may have happened"

    # rerun: resumes after the approval and finishes
    second = remove(setup, record)
    assert second.returncode == 0, second.out[-6000:]
    assert "done [approval]; pending [drain" in second.out
    st = state_file(setup, "CHG-RM-LAB")
    assert st["finished_at"] and len(st["steps"]) == 9

    # standalone, every credential path refused (checked here too, not only in the playbook)
    assert kube().get_node(NODE) is None
    join = setup["manifest"]["sections"]["join"]
    csrs = [a["name"] for a in join["artefacts"] if a.get("resource") == "certificatesigningrequests"]
    tokens = [a["name"] for a in join["artefacts"] if a.get("name", "").startswith("bootstrap-token-")]
    assert csrs and tokens
    assert all(kube().get_csr(n) is None for n in csrs)
    assert all(kube().get_secret("kube-system", n) is None for n in tokens)
    # the client certificate cannot be revoked: the API still authenticates it (404 for the
    # deleted Node, not 401), so the record must state its serial and expiry, and no copy of
    # its key may be left on the node
    assert cert_status(setup["cert"], "/api/v1/nodes/" + NODE) == 404
    # ... but the node's own path to the API is closed: the API guard on the lab host (api-front)
    # no longer holds its address, and the same certificate retried from the node gets no connection
    members = guard_members()
    assert members is not None and IP not in members, members
    retried = retry_from_node(setup["cert"])
    assert retried.startswith("no connection"), retried
    closed = [e["details"] for e in events_of(setup) if e["action"] == "close_api_path"]
    assert closed and closed[-1]["path_closed"] is True and closed[-1]["address"] == IP, closed
    assert closed[-1]["guard_hosts"] == ["api-front"] and closed[-1]["endpoints"] == ["10.213.77.1:6443"], closed
    serial = subprocess.run(["openssl", "x509", "-noout", "-serial", "-in", setup["cert"]], capture_output=True,
                            text=True, check=True).stdout.strip().split("=")[1].lower()
    events = [json.loads(x) for x in open(os.path.join(setup["rec"], "audit", "audit.jsonl"))]
    residual = [e["details"]["residual_validity"] for e in events if e["action"] == "revoke_credential"]
    assert [e["details"]["join_method"] for e in events if e["action"] == "revoke_credential"] == ["kubeadm"]
    assert residual and residual[0]["serial"] == serial, residual
    assert residual[0]["not_after"] == join["facts"]["client_certificate"]["not_after"]
    # the join's files and packages, and the unit that loaded the host firewall at boot
    gone = ssh(NODE, "ls /etc/kubernetes/kubelet.conf /etc/kubernetes/pki /var/lib/kubelet "
                     "/etc/systemd/system/hybridgpu-nft-hybridgpu.service 2>&1; "
                     "dpkg-query -W -f='${db:Status-Abbrev}\\n' kubeadm kubelet 2>&1", check=False).stdout
    assert gone.count("No such file") == 4 and "ii" not in gone, gone
    refused = key_ssh(setup["key"])
    assert refused.returncode != 0 and "Permission denied" in refused.stderr
    out = ssh(NODE, "nft list tables; systemctl is-active kubelet hybridgpu-gpu-exporter; "
                    "ls /etc/hybridgpu /var/lib/hybridgpu; getent passwd hgpu-gpu-exporter; "
                    "dpkg-query -W -f='${db:Status-Abbrev}' kubelet; nvidia-smi -L | wc -l",
              check=False).stdout
    assert "table inet hybridgpu\n" not in out
    assert "active\n" not in out.replace("inactive", "")
    assert "hgpu-gpu-exporter" not in out and "ii" not in out
    assert out.strip().endswith("8"), out  # 8 A100 GPUs still answer nvidia-smi
    assert ssh(NODE, "systemctl is-active chrony ssh").returncode == 0

    # a second run changes nothing
    third = remove(setup, record)
    assert third.returncode == 0, third.out[-4000:]
    assert recap(third.out)[NODE]["changed"] == 0, third.out[-3000:]

    # the audit log the runs wrote: intact, then a tampered copy is caught at the right line
    log = os.path.join(setup["rec"], "audit", "audit.jsonl")
    verify = os.path.join(ROOT, "bin", "hgpu-audit-verify")
    ok = subprocess.run([verify, log], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    lines = open(log).read().splitlines()
    actions = [json.loads(x)["action"] for x in lines]
    for action in ("approval", "cordon", "drain", "delete_node", "revoke_credential", "close_api_path", "remove"):
        assert action in actions, actions
    n = actions.index("delete_node")
    bad_line = json.loads(lines[n])
    bad_line["result"] = "skipped"
    lines[n] = json.dumps(bad_line, sort_keys=True)
    tampered = str(setup["tmp"] / "tampered.jsonl")
    open(tampered, "w").write("\n".join(lines) + "\n")
    caught = subprocess.run([verify, tampered], capture_output=True, text=True, check=False)
    assert caught.returncode == 1
    assert "line %d" % (n + 1) in caught.stdout + caught.stderr, caught.stdout + caught.stderr
    # the same events reached the node's journal
    journal = ssh(NODE, "journalctl -t hybridgpu-audit --no-pager -o cat | grep CHG-RM-LAB").stdout
    assert "delete_node" in journal and "revoke_credential" in journal
