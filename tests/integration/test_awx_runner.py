"""The AWX job templates, workflows and schedules of awx/, run against the lab the way AWX runs
them: ansible-runner with process isolation in the execution environment image (built by
test_ee.py's build from execution-environment.yml), the lab inventory synced as AWX syncs it,
survey answers and prompts by AWX's rules, the credentials injected as AWX injects them
(tests/integration/awx_runner.py says which rules it follows).

What the AWX administrator sets on the inventory (not what the lab's own files say):
- the synced inventory loses ansible_user, ansible_ssh_private_key_file and hgpu_kubeconfig, so
  SSH goes through the Machine credential (the lab key through ssh-agent, user root) and the
  Kubernetes tasks through the kubeconfig credential (a file named by K8S_AUTH_KUBECONFIG);
- hgpu_site_dir names the project's inventories/lab where the job's container holds the
  project (/runner/project), as awx/controller.yml sets it for the example: under AWX,
  inventory_dir is the job's own inventory folder, which holds none of the site's files;
- records live on a persistent path bind-mounted into every job's container at the same path
  (build/awx-runner/records), as an AWX site mounts shared storage into its execution nodes.
The lab's own files that its inventory names (.lab: kubeconfig, CA, lab keys, known_hosts, the
pinned boundary signer; tests/lab: job classes, the drill script) are mounted read-only at
their own paths, as a site bakes its equivalents into the EE or mounts them.

In make test (a few minutes with the EE image built, about one more to build it): smoke (one
node), preflight -> report with set_stats and records across jobs, the overflow check twice (its
tracker survives), the overflow history and warm-shared templates, the scheduled wave workflow with
a failing first node, the three approval workflows refused for an unsigned and a foreign-signed
record, the member revocation released by a signed record, the whole wave workflow (preflight ->
NCCL baseline -> onboard -> validate -> report) from the EE's installed copy, the driver upgrade
and the removal released by signed records (the wave template bringing the removed node back), the
operator's overflow move of a real Slurm job and the safe overflow drills chosen in the survey.
Marked long (make integration-long): onboard / validate / wave on one node (their templates run
in make test inside the workflows and after the removal), every overflow drill (the unsafe ones
through the lab's drill script).
"""
import datetime
import glob
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import ROOT, ssh
from lablib import config
from lablib.nodes import key_path
import lifecycle_lab
import test_boundary_revocation as revocation
import test_overflow
import test_upgrade as upgrade_lab
from lifecycle_lab import approvers
from test_boundary_revocation import CLUSTERS, NODE as MEMBER_NODE, member_ssh, objects_left

import awx_runner as ar

pytestmark = pytest.mark.lab

WORK = os.path.join(ROOT, "build", "awx-runner")
RECORDS = os.path.join(WORK, "records")
sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "lifecycle"))
import lifecycle_support as ls  # noqa: E402

SIGN = os.path.join(ROOT, "bin", "hgpu-sign-change")
NODE = "owned-a100-1"
DROP = ["ansible_user", "ansible_ssh_private_key_file", "hgpu_kubeconfig"]
# The lab machine stands in for the API's load balancer (api-front, a local connection). A job's
# container cannot manage the machine it runs on, and a site reaches its guard hosts over SSH, so
# the AWX inventory leaves it out: no guard hosts, onboarding keeps the members the lab has.
DROP_HOSTS = ["api-front"]

# Fixtures shared with the lifecycle tests: the destructive-test lock, and the revocation test's
# member (objects in both clusters and a login key on a node, listed in a signed boundary).
lab_lock = lifecycle_lab.lab_lock
member = revocation.member
# The upgrade test's node on 535 in service with a Job on its neighbour (put back on 535 after).
setup = upgrade_lab.setup
# The Slurm controller and the cloud storage host, made idempotently.
overflow_lab = test_overflow.overflow_lab


