"""The validation sequence on the lab: playbooks/validate.yml passes on
joined owned nodes, and each step fails for the right reason when a fault is injected:
a hidden GPU, a missing piece of the GPU software stack (container toolkit, containerd's nvidia
runtime, fabric manager version, device plugin, allocatable GPUs), a reference job with other
inputs, NCCL below baseline or with #wrong > 0, a restricted job without its label landing on a
cloud node, a node that never rejoins, a failing DCGM diagnostic, a log line not found.

Owned nodes are joined to the `onprem` emulator by the module fixture when nothing else
joined them (agent package from the lab apt repo, node credential Secret, kubeconfig, the
restricted placement label), and returned to standalone afterwards. Faults go to
owned-a100-2's GPU spec and are restored by finalizers."""
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import ROOT, config, podman_exec, ssh

from lablib import k8s as labk8s  # noqa: E402,I100
from lablib import nodes as labnodes  # noqa: E402,I100

pytestmark = pytest.mark.lab

OWNED = ["owned-a100-1", "owned-a100-2"]
FAULT_NODE = "owned-a100-2"
RESTRICTED = "node-restriction.kubernetes.io/data-class"
MATRIX = {
    "a100-535": {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_count": 8, "gpu_memory_mib": 81920},
    "l40s-550": {"gpu_model": "NVIDIA L40S", "gpu_count": 4, "gpu_memory_mib": 46068},
}
# Declared baselines (GB/s, avg bus bandwidth of -b 8M -e 64M -f 2) so the tests do not
# depend on a baseline file; test_baseline_run_writes_group_files measures real ones.
BASELINES = {"ng_a100_535": {"low": 170.0, "high": 220.0},
             "ng_a100_535-multinode": {"low": 170.0, "high": 225.0}}


def node_ready(name):
    st, body = labk8s.api("onprem", "GET", "/api/v1/nodes/" + name)
    if st != 200:
        return None
    for cond in body.get("status", {}).get("conditions", []):
        if cond.get("type") == "Ready":
            return cond.get("status")
    return "Unknown"


def wait_ready(name, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if node_ready(name) == "True":
            return True
        time.sleep(1)
    return False


def join(name):
    node = next(n for n in config.NODES if n["name"] == name)
    res = podman_exec(name, "sh", "-c", "DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
                      "hybridgpu-node-agent >/dev/null", timeout=180)
    assert res.returncode == 0, res.stderr
    labk8s.join_node(node, "onprem")
    assert wait_ready(name), "%s did not become Ready on onprem" % name
    st, body = labk8s.api("onprem", "PATCH", "/api/v1/nodes/" + name,
                          body={"metadata": {"labels": {RESTRICTED: "restricted",
                                                        "hybridgpu.io/side": "owned"}}})
    assert st == 200, body


def unjoin(name):
    podman_exec(name, "sh", "-c", "systemctl disable --now hybridgpu-node-agent.service; "
                "rm -rf /etc/hybridgpu/node-agent; DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "
                "hybridgpu-node-agent >/dev/null", timeout=120)
    labk8s.api("onprem", "DELETE", "/api/v1/namespaces/kube-system/secrets/node-%s-token" % name)
    labk8s.api("onprem", "DELETE", "/api/v1/nodes/" + name)
    labnodes.guard_member(next(n for n in config.NODES if n["name"] == name)["ip"], present=False)


@pytest.fixture(scope="module")
def joined(lab):
    """OWNED joined to onprem; only the nodes this fixture joined are returned to standalone."""
    mine = [n for n in OWNED if node_ready(n) != "True"]
    try:
        for name in mine:
            join(name)
        yield OWNED
    finally:
        for name in mine:
            unjoin(name)


@pytest.fixture
def records():
    path = tempfile.mkdtemp(prefix="hgpu-validate-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def playbook(records_dir, *extra, limit=None, tags=None, extra_vars=None):
    ev = {"validate_wave": "t", "hgpu_lab_records_dir": records_dir, "validate_matrix": MATRIX,
          "validate_nccl_baselines": BASELINES, "validate_hosts": "owned",
          "validate_fail_on_failed": True}
    ev.update(extra_vars or {})
    cmd = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "playbooks/validate.yml",
           "-e", json.dumps(ev), "--limit", limit or ",".join(OWNED)]
    if tags:
        cmd += ["--tags", tags]
    cmd += list(extra)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "tests", "lab", "ansible.cfg"),
               PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"])
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)


