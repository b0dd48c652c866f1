"""Cost rows: per-minute billing, prepaid first, lines kept apart, divided by completed jobs."""
import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import cost

PRICES = {"gpu_hour": 6.0, "storage_gb_month": 0.03, "ingress_per_gb": 0.0, "egress_per_gb": 0.05,
          "engineer_hour": 90.0}


def scenario(**kw):
    s = {"name": "large-input", "path": "operator", "jobs_dispatched": 4, "jobs_completed_returned": 3,
         "runs": [{"gpus": 8, "seconds": 4 * 3600}, {"gpus": 8, "seconds": 61, "retry": True}],
         "warm_pool": [{"gpus": 8, "seconds": 1800}],
         "storage": [{"bytes": 2 * 10**12, "seconds": 30 * 86400}],
         "transfer": {"in_bytes": 2 * 10**12, "out_bytes": 40 * 10**9},
         "operator_minutes": 20}
    s.update(kw)
    return s


def test_billed_minutes_round_up():
    assert cost.billed_minutes(0) == 0
    assert cost.billed_minutes(1) == 1
    assert cost.billed_minutes(60) == 1
    assert cost.billed_minutes(61) == 2
    with pytest.raises(cost.CostError):
        cost.billed_minutes(-1)


def test_row_per_minute():
    r = cost.scenario_row(scenario(), PRICES)
    assert r["billing"] == "per_minute"
    assert r["gpu_running"] == pytest.approx(4 * 8 * 6.0)          # 192
    assert r["gpu_retries"] == pytest.approx(2 * 8 * 0.1)          # 61 s bills 2 minutes on 8 GPUs
    assert r["gpu_warm_pool"] == pytest.approx(30 * 8 * 0.1)       # 24
    assert r["storage"] == pytest.approx(2000 * 0.03)              # 2 TB for one month
    assert r["network"] == pytest.approx(40 * 0.05)                # egress of results only
    assert r["engineering"] == pytest.approx(30.0)
    total = 192 + 1.6 + 24 + 60 + 2 + 30
    assert r["total"] == pytest.approx(total)
    # divided by completed and returned, not dispatched
    assert r["cost_per_completed_job"] == pytest.approx(total / 3)


def test_prepaid_consumed_first():
    prices = dict(PRICES, prepaid_gpu_hours=33, prepaid_gpu_hour=4.0)
    r = cost.scenario_row(scenario(), prices)
    assert r["billing"] == "prepaid"
    # 33 h = 1980 min covers the 1920 running minutes and the 16 retry minutes; 44 of 240 pool minutes
    assert r["gpu_running"] == 0 and r["gpu_retries"] == 0
    assert r["gpu_warm_pool"] == pytest.approx((240 - 44) * 0.1)
    assert r["prepaid_minutes_used"] == 1980
    assert r["prepaid_commitment"] == pytest.approx(132.0)


def test_no_completed_jobs_has_no_per_job_cost():
    r = cost.scenario_row(scenario(jobs_completed_returned=0), PRICES)
    assert r["cost_per_completed_job"] is None and r["total"] > 0


def test_unknown_price_rejected():
    with pytest.raises(cost.CostError):
        cost.scenario_row(scenario(), {"gpu_hours": 1})


def test_table():
    rows = cost.cost_table([scenario(), scenario(name="small-input", path="policy", operator_minutes=0)], PRICES)
    assert [r["path"] for r in rows] == ["operator", "policy"] and rows[1]["engineering"] == 0


def test_cost_block_of_the_lab_job_classes_loads():
    import os
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import jobclass
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    path = os.path.join(root, "tests", "lab", "overflow", "job_classes.yml")
    got = jobclass.load_cost(path)
    assert got["prices"]["gpu_hour"] > 0 and got["operator_minutes_per_move"] == 10
    assert "small-input" in jobclass.load(path)       # the class loader accepts the cost block


def test_cost_block_errors_name_the_field(tmp_path):
    import pytest
    import yaml
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import jobclass
    f = tmp_path / "c.yml"
    cost = {"prices": {"gpu_hours": 1, "egress_per_gb": -1}, "warm_pool_gpus": "two", "other": 1}
    f.write_text(yaml.safe_dump({"classes": {}, "cost": cost}))
    with pytest.raises(jobclass.JobClassError) as exc:
        jobclass.load_cost(str(f))
    msg = str(exc.value)
    assert "cost.prices.gpu_hours: unknown price" in msg and "cost.prices.egress_per_gb: must be a number" in msg
    assert "cost.warm_pool_gpus: must be a number" in msg and "cost.other: unknown key" in msg
