"""overflow_history: the sacct and Kubernetes readers, the pool-sizing report on a synthetic history,
bad input, the record, and the module run through ansible and ansible-playbook."""
import json
import os
import subprocess
import sys
import time

import pytest

from hgpu_testenv import REAL_OUTPUTS, ROOT

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import (
    history, history_page, history_report, history_sources, jobclass)

CLASSES_FILE = os.path.join(ROOT, "inventories", "example", "overflow", "job_classes.yml")
CLASSES = jobclass.load(CLASSES_FILE)
# Partition and QOS of each class of the example file (jobclass.slurm_class reads them back).
SLURM = {name: cls["slurm"] for name, cls in CLASSES.items() if cls.get("slurm")}
HEADER = "JobID|JobName|State|Submit|Start|End|Partition|QOS|Account|AllocTRES"
PRICES = {"gpu_hour": 2.5, "storage_gb_month": 0.02, "egress_per_gb": 0.05,
          "prepaid_gpu_hours": 400.0, "prepaid_gpu_hour": 1.8}


def iso(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch))


def synthetic_week(n=3000, seed=42):
    """history.generate's busy week, over the classes of the example job classes file."""
    classes = {k: v for k, v in history.SYNTHETIC_CLASSES.items() if k in CLASSES}
    return history.generate(n, seed=seed, utilization=0.8, classes=classes)


def sacct_export(records):
    """A --parsable2 export of the records, each job with its batch and extern steps (rounded to the second)."""
    lines = [HEADER]
    for n, rec in enumerate(records, 1000):
        match = dict({"partition": "gpu", "qos": "normal", "account": "lab"}, **SLURM[rec[0]])
        times = [iso(t) for t in rec[1:4]]
        lines.append("|".join([str(n), "job%d" % n, "COMPLETED"] + times
                              + [match["partition"], match["qos"], match["account"], "cpu=4,mem=16G,node=1,gres/gpu=%d" % rec[4]]))
        lines.append("|".join(["%d.batch" % n, "batch", "COMPLETED"] + times + ["", "", "lab", "cpu=4,mem=16G,node=1"]))
        lines.append("|".join(["%d.extern" % n, "extern", "COMPLETED"] + times + ["", "", "lab", ""]))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def week():
    return synthetic_week()


@pytest.fixture
def export(tmp_path, week):
    path = tmp_path / "sacct-week.txt"
    path.write_text(sacct_export(week))
    return str(path)


def test_synthetic_history_finds_overflow_and_a_pool(week):
    records = [r + (True,) for r in week]
    rep = history_report.build(records, CLASSES, prices=PRICES)
    assert rep["overflow_classes"] == ["small-input"]
    assert not rep["classes"]["large-input"]["recommend_overflow"]
    assert "restricted" in rep["classes"]["restricted"]["why"]
    hours = [h["gpus"] for h in rep["pool_by_hour"]]
    assert len(hours) == 24 and all(g % 8 == 0 for g in hours)
    # the generator's arrivals peak mid-afternoon (UTC) and are thin at night
    assert max(hours) > 0 and hours[3] == 0 and hours[15] > 0
    assert rep["pool_peak_hour_gpus"] == max(hours)
    before, after = rep["wait"]["without_overflow"], rep["wait"]["with_overflow"]
    assert rep["wait"]["jobs_moved"] > 0
    assert after["p95_s"] < before["p95_s"] and after["mean_s"] < before["mean_s"]
    rows = {row["billing"]: row for row in rep["cost"]}
    assert sorted(rows) == ["per_minute", "prepaid"]
    for row in rows.values():
        assert row["jobs_completed_returned"] == rep["wait"]["jobs_moved"]
        assert row["cost_per_completed_job"] == pytest.approx(row["total"] / row["jobs_completed_returned"], rel=1e-6)
    assert rows["per_minute"]["prepaid_commitment"] == 0
    assert rows["prepaid"]["prepaid_commitment"] == pytest.approx(400 * 1.8)


def test_moved_job_waits_threshold_plus_time_to_start_in_the_cloud():
    # one small-input job (20 GB at 5 Gbps = 32 s) waiting 5 h: threshold 30 min + dispatch 10 min +
    # cloud queue 15 min + 32 s
    cls = CLASSES["small-input"]
    t0 = 1_700_000_000.0
    rec = ("small-input", t0, t0 + 5 * 3600, t0 + 7 * 3600, 1, 20 * 10**9, 2 * 10**9, True)
    rep = history_report.build([rec], CLASSES, min_share=0.5)
    expected = cls["queue_wait_threshold"] + cls["dispatch"] + cls["cloud_queue_wait"] + 20 * 10**9 * 8 / 5e9
    assert expected == pytest.approx(1800 + 600 + 900 + 32)
    assert rep["wait"]["with_overflow"]["p50_s"] == pytest.approx(expected)
    assert rep["wait"]["without_overflow"]["p50_s"] == 5 * 3600
    assert rep["cost"] == []          # no prices, no cost rows