@pytest.fixture(scope="module", autouse=True)
def fresh_site_records():
    """Every run of this module is a new AWX site: its persistent records path starts empty, or a
    second `make test` would find the first run's baselines, ledger entries and records there."""
    shutil.rmtree(RECORDS, ignore_errors=True)
    os.makedirs(RECORDS)


@pytest.fixture(scope="module")
def ee(lab):
    """The EE image: HGPU_EE_IMAGE when given, else built from this checkout by test_ee.py's build
    (podman's layer cache makes it quick when only the collection changed)."""
    if os.environ.get("HGPU_EE_IMAGE"):
        return os.environ["HGPU_EE_IMAGE"]
    import test_ee
    return test_ee.build_ee_image()


def credentials(ssh_key=None):
    with open(ssh_key or key_path()) as fh:
        key = fh.read()
    with open(os.path.join(config.LAB_DIR, "k8s", "kubeconfig")) as fh:
        kubeconfig = fh.read()
    defs = ar.Definitions(os.path.join(ROOT, "awx"))
    names = defs.data["awx_credentials"]
    return {names["machine"]: ar.Credential(names["machine"], "ssh", username="root", ssh_key_data=key),
            names["kubeconfig"]: ar.Credential(names["kubeconfig"], "Kubeconfig file", kubeconfig=kubeconfig)}


def make_site(ee, work, user="ops-lead", ssh_key=None, mounts=(), boundary=None, definitions=None):
    os.makedirs(RECORDS, exist_ok=True)
    # The execution node's network and raw sockets, as docs/awx.md tells a site to set AWX's
    # DEFAULT_CONTAINER_RUN_OPTIONS: preflight binds its time responder to the control address.
    opts = ["--network", "host", "--cap-add", "NET_RAW"]
    for path, mode in [(config.LAB_DIR, "ro"), (config.LAB_SRC, "ro"),
                       (os.path.join(ROOT, "inventories", "lab"), "ro"), (RECORDS, "rw")] + [(m, "ro") for m in mounts]:
        opts += ["-v", "%s:%s:%s" % (path, path, mode)]
    site = ar.Site(definitions or ar.Definitions(os.path.join(ROOT, "awx")), ROOT, config.INVENTORY,
                   credentials(ssh_key), str(work), ee_image=ee, container_options=opts, user=user,
                   inventory_drop_vars=DROP, inventory_drop_hosts=DROP_HOSTS,
                   project_files=["ansible.cfg", "playbooks", "awx", "inventories"],
                   timeout=1800)
    # The AWX inventory's own variables (awx/controller.yml): the site folder where the job's
    # container holds the project, and the records on the persistent path.
    extra = {"hgpu_boundary_path": boundary} if boundary else {}
    site.set_inventory_vars(hgpu_lab_records_dir=RECORDS, hgpu_site_dir="/runner/project/inventories/lab", **extra)
    return site


@pytest.fixture(scope="module")
def site(ee, tmp_path_factory):
    return make_site(ee, tmp_path_factory.mktemp("awx-jobs"))


def ran_in_the_ee(job, ee):
    with open(os.path.join(job.private_data_dir, "artifacts", job.ident, "command")) as fh:
        command = json.load(fh)["command"]
    return command[0].endswith("podman") and ee in command


def out(job):
    return job.stdout[-6000:] if job is not None else "(no job started)"


# --- plain jobs ----------------------------------------------------------------------------

def test_smoke_runs_in_the_ee_with_the_injected_credentials(site, ee):
    inv = site._inventory
    hostvars = inv["_meta"]["hostvars"][NODE]
    assert not set(DROP) & set(hostvars) and not set(DROP) & set(inv["all"].get("vars", {}))
    job = site.launch_job("hybridgpu smoke", limit=NODE)
    assert job.status == "successful", out(job)
    assert ran_in_the_ee(job, ee)
    assert set(h for h in job.recap() if h != "localhost") == {NODE}, job.recap()
    assert job.env["K8S_AUTH_KUBECONFIG"].startswith("/runner/env/"), job.env
    assert "-u root" in " ".join(job.args)


