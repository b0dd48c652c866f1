"""Queue-history analysis, pool sizing and the synthetic generator."""
import json

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import history

H = 3600.0
T0 = 1_700_000_000.0


def rec(cls, submit, wait, run, gpus=1, inb=0, outb=0):
    return (cls, T0 + submit, T0 + submit + wait, T0 + submit + wait + run, gpus, inb, outb)


def test_seed_example_classes():
    # large-input: the seed's 2 TB job waits 9 h past the trigger -> moves; 40 TB job stays
    records = [rec("large", 0, 9 * H, 4 * H, 8, 2 * 10**12, 40 * 10**9) for dummy in range(5)]
    records += [rec("huge", 0, 9 * H, 4 * H, 8, 40 * 10**12, 40 * 10**9) for dummy in range(5)]
    records += [rec("vault", 0, 9 * H, 4 * H, 1, 10**9, 10**9) for dummy in range(5)]
    rep = history.analyze(records, link_bps=5e9, dispatch_s=600, cloud_queue_s=900, restricted=["vault"])
    large = rep["classes"]["large"]
    assert large["share_sooner_in_cloud"] == 1.0
    # 13 h local - (600 + 3200 + 900 + 14400 + 64) s
    assert large["median_gain_s"] == pytest.approx(13 * H - 19164)
    assert large["recommend_overflow"]
    assert not rep["classes"]["huge"]["recommend_overflow"]
    assert rep["classes"]["huge"]["share_sooner_in_cloud"] == 0.0
    assert not rep["classes"]["vault"]["recommend_overflow"] and "restricted" in rep["classes"]["vault"]["why"]
    assert rep["overflow_classes"] == ["large"]
    assert rep["classes"]["large"]["wait_s"]["p50"] == 9 * H


def test_threshold_moves_the_trigger_point():
    records = [rec("a", 0, 2 * H, H, 1, 10**9, 10**9)]
    assert history.analyze(records, 5e9, thresholds={"a": 3 * H})["classes"]["a"]["share_sooner_in_cloud"] == 0.0
    assert history.analyze(records, 5e9, thresholds={"a": 0})["classes"]["a"]["share_sooner_in_cloud"] == 1.0


def test_pool_rule_on_known_step_function():
    # 16 GPUs wait for the first hour, nothing afterwards until hour 4
    records = [rec("a", 0, H, 60, 8), rec("a", 0, H, 60, 8), rec("a", 4 * H, 0, 60, 1)]
    windows, peak = history.waiting_demand_windows(records, 900)
    assert peak == 16
    assert windows[:4] == [16.0, 16.0, 16.0, 16.0] and windows[4] == 0.0
    pool = history.pool_size(records, 900, q=50, node_gpus=8)
    assert pool["peak_waiting_gpus"] == 16
    # 17 windows: 4 at 16, 13 at 0 -> median 0
    assert pool["gpus"] == 0
    pool = history.pool_size(records, 900, q=95, node_gpus=8)
    assert pool["nodes"] == 2 and pool["gpus"] == 16


def test_window_straddling_interval():
    # windows start at the first event (t=0); 4 GPUs wait from 450 s to 1350 s
    records = [rec("a", 0, 0, 60, 1), rec("a", 450, 900, 60, 4)]
    windows, dummy = history.waiting_demand_windows(records, 900)
    assert windows == [pytest.approx(2.0), pytest.approx(2.0)]


def test_generator_is_seeded_and_consistent():
    a = history.generate(2000, seed=7)
    assert a == history.generate(2000, seed=7)
    assert a != history.generate(2000, seed=8)
    assert len(a) == 2000
    for r in a:
        assert r[history.C_SUBMIT] <= r[history.C_START] <= r[history.C_END]
    assert any(r[history.C_START] > r[history.C_SUBMIT] for r in a)   # queues do build
    rep = history.analyze(a, 5e9, thresholds={"small-input": 1800}, restricted=["restricted"])
    assert not rep["classes"]["huge-input"]["recommend_overflow"]
    assert not rep["classes"]["restricted"]["recommend_overflow"]
    assert rep["pool"]["gpus"] % 8 == 0


def test_csv_and_json_round_trip(tmp_path):
    recs = history.generate(50, seed=1)
    p = str(tmp_path / "h.csv")
    history.write_csv(p, recs)
    back = history.load(p)
    assert [r[0] for r in back] == [r[0] for r in recs]
    assert back[3][1] == pytest.approx(recs[3][1])
    j = str(tmp_path / "h.json")
    with open(j, "w") as fh:
        json.dump([dict(zip(history.FIELDS, r)) for r in recs[:3]], fh)
    assert len(history.load(j)) == 3


def test_iso_times_and_bad_rows(tmp_path):
    p = tmp_path / "h.csv"
    p.write_text("class,submit,start,end,gpus,input_bytes,output_bytes\n"
                 "a,2024-05-01T10:00:00Z,2024-05-01T11:00:00Z,2024-05-01T12:00:00Z,1,10,10\n")
    (r,) = history.load(str(p))
    assert r[history.C_START] - r[history.C_SUBMIT] == 3600
    p.write_text("class,submit,start,end,gpus,input_bytes,output_bytes\na,5,4,6,1,0,0\n")
    with pytest.raises(history.HistoryError, match="line 2: times must satisfy"):
        history.load(str(p))
    p.write_text("class,submit,end\n")
    with pytest.raises(history.HistoryError, match="header lacks"):
        history.load(str(p))