def test_pool_by_hour_and_its_cost_on_one_job():
    # a day boundary; the job waits 5 h (trigger at 30 min), runs 2 h on 1 GPU; hourly windows
    day = 1_699_920_000.0
    rec = ("small-input", day, day + 5 * 3600, day + 7 * 3600, 1, 20 * 10**9, 2 * 10**9, True)
    rep = history_report.build([rec], CLASSES, prices={"gpu_hour": 6.0}, window_s=3600, node_gpus=1, min_share=0.5)
    pool = rep["pool_by_hour"]
    # waiting past the trigger: half of hour 0, all of hours 1 to 4
    assert [h["percentile_waiting_gpus"] for h in pool[:6]] == [0.5, 1.0, 1.0, 1.0, 1.0, 0.0]
    assert [h["gpus"] for h in pool] == [1, 1, 1, 1, 1] + [0] * 19
    assert [h["windows"] for h in pool] == [1] * 8 + [0] * 16
    (row,) = rep["cost"]
    # 5 pool GPU-hours less the job's 2 GPU-hours sit idle: 180 min at 0.10 per minute
    assert row["gpu_warm_pool"] == pytest.approx(18.0)
    assert row["gpu_running"] == pytest.approx(12.0)
    assert row["cost_per_completed_job"] == pytest.approx(30.0)


def test_sacct_export_gives_the_same_report(export, week):
    records, skipped = history_sources.read_sacct(export, CLASSES)
    assert len(records) == len(week) and skipped == {"not_started": 0, "running": 0, "no_gpu": 0}
    assert {r[0] for r in records} == {"small-input", "large-input", "restricted"}
    rep = history_report.build(records, CLASSES, prices=PRICES)
    assert rep["overflow_classes"] == ["small-input"] and rep["pool_peak_hour_gpus"] > 0


def test_sacct_rows_that_are_skipped(tmp_path):
    path = tmp_path / "sacct.txt"
    path.write_text(HEADER + "|\n" + "\n".join([     # --parsable: a separator ends every line
        "1|a|PENDING|2026-11-01T10:00:00|Unknown|Unknown|gpu-short|cloud-ok|lab|gres/gpu=1|",
        "2|b|RUNNING|2026-11-01T10:00:00|2026-11-01T10:05:00|Unknown|gpu-short|cloud-ok|lab|gres/gpu=1|",
        "3|c|COMPLETED|2026-11-01T10:00:00|2026-11-01T10:05:00|2026-11-01T11:00:00|cpu|normal|lab|cpu=4|",
        "4_7|d|FAILED|2026-11-01T10:00:00|2026-11-01T10:05:00|2026-11-01T11:00:00|gpu-short|cloud-ok|lab|"
        "cpu=4,gres/gpu=2,gres/gpu:a100=2|",
        "4_7.batch|batch|FAILED|2026-11-01T10:00:00|2026-11-01T10:05:00|2026-11-01T11:00:00|||lab||", ""]))
    records, skipped = history_sources.read_sacct(str(path), CLASSES)
    assert skipped == {"not_started": 1, "running": 1, "no_gpu": 1}
    assert len(records) == 1
    rec = records[0]
    assert rec[0] == "small-input" and rec[4] == 2 and rec[2] - rec[1] == 300 and rec[7] is False


@pytest.mark.parametrize("text, message", [
    ("JobID|State|Start|End|Partition|AllocTRES\n", "line 1: header lacks field Submit"),
    ("JobID|State|Submit|Start|End|Partition\n", "line 1: header lacks field AllocTRES"),
    ("JobID|State|Submit|Start|End|Partition|AllocTRES\n", "header lacks field QOS (class large-input matches Slurm jobs on qos)"),
    (HEADER + "\n1|a|COMPLETED|2026-11-01T10:00:00|2026-11-01T10:05:00\n", "line 2: 5 fields where the header has 10"),
    (HEADER + "\n1|a|COMPLETED|2026-11-01T10:00:00|yesterday|2026-11-01T11:00:00|p|q|a|gres/gpu=1\n",
     "line 2: field Start: cannot read time 'yesterday'"),
    (HEADER + "\n1|a|COMPLETED|2026-11-01T10:00:00|2026-11-01T09:00:00|2026-11-01T11:00:00|p|q|a|gres/gpu=1\n",
     "line 2: fields Submit, Start, End: times must satisfy"),
    (HEADER + "\n|a|COMPLETED|2026-11-01T10:00:00|2026-11-01T10:00:00|2026-11-01T11:00:00|p|q|a|gres/gpu=1\n",
     "line 2: field JobID: empty"),
    ("", "line 1: empty file"),
])
def test_bad_sacct_export_names_file_line_and_field(tmp_path, text, message):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(history.HistoryError) as err:
        history_sources.read_sacct(str(path), CLASSES)
    assert str(err.value).startswith(str(path) + ": ") and message in str(err.value)


