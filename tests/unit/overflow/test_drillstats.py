"""Spread stopping rule and checkpoint curve comparison."""
import random

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import drillstats


def test_spread_kinds():
    v = list(range(1, 12))     # 1..11
    assert drillstats.spread(v, "iqr") == pytest.approx(8.5 - 3.5)
    assert drillstats.spread(v, "p10-p90") == pytest.approx(10 - 2)
    with pytest.raises(ValueError):
        drillstats.spread(v, "range")


def test_needs_min_runs():
    r = drillstats.should_stop({"transfer": [1, 1, 1]}, min_runs=5)
    assert not r["stop"] and "fewer than 5" in r["reason"]


def test_stops_when_spread_settles():
    rnd = random.Random(1)
    transfer = [100 + rnd.gauss(0, 5) for dummy in range(200)]
    queue = [900 + rnd.gauss(0, 60) for dummy in range(200)]
    stopped = None
    for n in range(1, 201):
        r = drillstats.should_stop({"transfer": transfer[:n], "queue": queue[:n]}, rel_tol=0.05, min_runs=5, max_runs=200)
        if r["stop"]:
            stopped = r
            break
    assert stopped is not None and stopped["settled"] and stopped["runs"] < 200
    assert set(stopped["spreads"]) == {"transfer", "queue"}
    assert all(abs(s["change"]) <= 0.05 for s in stopped["spreads"].values())


def test_shifting_spread_keeps_going_until_max():
    growing = [float(2 ** i) for i in range(12)]
    r = drillstats.should_stop({"transfer": growing[:8]}, min_runs=5, max_runs=12)
    assert not r["stop"] and r["reason"] == "spread still shifting"
    r = drillstats.should_stop({"transfer": growing}, min_runs=5, max_runs=12)
    assert r["stop"] and not r["settled"] and r["reason"].startswith("max runs reached")


def test_constant_values_settle():
    r = drillstats.should_stop({"queue": [5.0] * 6}, min_runs=5)
    assert r["stop"] and r["settled"]


def test_bad_input():
    with pytest.raises(ValueError):
        drillstats.should_stop({"a": [1, 2], "b": [1]})
    with pytest.raises(ValueError):
        drillstats.should_stop({})


def test_curves_within_tolerance():
    ref = {s: 2.0 / (1 + s) for s in range(0, 100, 10)}
    cand = [(s, v * 1.001) for s, v in ref.items()]
    r = drillstats.compare_curves(ref, cand, rel_tol=0.01)
    assert r["ok"] and r["compared"] == 10


def test_curves_outside_tolerance_and_missing():
    ref = {0: 1.0, 10: 0.5, 20: 0.25}
    r = drillstats.compare_curves(ref, {0: 1.0, 10: 0.7}, abs_tol=0.05)
    assert not r["ok"] and r["failed_steps"] == [10] and r["missing_steps"] == [20]
    assert r["worst_step"] == 10 and r["max_abs_diff"] == pytest.approx(0.2)


def test_tolerance_must_be_set_beforehand():
    with pytest.raises(ValueError):
        drillstats.compare_curves({0: 1}, {0: 1})