def record(records_dir, node):
    with open(os.path.join(records_dir, "validation", "t", "validate-%s.json" % node)) as fh:
        return json.load(fh)


def step(rec, name):
    return next(s for s in rec["steps"] if s["step"] == name)


@pytest.fixture
def gpu_spec():
    """Edit owned-a100-2's GPU spec faults from the host; restored afterwards."""
    path = config.path("nodes", FAULT_NODE, "gpu-spec.json")
    with open(path) as fh:
        original = fh.read()

    def set_faults(**faults):
        spec = json.loads(original)
        spec["faults"].update(faults)
        with open(path, "w") as fh:
            json.dump(spec, fh, indent=2)
    yield set_faults
    with open(path, "w") as fh:
        fh.write(original)


# -- the sequence passes -------------------------------------------------------------------

def test_sequence_passes_on_joined_owned_nodes(joined, records):
    res = playbook(records, extra_vars={"validate_steps": ["inventory", "reference_job",
                                                           "collectives", "placement"]})
    assert res.returncode == 0, res.stdout[-6000:]
    for node in OWNED:
        rec = record(records, node)
        assert rec["passed"], rec
        assert [s["step"] for s in rec["steps"]] == ["inventory", "reference_job", "collectives",
                                                     "placement"]
        ref = step(rec, "reference_job")
        assert ref["checksum_match"] and ref["owned"]["node"] == node
        assert ref["cloud"]["node"].startswith("cloud-h200-")
        coll = step(rec, "collectives")
        scopes = [r["scope"] for r in coll["runs"]]
        assert scopes == ["intra-node", "multi-node"]
        assert sorted(coll["runs"][1]["hosts"]) == sorted(OWNED)
        place = step(rec, "placement")
        runs = {(r["cluster"], r["restricted"]): r for r in place["runs"]}
        assert runs[("onprem", True)]["node"] == node
        assert runs[("cloud", True)]["node"] is None  # no cloud node carries the label


# -- each step fails for the right reason --------------------------------------------------

def test_wrong_gpu_count_fails_inventory(joined, records, gpu_spec):
    gpu_spec(hide_gpus=2)
    res = playbook(records, limit=FAULT_NODE, extra_vars={"validate_steps": ["inventory"]})
    assert res.returncode != 0
    inv = step(record(records, FAULT_NODE), "inventory")
    assert not inv["passed"]
    assert {"field": "gpu_count", "source": "ssh", "expected": 8, "observed": 6} in inv["differences"]
    assert "gpu_count (ssh): expected 8, observed 6" in res.stdout


# -- the GPU software stack (step 1) ---------------------------------------------------------

@pytest.fixture
def spec_stack():
    """Set keys of owned-a100-2's GPU spec `stack` section (stand-in overrides); restored afterwards."""
    path = config.path("nodes", FAULT_NODE, "gpu-spec.json")
    with open(path) as fh:
        original = fh.read()

    def set_stack(**values):
        spec = json.loads(original)
        spec.setdefault("stack", {}).update(values)
        with open(path, "w") as fh:
            json.dump(spec, fh, indent=2)
    yield set_stack
    with open(path, "w") as fh:
        fh.write(original)


def inventory_stack(records, node=FAULT_NODE):
    res = playbook(records, limit=node, extra_vars={"validate_steps": ["inventory"]})
    return res, step(record(records, node), "inventory")


def test_gpu_stack_complete_on_owned_nodes(joined, records):
    res = playbook(records, extra_vars={"validate_steps": ["inventory"]})
    assert res.returncode == 0, res.stdout[-6000:]
    for node in OWNED:
        stack = step(record(records, node), "inventory")["stack"]
        assert stack["passed"], stack["reasons"]
        checks = {c["piece"]: c for c in stack["checks"]}
        assert all(checks[p]["ok"] for p in ("driver module", "container toolkit", "containerd runtime",
                                             "fabric manager", "device plugin", "allocatable GPUs")), checks
        assert "nvidia-fabricmanager 535." in checks["fabric manager"]["detail"]  # 8x SXM: required
        assert "kube-system/nvidia-device-plugin-daemonset" in checks["device plugin"]["detail"]


def test_missing_container_toolkit_names_node_and_piece(joined, records):
    ssh(FAULT_NODE, "DEBIAN_FRONTEND=noninteractive apt-get remove -y -q nvidia-container-toolkit >/dev/null", timeout=120)
    try:
        res, inv = inventory_stack(records)
        assert res.returncode != 0
        assert inv["stack"]["missing"] == ["container toolkit"]
        assert "node %s: nvidia-container-toolkit not installed" % FAULT_NODE in res.stdout
    finally:
        ssh(FAULT_NODE, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q nvidia-container-toolkit >/dev/null",
            timeout=180)


