"""Overflow in the lab, for both local queue backends (Slurm on site-sched, Jobs on the
onprem emulator): real holds, real rsync staging to cloud-storage, real cloud Jobs run by the node
agent, every drill failure injected on both queues and both movable classes (pairwise; the full
product with make integration-long), the restricted control, the
checkpoint resume and the operator playbook. Each scenario restores what it changed."""
import contextlib
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import LAB_SRC, ROOT

sys.path.insert(0, os.path.join(LAB_SRC, "overflow"))

import drill  # noqa: E402
from lablib import image, slurm, storage  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends as b  # noqa: E402

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def overflow_lab(lab):
    """site-sched (Slurm) and cloud-storage, made idempotently on the running lab."""
    ref = image.node_ref()
    storage.ensure(ref)
    slurm.ensure(ref)
    return lab


@pytest.fixture(scope="module")
def envs(overflow_lab, tmp_path_factory):
    made = {}
    tag = "%x" % int(time.time() * 10 % 0xFFFFFF)

    def get(backend):
        if backend not in made:
            made[backend] = drill.Env(backend, str(tmp_path_factory.mktemp("drill-" + backend)), tag)
        return made[backend]
    yield get
    for env in made.values():
        env.close()


def test_slurm_hold_release_withdraw_and_started(overflow_lab):
    q = drill.slurm_queue()
    tag = "%x" % int(time.time() * 10 % 0xFFFFFF)
    blocker, job = "it-blk-" + tag, "it-job-" + tag
    try:
        blocker_id = q.enqueue(blocker, "site-batch", "sleep 120", cpus=4)
        job_id = q.enqueue(job, "small-input", "sleep 5")        # the job ID is Slurm's, not the name
        time.sleep(1.5)
        assert q.state(job_id) == b.Q_QUEUED and q.state(job) == b.Q_GONE
        assert q.hold(job_id) == b.HELD and q.state(job_id) == b.Q_HELD
        assert q.hold(job_id) == b.HELD
        row = q._find(job_id)
        assert row["slurm_id"] == job_id and row["reason"] == "JobHeldAdmin"
        assert q.release(job_id) and q.state(job_id) == b.Q_QUEUED
        assert q.hold(blocker_id) == b.ALREADY_STARTED          # Slurm refuses to hold a running job
        assert q.hold(job_id) == b.HELD and q.withdraw(job_id) and q.state(job_id) == b.Q_WITHDRAWN
        assert q.hold(job_id) == b.GONE and q.hold("999999999") == b.GONE
        before = q.round_trips
        snap = q.snapshot(total_gpus={drill.A100: 8})
        assert q.round_trips == before + 1                     # squeue + sprio in one round trip
        assert [j.job_id for j in snap.jobs if j.state == "running"] == [blocker_id]
    finally:
        q.run("scancel -n %s; scancel -n %s" % (blocker, job), check=False)