def test_preflight_hands_its_results_to_the_report_and_records_outlive_the_jobs(site):
    """Preflight and the report run in two containers; the report reads preflight's records from
    the persistent path and gets hgpu_preflight as extra vars from preflight's set_stats. Without
    the onboard and validate steps the wave record fails those stages (and the report job fails
    on them), but its preflight stage passes on the record the first container left."""
    steps = {s["identifier"]: s for s in site.defs.data["awx_wave_steps"]}
    site.defs.workflows["wave1 preflight and report"] = {
        "name": "wave1 preflight and report", "limit": "wave1", "workflow_nodes": [
            {"identifier": "preflight",
             "unified_job_template": {"name": steps["preflight"]["template"], "type": "job_template"},
             "related": {"success_nodes": [{"identifier": "report"}]}},
            {"identifier": "report",
             "unified_job_template": {"name": steps["report"]["template"], "type": "job_template"},
             "extra_data": {steps["report"]["wave_var"]: "wave1"}}]}
    wave_json = os.path.join(RECORDS, "validation", "wave1", "wave.json")
    if os.path.exists(wave_json):
        os.unlink(wave_json)
    run = site.launch_workflow("wave1 preflight and report")
    pre = run.nodes["preflight"].job
    assert pre.status == "successful" and run.order == ["preflight", "report"], (run.order, out(pre))
    handed = pre.artifacts["hgpu_preflight"]["wave1"]
    assert {"records", "digest", "boundary"} <= set(handed), handed
    report = run.nodes["report"].job
    assert report.extra_vars["hgpu_preflight"] == pre.artifacts["hgpu_preflight"]
    assert report.limit == "wave1" and report.extra_vars["wave"] == "wave1"
    with open(wave_json) as fh:
        record = json.load(fh)
    assert record["stages"]["preflight"]["status"] == "passed", record["stages"]
    assert record["stages"]["onboard"]["status"] == "failed", "nothing was onboarded in this run"
    assert run.nodes["report"].status == "failed" and run.status == "failed", out(report)
    assert os.path.isdir(os.path.join(RECORDS, "wave1")), "preflight's records are not on the shared path"


def _tracker_rows(path):
    con = sqlite3.connect(path)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: con.execute('SELECT COUNT(*) FROM "%s"' % t).fetchone()[0] for t in tables}
    finally:
        con.close()


def test_overflow_state_survives_between_runs(site, overflow_lab):
    tracker = os.path.join(RECORDS, "overflow", "tracker.db")
    first = site.launch_job("hybridgpu overflow policy check")
    assert first.status == "successful", out(first)
    assert os.path.exists(tracker), "the tracker must be on the persistent path, not in the job's container"
    inode, rows = os.stat(tracker).st_ino, _tracker_rows(tracker)
    second = site.launch_job("hybridgpu overflow policy check")
    assert second.status == "successful", out(second)
    assert os.stat(tracker).st_ino == inode, "the second run started a new tracker"
    after = _tracker_rows(tracker)
    assert set(rows) <= set(after) and all(after[t] >= n for t, n in rows.items()), (rows, after)


def test_overflow_history_and_warm_shared_run(site, overflow_lab):
    before = set(glob.glob(os.path.join(RECORDS, "overflow-history", "*.json")))
    job = site.launch_job("hybridgpu overflow history", extra_vars={"overflow_history_source": "kubernetes"})
    assert job.status == "successful", out(job)
    assert set(glob.glob(os.path.join(RECORDS, "overflow-history", "*.json"))) - before
    # The shared datasets are the site's: the administrator names them on the AWX inventory, on a
    # path every job's container mounts (here the persistent records path).
    shared = os.path.join(RECORDS, "datasets", "awx-shared.bin")
    os.makedirs(os.path.dirname(shared), exist_ok=True)
    with open(shared, "wb") as fh:
        fh.write(os.urandom(200_000))
    site.set_inventory_vars(hgpu_overflow_shared_datasets=[{"name": "awx-shared.bin", "path": shared}])
    try:
        first = site.launch_job("hybridgpu overflow warm shared datasets")
        assert first.status == "successful", out(first)
        # Sent when absent from the store, refreshed when an earlier run left other bytes there.
        assert re.search(r"awx-shared.bin: (sent|refreshed), 200000 bytes", first.stdout), out(first)
        again = site.launch_job("hybridgpu overflow warm shared datasets")
        assert again.status == "successful", out(again)
        assert "awx-shared.bin: warm" in again.stdout, out(again)
    finally:
        site._inventory["all"]["vars"].pop("hgpu_overflow_shared_datasets", None)


