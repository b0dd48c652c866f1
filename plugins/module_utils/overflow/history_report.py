# -*- coding: utf-8 -*-
"""Pool sizing from a job history: the warm pool per hour of day, the queue wait with and without
overflow, and the cost per completed job by billing mode.

Records: history_sources tuples (history.FIELDS + completed). Each job of a class is replayed with
the class's settings from the job classes file, as if the trigger had fired when its wait crossed the
class threshold: local = rest of its real wait + its real runtime; cloud = dispatch + startup + image
pull (0 when cached) + cloud queue + input transfer (0 when the inputs sit in the cloud) + runtime +
result return. It moves when cloud finishes sooner. A class is recommended when it may leave the site,
at least `min_share` of its jobs move and their median gain is at least the class's min_gain.

Wait with overflow: a moved job of a recommended class waits threshold + dispatch + startup + image
pull + input transfer + cloud queue; every other job keeps its real wait. Moving jobs would also
shorten the wait of the jobs behind them; that is not counted, so the gain shown is a lower bound.

Warm pool per hour: the GPUs of moved jobs, waiting from threshold until their real local start, as
a step function; averaged over windows of `window_s` aligned on the clock; per hour of day (UTC, or
the clock of the export when its times carry no zone) the `pool_percentile` of that hour's windows
over every day of the history, rounded up to whole nodes of `node_gpus`.

Cost (cost.scenario_row, policy path): the moved jobs' GPU time, the pool's idle GPU time (each window
of the history at its hour's pool, less the moved jobs' GPU time), staged inputs for transfer + runtime +
return, transfer in and out; divided by moved jobs that completed. One row per billing mode:
per_minute (pay-as-you-go), and prepaid when the prices commit prepaid GPU hours.
"""
from __future__ import annotations

import math

from . import cost, history
from .history import C_CLASS, C_END, C_GPUS, C_IN, C_OUT, C_START, C_SUBMIT

C_DONE = 7
HOUR = 3600.0
DAY = 86400.0
PREPAID = ("prepaid_gpu_hours", "prepaid_gpu_hour")


def _start_delay(cls, rec):
    """Seconds from the trigger until the job starts in the cloud."""
    link = cls["link_bps"]
    image = 0.0 if cls.get("image_cached", True) else cls.get("image_size", 0) * 8.0 / link
    inputs = 0.0 if cls.get("inputs_in_cloud") else rec[C_IN] * 8.0 / link
    return cls.get("dispatch", 0.0) + cls.get("startup", 0.0) + image + cls.get("cloud_queue_wait", 0.0) + inputs


def replay(rec, cls):
    """(moves, gain_s, cloud_start_delay_s, return_s) of one job of class settings `cls`."""
    thr = cls.get("queue_wait_threshold", 0.0)
    wait = rec[C_START] - rec[C_SUBMIT]
    delay = _start_delay(cls, rec)
    back = rec[C_OUT] * 8.0 / cls.get("return_link_bps", cls["link_bps"])
    if wait <= thr:
        return False, 0.0, delay, back
    runtime = rec[C_END] - rec[C_START]
    gain = (wait - thr + runtime) - (delay + runtime + back)
    return gain > 0, gain, delay, back


def _wait_stats(waits):
    waits = sorted(waits)
    if not waits:
        return {"p50_s": None, "p95_s": None, "mean_s": None, "max_s": None}
    return {"p50_s": history.percentile(waits, 50), "p95_s": history.percentile(waits, 95),
            "mean_s": sum(waits) / len(waits), "max_s": waits[-1]}


def _classes(records, classes, min_share):
    """Per class: replay every job; returns (report per class, {record index: (delay, back)} of moves)."""
    by_class = {}
    for i, rec in enumerate(records):
        by_class.setdefault(rec[C_CLASS], []).append(i)
    report, moves = {}, {}
    for name, idx in sorted(by_class.items()):
        cls = classes.get(name)
        waits = [records[i][C_START] - records[i][C_SUBMIT] for i in idx]
        row = {"jobs": len(idx), "wait": _wait_stats(waits), "recommend_overflow": False}
        if cls is None:
            row.update(share_moved=0.0, median_gain_s=0.0, why="no job class: never moves")
            report[name] = row
            continue
        moved = {}
        for i in idx:
            go, gain, delay, back = replay(records[i], cls)
            if go:
                moved[i] = (gain, delay, back)
        gains = sorted(g for g, dummy, dummy2 in moved.values())
        share = len(gains) / float(len(idx))
        median = history.percentile(gains, 50) if gains else 0.0
        if cls.get("restricted"):
            why = "restricted: data may not leave the site"
        elif share >= min_share and gains and median >= cls.get("min_gain", 0.0):
            row["recommend_overflow"] = True
            why = "%.0f%% of jobs would finish sooner, median gain %.0f s" % (share * 100, median)
            moves.update((i, (d, b)) for i, (g, d, b) in moved.items())
        else:
            why = "only %.0f%% of jobs would finish sooner (median gain %.0f s)" % (share * 100, median)
        row.update(share_moved=share, median_gain_s=median, why=why)
        report[name] = row
    return report, moves


