"""Verdicts of the six validation steps: each passes on good evidence and fails for the
right reason, with the difference named."""
import os
import subprocess
import sys

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate import validation

DATA = os.path.join(os.path.dirname(__file__), "data")
REF_JOB = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "validate", "files",
                       "reference_job.py")
A100 = {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_count": 8, "gpu_memory_mib": 81920}


def read(name):
    with open(os.path.join(DATA, name)) as fh:
        return fh.read()


def node_obj(gpus=8, labels=None):
    return {"metadata": {"name": "owned-a100-1", "labels": labels or {"nvidia.com/gpu.count": str(gpus)}},
            "status": {"capacity": {"nvidia.com/gpu": str(gpus)}}}


def facts(count=8, model="NVIDIA A100-SXM4-80GB", mem=81920):
    return {"count": count, "model": model, "memory_mib": mem}


# -- inventory --------------------------------------------------------------------------

def test_inventory_passes_when_ssh_and_api_match_the_matrix():
    out = validation.inventory_verdict("owned-a100-1", facts(), node_obj(), A100, {"nvidia.com/gpu.count": "8"})
    assert out["passed"], out["reasons"]
    assert out["differences"] == []


def test_inventory_wrong_gpu_count_names_the_difference_on_both_sources():
    out = validation.inventory_verdict("owned-a100-1", facts(count=6), node_obj(gpus=6), A100)
    assert not out["passed"]
    assert {"field": "gpu_count", "source": "ssh", "expected": 8, "observed": 6} in out["differences"]
    assert {"field": "gpu_count", "source": "api", "expected": 8, "observed": 6} in out["differences"]
    assert "gpu_count (ssh): expected 8, observed 6" in out["reasons"]


def test_inventory_missing_label_and_unregistered_node():
    out = validation.inventory_verdict("n1", facts(), node_obj(), A100,
                                       {"node-restriction.kubernetes.io/data-class": "restricted"})
    assert out["reasons"] == ["label node-restriction.kubernetes.io/data-class (api): expected "
                              "restricted, observed None"]
    out = validation.inventory_verdict("n1", facts(), None, A100)
    assert out["reasons"] == ["node n1 is not registered in the cluster"]


def test_inventory_label_presence_only_and_memory_model_mismatch():
    out = validation.inventory_verdict("n1", facts(mem=40960, model="NVIDIA A100-SXM4-40GB"),
                                       node_obj(labels={"a": "x"}), A100, {"a": None})
    fields = sorted(d["field"] for d in out["differences"])
    assert fields == ["gpu_memory_mib", "gpu_model"]


def test_inventory_expected_from_preflight_matrix_row_and_empty_refused():
    row = {"id": "a100-535", "values": {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_count": 8,
                                        "gpu_memory_mib": 81920, "os": "debian 12"}}
    assert validation.expected_from_matrix_row(row) == A100
    with pytest.raises(validation.ValidationError, match="node n1"):
        validation.inventory_verdict("n1", facts(), node_obj(), {})


# -- reference job ----------------------------------------------------------------------

def run_reference(check=True, pythonpath=None, **env):
    full = dict(os.environ, REF_DEVICE="cpu")
    full.update(("REF_" + k.upper(), str(val)) for k, val in env.items())
    if pythonpath:
        full["PYTHONPATH"] = pythonpath
    res = subprocess.run([sys.executable, REF_JOB], capture_output=True, text=True,
                         env=full, timeout=60, check=check)
    return validation.parse_reference_log("some noise\n" + res.stdout) if check else res


def fake_torch(tmp_path, body):
    """A `torch` package on PYTHONPATH standing for an image's PyTorch."""
    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(body)
    return str(tmp_path)


def test_reference_on_cuda_without_pytorch_fails_saying_so(tmp_path):
    res = run_reference(check=False, device="cuda", steps=5,
                        pythonpath=fake_torch(tmp_path, "raise ImportError('No module named torch')\n"))
    assert res.returncode == 2
    out = validation.parse_reference_log(res.stdout)
    assert out["error"].startswith("PyTorch is not in the image") and "checksum" not in out
    verdict = validation.reference_verdict({"node": "owned-a100-1", "image": "i", "result": out},
                                           {"node": "cloud-h200-1", "image": "i", "result": run_reference(steps=5)})
    assert not verdict["passed"]
    assert verdict["reasons"] == ["reference job on owned-a100-1: " + out["error"]]


def test_reference_on_cuda_without_a_device_fails_saying_so(tmp_path):
    body = ("__version__ = '2.5.1'\n"
            "class version:\n    cuda = '12.4'\n"
            "class cuda:\n    @staticmethod\n    def is_available():\n        return False\n")
    res = run_reference(check=False, device="cuda", steps=5, pythonpath=fake_torch(tmp_path, body))
    assert res.returncode == 2
    assert validation.parse_reference_log(res.stdout)["error"] == \
        "no CUDA device visible to the container (torch 2.5.1, CUDA build 12.4)"


def test_reference_gpu_result_off_the_cpu_fails():
    a = run_reference(steps=5)
    bad = dict(a, device="cuda", gpu={"name": "NVIDIA H200", "count": 1, "max_rel_diff_vs_cpu": 0.02,
                                      "tolerance": 1e-9, "check": "fail"})
    good = dict(a, device="cuda", gpu={"name": "NVIDIA A100-SXM4-80GB", "count": 1, "max_rel_diff_vs_cpu": 0.0,
                                       "tolerance": 1e-9, "check": "pass"})
    out = validation.reference_verdict({"node": "o", "image": "i", "result": good}, {"node": "c", "image": "i", "result": bad})
    assert out["reasons"] == ["reference job on c: the GPU's result (NVIDIA H200) differs from the CPU's by 0.02 "
                              "(relative), above 1e-09"]
    assert validation.reference_verdict({"node": "o", "image": "i", "result": good},
                                        {"node": "c", "image": "i", "result": dict(good)})["passed"]
    # a cpu run against a cuda run is a different input
    out = validation.reference_verdict({"node": "o", "image": "i", "result": good}, {"node": "c", "image": "i", "result": a})
    assert any("input device differs" in r for r in out["reasons"])


def test_reference_unknown_device_is_refused():
    res = run_reference(check=False, device="tpu", steps=5)
    assert res.returncode == 2 and "REF_DEVICE must be cuda or cpu" in validation.parse_reference_log(res.stdout)["error"]


def test_reference_script_is_deterministic_and_learns():
    a = run_reference(steps=50)
    b = run_reference(steps=50)
    assert a == b
    assert a["loss"] < 0.5  # regression with noise 0.1 converges well below the initial loss

    def side(node, res):
        return {"node": node, "image": "python:3.11", "result": res}

    out = validation.reference_verdict(side("owned-a100-1", a), side("cloud-h200-1", b))
    assert out["passed"] and out["checksum_match"]


def test_reference_outside_tolerance_fails_on_metric():
    a = run_reference(steps=50)
    b = run_reference(steps=10)
    b["steps"] = 50  # same declared inputs, different numbers: the metric must catch it

    def side(node, res):
        return {"node": node, "image": "img", "result": res}

    out = validation.reference_verdict(side("o", a), side("c", b), compare="metric", tolerance=0.01)
    assert not out["passed"]
    assert "above tolerance 0.01" in out["reasons"][0]
    out = validation.reference_verdict(side("o", a), side("c", dict(a)), compare="metric", tolerance=0.01)
    assert out["passed"]


def test_reference_checksum_and_input_mismatch_reasons():
    a = run_reference(steps=20)
    b = dict(a, checksum="0" * 64, seed=99)
    out = validation.reference_verdict({"node": "o", "image": "i1", "result": a},
                                       {"node": "c", "image": "i2", "result": b})
    text = "\n".join(out["reasons"])
    assert "input seed differs" in text and "image differs" in text and "checksum differs" in text


def test_reference_log_without_result_line():
    with pytest.raises(validation.ValidationError, match="HGPU_REF"):
        validation.parse_reference_log("Traceback ...\n")


# -- collectives ------------------------------------------------------------------------

BASE = {"low": 180.0, "high": 215.0}


def test_nccl_within_baseline_passes():
    out = validation.nccl_verdict("intra-node", validation.nccl_summary(read("allreduce_ok.txt")), BASE)
    assert out["passed"], out["reasons"]
    assert out["avg_busbw"] == pytest.approx(195.883)
    assert out["total_wrong"] == 0


def test_nccl_wrong_values_fail():
    out = validation.nccl_verdict("intra-node", validation.nccl_summary(read("allreduce_wrong.txt")), BASE)
    assert not out["passed"]
    assert out["reasons"][0] == "#wrong is 3 (must be 0)"


def test_nccl_below_baseline_fails():
    out = validation.nccl_verdict("intra-node", validation.nccl_summary(read("allreduce_slow.txt")), BASE)
    assert out["reasons"] == ["avg bus bandwidth 105.31 GB/s below baseline range 180.00-215.00"]


def test_nccl_multinode_hosts_and_missing_baseline():
    summary = validation.nccl_summary(read("allreduce_multinode.txt"))
    assert summary["hosts"] == ["owned-a100-1", "owned-a100-2"]
    assert summary["ranks"] == 16
    with pytest.raises(validation.ValidationError, match="baseline"):
        validation.nccl_verdict("multi-node", summary, None)


def test_baseline_range_from_runs_and_failed_run_refused():
    ok = validation.nccl_summary(read("allreduce_ok.txt"))
    base = validation.baseline_from_summaries([ok, ok], margin=0.1)
    assert base["low"] == pytest.approx(195.883 * 0.9, abs=1e-3)
    assert base["high"] == pytest.approx(195.883 * 1.1, abs=1e-3)
    with pytest.raises(validation.ValidationError, match="did not pass"):
        validation.baseline_from_summaries([validation.nccl_summary(read("allreduce_wrong.txt"))])


# -- placement --------------------------------------------------------------------------

SIDES = {"owned-a100-1": "owned", "cloud-h200-1": "cloud"}


def test_placement_restricted_on_owned_and_unscheduled_on_cloud_passes():
    runs = [{"cluster": "onprem", "job": "r1", "restricted": True, "node": "owned-a100-1",
             "expect_scheduled": True, "phase": "Succeeded"},
            {"cluster": "cloud", "job": "r2", "restricted": True, "node": None},
            {"cluster": "onprem", "job": "u1", "restricted": False, "node": "owned-a100-1",
             "allowed_sides": ["owned"], "phase": "Succeeded"}]
    out = validation.placement_verdict(runs, SIDES)
    assert out["passed"], out["reasons"]


def test_placement_restricted_job_on_cloud_node_fails():
    runs = [{"cluster": "cloud", "job": "r2", "restricted": True, "node": "cloud-h200-1"}]
    out = validation.placement_verdict(runs, SIDES)
    assert out["reasons"] == ["restricted job r2 in cluster cloud was scheduled on cloud node cloud-h200-1"]
    # an unknown node counts as cloud: fail closed
    out = validation.placement_verdict([{"cluster": "x", "job": "r", "restricted": True, "node": "who"}], SIDES)
    assert not out["passed"]


def test_placement_unmarked_outside_policy_and_unscheduled_restricted():
    out = validation.placement_verdict([{"cluster": "cloud", "job": "u", "restricted": False,
                                         "node": "cloud-h200-1", "allowed_sides": ["owned"]},
                                        {"cluster": "onprem", "job": "r", "restricted": True, "node": None,
                                         "expect_scheduled": True}], SIDES)
    assert len(out["reasons"]) == 2
    assert "policy allows owned" in out["reasons"][0]
    assert "was not scheduled" in out["reasons"][1]


# -- telemetry --------------------------------------------------------------------------

def test_telemetry_verdicts():
    alert = {"labels": {"alertname": "GPUXidError", "node": "owned-a100-2"}, "state": "firing"}
    ok = validation.telemetry_verdict(["owned-a100-2", "cloud-h200-1"], ["owned-a100-2"], ["cloud-h200-1"],
                                      ["owned-a100-2"], [alert], "GPUXidError", "owned-a100-2")
    assert ok["passed"], ok["reasons"]
    bad = validation.telemetry_verdict(["cloud-h200-1"], ["owned-a100-2"], ["cloud-h200-1"], [],
                                       [dict(alert, state="pending")], "GPUXidError", "owned-a100-2")
    assert bad["reasons"] == ["no GPU metrics from owned-a100-2",
                              "existing monitoring no longer receives data from owned-a100-2",
                              "alert GPUXidError did not fire for owned-a100-2"]


# -- link interruption ------------------------------------------------------------------

def test_interruption_rejoined_and_job_continued():
    tl = {"cut_at": 100.0, "not_ready_at": 122.0, "restored_at": 130.0, "ready_again_at": 133.5,
          "job_succeeded": True, "job_phase": "Succeeded"}
    out = validation.interruption_verdict(tl, 30, 60)
    assert out["passed"], out["reasons"]
    assert out["reported_after_s"] == 22.0 and out["rejoin_s"] == 3.5 and out["job_continued"]


def test_interruption_never_rejoined_fails():
    tl = {"cut_at": 100.0, "not_ready_at": 122.0, "restored_at": 130.0, "ready_again_at": None,
          "job_succeeded": False, "job_phase": "Running"}
    out = validation.interruption_verdict(tl, 30, 60)
    assert out["reasons"][0] == "the node did not rejoin (Ready=True) within 60s after the link came back"
    assert "did not complete (phase Running)" in out["reasons"][1]


def test_interruption_never_reported_and_slow_rejoin():
    tl = {"cut_at": 100.0, "not_ready_at": None, "restored_at": 130.0, "ready_again_at": 230.0,
          "job_succeeded": True}
    out = validation.interruption_verdict(tl, 30, 60)
    assert out["reasons"] == ["the node was never reported as not Ready during the 30s cut",
                              "rejoin took 100.0s, more than 60s"]


# -- node record ------------------------------------------------------------------------

def test_node_record_orders_steps_and_lists_failures():
    steps = [{"step": "collectives", "passed": False, "reasons": ["x"]},
             {"step": "inventory", "passed": True, "reasons": []}]
    rec = validation.node_record("owned-a100-1", "owned", "ng_a100_535", steps)
    assert [s["step"] for s in rec["steps"]] == ["inventory", "collectives"]
    assert rec["failed_steps"] == ["collectives"] and rec["passed"] is False
    assert validation.record_filename("a/b") == "validate-a_b.json"