# --- schedules and a failing node ----------------------------------------------------------

def test_the_wave_schedule_launches_its_workflow_and_a_failed_node_stops_it(ee, tmp_path):
    """The wave1 schedule at its next window launches the wave1 workflow (limit wave1, no user);
    with a Machine credential whose key the nodes refuse, preflight fails and, the workflow
    having no failure edges, nothing runs after it."""
    bad_key = str(tmp_path / "not-the-lab-key")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", bad_key], check=True)
    site = make_site(ee, tmp_path / "jobs", ssh_key=bad_key)
    name = next(s["name"] for s in site.defs.schedules.values() if s["unified_job_template"] == "hybridgpu wave1")
    now = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.timezone.utc)  # a Tuesday
    run = site.launch_schedule(name, now=now)
    assert run.scheduled_for == datetime.datetime(2026, 12, 7, 22, 0, tzinfo=datetime.timezone.utc)
    first = run.nodes["preflight"].job
    assert first.limit == "wave1" and first.extra_vars["awx_schedule_name"] == name
    assert "awx_user_name" not in first.extra_vars
    assert run.order == ["preflight"] and run.nodes["preflight"].status == "failed", out(first)
    assert run.skipped == ["baseline", "onboard", "report", "validate"] and run.status == "failed"
    assert any(c.get("dark") for c in first.recap().values()), "the nodes must refuse the wrong key"


# --- approvals -----------------------------------------------------------------------------

def approver(appr, tmp_path):
    """The approver's check before clicking Approve: the survey's record verifies against the
    boundary's approvers (bin/hgpu-sign-change verify). Returns the callback and its answers."""
    answers = []

    def check(node, wf_vars):
        path = str(tmp_path / ("approve-%d.yml" % len(answers)))
        with open(path, "w") as fh:
            fh.write(wf_vars["change_record"])
        with open(path + ".sig", "w") as fh:
            fh.write(wf_vars["change_signature"])
        res = subprocess.run([sys.executable, SIGN, "verify", path, "--boundary", appr["boundary"],
                              "--signers", appr["signers_file"]], capture_output=True, text=True, check=False)
        answers.append(res)
        return res.returncode == 0
    check.answers = answers
    return check


def record_answers(appr, tmp_path, name, signer, **kw):
    """change_record and change_signature as pasted into the survey (signer None: no signature;
    a key path: signed by that key)."""
    text = ls.record_text(**kw)
    path = ls.write_record(str(tmp_path), name, text, appr["keys"].get(signer, signer) if signer else None)
    sig = open(path + ".sig").read() if signer else "-----BEGIN SSH SIGNATURE-----\nnone\n-----END SSH SIGNATURE-----\n"
    return {"change_record": text, "change_signature": sig}


APPROVAL_CASES = {
    "hybridgpu removal (approved)": dict(action="remove", targets=["owned-a100-2"], answers={"remove_targets": "owned-a100-2"}),
    "hybridgpu driver upgrade rehearsal (approved)": dict(action="driver_upgrade", targets=["owned-a100-2"],
                                                          answers={"upgrade_target": "owned-a100-2"}),
    "hybridgpu member revocation (approved)": dict(action="revoke_member", targets=[NODE], member="test-member",
                                                   answers={"revoke_member": "test-member", "revoke_hosts": NODE}),
}


