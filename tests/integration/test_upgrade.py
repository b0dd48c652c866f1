"""Driver-upgrade rehearsal of owned-a100-2 against the lab: refused change records
stop before any change; a signed record moves the node from the 535 to the 550 lab driver
through a real apt transaction with holds. A process left holding /dev/nvidia0 keeps the old
module loaded, so the node reboots (its container restarts with every unit in it; the host
firewall comes back from its boot unit), and the six validation steps pass afterwards. A Job
sleeping on owned-a100-1 keeps running, and the record says how long the node was out and why
it rebooted. A tampered line of the audit log that run wrote is caught by bin/hgpu-audit-verify.
The node is put back on 535 (held), Ready and uncordoned at the end."""
import datetime
import json
import os
import subprocess
import time

import pytest

from conftest import ROOT, ssh
from lifecycle_lab import approvers, kube, lab_lock, node_state, playbook, signed_record  # noqa: F401  pylint: disable=unused-import

pytestmark = pytest.mark.lab

NODE = "owned-a100-2"
OTHER = "owned-a100-1"
NS = "hgpu-upgrade-test"
JOB = "long-sleep"
MATRIX = {"a100-535": {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_count": 8, "gpu_memory_mib": 81920}}
PIN_535 = "nvidia-driver-535=535.230.02-1 nvidia-fabricmanager-535=535.230.02-1"
BASELINES = {"ng_a100_535": {"low": 170.0, "high": 220.0},
             "ng_a100_535-multinode": {"low": 170.0, "high": 225.0}}
HOLDER = "hgpu-test-gpu-holder"
BOOT_TIME = "cut -d' ' -f22 /proc/1/stat"


def driver(name=NODE):
    return ssh(name, "nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1").stdout.strip()


def put_back_535():
    """Unhold, install the branch's first 535 release, hold it again, load its module and
    restart the kubelet so the Node's driver label follows."""
    if driver().startswith("535.") and "nvidia-driver-535" in ssh(NODE, "apt-mark showhold").stdout:
        return
    ssh(NODE, "systemctl stop %s 2>/dev/null; apt-mark unhold 'nvidia-driver-*' >/dev/null; "
              "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades %s >/dev/null && "
              "apt-mark hold nvidia-driver-535 && "
              "modprobe -r nvidia_drm nvidia_modeset nvidia_uvm nvidia && modprobe nvidia && "
              "(systemctl try-restart kubelet hybridgpu-node-agent || true)"
        % (HOLDER, PIN_535), timeout=180)
    assert driver().startswith("535."), driver()


def wait_in_service(timeout=90):
    """Ready, uncordoned and labelled with the 535 branch."""
    k = kube()
    deadline = time.monotonic() + timeout
    while True:
        node = k.get_node(NODE)
        if node and node["spec"].get("unschedulable"):
            k.patch_node(NODE, {"spec": {"unschedulable": None}}, patch_type="merge")
            continue
        ready = [c["status"] for c in (node or {}).get("status", {}).get("conditions", []) if c["type"] == "Ready"]
        label = (node or {}).get("metadata", {}).get("labels", {}).get("nvidia.com/cuda.driver.major")
        if ready == ["True"] and label == "535":
            return node
        assert time.monotonic() < deadline, "%s not back in service: ready=%s label=%s" % (NODE, ready, label)
        time.sleep(2)


def job_state():
    pods = kube().list_pods(NS, label_selector="job-name=" + JOB)
    job = kube().get_job(NS, JOB) or {}
    return {"pods": sorted((p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"))
                           for p in pods),
            "active": job.get("status", {}).get("active"), "failed": job.get("status", {}).get("failed"),
            "succeeded": job.get("status", {}).get("succeeded")}


@pytest.fixture(scope="module")
def setup(lab_lock, tmp_path_factory):
    # preconditions re-checked under the lock
    for name in (NODE, OTHER):
        node = kube().get_node(name)
        assert node is not None, "%s must be joined to onprem (onboard.yml)" % name
    put_back_535()
    wait_in_service()
    tmp = tmp_path_factory.mktemp("upgrade")
    k = kube()
    k.ensure_namespace(NS)
    if k.get_job(NS, JOB):
        k.delete_job(NS, JOB)
        time.sleep(3)
    k.create_job(NS, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": JOB, "namespace": NS},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": OTHER},
            "tolerations": [{"key": "hybridgpu.io/owned", "operator": "Exists"}],
            "containers": [{"name": "sleep", "image": "docker.io/library/busybox:1.36",
                            "command": ["sleep", "1800"]}]}}}})
    deadline = time.monotonic() + 60
    while not any(p[2] == "Running" for p in job_state()["pods"]):
        assert time.monotonic() < deadline, job_state()
        time.sleep(2)
    # The node was validated under the current matrix (same preflight digest in its last validation
    # record), so the rehearsal does not validate it again before the change.
    digest = "ab" * 32
    (tmp / "records" / "wave1").mkdir(parents=True)
    (tmp / "records" / "wave1" / "preflight.json").write_text(json.dumps({"verdicts_digest": digest}))
    (tmp / "records" / "validation" / "wave1").mkdir(parents=True)
    (tmp / "records" / "validation" / "wave1" / ("validate-%s.json" % NODE)).write_text(
        json.dumps({"node": NODE, "run": {"preflight_digest": digest}}))
    yield {"tmp": tmp, "appr": approvers(tmp / "appr"), "rec": str(tmp / "records")}
    # leave the lab as found: 535 held, Ready, uncordoned; the test Job gone
    try:
        k.delete_job(NS, JOB)
    finally:
        put_back_535()
        wait_in_service()


