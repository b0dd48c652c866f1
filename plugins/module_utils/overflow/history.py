# -*- coding: utf-8 -*-
"""Queue-history analysis: which job classes belong in the overflow rule, and how big a standing pool.

Input records: class, submit, start, end, gpus, input_bytes, output_bytes (CSV or JSON; times as
epoch seconds or ISO 8601). Records are kept as tuples in FIELDS order so a million fit in memory.

Per class, each job is replayed through the time model as if the trigger had fired when its wait
crossed the class threshold (at submit when no threshold): local = rest of its real wait + its real
runtime; cloud = dispatch + input transfer + image pull + cloud queue + runtime + result return.
A class is recommended when at least `min_share` of its jobs would have finished sooner and the
median gain of those jobs is at least `min_gain_s`, and its data may leave the site.

Standing pool rule: take the GPUs waiting in the queue (recommended classes only) as a step function
of time, average it over consecutive windows of `window_s` (15 min by default, so short spikes do
not size the pool), and take the `pool_percentile` (95th by default) of those window averages,
rounded up to whole nodes of `node_gpus` GPUs. The peak is reported beside it.
"""
from __future__ import annotations

import csv
import heapq
import json
import math
import random
from datetime import datetime

FIELDS = ("class", "submit", "start", "end", "gpus", "input_bytes", "output_bytes")
C_CLASS, C_SUBMIT, C_START, C_END, C_GPUS, C_IN, C_OUT = range(7)


class HistoryError(ValueError):
    pass


def _time(value, where):
    try:
        return float(value)
    except (TypeError, ValueError):
        pass
    try:
        text = str(value).replace("Z", "+00:00")
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise HistoryError("%s: cannot read time %r (epoch seconds or ISO 8601)" % (where, value))


def _row(values, where):
    try:
        cls, submit, start, end, gpus, inb, outb = values
        rec = (str(cls), _time(submit, where), _time(start, where), _time(end, where), int(gpus),
               int(float(inb)), int(float(outb)))
    except HistoryError:
        raise
    except (TypeError, ValueError) as exc:
        raise HistoryError("%s: %s" % (where, exc))
    if not rec[C_SUBMIT] <= rec[C_START] <= rec[C_END]:
        raise HistoryError("%s: times must satisfy submit <= start <= end" % where)
    return rec


def load(path):
    """Read a CSV (header with FIELDS) or JSON (list of objects) history file into tuples."""
    if path.endswith(".json"):
        with open(path) as fh:
            data = json.load(fh)
        if not isinstance(data, list):
            raise HistoryError("%s: expected a JSON list of job records" % path)
        out = []
        for i, item in enumerate(data):
            where = "%s: record %d" % (path, i)
            missing = [f for f in FIELDS if f not in item]
            if missing:
                raise HistoryError("%s: missing %s" % (where, ", ".join(missing)))
            out.append(_row([item[f] for f in FIELDS], where))
        return out
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            return []
        header = [h.strip() for h in header]
        missing = [f for f in FIELDS if f not in header]
        if missing:
            raise HistoryError("%s: header lacks %s" % (path, ", ".join(missing)))
        idx = [header.index(f) for f in FIELDS]
        out = []
        append = out.append
        fast = idx == list(range(7)) and len(header) == 7
        for n, row in enumerate(reader, 2):
            if fast:
                # common case, kept tight for a million rows
                try:
                    rec = (row[0], float(row[1]), float(row[2]), float(row[3]), int(row[4]), int(row[5]),
                           int(row[6]))
                    if rec[1] <= rec[2] <= rec[3]:
                        append(rec)
                        continue
                except (ValueError, IndexError):
                    pass
            append(_row([row[i] for i in idx] if len(row) >= len(header) else row, "%s: line %d" % (path, n)))
        return out


def write_csv(path, records):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(FIELDS)
        w.writerows(records)


def percentile(sorted_values, q):
    """Linear-interpolated percentile (q in 0..100) of an already sorted list."""
    if not sorted_values:
        return None
    k = (len(sorted_values) - 1) * q / 100.0
    lo = int(math.floor(k))
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def analyze(records, link_bps, dispatch_s=600.0, cloud_queue_s=900.0, image_s=0.0, thresholds=None,
            restricted=(), min_share=0.2, min_gain_s=0.0, window_s=900.0, pool_percentile=95.0, node_gpus=8):
    """Report per class and the standing pool recommendation. Times in seconds, link in bit/s."""
    thresholds = thresholds or {}
    restricted = set(restricted)
    per_bit = 8.0 / float(link_bps)
    fixed = dispatch_s + cloud_queue_s + image_s
    by_class = {}
    for r in records:
        by_class.setdefault(r[C_CLASS], []).append(r)
    report = {}
    for cls, rows in sorted(by_class.items()):
        thr = float(thresholds.get(cls, 0.0))
        waits = sorted([r[C_START] - r[C_SUBMIT] for r in rows])
        gains = []
        for r in rows:
            wait = r[C_START] - r[C_SUBMIT]
            if wait <= thr:
                continue        # trigger never fired for this job
            local = wait - thr + (r[C_END] - r[C_START])
            cloud = fixed + (r[C_IN] + r[C_OUT]) * per_bit + (r[C_END] - r[C_START])
            if local > cloud:
                gains.append(local - cloud)
        gains.sort()
        n = len(rows)
        share = len(gains) / float(n)
        median_gain = percentile(gains, 50) if gains else 0.0
        if cls in restricted:
            verdict, why = False, "restricted: data may not leave the site"
        elif share >= min_share and median_gain >= min_gain_s:
            verdict, why = True, "%.0f%% of jobs would finish sooner, median gain %.0f s" % (share * 100, median_gain)
        else:
            verdict, why = False, "only %.0f%% of jobs would finish sooner (median gain %.0f s)" % (
                share * 100, median_gain)
        report[cls] = {
            "jobs": n,
            "wait_s": {"p50": percentile(waits, 50), "p90": percentile(waits, 90), "p99": percentile(waits, 99),
                       "max": waits[-1], "mean": sum(waits) / n},
            "share_sooner_in_cloud": share,
            "median_gain_s": median_gain,
            "recommend_overflow": verdict,
            "why": why,
        }
    chosen = [c for c, v in report.items() if v["recommend_overflow"]]
    pool = pool_size([r for c in chosen for r in by_class[c]], window_s, pool_percentile, node_gpus)
    return {"classes": report, "overflow_classes": chosen, "pool": pool,
            "rules": {"class": "share >= %.2f and median gain >= %.0f s, not restricted" % (min_share, min_gain_s),
                      "pool": "p%.0f of waiting-GPU demand averaged over %.0f s windows, rounded up to %d-GPU nodes"
                              % (pool_percentile, window_s, node_gpus)}}