@pytest.mark.parametrize("workflow", sorted(APPROVAL_CASES))
@pytest.mark.parametrize("signed_by", ["nobody", "a stranger"])
def test_an_unsigned_or_foreign_record_is_not_approved(site, tmp_path, workflow, signed_by):
    case = APPROVAL_CASES[workflow]
    appr = approvers(tmp_path / "appr")
    with pytest.raises(ar.LaunchError) as err:
        site.launch_workflow(workflow, extra_vars=dict(case["answers"]))
    assert "'change_record' value missing" in str(err.value)
    signer = None
    if signed_by == "a stranger":
        signer = str(tmp_path / "stranger")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", signer], check=True)
    kw = {k: v for k, v in case.items() if k != "answers"}
    answers = dict(case["answers"], **record_answers(appr, tmp_path, "chg.yml", signer, change_id="CHG-AWX-NO",
                                                     requester="ops-lead", **kw))
    check = approver(appr, tmp_path)
    jobs = len(site.jobs)
    run = site.launch_workflow(workflow, extra_vars=answers, approve=check)
    assert check.answers and check.answers[0].returncode != 0 and "signature" in check.answers[0].stderr
    assert run.nodes["approve"].approval == "denied" and run.order == ["approve"] and len(run.skipped) == 1
    assert run.status == "failed" and len(site.jobs) == jobs, "a denied approval must start no job"


def test_a_signed_record_releases_the_member_revocation(ee, member, tmp_path):
    """The approval workflow in front of revoke_member.yml: the approver verifies the signed
    record and approves; the job (launched by ops-lead, the executor) verifies it again and revokes
    what the signed boundary lists for the member."""
    appr = member["appr"]
    site = make_site(ee, tmp_path / "jobs", user="ops-lead", mounts=[str(member["tmp"])], boundary=appr["boundary"])
    change = "CHG-AWX-REVOKE-%d" % int(time.time())
    answers = dict(APPROVAL_CASES["hybridgpu member revocation (approved)"]["answers"],
                   **record_answers(appr, member["tmp"], "awx-revoke.yml", "sec-owner", change_id=change,
                                    action="revoke_member", member="test-member", targets=[MEMBER_NODE],
                                    requester="ops-lead", reason="member left"))
    answers["revoke_hosts"] = MEMBER_NODE
    for c in CLUSTERS:
        assert objects_left(c) == ["sa", "token secret", "crb"]
    check = approver(appr, tmp_path)
    run = site.launch_workflow("hybridgpu member revocation (approved)", extra_vars=answers, approve=check)
    assert check.answers[0].returncode == 0, check.answers[0].stderr
    job = run.nodes["revoke"].job
    assert run.order == ["approve", "revoke"] and run.status == "successful", out(job)
    assert job.extra_vars["awx_user_name"] == "ops-lead" and job.extra_vars["change_record"] == answers["change_record"]
    for c in CLUSTERS:
        assert objects_left(c) == [], c
    assert member_ssh(member["key"]).returncode != 0
    ssh(MEMBER_NODE, "true")
    with open(os.path.join(RECORDS, "audit", "audit.jsonl")) as fh:
        assert change in fh.read(), "the audit log must be on the persistent path"
    # The used-once ledger entry outlives the job's container: the same record released again
    # is the same run again (playbook, targets, member, executor), which resumes it and changes
    # nothing, against the entry the first job wrote on the persistent path.
    ledger = os.path.join(RECORDS, "approvals", change + ".json")
    with open(ledger) as fh:
        first_used = json.load(fh)["first_used_at"]
    again = site.launch_workflow("hybridgpu member revocation (approved)", extra_vars=answers, approve=check)
    rerun = again.nodes["revoke"].job
    assert again.status == "successful", out(rerun)
    assert rerun.recap()[MEMBER_NODE].get("changed", 0) == 0, rerun.recap()
    with open(ledger) as fh:
        assert json.load(fh)["first_used_at"] == first_used


# --- the wave workflow, then the approved upgrade and removal ------------------------------