def upgrade(setup, record):
    # Step 5 reads the lab's Prometheus; step 3 compares with the declared baselines.
    ev = {"upgrade_target": NODE, "upgrade_executor": "ops-oncall",
          "change_record_path": record, "upgrade_validate_matrix": MATRIX,
          "upgrade_preflight_record": os.path.join(setup["rec"], "wave1", "preflight.json"),
          "validate_prometheus_url": "http://127.0.0.1:9090", "validate_nccl_baselines": BASELINES}
    return playbook("upgrade_rehearsal.yml", extra=ev, tmp_path=setup["tmp"],
                    site={"hgpu_boundary_path": setup["appr"]["boundary"], "hgpu_records_dir": setup["rec"]})


@pytest.mark.parametrize("case", ["unsigned", "expired", "wrong_target"])
def test_refused_record_changes_nothing(setup, case):
    now = datetime.datetime.now(datetime.timezone.utc)
    kw = dict(change_id="CHG-UP-BAD-" + case, action="driver_upgrade", targets=[NODE],
              requester="ops-oncall")
    signer = "ops-lead"
    if case == "unsigned":
        signer = None
    elif case == "expired":
        kw.update(start=now - datetime.timedelta(hours=3), end=now - datetime.timedelta(hours=1))
    else:
        kw.update(targets=[OTHER])
    record = signed_record(setup["appr"], setup["tmp"], "bad-%s.yml" % case, signer=signer, **kw)
    before = node_state(NODE)
    res = upgrade(setup, record)
    assert res.returncode != 0
    assert "Verify the signed change record" in res.out
    expect = {"unsigned": "signature", "expired": "window", "wrong_target": NODE}[case]
    assert expect in res.out, res.out[-3000:]
    assert node_state(NODE) == before
    assert driver().startswith("535.")
    assert not os.path.exists(os.path.join(setup["rec"], "upgrades"))
    assert not os.path.exists(os.path.join(setup["rec"], "audit", "audit.jsonl"))


