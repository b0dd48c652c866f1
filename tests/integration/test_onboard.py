"""Onboarding against the lab: onboard.yml joins the wave to the onprem emulator, a second
run changes nothing, and bad input stops before any change.

The owned nodes are left JOINED (the validation tests need them). Every test is rerunnable:
onboarding is idempotent, and the tests that change something restore it.
"""
import json
import os
import re
import subprocess

import pytest
import yaml

from conftest import ROOT, guard_members, podman_exec, ssh

pytestmark = pytest.mark.lab

WAVE = ["owned-a100-1", "owned-a100-2", "owned-l40s-1"]
KUBEADM = ["owned-a100-1", "owned-a100-2"]  # the l40s group joins with the command method (lab vendor connector)
COMMAND = "owned-l40s-1"
ONE = "owned-l40s-1"  # the node destructive checks use
# Where each join method leaves the node's CA and its client certificate (kubelet credential).
CREDS = {"kubeadm": ("/etc/kubernetes/pki/ca.crt", "/var/lib/kubelet/pki/kubelet-client-current.pem"),
         "command": ("/etc/vendor-node-connector/pki/ca.crt", "/var/lib/vendor-node-connector/pki/kubelet-client-current.pem")}
PLAYBOOK = os.path.join(ROOT, "playbooks", "onboard.yml")
RECORDS = os.path.join(ROOT, "records", "manifests")


def playbook(*args, extra=None, tmp_path=None, timeout=900):
    env = dict(os.environ, PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"],
               ANSIBLE_CONFIG=os.path.join(ROOT, "tests", "lab", "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0")
    cmd = ["ansible-playbook", PLAYBOOK, *args]
    if extra is not None:
        path = os.path.join(str(tmp_path), "extra.json")
        with open(path, "w") as fh:
            json.dump(extra, fh)
        cmd += ["-e", "@" + path]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def recap(out):
    """{host: {ok, changed, failed, ...}} from the PLAY RECAP."""
    hosts = {}
    for m in re.finditer(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", out, re.M):
        hosts[m.group(1)] = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2)))
    return hosts


def kube():
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import Kube
    return Kube({"kubeconfig": os.path.join(ROOT, ".lab", "k8s", "kubeconfig"), "context": "onprem"})