# The collection as the EE installed it from the tarball (ansible-builder's galaxy step).
EE_COLLECTION = "/usr/share/ansible/collections/ansible_collections/hybridgpu/fleet/"


def task_paths(jobs):
    """The files of every task the jobs ran (ansible-runner's events carry each task's path)."""
    return {(e.get("event_data") or {}).get("task_path", "").rsplit(":", 1)[0]
            for job in jobs for e in job.events if (e.get("event_data") or {}).get("task_path")}


def test_the_wave_workflow_hands_each_step_on(site, lab_lock):
    """preflight -> NCCL baseline -> onboard -> validate -> report on wave1, every role and module
    from the collection the EE installed from its tarball (the project holds only playbooks).
    The baselines are measured on the persistent path (none there yet), the lab's owned nodes
    are onboarded already so onboarding reruns, validation runs on every node."""
    run = site.launch_workflow("hybridgpu wave1")
    assert run.order == ["preflight", "baseline", "onboard", "validate", "report"], \
        [(i, n.status) for i, n in run.nodes.items()]
    assert run.status == "successful", out(run.nodes[run.order[-1]].job)
    jobs = {i: run.nodes[i].job for i in run.order}
    assert jobs["baseline"].extra_vars["baseline_hosts"] == "wave1"
    groups = jobs["baseline"].artifacts["hgpu_baselines"]
    assert groups and all(os.path.exists(os.path.join(RECORDS, "baselines", g + ".json")) for g in groups), groups
    assert jobs["onboard"].extra_vars["onboard_wave"] == "wave1"
    assert jobs["onboard"].extra_vars["hgpu_preflight"] == jobs["preflight"].artifacts["hgpu_preflight"]
    assert "wave1" in jobs["onboard"].artifacts["hgpu_onboarded"]
    assert jobs["validate"].extra_vars["hgpu_onboarded"] == jobs["onboard"].artifacts["hgpu_onboarded"]
    report_vars = jobs["report"].extra_vars
    for key, step in (("hgpu_preflight", "preflight"), ("hgpu_onboarded", "onboard"), ("hgpu_validated", "validate")):
        assert report_vars[key] == jobs[step].artifacts[key], key
    with open(os.path.join(RECORDS, "validation", "wave1", "wave.json")) as fh:
        record = json.load(fh)
    assert all(s["status"] == "passed" for s in record["stages"].values()), record["stages"]

    # Every role task came from the EE's installed copy; the playbooks from the project.
    paths = task_paths(jobs.values())
    roles = sorted(p for p in paths if "/roles/" in p)
    assert roles and all(p.startswith(EE_COLLECTION) for p in roles), roles
    assert any("/roles/onboard/" in p for p in roles) and any("/roles/validate/" in p for p in roles), roles
    assert all(p.startswith(EE_COLLECTION) or p.startswith("/runner/project/playbooks/") for p in paths), sorted(paths)

    # The nodes were onboarded before under the command line's records folder: the manifests on the
    # persistent path took each node's own copy, so the standalone state removal restores is the
    # one recorded before the first onboarding, not the onboarded state (the kubelet running).
    for name in (n["name"] for n in config.NODES if n["role"] == "owned"):
        with open(os.path.join(RECORDS, "manifests", name + ".json")) as fh:
            kept = json.load(fh)["pre_onboarding"]
        on_node = json.loads(ssh(name, "cat /var/lib/hybridgpu/manifest.json").stdout)["pre_onboarding"]
        assert kept == on_node, name
        assert "kubelet.service" not in kept["active_units"], (name, kept["active_units"])

    # Real state: the owned Nodes carry the placement label and taint in the onprem API.
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import Kube
    kube = Kube({"kubeconfig": os.path.join(config.LAB_DIR, "k8s", "kubeconfig"), "context": "onprem"})
    for name in (n["name"] for n in config.NODES if n["role"] == "owned"):
        obj = kube.get_node(name)
        assert obj["metadata"]["labels"].get("node-restriction.kubernetes.io/data-class") == "restricted", name
        taints = [{k: t.get(k) for k in ("key", "value", "effect")} for t in obj["spec"].get("taints") or []]
        assert {"key": "hybridgpu.io/owned", "value": "true", "effect": "PreferNoSchedule"} in taints, taints