def waiting_demand_windows(records, window_s, origin=None):
    """Average number of GPUs waiting in each consecutive window (sweep over submit/start events).

    Window k covers [origin + k * window_s, origin + (k + 1) * window_s); origin defaults to the
    first submit. An origin on a window boundary of the clock lets callers tell each window's hour."""
    if not records:
        return [], 0
    events = [(r[C_SUBMIT], r[C_GPUS]) for r in records]
    events.extend((r[C_START], -r[C_GPUS]) for r in records)
    events.sort()
    t0 = events[0][0] if origin is None else min(origin, events[0][0])
    nwin = int((events[-1][0] - t0) // window_s) + 1
    area = [0.0] * nwin
    level = 0
    peak = 0
    prev = t0
    for t, delta in events:
        if t > prev and level:
            # spread level*(t-prev) over the windows it covers
            a, b = prev, t
            wa = int((a - t0) // window_s)
            wb = int((b - t0) // window_s)
            if wa == wb:
                area[wa] += level * (b - a)
            else:
                area[wa] += level * (t0 + (wa + 1) * window_s - a)
                for k in range(wa + 1, wb):
                    area[k] += level * window_s
                area[wb] += level * (b - (t0 + wb * window_s))
        prev = t
        level += delta
        if level > peak:
            peak = level
    return [x / window_s for x in area], peak


def pool_size(records, window_s=900.0, q=95.0, node_gpus=8):
    windows, peak = waiting_demand_windows(records, window_s)
    if not windows:
        return {"gpus": 0, "nodes": 0, "peak_waiting_gpus": 0, "percentile_waiting_gpus": 0.0}
    level = percentile(sorted(windows), q)
    nodes = int(math.ceil(level / node_gpus - 1e-9)) if level > 0 else 0
    return {"gpus": nodes * node_gpus, "nodes": nodes, "peak_waiting_gpus": peak, "percentile_waiting_gpus": level}


# Synthetic history -------------------------------------------------------------------------------

SYNTHETIC_CLASSES = {
    # name: (weight, gpus, mean runtime s, input bytes, output bytes)
    "small-input": (0.6, 1, 2 * 3600, 20 * 10**9, 2 * 10**9),
    "large-input": (0.25, 8, 4 * 3600, 2 * 10**12, 40 * 10**9),
    "huge-input": (0.05, 8, 4 * 3600, 40 * 10**12, 40 * 10**9),
    "restricted": (0.1, 1, 3600, 50 * 10**9, 10**9),
}


def generate(n_jobs, seed=0, span_s=7 * 86400.0, start=1_700_000_000.0, classes=None, total_gpus=None,
             utilization=0.7):
    """Seeded synthetic week: daily-peaked arrivals, a strict FIFO queue over `total_gpus` GPUs.

    total_gpus defaults to the count that makes average utilisation `utilization`, so queues build at peaks.
    Returns tuples in FIELDS order, sorted by submit time.
    """
    rnd = random.Random(seed)
    classes = classes or SYNTHETIC_CLASSES
    names = list(classes)
    weights = [classes[c][0] for c in names]
    picks = rnd.choices(names, weights, k=n_jobs)
    # arrivals: thinning against a day curve peaking mid-afternoon (1 +/- 0.8)
    times = []
    two_pi_day = 2 * math.pi / 86400.0
    while len(times) < n_jobs:
        t = rnd.random() * span_s
        if rnd.random() * 1.8 <= 1.0 + 0.8 * math.sin(two_pi_day * t - math.pi / 2):
            times.append(start + t)
    times.sort()
    jobs = []
    demand = 0.0
    for t, c in zip(times, picks):
        dummy, gpus, mean_rt, inb, outb = classes[c]
        rt = max(60.0, rnd.expovariate(1.0 / mean_rt))
        demand += rt * gpus
        jobs.append((c, t, rt, gpus, int(inb * rnd.uniform(0.5, 1.5)), int(outb * rnd.uniform(0.5, 1.5))))
    if total_gpus is None:
        total_gpus = max(max(j[3] for j in jobs), int(math.ceil(demand / (span_s * utilization))))
    free = total_gpus
    running = []        # heap of (end, gpus)
    clock = start
    out = []
    for c, submit, rt, gpus, inb, outb in jobs:
        clock = max(clock, submit)
        while running and running[0][0] <= clock:
            free += heapq.heappop(running)[1]
        while free < gpus:
            end, g = heapq.heappop(running)
            free += g
            clock = max(clock, end)
        free -= gpus
        heapq.heappush(running, (clock + rt, gpus))
        out.append((c, round(submit, 3), round(clock, 3), round(clock + rt, 3), gpus, inb, outb))
    return out