def manifest(name):
    with open(os.path.join(RECORDS, name + ".json")) as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def onboarded(lab):
    # The onboarding gate reads the wave's preflight record; write it as a wave does.
    env = dict(os.environ, PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"],
               ANSIBLE_CONFIG=os.path.join(ROOT, "tests", "lab", "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    pre = subprocess.run(["ansible-playbook", os.path.join(ROOT, "playbooks", "preflight.yml"), "-e", "preflight_wave=wave1"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert pre.returncode == 0, pre.stdout[-6000:] + pre.stderr[-2000:]
    first = playbook()
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-2000:]
    second = playbook()
    assert second.returncode == 0, second.stdout[-6000:] + second.stderr[-2000:]
    return first, second


def test_second_run_changes_nothing(onboarded):
    counts = recap(onboarded[1].stdout)
    assert sorted(counts) == WAVE
    for host, c in counts.items():
        assert c["changed"] == 0 and c["failed"] == 0, (host, c, onboarded[1].stdout[-4000:])


def test_nodes_ready_with_placement_from_the_matrix(onboarded):
    rows = {"owned-a100-1": ("ng_a100_535", "a100-535"), "owned-a100-2": ("ng_a100_535", "a100-535"),
            "owned-l40s-1": ("ng_l40s_550", "l40s-550")}
    k = kube()
    for name in WAVE:
        node = k.get_node(name)
        ready = [c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready == ["True"], name
        labels = node["metadata"]["labels"]
        assert labels["hybridgpu.io/side"] == "owned"
        assert (labels["hybridgpu.io/node-group"], labels["hybridgpu.io/matrix-row"]) == rows[name]
        assert labels["node-restriction.kubernetes.io/data-class"] == "restricted"
        assert labels["kubernetes.io/hostname"] == name  # the agent's own labels stay
        taints = [(t["key"], t.get("value"), t["effect"]) for t in node["spec"].get("taints") or []]
        assert ("hybridgpu.io/owned", "true", "PreferNoSchedule") in taints


def test_node_side_state_and_manifest(onboarded):
    for name in WAVE:
        method = "command" if name == COMMAND else "kubeadm"
        unit, kubeconfig = {"kubeadm": ("kubelet", "/etc/kubernetes/kubelet.conf"),
                            "command": ("vendor-node-connector", "/etc/vendor-node-connector/kubelet.conf")}[method]
        res = ssh(name, "systemctl is-active %s hybridgpu-gpu-exporter; "
                        "nft list table inet hybridgpu >/dev/null && echo table-ok; "
                        "stat -c %%a %s; "
                        "systemctl show -p User -p NoNewPrivileges -p ProtectSystem hybridgpu-gpu-exporter" % (unit, kubeconfig))
        out = res.stdout.split()
        assert out[:2] == ["active", "active"] and "table-ok" in out and "600" in out, res.stdout
        assert "User=hgpu-gpu-exporter" in out and "NoNewPrivileges=yes" in out and "ProtectSystem=strict" in out
        doc = manifest(name)
        kinds = dict((s, set((a["kind"], a.get("name") or a.get("path") or a.get("key")) for a in v["artefacts"]))
                     for s, v in doc["sections"].items())
        assert doc["sections"]["join"]["facts"]["method"] == method
        if method == "kubeadm":
            assert ("file", "/etc/kubernetes/kubelet.conf") in kinds["join"]
            assert ("file", "/var/lib/kubelet/pki/kubelet-client-current.pem") in kinds["join"]
            assert ("unit", "kubelet.service") in kinds["join"] and ("package", "kubeadm") in kinds["join"]
        else:
            assert ("unit", "vendor-node-connector.service") in kinds["join"]
            assert ("package", "vendor-node-connector") in kinds["join"]
            assert ("file", "/etc/vendor-node-connector") in kinds["join"]
            assert ("package", "kubeadm") not in kinds["join"]
        assert ("nft_table", "hybridgpu") in kinds["host_firewall"]
        assert ("label", "node-restriction.kubernetes.io/data-class") in kinds["placement"]
        assert ("taint", "hybridgpu.io/owned") in kinds["placement"]
        assert ("user", "hgpu-gpu-exporter") in kinds["agents"]
        assert ("unit", "hybridgpu-gpu-exporter.service") in kinds["agents"]
        pre = doc["pre_onboarding"]
        assert "ssh.service" in pre["active_units"] and "nft_ruleset" in pre
        # the copy on the node is the same document
        on_node = json.loads(ssh(name, "cat /var/lib/hybridgpu/manifest.json").stdout)
        assert on_node == doc


def test_a_node_copy_that_drifted_is_written_again_on_a_rerun(onboarded):
    """A rerun writes the node's copy only when it differs from the record (the join step reads its
    SHA-256 and mode): an edited copy, a copy with another mode and a missing copy are each put
    back, and a matching copy is left alone."""
    copy = "/var/lib/hybridgpu/manifest.json"
    nodes = ["owned-a100-1", COMMAND]  # one node of each join method
    ssh(nodes[0], "printf '{}' > %s" % copy)
    ssh(nodes[1], "chmod 0644 %s" % copy)
    res = playbook("--limit", ",".join(nodes + ["owned-a100-2"]))
    assert res.returncode == 0, res.stdout[-6000:]
    counts = recap(res.stdout)
    assert counts["owned-a100-1"]["changed"] == 1 and counts[COMMAND]["changed"] == 1, counts
    assert counts["owned-a100-2"]["changed"] == 0, counts
    for name in nodes:
        out = ssh(name, "stat -c %%a %s; cat %s" % (copy, copy)).stdout.split("\n", 1)
        assert out[0] == "640" and json.loads(out[1]) == manifest(name), name
    ssh(nodes[0], "rm %s" % copy)
    res = playbook("--limit", nodes[0])
    assert res.returncode == 0 and recap(res.stdout)[nodes[0]]["changed"] == 1, res.stdout[-4000:]
    assert json.loads(ssh(nodes[0], "cat %s" % copy).stdout) == manifest(nodes[0])


def test_management_agent_opens_no_inbound_port(onboarded):
    listing = ssh(ONE, "nft list table inet hybridgpu").stdout
    assert "6443" not in listing.split("chain output")[0]  # API port only as egress
    assert re.search(r'ip daddr 10\.213\.77\.1 tcp dport 6443 accept', listing)


def test_undeclared_label_is_removed_check_mode_first(onboarded, tmp_path):
    k = kube()
    k.patch_node(ONE, {"metadata": {"labels": {"hybridgpu.io/stale": "yes"}}}, patch_type="merge")
    try:
        check = playbook("--limit", ONE, "--tags", "placement", "--check", "--diff")
        assert check.returncode == 0, check.stdout[-4000:]
        assert "-label hybridgpu.io/stale=yes" in check.stdout
        assert k.get_node(ONE)["metadata"]["labels"].get("hybridgpu.io/stale") == "yes"
        run = playbook("--limit", ONE, "--tags", "placement")
        assert run.returncode == 0 and recap(run.stdout)[ONE]["changed"] >= 1
        assert "hybridgpu.io/stale" not in k.get_node(ONE)["metadata"]["labels"]
        assert "hybridgpu.io/stale" not in json.dumps(manifest(ONE)["sections"]["placement"])
    finally:
        k.patch_node(ONE, {"metadata": {"labels": {"hybridgpu.io/stale": None}}}, patch_type="merge")


def node_state(name):
    """What a failed run must leave as it was."""
    k = kube()
    node = k.get_node(name)
    side = ssh(name, "nft list table inet hybridgpu | sed 's/counter packets [0-9]* bytes [0-9]*/counter/'; "
                     "getent passwd | cut -d: -f1; ls /etc/systemd/system").stdout
    with open(os.path.join(RECORDS, name + ".json")) as fh:
        man = fh.read()
    return node["metadata"]["labels"], node["spec"].get("taints"), side, man


@pytest.mark.parametrize("case", ["unknown_agent", "label_outside_prefixes", "firewall_cuts_management"])
def test_bad_input_stops_before_any_change(onboarded, tmp_path, case):
    before = node_state(ONE)
    if case == "unknown_agent":
        agents = yaml.safe_load(open(os.path.join(ROOT, "inventories", "lab", "group_vars", "owned.yml")))[
            "node_agents_agents"]
        extra = {"node_agents_agents": agents + [{
            "name": "rogue-agent", "binary": {"src": "/bin/true", "dest": "/usr/local/bin/rogue"},
            "exec_start": "/usr/local/bin/rogue", "systemd_unit": "rogue.service", "user": "rogue"}]}
        res = playbook("--limit", ONE, extra=extra, tmp_path=tmp_path)
        message = "agent rogue-agent is not in the access boundary"
    elif case == "label_outside_prefixes":
        extra = {"node_placement_extra_labels": {"node-restriction.kubernetes.io/data-class": "restricted",
                                                 "team.example.com/owner": "ml"}}
        res = playbook("--limit", ONE, "--tags", "placement", extra=extra, tmp_path=tmp_path)
        message = "team.example.com/owner"
    else:
        with open(os.path.join(ROOT, "inventories", "lab", "preflight", "paths.yml")) as fh:
            table = yaml.safe_load(fh)
        for path in table["paths"]:
            if path["id"] == "mgmt-ssh":
                path["narrowest_source"] = "10.213.77.1/32"
                path["source"] = {"cidr": "10.213.77.200/32"}
                path["narrowest_source"] = "10.213.77.200/32"
        bad = tmp_path / "paths.yml"
        bad.write_text(yaml.safe_dump(table))
        res = playbook("--limit", ONE, "--tags", "firewall", extra={"onboard_path_table": str(bad)},
                       tmp_path=tmp_path)
        message = "would cut the management path"
    assert res.returncode != 0
    assert message in res.stdout, res.stdout[-4000:]
    assert node_state(ONE) == before
    # no rollback timer left behind either
    assert podman_exec(ONE, "systemctl", "is-active", "hybridgpu-nft-rollback-hybridgpu.timer").stdout.strip() \
        != "active"


CLOUD = "cloud-h200-2"
SSH_PROBE = ("import socket,sys\n"
             "try:\n"
             "    socket.create_connection((sys.argv[1], 22), timeout=3).close(); print('open')\n"
             "except OSError as e:\n"
             "    print('blocked')\n")


@pytest.fixture
def cloud_firewall_restored(lab):
    yield
    res = playbook("--tags", "cloud_firewall", "--limit", CLOUD, "-e", "cloud_firewall_state=absent")
    assert res.returncode == 0, res.stdout[-3000:]
    path = os.path.join(RECORDS, CLOUD + ".json")
    if os.path.exists(path):
        os.unlink(path)
    assert "hybridgpu_provider" not in podman_exec(CLOUD, "nft", "list", "tables").stdout


def test_cloud_firewall_flags_all_open_then_narrows(cloud_firewall_restored):
    assert podman_exec("cloud-h200-1", "python3", "-c", SSH_PROBE, "10.213.77.22").stdout.strip() == "open"
    first = playbook("--tags", "cloud_firewall", "--limit", CLOUD)
    assert first.returncode == 0, first.stdout[-4000:]
    assert "FLAG: %s is reachable from the site and still behind an" % CLOUD in first.stdout
    second = playbook("--tags", "cloud_firewall", "--limit", CLOUD)
    assert second.returncode == 0 and recap(second.stdout)[CLOUD]["changed"] == 0
    assert "FLAG:" not in second.stdout
    listing = podman_exec(CLOUD, "nft", "list", "table", "inet", "hybridgpu_provider").stdout
    assert 'ip saddr 10.213.77.1 tcp dport 9400 accept comment "scrape-gpu-exporter"' in listing
    # only listed sources get in: the control host still reaches SSH, a sibling does not
    assert ssh(CLOUD, "true").returncode == 0
    assert podman_exec("cloud-h200-1", "python3", "-c", SSH_PROBE, "10.213.77.22").stdout.strip() == "blocked"
    # the node agent's outbound path is untouched: the Node stays Ready
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import Kube, node_ready
    cloud = Kube({"kubeconfig": os.path.join(ROOT, ".lab", "k8s", "kubeconfig"), "context": "cloud"})
    assert node_ready(cloud.get_node(CLOUD)) == "True"
    arts = manifest(CLOUD)["sections"]["cloud_firewall"]
    assert arts["facts"]["all_open_found"] is True
    assert {a["name"] for a in arts["artefacts"]} == {"scrape-gpu-exporter", "scrape-node-exporter"}


def test_node_exporter_answers_on_an_onboarded_node(onboarded):
    """The Debian prometheus-node-exporter (lab apt repo) runs hardened on an onboarded owned
    node, the host firewall lets the control host scrape 9100, and the lab Prometheus sees it."""
    import time
    import urllib.parse
    import urllib.request
    name, addr = "owned-a100-1", "10.213.77.11"
    res = ssh(name, "systemctl is-active prometheus-node-exporter; "
                    "systemctl show -p User -p NoNewPrivileges -p ProtectSystem prometheus-node-exporter; "
                    "nft list table inet hybridgpu")
    assert res.stdout.split()[0] == "active", res.stdout
    assert "User=prometheus" in res.stdout and "ProtectSystem=strict" in res.stdout
    assert re.search(r'ip saddr 10\.213\.77\.1 tcp dport 9100 accept comment "scrape-node-exporter"', res.stdout)
    with urllib.request.urlopen("http://%s:9100/metrics" % addr, timeout=10) as resp:
        body = resp.read().decode()
    assert re.search(r"^node_uname_info\{.*nodename=\"%s\"" % name, body, re.M), body[:2000]
    kinds = set((a["kind"], a.get("name") or a.get("path")) for a in manifest(name)["sections"]["agents"]["artefacts"])
    assert ("unit", "prometheus-node-exporter.service") in kinds
    query = urllib.parse.urlencode({"query": 'up{job="node",Hostname="%s"}' % name})
    value = None
    for dummy in range(30):  # one scrape interval at most
        with urllib.request.urlopen("http://127.0.0.1:9090/api/v1/query?" + query, timeout=10) as resp:
            result = json.load(resp)["data"]["result"]
        value = result[0]["value"][1] if result else None
        if value == "1":
            break
        time.sleep(1)
    assert value == "1", result


def node_request(name, method, path, body=None):
    """A request from the node with its own client certificate (the kubelet's credential)."""
    ca, cert = CREDS["command" if name == COMMAND else "kubeadm"]
    code = ("import json,ssl,sys,urllib.request as u\n"
            "ctx=ssl.create_default_context(cafile='%s')\n"
            "ctx.load_cert_chain('%s')\n" % (ca, cert) +
            "body=sys.argv[3].encode() if len(sys.argv)>3 else None\n"
            "r=u.Request('https://10.213.77.1:6443'+sys.argv[2],data=body,method=sys.argv[1],"
            "headers={'Content-Type':'application/merge-patch+json'})\n"
            "try:\n    print(u.urlopen(r,context=ctx).status)\n"
            "except u.HTTPError as e:\n    print(e.code)\n")
    args = ["python3", "-c", code, method, path] + ([json.dumps(body)] if body is not None else [])
    return podman_exec(name, *args).stdout.strip()


def test_nodes_joined_with_kubeadm_and_approved_csrs(onboarded):
    """The Node is backed by a CSR-signed client certificate; the join's CSRs were approved for
    the join's bootstrap token only, each approval is in the audit trail, and the token, the
    bootstrap kubeconfig and the JoinConfiguration are gone."""
    k = kube()
    audit = [json.loads(line) for line in open(os.path.join(ROOT, "records", "audit", "audit.jsonl"))]
    approvals = dict((e["details"]["name"], e) for e in audit if e["action"] == "approve_csr")
    for name in KUBEADM:
        join = manifest(name)["sections"]["join"]
        csrs = [a["name"] for a in join["artefacts"] if a.get("resource") == "certificatesigningrequests"]
        tokens = [a["name"] for a in join["artefacts"] if a.get("name", "").startswith("bootstrap-token-")]
        assert csrs and tokens, join
        for csr_name in csrs:
            csr = k.get_csr(csr_name)
            spec = csr["spec"]
            assert spec["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
            assert spec["username"] in ["system:bootstrap:" + t[len("bootstrap-token-"):] for t in tokens]
            assert "Approved" in [c["type"] for c in csr["status"]["conditions"]] and csr["status"]["certificate"]
            assert approvals[csr_name]["details"]["subject"] == {"cn": "system:node:" + name, "o": ["system:nodes"]}
        for token in tokens:
            assert k.get_secret("kube-system", token) is None
        subject = ssh(name, "openssl x509 -noout -subject -serial -in /var/lib/kubelet/pki/kubelet-client-current.pem; "
                            "ls /etc/kubernetes").stdout
        assert "CN = system:node:%s" % name in subject and "O = system:nodes" in subject, subject
        assert join["facts"]["client_certificate"]["serial"].upper() in subject
        assert "bootstrap-kubelet.conf" not in subject and "hybridgpu-join.yaml" not in subject
        assert node_request(name, "GET", "/api/v1/nodes/" + name) == "200"


def test_node_credential_cannot_change_restricted_labels_or_taints(onboarded):
    """NodeRestriction: the node's own certificate may not touch node-restriction.kubernetes.io/
    labels or taints (the admin credential sets them), while it may patch a label of its own."""
    before = kube().get_node(ONE)
    path = "/api/v1/nodes/" + ONE
    assert node_request(ONE, "PATCH", path, {"metadata": {"labels": {
        "node-restriction.kubernetes.io/data-class": "public"}}}) == "403"
    assert node_request(ONE, "PATCH", path, {"spec": {"taints": []}}) == "403"
    assert node_request(ONE, "PATCH", path, {"metadata": {"labels": {"example.com/self": "yes"}}}) == "200"
    after = kube().get_node(ONE)
    assert after["metadata"]["labels"]["node-restriction.kubernetes.io/data-class"] == "restricted"
    assert after["spec"].get("taints") == before["spec"].get("taints")
    kube().patch_node(ONE, {"metadata": {"labels": {"example.com/self": None}}}, patch_type="merge")


ADDRESSES = {"owned-a100-1": "10.213.77.11", "owned-a100-2": "10.213.77.12", "owned-l40s-1": "10.213.77.13"}


def api_connects(node, timeout=5):
    """Whether a TCP connection from the node to the onprem API opens (within ``timeout`` s)."""
    code = ("import socket\ntry:\n    socket.create_connection(('10.213.77.1', 6443), %d).close(); print('open')\n"
            "except OSError as e:\n    print('closed', e)\n" % timeout)
    return ssh(node, "python3 -c \"%s\"" % code, check=False).stdout.startswith("open")


def test_api_guard_lets_the_onboarded_nodes_through(onboarded):
    """Onboarding put each node of the wave into the API guard on the lab host before it joined;
    the guard drops the owned range's other addresses only, and the nodes reach the API."""
    members = guard_members()
    assert members is not None, "onboarding made no API guard table on the lab host"
    assert set(ADDRESSES.values()) <= set(members), members
    chain = subprocess.run(["nft", "list", "chain", "inet", "hybridgpu_api_guard", "input"],
                           capture_output=True, text=True, check=True).stdout
    assert "policy accept" in chain
    assert "ip saddr 10.213.77.8/29 ip saddr != @members tcp dport 6443" in chain and " drop " in chain, chain
    for node in WAVE:
        assert api_connects(node), "%s cannot reach the API through the guard" % node