@pytest.mark.long
def test_a_signed_record_releases_the_driver_upgrade(ee, setup, tmp_path):
    """The approval workflow in front of upgrade_rehearsal.yml, launched by ops-oncall with a
    record ops-lead signed: approved, the job moves the node to 550 (its matrix row from the
    preflight record the AWX preflight job left on the persistent path). It runs after the wave
    workflow, whose validation records and NCCL baselines it reads on the persistent path.
    make test covers it another way: the rehearsal itself in test_upgrade.py, the AWX user as
    executor and a signed record releasing a destructive workflow in the removal and revocation
    tests here, and this workflow's refusals of unsigned and foreign records."""
    appr = setup["appr"]
    site = make_site(ee, tmp_path / "jobs", user="ops-oncall", mounts=[str(setup["tmp"])], boundary=appr["boundary"])
    change = "CHG-AWX-UP-%d" % int(time.time())
    answers = dict(upgrade_target=upgrade_lab.NODE, **record_answers(
        appr, setup["tmp"], "awx-upgrade.yml", "ops-lead", change_id=change,
        action="driver_upgrade", targets=[upgrade_lab.NODE], requester="ops-oncall"))
    check = approver(appr, tmp_path)
    run = site.launch_workflow("hybridgpu driver upgrade rehearsal (approved)", extra_vars=answers, approve=check)
    assert check.answers[0].returncode == 0, check.answers[0].stderr
    assert run.order == ["approve", "upgrade"] and run.status == "successful", out(run.nodes["upgrade"].job)
    assert upgrade_lab.driver().startswith("550."), upgrade_lab.driver()
    # the record on the persistent path names the AWX user who launched the job as the executor
    with open(os.path.join(RECORDS, "upgrades", "upgrade-%s-%s.json" % (upgrade_lab.NODE, change))) as fh:
        record = json.load(fh)
    assert record["executed_by"] == "ops-oncall" and record["approved_by"] == "ops-lead", record