def test_containerd_without_nvidia_runtime_names_node_and_piece(joined, records):
    ssh(FAULT_NODE, "cp /etc/containerd/config.toml /etc/containerd/config.toml.hgpu-test && "
                    "printf 'version = 2\\n' > /etc/containerd/config.toml")
    try:
        res, inv = inventory_stack(records)
        assert res.returncode != 0 and inv["stack"]["missing"] == ["containerd runtime"]
        assert "node %s: containerd has no nvidia runtime" % FAULT_NODE in res.stdout
    finally:
        ssh(FAULT_NODE, "mv /etc/containerd/config.toml.hgpu-test /etc/containerd/config.toml")


def test_wrong_fabricmanager_version_names_node_and_piece(joined, records, spec_stack):
    spec_stack(fabricmanager_version="535.216.01")
    res, inv = inventory_stack(records)
    assert res.returncode != 0 and inv["stack"]["missing"] == ["fabric manager"]
    assert ("node %s: nvidia-fabricmanager 535.216.01 does not match the driver 535." % FAULT_NODE) in res.stdout


def test_no_device_plugin_names_node_and_piece(joined, records):
    path = labk8s.DEVICE_PLUGIN_PATH + "/" + labk8s.DEVICE_PLUGIN["metadata"]["name"]
    st, body = labk8s.api("onprem", "DELETE", path)
    assert st in (200, 202), body
    try:
        res, inv = inventory_stack(records)
        assert res.returncode != 0 and inv["stack"]["missing"] == ["device plugin"]
        assert "node %s: cluster onprem: no NVIDIA device plugin DaemonSet" % FAULT_NODE in res.stdout
    finally:
        labk8s.ensure_device_plugin("onprem")


# The node's kubelet: kubeadm's kubelet.service on a node the wave joined, the lab agent on one
# this file's fixture joined.
RESTART_KUBELET = ("systemctl restart $(systemctl list-unit-files --no-legend --state=enabled kubelet.service "
                   "hybridgpu-node-agent.service | cut -d' ' -f1)")


def test_allocatable_below_gpu_count_names_node_and_piece(joined, records, gpu_spec):
    # The agent (device plugin's part in the lab) reads the GPUs when it starts: start it while
    # two GPUs are hidden, then show them again; nvidia-smi lists 8, the Node advertises 6.
    gpu_spec(hide_gpus=2)
    ssh(FAULT_NODE, RESTART_KUBELET)
    time.sleep(5)
    gpu_spec(hide_gpus=0)
    try:
        res, inv = inventory_stack(records)
        assert res.returncode != 0 and inv["stack"]["missing"] == ["allocatable GPUs"]
        assert "node %s: Node advertises nvidia.com/gpu allocatable 6, the node has 8 GPUs" % FAULT_NODE in res.stdout
    finally:
        ssh(FAULT_NODE, RESTART_KUBELET)
        assert wait_ready(FAULT_NODE, 60)


def test_reference_job_outside_tolerance_fails(joined, records):
    res = playbook(records, limit=FAULT_NODE, extra_vars={
        "validate_steps": ["reference_job"], "validate_reference_compare": "metric",
        "validate_reference_tolerance": 0.01,
        # a cloud run with fewer optimisation steps: a different loss, beyond 1 %
        "validate_reference_cloud_overrides": {"steps": 5}})
    assert res.returncode != 0
    ref = step(record(records, FAULT_NODE), "reference_job")
    assert not ref["passed"]
    assert any("above tolerance 0.01" in r for r in ref["reasons"]), ref["reasons"]
    assert any("input steps differs" in r for r in ref["reasons"])


def test_nccl_below_baseline_fails(joined, records, gpu_spec):
    gpu_spec(nccl_busbw_factor=0.5)
    res = playbook(records, limit=FAULT_NODE, extra_vars={"validate_steps": ["collectives"],
                                                          "validate_multinode_groups": []})
    assert res.returncode != 0
    coll = step(record(records, FAULT_NODE), "collectives")
    assert any("below baseline range" in r for r in coll["reasons"]), coll["reasons"]