def test_stager_resumes_skips_warm_data_and_verifies(overflow_lab, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.bin").write_bytes(os.urandom(20_000_000))
    (src / "shared.bin").write_bytes(os.urandom(300_000))
    st = drill.stager(str(tmp_path / "onprem"), remote_root="/srv/cloud-storage/it-%d" % os.getpid())
    inputs = [{"name": "a.bin", "path": str(src / "a.bin")},
              {"name": "shared.bin", "path": str(src / "shared.bin"), "shared": True}]
    try:
        st.interrupt_next = 1
        with pytest.raises(b.TransferInterrupted) as err:
            st.stage_inputs("j1", inputs)
        assert 0 < err.value.done_bytes < 20_000_000
        got = st.stage_inputs("j1", inputs)
        assert got["resumed"] and got["bytes_sent"] < 20_300_000 and got["throughput_Bps"] > 0
        again = st.stage_inputs("j2", inputs)                  # the shared dataset stays warm
        assert again["warm_shared"] == ["shared.bin"] and again["bytes_skipped"] == 300_000
        assert again["bytes_sent"] == 20_000_000
        # a damaged remote copy of the right size: the storage host's checksum differs from the one
        # computed while the bytes were read, so the copy is removed and sent whole in the same pass
        st.ssh("printf X | dd of=%s/jobs/j2/inputs/a.bin bs=1 seek=5 conv=notrunc 2>/dev/null" % st.remote_root)
        assert st.stage_inputs("j2", inputs)["bytes_sent"] == 20_000_000
        remote = st.ssh("sha256sum %s/jobs/j2/inputs/a.bin" % st.remote_root).stdout.split()[0]
        from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.rsync_stager import file_sha256
        assert remote == file_sha256(str(src / "a.bin"))
    finally:
        st.ssh("rm -rf %s" % st.remote_root, check=False)


def test_image_cached_cold_pull_and_corrupted_cache(overflow_lab, tmp_path):
    blob = tmp_path / "img.tar"
    blob.write_bytes(os.urandom(1_500_000))
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.rsync_stager import file_sha256
    img = {"name": "it-img.tar", "path": str(blob), "digest": "sha256:" + file_sha256(str(blob))}
    st = drill.stager(str(tmp_path / "onprem"), remote_root="/srv/cloud-storage/it-img-%d" % os.getpid())
    try:
        cold = st.ensure_image("j1", img)
        assert cold["outcome"] == "cold_pull" and cold["cached_digest"] is None
        assert cold["verified_digest"] == img["digest"] and cold["bytes_sent"] == 1_500_000
        warm = st.ensure_image("j2", img)
        assert warm["outcome"] == "cached" and warm["bytes_sent"] == 0
        st.ssh("printf X | dd of=%s bs=1 seek=7 conv=notrunc 2>/dev/null" % st.cached_image_path(img["name"]))
        again = st.ensure_image("j3", img)
        assert again["outcome"] == "cold_pull" and again["cached_digest"] not in (None, img["digest"])
        assert again["verified_digest"] == img["digest"]
        with pytest.raises(b.TransferInterrupted, match="declares"):
            st.ensure_image("j4", dict(img, digest="sha256:" + "0" * 64))
    finally:
        st.ssh("rm -rf %s" % st.remote_root, check=False)


def test_drill_report_has_image_marks_and_cost(overflow_lab, tmp_path):
    out = tmp_path / "report"
    rc = drill.main(["--out", str(out), "--backend", "kubernetes", "--class", "small-input", "--failure",
                     "operator_returns_job", "--min-runs", "2", "--max-runs", "2", "--no-checkpoint"])
    report = json.loads((out / "drill.json").read_text())
    assert rc == 0, [(s["failure"], s["final_state"], s["notes"]) for s in report["scenarios"]]
    outcomes = [s["image"]["outcome"] for s in report["scenarios"]]
    assert outcomes[0] == "cold_pull" and "cached" in outcomes[1:]       # cache cleared for small-input at start
    first = report["scenarios"][0]
    assert first["image"]["verified_digest"] == first["image"]["onprem_digest"]
    assert first["image"]["pull_s"] > 0
    assert first["cloud_estimate"]["image_pull_measured_s"] == first["image"]["pull_s"]
    assert abs(first["cloud_estimate"]["parts"]["image_pull_s"] - first["image"]["pull_s"]) < 1e-3
    assert first["marks"]["data and image landed"] >= first["image"]["ready_at"]
    row = report["cost"]["rows"][0]
    assert row["operator_moves"] == 1 and row["engineering"] > 0 and row["gpu_running"] > 0
    assert row["jobs_completed_returned"] == 2 and row["cost_per_completed_job"] == round(row["total"] / 2, 6)
    html = (out / "drill.html").read_text()
    assert "Image on the cloud pool" in html and "cold pull" in html and "Cost per backend and class" in html


@pytest.mark.parametrize("backend", ["slurm", "kubernetes"])
def test_restricted_class_never_moves(envs, backend):
    env = envs(backend)
    for path in ("policy", "operator"):
        c = drill.control(env, path)
        assert c["pass"], c


# Every failure for each queue and for each job class, pairwise: a failure runs once on Slurm and
# once on Kubernetes, with the two classes swapped from one failure to the next, so every pair of
# queue and class, failure and queue, failure and class is drilled. The rest of the full product
# (the same failure, queue and the other class) is marked long (make integration-long).
def _pairwise(i, backend, job_class):
    first = drill.MOVABLE[i % 2]
    return job_class == (first if backend == "slurm" else drill.MOVABLE[1 - i % 2])


SCENARIOS = [pytest.param(bk, cls, f, id="%s-%s-%s" % (bk, cls, f),
                          marks=() if _pairwise(i, bk, cls) else (pytest.mark.long,))
             for i, f in enumerate(drill.FAILURES) for bk in ("slurm", "kubernetes") for cls in drill.MOVABLE]


@pytest.mark.parametrize("backend,job_class,failure", SCENARIOS)
def test_failure_drill(envs, backend, job_class, failure):
    r = drill.run_scenario(envs(backend), job_class, failure)
    assert r["commit_count"] <= 1
    shown = ("final_state", "local_state", "commit_count", "notes", "explained", "attempts", "target")
    assert r["pass"], json.dumps({k: r[k] for k in shown}, indent=1, default=str)
    if failure in ("none", "second_commit"):
        assert r["reference"]["match"]
    if failure == "second_commit":
        assert any("repeated" in x for x in r["rejected_commits"])
    if failure == "operator_returns_job":
        assert any("stopped and may not commit" in x for x in r["rejected_commits"])


def test_checkpoint_resumes_locally_on_the_same_curve(envs):
    ck = drill.checkpoint_drill(envs("slurm"))
    assert ck["pass"], ck
    assert ck["checkpoint_holds"] == ["model", "optimizer", "rng", "scheduler", "step"]


@contextlib.contextmanager
def queued_slurm_job(prefix, blocker_s=300):
    """(queue, job ID) of a user's own batch script queued behind a blocker that fills the site
    partition; both are cancelled afterwards."""
    q = drill.slurm_queue()
    tag = "%x" % int(time.time() * 10 % 0xFFFFFF)
    blocker, job = "%s-blk-%s" % (prefix, tag), "%s-small-%s" % (prefix, tag)
    try:
        q.enqueue(blocker, "site-batch", "sleep %d" % blocker_s, cpus=4)
        job_id = drill.userjobs.submit_slurm(q, job, "cloud-small", drill.userjobs.slurm_script())
        time.sleep(1.5)
        yield q, job_id
    finally:
        q.run("scancel -n %s; scancel -n %s" % (blocker, job), check=False)


# The same two playbooks run in make test through AWX (test_awx_runner.py): from the command line
# they are marked long.
@pytest.mark.long
def test_operator_playbook_moves_a_slurm_job(overflow_lab, tmp_path):
    # the playbook moves the user's job by Slurm's job ID
    with queued_slurm_job("pb") as (q, job_id):
        env = dict(os.environ, PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"],
                   ANSIBLE_CONFIG=os.path.join(ROOT, "tests", "lab", "ansible.cfg"))
        extra = {"overflow_jobs": [job_id], "overflow_records": str(tmp_path), "overflow_wait_s": 120}
        res = subprocess.run(["ansible-playbook", "playbooks/overflow_move.yml", "-e", json.dumps(extra)],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
        assert "state: finished" in res.stdout and "path: operator" in res.stdout
        assert q.state(job_id) == b.Q_WITHDRAWN


@pytest.mark.long
def test_safe_drills_playbook_on_the_lab(overflow_lab, tmp_path):
    """The safe drills through the playbook with the lab inventory's test namespace and class: real cloud
    Jobs on the node agents, real rsync to cloud-storage; the unsafe drills are not chosen, so the lab's
    drill script does not run."""
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import drills
    env = dict(os.environ, PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"],
               ANSIBLE_CONFIG=os.path.join(ROOT, "tests", "lab", "ansible.cfg"))
    extra = {"overflow_drill_out": str(tmp_path / "drill"), "overflow_drill_failures": list(drills.SAFE_NAMES),
             "overflow_drill_poll_s": 2, "overflow_drill_timeout_s": 300}
    res = subprocess.run(["ansible-playbook", "playbooks/overflow_drill.yml", "-e", json.dumps(extra)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=3000, check=False)
    rep = json.loads((tmp_path / "drill" / "safe" / "safe_drill.json").read_text())
    failed = [(d["drill"], [c for c in d["checks"] if not c["pass"]]) for d in rep["drills"] if not d["pass"]]
    assert res.returncode == 0 and rep["pass"], (failed, res.stdout[-3000:])
    assert [d["drill"] for d in rep["drills"]] == list(drills.SAFE_NAMES) and rep["refused"] == []
    assert not (tmp_path / "drill" / "drill.json").exists()          # the lab's script did not run
    assert all(d["cleanup"]["deleted"] for d in rep["drills"])
