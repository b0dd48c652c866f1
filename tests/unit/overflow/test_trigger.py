"""Job class validation and the trigger rule."""
import os

import pytest
import yaml

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import jobclass
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.trigger import QueueJob, QueueSnapshot, evaluate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXAMPLE = os.path.join(ROOT, "inventories", "lab", "overflow", "job_classes.yml")
A100 = "NVIDIA A100-SXM4-80GB"
NOW = 1_700_000_000.0
H = 3600.0


@pytest.fixture(scope="module")
def classes():
    return jobclass.load(EXAMPLE)


def test_example_file_loads(classes):
    assert set(classes) == {"small-input", "large-input", "restricted"}
    assert classes["large-input"]["input_size"] == 2 * 10**12
    assert classes["large-input"]["link_bps"] == 5e9
    assert classes["restricted"]["restricted"] and not classes["small-input"]["restricted"]


def write(tmp_path, data):
    f = tmp_path / "classes.yml"
    f.write_text(yaml.safe_dump(data))
    return str(f)


def test_errors_name_file_and_field(tmp_path):
    data = yaml.safe_load(open(EXAMPLE))
    data["classes"]["small-input"]["input_sise"] = "1GB"
    data["classes"]["large-input"]["typical_runtime"] = "four hours"
    del data["classes"]["restricted"]["data_may_leave_site"]
    path = write(tmp_path, data)
    with pytest.raises(jobclass.JobClassError) as exc:
        jobclass.load(path)
    errs = exc.value.errors
    assert any(e.startswith(path + ": classes.small-input.input_sise: unknown key") for e in errs)
    assert any(e.startswith(path + ": classes.large-input.typical_runtime:") for e in errs)
    assert path + ": classes.restricted.data_may_leave_site: required" in errs


def test_unknown_top_level_and_bad_types(tmp_path):
    path = write(tmp_path, {"classes": {"x": {"input_size": "1GB", "output_size": "1GB", "image_size": "1GB",
                                              "typical_runtime": "1h", "data_may_leave_site": "yes",
                                              "gpu_type": "T4", "gpus": 0, "queue_wait_threshold": "1h"}},
                            "extra": 1})
    with pytest.raises(jobclass.JobClassError) as exc:
        jobclass.load(path)
    msg = str(exc.value)
    assert "extra: unknown key" in msg
    assert "classes.x.data_may_leave_site: must be true or false" in msg
    assert "classes.x.gpus: must be a whole number" in msg
    assert "classes.x.link_bps: required" in msg


def test_missing_file_is_named(tmp_path):
    with pytest.raises(jobclass.JobClassError) as exc:
        jobclass.load(str(tmp_path / "nope.yml"))
    assert "nope.yml: cannot read" in str(exc.value)


def snap(jobs, free=None, total=None):
    return QueueSnapshot(NOW, jobs, free if free is not None else {A100: 0}, total)


def test_full_large_input_moves_like_the_seed(classes):
    # waited 2 h, scheduler says 9 h more: the seed's example
    j = QueueJob("slurm-1", "large-input", NOW - 2 * H, "pending", 8, A100, expected_start=NOW + 9 * H)
    (d,) = evaluate(snap([j]), classes)
    assert d["decision"] == "move"
    assert any(r.startswith("wait_above_threshold") for r in d["full"])
    assert any(r.startswith("no_free_gpus") for r in d["full"])
    assert round(d["time_model"]["cloud"]["total_s"] / H, 1) == 5.3
    assert d["wait_estimate"]["method"] == "scheduler_estimate"


def test_restricted_never_moves_even_when_full(classes):
    j = QueueJob("r-1", "restricted", NOW - 10 * H, "pending", 1, "NVIDIA L40S", deadline=NOW + 60,
                 expected_start=NOW + 48 * H)
    (d,) = evaluate(snap([j], {"NVIDIA L40S": 0}), classes)
    assert d["decision"] == "stay" and len(d["full"]) == 3
    assert "restricted" in d["reason"] and d["time_model"] is None


def test_not_full_stays(classes):
    j = QueueJob("s-1", "small-input", NOW - 60, "pending", 1, A100)
    (d,) = evaluate(snap([j], {A100: 4}), classes)
    assert d["decision"] == "stay" and d["full"] == []


def test_full_but_transfer_too_slow_stays(tmp_path):
    data = yaml.safe_load(open(EXAMPLE))
    data["classes"]["large-input"]["input_size"] = "40TB"
    classes = jobclass.validate(data, "mem")
    j = QueueJob("l-1", "large-input", NOW - 2 * H, "pending", 8, A100, expected_start=NOW + 9 * H)
    (d,) = evaluate(snap([j]), classes)
    assert d["full"] and d["decision"] == "stay" and "input_transfer" in d["reason"]


def test_deadline_rule_and_work_ahead_estimate(classes):
    # 2 A100s in total, a running 8-GPU large job ahead: 4 h * 8 / 2 = 16 h of wait
    running = QueueJob("l-0", "large-input", NOW - 5 * H, "running", 8, A100)
    j = QueueJob("s-2", "small-input", NOW - 60, "pending", 1, A100, deadline=NOW + 6 * H)
    d = evaluate(snap([running, j], {A100: 1}, {A100: 2}), classes)
    assert len(d) == 1 and d[0]["job_id"] == "s-2"
    assert d[0]["wait_estimate"] == {"seconds": 16 * H, "method": "work_ahead"}
    assert [r.split(":")[0] for r in d[0]["full"]] == ["deadline_at_risk"]
    assert d[0]["decision"] == "move"


def test_unknown_class_stays(classes):
    j = QueueJob("u-1", "mystery", NOW - 9 * H, "pending", 1, A100)
    (d,) = evaluate(snap([j]), classes, path="operator")
    assert d["decision"] == "stay" and "unknown job class" in d["reason"] and d["path"] == "operator"


def test_snapshot_from_dict(classes):
    s = QueueSnapshot.from_dict({"now": NOW, "free_gpus": {A100: 0}, "jobs": [
        {"job_id": "1", "job_class": "small-input", "submit_time": NOW - 2 * H, "state": "pending",
         "gpus": 1, "gpu_type": A100}]})
    (d,) = evaluate(s, classes)
    assert d["decision"] == "move" and d["wait_estimate"]["method"] == "waited_so_far"
