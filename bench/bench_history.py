#!/usr/bin/env python3
"""Benchmark: queue-history analysis of N synthetic jobs (default 1,000,000).

Baseline in the same run: read the same CSV and sort the records by submit time.
Measured: read the same CSV and run the full analysis (per-class waits, time-model replay,
pool sizing sweep). The synthetic estate runs at 80% average utilisation, so the daily peak builds
queues of hours: one class overflows, a large-input class does not, the restricted class never does,
and the pool is non-zero (the bench exits non-zero when the history exercises nothing). Prints both times and their ratio. No thresholds are asserted.

    .venv/bin/python bench/bench_history.py [--jobs N] [--seed S]
"""
import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".collections")
_link = os.path.join(COLLECTIONS, "ansible_collections", "hybridgpu", "fleet")
if not os.path.exists(_link):
    os.makedirs(os.path.dirname(_link), exist_ok=True)
    os.symlink(os.path.join("..", "..", ".."), _link)
sys.path.insert(0, COLLECTIONS)

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import history  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--utilization", type=float, default=0.8,
                    help="average GPU utilisation of the synthetic estate; 0.8 builds queues of hours at the daily peak")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = ap.parse_args()

    t = time.perf_counter()
    records = history.generate(args.jobs, seed=args.seed, utilization=args.utilization)
    gen_s = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "history.csv")
        history.write_csv(path, records)
        del records

        t = time.perf_counter()
        base = history.load(path)
        base.sort(key=lambda r: r[history.C_SUBMIT])
        baseline_s = time.perf_counter() - t
        del base

        t = time.perf_counter()
        recs = history.load(path)
        report = history.analyze(recs, link_bps=5e9, dispatch_s=600, cloud_queue_s=900,
                                 thresholds={"small-input": 1800, "large-input": 3600},
                                 restricted=["restricted"])
        analysis_s = time.perf_counter() - t

    result = {"jobs": args.jobs, "generate_s": round(gen_s, 3), "baseline_parse_sort_s": round(baseline_s, 3),
              "analysis_s": round(analysis_s, 3), "ratio_analysis_to_baseline": round(analysis_s / baseline_s, 2),
              "overflow_classes": report["overflow_classes"], "pool": report["pool"]}
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print("jobs:                        %d" % args.jobs)
        print("generate (not timed below):  %.2f s" % gen_s)
        print("baseline (parse + sort):     %.2f s" % baseline_s)
        print("analysis (parse + analyze):  %.2f s" % analysis_s)
        print("ratio analysis / baseline:   %.2f" % (analysis_s / baseline_s))
        print("overflow classes:            %s" % ", ".join(report["overflow_classes"]))
        print("standing pool:               %s" % json.dumps(report["pool"], sort_keys=True))
        for cls, row in sorted(report["classes"].items()):
            print("  %-12s jobs %7d  wait p90 %6.0f s  sooner in cloud %3.0f%%  %s" % (
                cls, row["jobs"], row["wait_s"]["p90"], 100 * row["share_sooner_in_cloud"], row["why"]))
    # A history in which no class overflows measures an analysis that finds nothing.
    if not report["overflow_classes"] or not report["pool"]["gpus"]:
        sys.exit("the synthetic history exercised nothing: no overflow class or an empty pool")


if __name__ == "__main__":
    main()