def test_nccl_wrong_values_fail(joined, records, gpu_spec):
    gpu_spec(nccl_wrong=3)
    res = playbook(records, limit=FAULT_NODE, extra_vars={"validate_steps": ["collectives"],
                                                          "validate_multinode_groups": []})
    assert res.returncode != 0
    coll = step(record(records, FAULT_NODE), "collectives")
    assert "#wrong is 3 (must be 0)" in coll["reasons"]


def test_restricted_job_without_label_lands_on_cloud_node(joined, records):
    # The restricted job is submitted without its node-restriction selector (the missing
    # label): in the cloud cluster nothing keeps it off the cloud nodes.
    res = playbook(records, limit=FAULT_NODE, extra_vars={"validate_steps": ["placement"],
                                                          "validate_restricted_job_selector": {}})
    assert res.returncode != 0
    place = step(record(records, FAULT_NODE), "placement")
    assert any("in cluster cloud was scheduled on cloud node cloud-h200-" in r
               for r in place["reasons"]), place["reasons"]


# -- link interruption ----------------------------------------------------------------------

def nft_tables(name):
    return ssh(name, "nft list tables").stdout


def test_link_interruption_one_node_rejoins_and_one_never_does(joined, records, tmp_path):
    """Both owned nodes cut at once, as a wave does. On owned-a100-1 a transient timer stops the
    agent a few seconds into the cut (as if the node died), so restoring its link does not bring
    it back within its allowed time (8 s, a host variable): it fails, and owned-a100-2 passes."""
    dead = next(n for n in OWNED if n != FAULT_NODE)
    (tmp_path / "dead.yml").write_text(json.dumps({"all": {"hosts": {dead: {"validate_link_max_rejoin": 8}}}}))
    ssh(dead, "systemd-run --unit=hgpu-test-stop-agent --on-active=8 "
        "/bin/sh -c 'systemctl stop kubelet.service hybridgpu-node-agent.service; exit 0'")
    try:
        res = playbook(records, "-i", os.path.join(ROOT, "inventories", "lab", "hosts.yml"),
                       "-i", str(tmp_path / "dead.yml"), limit=",".join(OWNED), extra_vars={
                           "validate_steps": ["link_interruption"], "validate_link_nodes": OWNED})
        assert res.returncode != 0
        link = step(record(records, FAULT_NODE), "link_interruption")
        assert link["passed"], link["reasons"]
        assert link["job_continued"] and link["pod_node"] == FAULT_NODE
        assert link["not_ready_status"] == "Unknown"
        assert 0 < link["reported_after_s"] <= link["window_s"]
        # the window was sized from the grace period the cluster shows (its controller manager's pod)
        assert link["grace_period_s"] == 20.0, link
        assert link["grace_source"].startswith("kube-controller-manager-lab-control-plane:"), link
        assert link["window_s"] == 30
        assert link["rejoin_s"] is not None and link["rejoin_s"] < 15

        gone = step(record(records, dead), "link_interruption")
        assert not gone["passed"] and any("did not rejoin" in r for r in gone["reasons"]), gone["reasons"]
        assert gone["ready_again_at"] is None
    finally:
        ssh(dead, "systemctl stop hgpu-test-stop-agent.timer 2>/dev/null; "
            "systemctl reset-failed hgpu-test-stop-agent.service 2>/dev/null; "
            "systemctl start $(systemctl list-unit-files --no-legend --state=enabled kubelet.service "
            "hybridgpu-node-agent.service | cut -d' ' -f1)", check=False)
        assert wait_ready(dead, 60)
    assert all("hgpu_validate_cut" not in nft_tables(n) for n in OWNED)


# -- telemetry and alerts ------------------------------------------------------------------

EXPORTER = os.path.join(ROOT, "tests", "lab", "packages", "gpu-exporter", "hybridgpu-gpu-exporter.py")
TELEMETRY_NODES = [FAULT_NODE, "cloud-h200-1"]


def _exporter_up(name):
    node = next(n for n in config.NODES if n["name"] == name)
    return podman_exec(name, "python3", "-c", "import urllib.request;urllib.request.urlopen("
                       "'http://%s:9400/metrics', timeout=2)" % node["ip"]).returncode == 0