def test_rehearsal_moves_535_to_550(setup):
    # a change replaces a node's driver once (the node remembers it), so each run has its own
    change = "CHG-UP-LAB-%d" % int(time.time())
    record = signed_record(setup["appr"], setup["tmp"], "chg-up.yml", signer="ops-lead",
                           change_id=change, action="driver_upgrade", targets=[NODE],
                           requester="ops-oncall")
    jobs_before = job_state()
    # A process that did not leave with the drain keeps /dev/nvidia0 open: the old module
    # cannot be unloaded, so only a reboot loads the new one.
    ssh(NODE, "systemctl stop %s 2>/dev/null; systemd-run --unit %s sh -c 'exec sleep infinity < /dev/nvidia0'"
        % (HOLDER, HOLDER))
    booted = ssh(NODE, BOOT_TIME).stdout.strip()
    res = upgrade(setup, record)
    assert res.returncode == 0, res.out[-6000:]

    # the node rebooted: PID 1 started again, the holder is gone, the firewall came back at boot
    assert ssh(NODE, BOOT_TIME).stdout.strip() != booted, "the node did not reboot"
    assert ssh(NODE, "systemctl is-active %s" % HOLDER, check=False).stdout.strip() != "active"
    assert ssh(NODE, "systemctl is-active hybridgpu-nft-hybridgpu.service").stdout.strip() == "active"
    assert "policy drop" in ssh(NODE, "nft list table inet hybridgpu").stdout

    # the node: 550 installed and held, nvidia-smi answers 550, back in service with the label
    assert driver().startswith("550."), driver()
    pkgs = ssh(NODE, "dpkg-query -W -f='${Package} ${db:Status-Abbrev}\\n' 'nvidia-driver-*' | grep -v ' un'").stdout
    assert "nvidia-driver-550 hi" in pkgs and "nvidia-driver-535 ii" not in pkgs, pkgs
    assert ssh(NODE, "apt-mark showhold").stdout.split() == ["nvidia-driver-550"]
    # the fabric manager moved with the driver (NVSwitch board): same branch, same release
    fm = ssh(NODE, "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' 'nvidia-fabricmanager-*' | grep -v ' un'").stdout
    assert fm.split()[:2] == ["nvidia-fabricmanager-550", ssh(NODE, "dpkg-query -W -f='${Version}' nvidia-driver-550").stdout], fm
    node = kube().get_node(NODE)
    assert not node["spec"].get("unschedulable")
    assert node["metadata"]["labels"]["nvidia.com/cuda.driver.major"] == "550"

    # the Job on the other node kept running: same pod, still Running, still active
    jobs_after = job_state()
    assert jobs_after == jobs_before, (jobs_before, jobs_after)
    assert jobs_after["pods"][0][1:] == (OTHER, "Running") and jobs_after["active"] == 1

    # the record
    path = os.path.join(setup["rec"], "upgrades", "upgrade-%s-%s.json" % (NODE, change))
    rec = json.load(open(path))
    assert rec["approved_by"] == "ops-lead" and rec["executed_by"] == "ops-oncall"
    assert rec["change_id"] == change
    assert rec["driver_before"]["driver_version"].startswith("535.")
    assert rec["driver_after"]["driver_version"].startswith("550.")
    assert 0 < float(rec["out_of_service_s"]) < 600
    assert rec["left_service_at"] <= rec["reentered_service_at"]
    assert rec["validation"]["passed"] is True, rec["validation"]
    six = {"inventory", "reference_job", "collectives", "placement", "telemetry", "link_interruption"}
    assert {s["step"] for s in rec["validation"]["steps"]} == six
    act = rec["module_activation"]
    assert act["how"] == "reboot", act
    assert [h["unit"] for h in act["holders"]] == [HOLDER + ".service"] and "/dev/nvidia0" in act["holders"][0]["files"]
    assert "in use by pid" in act["reason"] and "version mismatch" in act["reason"], act
    assert rec["other_nodes_affected"] is False, rec["other_workloads"]
    assert rec["node_state_after"] == "in service"

    # the real audit log that run wrote: intact, then one line changed in place is caught
    log = os.path.join(setup["rec"], "audit", "audit.jsonl")
    verify = os.path.join(ROOT, "bin", "hgpu-audit-verify")
    ok = subprocess.run([verify, log], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    text = open(log).read()
    lines = text.splitlines()
    actions = [json.loads(x)["action"] for x in lines]
    for action in ("approval", "cordon", "drain", "driver_upgrade", "reboot", "uncordon", "validate"):
        assert action in actions, actions
    n = actions.index("driver_upgrade")
    entry = json.loads(lines[n])
    entry["executor"] = "mallory"
    lines[n] = json.dumps(entry, sort_keys=True)
    with open(log, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    try:
        caught = subprocess.run([verify, log], capture_output=True, text=True, check=False)
        assert caught.returncode == 1
        assert "line %d" % (n + 1) in caught.stdout + caught.stderr, caught.stdout + caught.stderr
    finally:
        with open(log, "w") as fh:
            fh.write(text)
    journal = ssh(NODE, "journalctl -t hybridgpu-audit --no-pager -o cat | grep " + change).stdout
    assert "driver_upgrade" in journal and "uncordon" in journal


def test_lab_up_puts_a_rehearsed_driver_back(setup):
    """`lab up` after the rehearsal (550 installed and held, as `make demo` leaves the node) brings
    the node back to the lab's declared 535 release in place, so `make test` can follow `make demo`."""
    from conftest import UP, lab_cmd
    assert driver().startswith("550."), "test_rehearsal_moves_535_to_550 must leave 550 first, got " + driver()
    res = lab_cmd(*UP)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "%s: driver was nvidia-driver-550" % NODE in res.stdout + res.stderr, res.stdout[-3000:]
    assert driver().startswith("535."), driver()
    pkgs = ssh(NODE, "dpkg-query -W -f='${Package} ${db:Status-Abbrev}\\n' 'nvidia-driver-*' | grep -v ' un'").stdout
    assert pkgs.split() == ["nvidia-driver-535", "hi"], pkgs
    wait_in_service()