def test_a_real_squeue_output_is_not_an_export():
    # real `squeue -O ... --noheader` output (SOURCES.md): pipe-separated, but no sacct header
    path = os.path.join(REAL_OUTPUTS, "slurm",
                        "squeue-O-custom-delim_pending-DependencyNeverSatisfied-JobArrayTaskLimit_anonymized.txt")
    if not os.path.exists(path):
        pytest.skip("real outputs not beside the checkout")
    with pytest.raises(history.HistoryError, match=r": line 1: header lacks field JobID"):
        history_sources.read_sacct(path, CLASSES)


def k8s_job(name, created, started=None, finished=None, gpus="2", cls="small-input", failed=False, parallelism=None):
    status = {}
    if started:
        status["startTime"] = started
    if finished and not failed:
        status["completionTime"] = finished
        status["conditions"] = [{"type": "Complete", "status": "True"}]
    if finished and failed:
        status["conditions"] = [{"type": "Failed", "status": "True", "lastTransitionTime": finished}]
    res = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}
    spec = {"template": {"spec": {"containers": [{"name": "main", "resources": res}]}}}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    return {"metadata": {"name": name, "namespace": "research", "creationTimestamp": created,
                         "labels": {history_sources.CLASS_LABEL: cls}}, "spec": spec, "status": status}


def test_k8s_jobs_read():
    items = [k8s_job("done", "2026-11-01T10:00:00Z", "2026-11-01T10:40:00Z", "2026-11-01T12:00:00Z"),
             k8s_job("failed", "2026-11-01T10:00:00Z", "2026-11-01T10:10:00Z", "2026-11-01T10:20:00Z", failed=True,
                     parallelism=2, cls="not-a-class"),
             k8s_job("queued", "2026-11-01T10:00:00Z"),
             k8s_job("running", "2026-11-01T10:00:00Z", "2026-11-01T10:01:00Z"),
             k8s_job("cpu", "2026-11-01T10:00:00Z", "2026-11-01T10:01:00Z", "2026-11-01T10:02:00Z", gpus=None)]
    records, skipped = history_sources.read_k8s_jobs(items, CLASSES)
    assert skipped == {"not_started": 1, "running": 1, "no_gpu": 1}
    done, failed = records
    assert done[0] == "small-input" and done[2] - done[1] == 2400 and done[3] - done[2] == 4800
    assert done[4] == 2 and done[5] == CLASSES["small-input"]["input_size"] and done[7] is True
    assert failed[0] == history_sources.UNCLASSIFIED and failed[4] == 4 and failed[7] is False


def test_k8s_bad_time_names_the_job_and_field():
    with pytest.raises(history.HistoryError, match=r"Job research/x: field status.startTime: cannot read time"):
        history_sources.read_k8s_jobs([k8s_job("x", "2026-11-01T10:00:00Z", "soon", "2026-11-01T12:00:00Z")], CLASSES)


def test_record_is_rewritten_only_when_the_content_changes(tmp_path, week):
    rep = history_report.build([r + (True,) for r in week[:300]], CLASSES, prices=PRICES)
    record = {"schema_version": 1, "run": {"source": "sacct", "written_at": "2026-12-01T10:00:00Z"},
              "report": rep, "jobs_skipped": {"no_gpu": 0}}
    path = str(tmp_path / "out" / "a.json")
    assert history_page.plan(path, record)[0] is True
    history_page.write(path, record)
    page = (tmp_path / "out" / "a.html").read_text()
    assert "Recommended warm pool per hour of day" in page and "per_minute" in page and "<script" not in page
    assert json.loads((tmp_path / "out" / "a.json").read_text())["report"]["jobs"] == 300
    later = dict(record, run=dict(record["run"], written_at="2026-12-02T10:00:00Z"))
    assert history_page.plan(path, later)[0] is False
    other = dict(record, jobs_skipped={"no_gpu": 1})
    changed, before, after = history_page.plan(path, other)
    assert changed and '"no_gpu": 0' in before and '"no_gpu": 1' in after


