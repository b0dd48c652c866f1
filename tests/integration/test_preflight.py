"""Preflight against the lab: every finding comes from real probes on real hosts.

One module-scoped run applies all faults at once on the nodes this part may change
(owned-l40s-1, cloud-h200-2) and on the control host, runs playbooks/preflight.yml, and
restores everything in finalizers. Other tests check malformed inputs (nothing written)
and that a rerun with nothing changed (the faults still in place) gives the same verdict digest.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import time

import pytest
import yaml

from conftest import ROOT, ssh

pytestmark = pytest.mark.lab

PLAYBOOK = os.path.join(ROOT, "playbooks", "preflight.yml")
INPUTS = os.path.join(ROOT, "inventories", "lab", "preflight")
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
CLOCK_SHIFT_S = 30
L40S = "owned-l40s-1"
H200 = "cloud-h200-2"
TEST_TABLE = "hgpu_preflight_test"
# The control host's clock as the probe sees it: CLOCK_SHIFT_S ahead.
CLOCK_ENV = {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": "+%ds" % CLOCK_SHIFT_S, "DONT_FAKE_MONOTONIC": "1"}


def run_preflight(records, *extra, timeout=600):
    env = dict(os.environ, PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"],
               ANSIBLE_CONFIG=os.path.join(ROOT, "tests", "lab", "ansible.cfg"))
    cmd = ["ansible-playbook", PLAYBOOK, "-e", "preflight_records_dir=%s" % records]
    for item in extra:
        cmd += ["-e", item]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def load(records, wave="wave1"):
    with open(os.path.join(records, wave, "preflight.json")) as handle:
        return json.load(handle)


def _agent_version(version):
    """Set (or with None, drop) the kubelet version the cloud node's agent reports."""
    if version is None:
        ssh(H200, "rm -f /etc/hybridgpu/node-agent/config.json && systemctl restart hybridgpu-node-agent")
    else:
        ssh(H200, "mkdir -p /etc/hybridgpu/node-agent && echo '%s' > /etc/hybridgpu/node-agent/config.json"
                  " && systemctl restart hybridgpu-node-agent" % json.dumps({"kubelet_version": version}))