def test_a_signed_record_releases_the_removal_and_the_wave_template_brings_the_node_back(ee, site, lab_lock, tmp_path):
    """The approval workflow in front of remove.yml: approved with a record sec-owner signed, the job
    (launched by ops-lead, the executor) removes the node as its manifest on the persistent path
    lists: the Node is gone from the API, the kubelet stopped on the node, the event in the audit
    log on the persistent path. The wave template (wave.yml in one job) limited to the node then
    brings it back: Ready again, with its placement label."""
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import Kube
    kube = Kube({"kubeconfig": os.path.join(config.LAB_DIR, "k8s", "kubeconfig"), "context": "onprem"})
    appr = approvers(tmp_path / "appr")
    approved = make_site(ee, tmp_path / "jobs", user="ops-lead", mounts=[str(tmp_path)], boundary=appr["boundary"])
    change = "CHG-AWX-RM-%d" % int(time.time())
    # the approver signs the digest of the manifest on the persistent path: what the removal reverses
    answers = dict(remove_targets=NODE, **record_answers(appr, tmp_path, "awx-remove.yml", "sec-owner", change_id=change,
                                                         action="remove", targets=[NODE], requester="ops-lead",
                                                         manifests={NODE: os.path.join(RECORDS, "manifests", NODE + ".json")}))
    check = approver(appr, tmp_path)
    run = approved.launch_workflow("hybridgpu removal (approved)", extra_vars=answers, approve=check)
    assert check.answers[0].returncode == 0, check.answers[0].stderr
    job = run.nodes["remove"].job
    assert run.order == ["approve", "remove"] and run.status == "successful", out(job)
    assert kube.get_node(NODE) is None
    assert ssh(NODE, "systemctl is-active kubelet", check=False).stdout.strip() != "active"
    with open(os.path.join(RECORDS, "audit", "audit.jsonl")) as fh:
        events = [json.loads(line) for line in fh if line.strip()]
    mine = [e for e in events if e["change_id"] == change]
    assert mine, "the audit log must be on the persistent path"
    # every step names the AWX user who launched the job as its executor, the signer as approver
    assert {(e["executor"], e["approver"]) for e in mine} == {("ops-lead", "sec-owner")}, mine
    assert [e["action"] for e in mine][-1] == "remove" and mine[-1]["target"] == NODE, mine

    back = site.launch_job("hybridgpu wave", limit=NODE)
    assert back.status == "successful", out(back)
    node = kube.get_node(NODE)
    assert node is not None, out(back)
    assert [c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready"] == ["True"]
    assert node["metadata"]["labels"].get("node-restriction.kubernetes.io/data-class") == "restricted"


# --- slow: the long templates --------------------------------------------------------------

@pytest.mark.long
@pytest.mark.parametrize("template, answers", [
    ("hybridgpu onboard", {"onboard_wave": "wave1"}),
    ("hybridgpu validate", {"validate_hosts": "wave1"}),
])
def test_the_long_templates_run_on_one_node(site, template, answers):
    job = site.launch_job(template, extra_vars=answers, limit=NODE)
    assert job.status == "successful", out(job)
    assert NODE in job.recap()


def test_overflow_move_moves_a_slurm_job(site, overflow_lab):
    """The operator's move of a user's queued Slurm job by its ID (the survey's text answer): the job
    finishes on the cloud pool and is withdrawn from the local queue."""
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends as b
    with test_overflow.queued_slurm_job("awx", blocker_s=400) as (q, job_id):
        job = site.launch_job("hybridgpu overflow move", extra_vars={"overflow_jobs": str(job_id)})
        assert job.status == "successful", out(job)
        # AWX's callback prints the summary as JSON, the command line's as YAML
        assert re.search(r'"?path"?: "?operator', job.stdout) and q.state(job_id) == b.Q_WITHDRAWN, out(job)
        assert re.search(r'"?state"?: "?finished', job.stdout), out(job)


def test_overflow_safe_drills_run_and_report_on_the_persistent_path(site, overflow_lab):
    """Two safe drills chosen in the survey, with the inventory's test namespace and class: real cloud
    Jobs on the node agents, real rsync to the storage host; the unsafe drills are not chosen, so the
    estate's drill script does not run. The report lands on the persistent records path. (make test
    runs every safe drill on the protocol and three through this playbook in the unit tests, against
    the in-process emulator; all of them on the lab in make integration-long, here and from the
    command line.)"""
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import drills
    chosen = ["lost_submission_response", next(n for n in drills.SAFE_NAMES if n.startswith("link_cut_"))]
    before = set(glob.glob(os.path.join(RECORDS, "overflow", "drill-*")))
    job = site.launch_job("hybridgpu overflow drill", extra_vars={"overflow_drill_failures": chosen})
    assert job.status == "successful", out(job)
    made = sorted(set(glob.glob(os.path.join(RECORDS, "overflow", "drill-*"))) - before)
    assert len(made) == 1, made
    with open(os.path.join(made[0], "safe", "safe_drill.json")) as fh:
        rep = json.load(fh)
    failed = [(d["drill"], [c for c in d["checks"] if not c["pass"]]) for d in rep["drills"] if not d["pass"]]
    assert rep["pass"], failed
    assert [d["drill"] for d in rep["drills"]] == chosen and rep["refused"] == []
    assert not os.path.exists(os.path.join(made[0], "drill.json"))     # the estate's script did not run
    assert all(d["cleanup"]["deleted"] for d in rep["drills"])


@pytest.mark.long
def test_overflow_drill_runs_every_drill(site, overflow_lab):
    """No drill chosen: all of them, the unsafe ones through the lab's drill script (disposable estate)."""
    job = site.launch_job("hybridgpu overflow drill")
    assert job.status == "successful", out(job)