def ansible_json(cmd):
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False)
    return out, json.loads(out.stdout)


def run_module(args, check=False, diff=False):
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-c", "local",
           "-e", "ansible_python_interpreter=" + sys.executable,
           "-m", "hybridgpu.fleet.overflow_history", "-a", json.dumps(args)]
    cmd += (["--check"] if check else []) + (["--diff"] if diff else [])
    return ansible_json(cmd)[1]["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_module_check_mode_then_write_then_unchanged(export, tmp_path):
    record = str(tmp_path / "rec" / "week.json")
    args = {"source": "sacct", "path": export, "job_classes": CLASSES_FILE, "record_path": record, "prices": PRICES}
    res = run_module(args, check=True, diff=True)
    assert res["changed"] and not os.path.exists(record) and res["diff"]["before"] == ""
    assert res["overflow_classes"] == ["small-input"] and res["pool_peak_hour_gpus"] > 0
    res = run_module(args)
    assert res["changed"] and os.path.exists(record) and os.path.exists(record[:-5] + ".html")
    assert json.loads(open(record).read())["report"]["pool_by_hour"] == res["pool_by_hour"]
    assert run_module(args)["changed"] is False


INPUT_ERRORS = [
    ({"source": "sacct"}, "source is sacct but all of the following are missing: path"),
    ({"source": "sacct", "path": "/nonexistent/sacct.txt"}, "/nonexistent/sacct.txt: cannot read"),
    ({"source": "sacct", "path": "/dev/null", "record_path": "/tmp/x.html"}, "record_path: must end in .json"),
    ({"source": "sacct", "path": "/dev/null", "window": "soon"}, "window: cannot read duration"),
    ({"source": "sacct", "path": "/dev/null", "prices": {"gpu_hour": "cheap"}},
     "prices.gpu_hour: must be a number of at least 0, not 'cheap'"),
]


@pytest.fixture(scope="module")
def input_error_results(tmp_path_factory):
    """The module's result for each bad input, one task each (the failures ignored) in one ansible-playbook run."""
    book = tmp_path_factory.mktemp("input-errors") / "play.yml"
    tasks = [{"name": "case %d" % n, "hybridgpu.fleet.overflow_history": dict({"job_classes": CLASSES_FILE}, **args),
              "ignore_errors": True} for n, (args, dummy) in enumerate(INPUT_ERRORS)]
    book.write_text(json.dumps([{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": tasks}]))
    out, result = ansible_json([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                                "-e", "ansible_python_interpreter=" + sys.executable, str(book)])
    ran = result["plays"][0]["tasks"]
    assert [t["task"]["name"] for t in ran] == ["case %d" % n for n in range(len(INPUT_ERRORS))], out.stdout[-3000:]
    return [t["hosts"]["localhost"] for t in ran]


@pytest.mark.parametrize("args, message", INPUT_ERRORS)
def test_module_input_errors(input_error_results, args, message):
    res = input_error_results[INPUT_ERRORS.index((args, message))]
    assert res.get("failed") and message in res["msg"]


def test_playbook_writes_the_record(export, tmp_path):
    records = tmp_path / "records"
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "playbooks/overflow_history.yml",
           "-i", "localhost,", "-e", "ansible_python_interpreter=" + sys.executable,
           "-e", "hgpu_records_dir=%s" % records, "-e", "hgpu_overflow_job_classes=%s" % CLASSES_FILE,
           "-e", "overflow_history_path=%s" % export]
    out, result = ansible_json(cmd)
    assert out.returncode == 0, out.stdout[-3000:]
    written = sorted(os.listdir(records / "overflow-history"))
    assert len(written) == 2 and written[0].endswith(".html") and written[1].endswith(".json")
    assert written[0][:-5] == written[1][:-5]
    record = json.loads((records / "overflow-history" / written[1]).read_text())
    assert record["report"]["overflow_classes"] == ["small-input"]
    assert record["report"]["pool_peak_hour_gpus"] > 0 and record["run"]["path"] == export
    summary = result["plays"][0]["tasks"][-1]["hosts"]["localhost"]["msg"]
    assert summary["overflow_classes"] == ["small-input"] and len(summary["warm_pool_gpus_by_hour"]) == 24


def test_module_names_a_bad_price(export):
    res = run_module({"source": "sacct", "path": export, "job_classes": CLASSES_FILE, "prices": {"gpu_hours": 2.0}})
    assert res.get("failed") and res["msg"].startswith("prices: unknown price 'gpu_hours'")