def pool_by_hour(records, moves, classes, window_s, q, node_gpus):
    """The warm pool per hour of day from the GPUs of moved jobs waiting past their threshold."""
    waiting = []
    for i in moves:
        rec = records[i]
        begin = rec[C_SUBMIT] + classes[rec[C_CLASS]].get("queue_wait_threshold", 0.0)
        waiting.append((rec[C_CLASS], begin, rec[C_START], rec[C_START], rec[C_GPUS], 0, 0))
    hours = [[] for dummy in range(24)]
    peaks = [0.0] * 24
    if records:
        first = min(r[C_SUBMIT] for r in records)
        last = max(r[C_END] for r in records)
        origin = math.floor(first / window_s) * window_s
        windows, dummy = history.waiting_demand_windows(waiting, window_s, origin=origin)
        count = int((last - origin) // window_s) + 1
        windows = (windows + [0.0] * count)[:max(count, len(windows))]
        for k, level in enumerate(windows):
            hour = int(((origin + k * window_s) % DAY) // HOUR)
            hours[hour].append(level)
            peaks[hour] = max(peaks[hour], level)
    out = []
    for hour in range(24):
        level = history.percentile(sorted(hours[hour]), q) if hours[hour] else 0.0
        nodes = int(math.ceil(level / node_gpus - 1e-9)) if level > 0 else 0
        out.append({"hour": hour, "gpus": nodes * node_gpus, "nodes": nodes, "percentile_waiting_gpus": level,
                    "peak_window_gpus": peaks[hour], "windows": len(hours[hour])})
    return out


def _scenario(records, moves, pool, window_s):
    runs = [{"gpus": records[i][C_GPUS], "seconds": records[i][C_END] - records[i][C_START]} for i in moves]
    busy = sum(r["gpus"] * r["seconds"] for r in runs)
    # every window of the history bills its hour's pool
    standing = sum(h["gpus"] * h["windows"] for h in pool) * window_s
    storage = [{"bytes": records[i][C_IN], "seconds": d + b + records[i][C_END] - records[i][C_START]}
               for i, (d, b) in moves.items()]
    return {"name": "history", "path": "policy", "jobs_dispatched": len(moves),
            "jobs_completed_returned": sum(1 for i in moves if records[i][C_DONE]),
            "runs": runs, "warm_pool": [{"gpus": 1, "seconds": max(0.0, standing - busy)}],
            "storage": storage,
            "transfer": {"in_bytes": sum(records[i][C_IN] for i in moves),
                         "out_bytes": sum(records[i][C_OUT] for i in moves)}}


def cost_by_mode(scenario, prices):
    """One cost row per billing mode the prices allow; [] without prices."""
    if not prices:
        return []
    rows = []
    payg = dict((k, v) for k, v in prices.items() if k not in PREPAID)
    rows.append(dict(cost.scenario_row(scenario, payg), billing="per_minute"))
    if prices.get("prepaid_gpu_hours"):
        rows.append(dict(cost.scenario_row(scenario, prices), billing="prepaid"))
    return rows


def build(records, classes, prices=None, window_s=900.0, pool_percentile=95.0, node_gpus=8, min_share=0.2):
    """The report (a JSON-ready dict); raises cost.CostError on a bad price."""
    report, moves = _classes(records, classes, min_share)
    pool = pool_by_hour(records, moves, classes, window_s, pool_percentile, node_gpus)
    span = (min(r[C_SUBMIT] for r in records), max(r[C_END] for r in records)) if records else (None, None)
    days = int(math.ceil((span[1] - span[0]) / DAY - 1e-9)) if records else 0
    before = [r[C_START] - r[C_SUBMIT] for r in records]
    after = list(before)
    for i, (delay, dummy) in moves.items():
        rec = records[i]
        after[i] = min(before[i], classes[rec[C_CLASS]].get("queue_wait_threshold", 0.0) + delay)
    return {
        "jobs": len(records),
        "jobs_completed": sum(1 for r in records if r[C_DONE]),
        "span": {"first_submit": span[0], "last_end": span[1], "days": days},
        "classes": report,
        "overflow_classes": sorted(c for c, v in report.items() if v["recommend_overflow"]),
        "pool_by_hour": pool,
        "pool_peak_hour_gpus": max(h["gpus"] for h in pool),
        "wait": {"without_overflow": _wait_stats(before), "with_overflow": _wait_stats(after),
                 "jobs_moved": len(moves)},
        "cost": cost_by_mode(_scenario(records, moves, pool, window_s), prices or {}),
        "rules": {"class": "moves when cloud finishes sooner; recommended when data may leave the site, "
                           "share moved >= %.2f and median gain >= the class's min_gain" % min_share,
                  "pool": "p%.0f per hour of day of the GPUs of moved jobs waiting past their threshold, "
                          "averaged over %.0f s windows, rounded up to %d-GPU nodes"
                          % (pool_percentile, window_s, node_gpus),
                  "wait_with_overflow": "moved jobs wait threshold + time to start in the cloud; others "
                                        "keep their real wait (a lower bound of the gain)"},
    }