def _node_kubelet(name):
    env = dict(os.environ, PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"],
               ANSIBLE_CONFIG=os.path.join(ROOT, "tests", "lab", "ansible.cfg"))
    res = subprocess.run(["ansible", "localhost", "-c", "local", "-m", "hybridgpu.fleet.k8s_node_info",
                          "-a", "kubeconfig=%s/.lab/k8s/kubeconfig context=cloud name=%s" % (ROOT, name),
                          "-o"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    return res.stdout


@pytest.fixture(scope="module")
def faulted(lab, tmp_path_factory, request):
    """All seven faults at once, one preflight run, everything restored afterwards."""
    if not os.path.exists(FAKETIME_LIB):
        pytest.fail("libfaketime is needed for the clock drill: apt-get install faketime")
    records = str(tmp_path_factory.mktemp("records"))

    # Skew: cloud-h200-2's agent reports a kubelet 4 minors behind the v1.30 API (max 3).
    request.addfinalizer(lambda: _agent_version(None))
    _agent_version("v1.26.3-hybridgpu")
    deadline = time.time() + 30
    while "v1.26.3-hybridgpu" not in _node_kubelet(H200):
        assert time.time() < deadline, "the agent did not report the new kubelet version"
        time.sleep(1)

    # Tunnel MTU 1380 on owned-l40s-1, frag-needed dropped; and an allowed path blocked:
    # echo requests from the control host (path mgmt-ping) dropped at the destination.
    def restore_l40s():
        ssh(L40S, "ip link set dev eth0 mtu 1500; nft delete table inet %s 2>/dev/null; true" % TEST_TABLE,
            check=False)
    request.addfinalizer(restore_l40s)
    ssh(L40S, "nft -f - <<'EOF'\n"
              "table inet %s {\n"
              " chain in { type filter hook input priority -10; ip saddr 10.213.77.1 icmp type echo-request drop; }\n"
              " chain out { type filter hook output priority -10; icmp type destination-unreachable icmp code frag-needed drop; }\n"
              "}\nEOF\nip link set dev eth0 mtu 1380" % TEST_TABLE)

    # A port the table says must be closed (7444, next to the API's 7443) is open on the control host.
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("10.213.77.1", 7444))
    listener.listen(16)
    request.addfinalizer(listener.close)

    res = run_preflight(records, json.dumps({"preflight_clock_server_environment": CLOCK_ENV}))
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    return load(records)


def test_driver_too_old_for_job_image_cuda(faulted):
    viol = [v for v in faulted["verdicts"]["matrix"]["violations"] if v["rule"] == "cuda-driver-minimum"]
    a100 = [v for v in viol if "owned-a100-1" in v["nodes"]]
    assert a100 and a100[0]["rows"] == ["a100-535"], viol
    assert "driver 535.230.02 is older than 550.54.14 required by CUDA 12.4" in a100[0]["message"]
    # The L40S row (driver 550) and the cloud row (570) meet CUDA 12.4.
    assert not [v for v in viol if L40S in v["nodes"] or H200 in v["nodes"]]


def test_kubelet_skew_out_of_policy(faulted):
    viol = [v for v in faulted["verdicts"]["matrix"]["violations"] if v["rule"] == "kubelet-apiserver-skew"]
    assert len(viol) == 1 and viol[0]["nodes"] == [H200], viol
    assert "v1.26.3-hybridgpu is 4 minor versions older than API server v1.30.4" in viol[0]["message"]


def test_cloud_vpc_overlaps_onprem(faulted):
    pairs = {(o["a"]["name"], o["b"]["name"]) for o in faulted["verdicts"]["cidr_overlaps"]}
    assert ("lab-nodes", "default-vpc") in pairs and ("pods", "default-vpc") in pairs


def test_pmtu_black_hole(faulted):
    row = next(p for p in faulted["details"]["probes"] if p["id"] == "pmtu:tunnel-cloud-to-l40s")
    assert faulted["verdicts"]["paths"]["pmtu:tunnel-cloud-to-l40s"] == "fail"
    assert row["source"] == H200 and "PMTU black hole" in row["evidence"]
    # A veth accepts up to MTU + 4 bytes (VLAN allowance), so the measured path carries 1380-1384.
    mtu = int(re.search(r"effective path MTU (\d+)", row["evidence"]).group(1))
    assert 1380 <= mtu <= 1384, row["evidence"]
    assert "recommend MTU %d, TCP MSS %d" % (mtu, mtu - 40) in row["evidence"]
    # The untouched path stays clean.
    assert faulted["verdicts"]["paths"]["pmtu:control-to-a100-1"] == "pass"


def test_clock_offset(faulted):
    rows = [p for p in faulted["details"]["probes"] if p["id"].startswith("clock:")]
    answered = [p for p in rows if p["observed"] == "open"]
    assert answered, rows
    for row in answered:
        assert faulted["verdicts"]["paths"][row["id"]] == "fail"
        assert "exceeds 100.0 ms" in row["evidence"]
        # The node is 30 s behind the (faked) control host clock.
        assert "offset -3" in row["evidence"] or "offset -2" in row["evidence"], row["evidence"]


def test_allowed_path_blocked(faulted):
    pid = "mgmt-ping:allow:%s" % L40S
    row = next(p for p in faulted["details"]["probes"] if p["id"] == pid)
    assert faulted["verdicts"]["paths"][pid] == "fail" and row["observed"] == "closed"
    assert faulted["verdicts"]["paths"]["mgmt-ping:allow:owned-a100-1"] == "pass"


def test_port_should_be_closed_but_open(faulted):
    # Probed from cloud-h200-1, a source without an egress allowlist (owned nodes may have one,
    # which stops 7444 at the source and is no evidence about the destination).
    pid = "cloud-agent-to-api:neighbour_port:control"
    row = next(p for p in faulted["details"]["probes"] if p["id"] == pid)
    assert faulted["verdicts"]["paths"][pid] == "fail" and row["observed"] == "open" and row["port"] == 7444
    assert "handshake completed" in row["evidence"]


@pytest.mark.parametrize("name,edit,needle", [
    ("paths.yml", lambda d: d["paths"][0].update(protocol="sctp"),
     "paths.yml: paths[0].protocol: 'sctp' is not one of tcp, udp, icmp"),
    ("boundary.yml", lambda d: d.update(security_owner="nobody-listed"), "boundary.yml: security_owner"),
    ("matrix.yml", lambda d: d.update(job_image_cuda=12.4), "matrix.yml: invalid matrix inputs: job_image_cuda"),
    ("cloud.yml", lambda d: d["worker_spec"].update(gpu_count="eight"), "cloud.yml: invalid cloud row"),
])
def test_malformed_input_writes_nothing(lab, tmp_path, name, edit, needle):
    inputs = tmp_path / "inputs"
    shutil.copytree(INPUTS, inputs)
    with open(inputs / name) as handle:
        doc = yaml.safe_load(handle)
    edit(doc)
    with open(inputs / name, "w") as handle:
        yaml.safe_dump(doc, handle)
    records = tmp_path / "records"
    res = run_preflight(str(records), "preflight_inputs_dir=%s" % inputs, "preflight_hosts=owned-a100-1",
                        timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert needle in out, out[-3000:]
    assert not records.exists(), "records were written despite bad input"


def test_rerun_gives_same_verdicts(faulted, tmp_path):
    """A second run with nothing changed (the faults still in place) gives the verdicts of the first."""
    records = str(tmp_path)
    again = run_preflight(records, json.dumps({"preflight_clock_server_environment": CLOCK_ENV}))
    assert again.returncode == 0, again.stdout[-3000:]
    two = load(records)
    assert faulted["verdicts"] == two["verdicts"]
    assert faulted["verdicts_digest"] == two["verdicts_digest"]
    with open(os.path.join(records, "wave1", "index.html")) as handle:
        page = handle.read()
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org", "")
    assert two["verdicts_digest"] in page


def _gpu_facts(name):
    """gpu_facts on a lab node, ad hoc (one module run, the way preflight and validation call it)."""
    env = dict(os.environ, PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"],
               ANSIBLE_CONFIG=os.path.join(ROOT, "tests", "lab", "ansible.cfg"))
    res = subprocess.run(["ansible", name, "-m", "hybridgpu.fleet.gpu_facts", "-o"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout.split("=>", 1)[1])["ansible_facts"]["hybridgpu_gpu"]


def test_gpu_facts_read_the_stack_stand_ins_in_one_run(lab):
    a100 = _gpu_facts("owned-a100-1")
    stack = a100["stack"]
    assert stack["module"] == {"loaded": True, "version": a100["driver_version"], "flavor": None, "source": "nvidia-smi"}
    assert stack["driver_package"]["name"] == "nvidia-driver-535"
    assert stack["driver_package"]["upstream"] == a100["driver_version"]
    assert stack["toolkit"] == {"installed": True, "version": "1.17.3", "source": "nvidia-ctk"}
    assert stack["containerd"]["source"] == "/etc/containerd/config.toml"
    assert stack["containerd"]["nvidia_runtimes"] == ["nvidia"]
    assert stack["fabricmanager"]["installed"] and stack["fabricmanager"]["active"]
    assert stack["fabricmanager"]["version"] == a100["driver_version"]
    assert "datacenter-gpu-manager" in stack["packages"]
    # nothing of the lab's own files is read
    assert a100["image_id"] is None and (a100["agent"] or {}).get("kind") in (None, "kubelet")
    l40s = _gpu_facts(L40S)
    assert l40s["stack"]["fabricmanager"]["installed"] is False  # PCIe GPUs: no fabric manager