@pytest.fixture(scope="module")
def prometheus(lab):
    """The lab's Prometheus (tests/lab/telemetry/prom.py) and a GPU exporter on every node the
    test reads: nodes without one (cloud nodes are not onboarded by us) get the onboarding's
    exporter stand-in as a transient unit, stopped afterwards."""
    from telemetry import prom
    started = prom.start()
    mine = []
    try:
        for name in TELEMETRY_NODES:
            if _exporter_up(name):
                continue
            res = subprocess.run(["podman", "cp", EXPORTER, "%s:/usr/local/lib/hgpu-test-exporter.py" % name],
                                 capture_output=True, text=True, check=False)
            assert res.returncode == 0, res.stderr
            ssh(name, "systemd-run --unit=hgpu-test-gpu-exporter /usr/bin/python3 "
                "/usr/local/lib/hgpu-test-exporter.py --port 9400")
            mine.append(name)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            res = prom.query("/api/v1/query?query=up%7Bjob%3D%22gpu%22%7D")
            up = {r["metric"]["Hostname"] for r in res["data"]["result"] if r["value"][1] == "1"}
            if set(TELEMETRY_NODES) <= up:
                break
            time.sleep(1)
        yield prom.URL
    finally:
        for name in mine:
            ssh(name, "systemctl stop hgpu-test-gpu-exporter.service; "
                "rm -f /usr/local/lib/hgpu-test-exporter.py", check=False)
        if started:
            prom.stop()


def telemetry_run(records, url, **extra):
    ev = {"validate_steps": ["telemetry"], "validate_prometheus_url": url,
          "validate_fault_node": FAULT_NODE, "validate_cloud_node": "cloud-h200-1",
          "validate_alert_timeout": 30}
    ev.update(extra)
    return playbook(records, limit=FAULT_NODE, extra_vars=ev)


def test_telemetry_both_sides_and_xid_alert_fires(joined, records, prometheus):
    res = telemetry_run(records, prometheus)
    assert res.returncode == 0, res.stdout[-6000:]
    tel = step(record(records, FAULT_NODE), "telemetry")
    assert tel["passed"], tel["reasons"]
    assert {FAULT_NODE, "cloud-h200-1"} <= set(tel["gpu_metric_nodes"])
    assert FAULT_NODE in tel["existing_monitoring_nodes"]
    assert tel["fired"][0]["labels"]["alertname"] == "GPUXidError"
    spec_path = config.path("nodes", FAULT_NODE, "gpu-spec.json")
    with open(spec_path) as fh:
        assert json.load(fh)["faults"]["xid"] == []  # fault restored
    assert os.stat(spec_path).st_mode & 0o777 == 0o644  # still readable by the exporter


def test_missing_alert_fails(joined, records, prometheus):
    # An alert the rules do not define never fires: the step must say so.
    res = telemetry_run(records, prometheus, validate_prometheus_alert="GPUXidNotDefined",
                        validate_alert_timeout=6)
    assert res.returncode != 0
    tel = step(record(records, FAULT_NODE), "telemetry")
    assert tel["reasons"] == ["alert GPUXidNotDefined did not fire for %s" % FAULT_NODE]


def test_dcgm_diag_failure_names_node_and_test(joined, records, prometheus, gpu_spec):
    gpu_spec(dcgm_diag=[{"test": "Page Retirement/Row Remap", "gpu": 3,
                         "message": "GPU 3 has uncorrectable memory errors and row remappings are pending"}])
    res = telemetry_run(records, prometheus, validate_fault_node="")
    assert res.returncode != 0
    tel = step(record(records, FAULT_NODE), "telemetry")
    assert tel["dcgm_diag"]["state"] == "fail"
    assert any(r.startswith("DCGM diagnostic on node %s failed: Page Retirement/Row Remap" % FAULT_NODE)
               for r in tel["reasons"]), tel["reasons"]


def test_dcgm_diag_passes_at_level_1(joined, records, prometheus):
    res = telemetry_run(records, prometheus, validate_fault_node="")
    assert res.returncode == 0, res.stdout[-6000:]
    tel = step(record(records, FAULT_NODE), "telemetry")
    assert tel["dcgm_diag"]["state"] == "pass" and tel["dcgm_diag"]["overall"] == "Pass"


def test_logs_from_both_sides_found_in_each_nodes_journal(joined, records, prometheus):
    res = playbook(records, limit=FAULT_NODE, extra_vars={
        "validate_steps": ["reference_job", "telemetry"], "validate_prometheus_url": prometheus,
        "validate_fault_node": "", "validate_cloud_node": "cloud-h200-1"})
    assert res.returncode == 0, res.stdout[-6000:]
    logs = step(record(records, FAULT_NODE), "telemetry")["logs"]
    assert logs["state"] == "pass" and [r["node"] for r in logs["results"]] == [FAULT_NODE, "cloud-h200-1"]
    out = ssh("cloud-h200-1", "journalctl -t hgpu-validate -o cat --no-pager | tail -n 5").stdout
    assert "hgpu-validate-log t cloud cloud-h200-1 " in out


def test_missing_log_line_names_node_and_place(joined, records, prometheus):
    # The site says job logs go to a file nobody writes: both sides' lines are missing.
    res = playbook(records, limit=FAULT_NODE, extra_vars={
        "validate_steps": ["reference_job", "telemetry"], "validate_prometheus_url": prometheus,
        "validate_fault_node": "", "validate_cloud_node": "cloud-h200-1", "validate_log_source": "file",
        "validate_log_path": "/var/log/hgpu-no-such-log", "validate_log_timeout": 2})
    assert res.returncode != 0
    tel = step(record(records, FAULT_NODE), "telemetry")
    assert tel["logs"]["state"] == "fail"
    assert ("log line of the reference job on cloud node cloud-h200-1 not found in /var/log/hgpu-no-such-log "
            "on cloud-h200-1") in " ".join(tel["reasons"])


# -- baseline and wave record ------------------------------------------------------------------

def test_baseline_run_writes_group_files(joined, records):
    res = playbook(records, tags="baseline", extra_vars={"validate_baseline_runs": 2})
    assert res.returncode == 0, res.stdout[-6000:]
    for name in ("ng_a100_535", "ng_a100_535-multinode"):
        with open(os.path.join(records, "baselines", name + ".json")) as fh:
            base = json.load(fh)
        assert base["node_group"] == name and len(base["measured"]) == 4  # 2 runs x 2 nodes
        assert 0 < base["low"] < min(base["measured"]) <= max(base["measured"]) < base["high"]
    # validation then reads the files (no declared baselines)
    res = playbook(records, extra_vars={"validate_steps": ["collectives"], "validate_nccl_baselines": {}})
    assert res.returncode == 0, res.stdout[-6000:]
    coll = step(record(records, OWNED[0]), "collectives")
    assert coll["passed"] and coll["runs"][0]["baseline"]["node_group"] == "ng_a100_535"


def test_wave_record_links_node_records(joined, records):
    res = playbook(records, extra_vars={"validate_steps": ["inventory"], "validate_wave": "wave1"})
    assert res.returncode == 0, res.stdout[-6000:]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "tests", "lab", "ansible.cfg"),
               PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"])
    cmd = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "playbooks/wave_record.yml",
           "-e", json.dumps({"wave": "wave1", "hgpu_lab_records_dir": records})]
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    folder = os.path.join(records, "validation", "wave1")
    with open(os.path.join(folder, "wave.json")) as fh:
        wave = json.load(fh)
    # owned-l40s-1 is in wave1 but was not validated here, and no preflight ran: the wave fails
    # and says why, while the validated nodes are linked with their verdicts
    assert res.returncode != 0
    nodes = {n["node"]: n for n in wave["nodes"]}
    assert set(OWNED) <= set(nodes) and all(nodes[n]["passed"] for n in OWNED)
    assert "owned-l40s-1" in wave["stages"]["validate"]["detail"]
    assert wave["stages"]["preflight"]["status"] == "failed"
    with open(os.path.join(folder, "wave.html")) as fh:
        page = fh.read()
    for node in OWNED:
        assert '<a href="validate-%s.json">' % node in page


def test_inventory_reads_the_matrix_from_the_preflight_record(joined, records):
    # No declared matrix: the expected values come from the wave's preflight record (the
    # shape preflight.yml writes: details.matrix.rows[].{nodes, values}).
    folder = os.path.join(records, "t")
    os.makedirs(folder)
    rows = [{"id": "a100-535", "side": "owned", "nodes": list(OWNED),
             "values": dict(MATRIX["a100-535"], gpu_count=4)},  # the matrix says 4: mismatch
            {"id": "cloud-h200-570", "side": "cloud", "nodes": None, "values": {}}]
    with open(os.path.join(folder, "preflight.json"), "w") as fh:
        json.dump({"details": {"matrix": {"rows": rows}}}, fh)
    res = playbook(records, limit=OWNED[0], extra_vars={"validate_steps": ["inventory"],
                                                        "validate_matrix": {}})
    assert res.returncode != 0
    inv = step(record(records, OWNED[0]), "inventory")
    assert inv["expected"]["gpu_count"] == 4
    assert {"field": "gpu_count", "source": "ssh", "expected": 4, "observed": 8} in inv["differences"]
    assert {"field": "label nvidia.com/gpu.count", "source": "api", "expected": "4",
            "observed": "8"} in inv["differences"]
