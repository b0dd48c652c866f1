#!/usr/bin/env python3
"""Matrix and CIDR-overlap time for 10,000 synthetic nodes and ranges, against plain baselines.

Run from the repo root:  .venv/bin/python bench/bench_matrix_cidr.py [--n 10000]

Baselines run in the same process:
- matrix: a plain sort of the same node dicts by their column tuple (the least any grouping
  must do), so the ratio shows the cost of rules, holds and wave on top of that;
- CIDR: the all-pairs brute force on a random subsample, scaled by (n / sample)^2 to n.
No assertions: it prints numbers.
"""
import argparse
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import cidr, matrix  # noqa: E402

MODELS = [("NVIDIA A100-SXM4-80GB", 81920, "535.230.02", "12.2"),
          ("NVIDIA L40S", 46068, "550.163.01", "12.4"),
          ("NVIDIA H100 80GB HBM3", 81559, "550.163.01", "12.4"),
          ("Tesla V100-SXM2-32GB", 32768, "535.230.02", "12.2")]


def synthetic_nodes(n, rng):
    nodes = []
    for i in range(n):
        model, mem, driver, cuda = rng.choice(MODELS)
        nodes.append({
            "hostname": "node-%05d" % i, "side": "owned",
            "gpu": {"model": model, "count": rng.choice([4, 8]), "memory_mib": mem, "mig_mode": "Disabled"},
            "driver_version": driver, "cuda_version": cuda,
            "kernel": rng.choice(["6.1.0-28-amd64", "5.15.0-100-generic"]),
            "os": {"id": rng.choice(["ubuntu", "debian"]), "version_id": "22.04"},
            "agent_version": rng.choice(["v1.29.4", "v1.30.1", None]),
        })
    return nodes


def synthetic_ranges(n, rng, side):
    out = []
    for i in range(n):
        if rng.random() < 0.8:
            bits = rng.randint(16, 28)
            addr = rng.getrandbits(32) & ~((1 << (32 - bits)) - 1) & 0xFFFFFFFF
            text = "%d.%d.%d.%d/%d" % (addr >> 24, (addr >> 16) & 255, (addr >> 8) & 255, addr & 255, bits)
        else:
            bits = rng.randint(48, 64)
            addr = (0xFD00 << 112) | (rng.getrandbits(40) << 72)
            addr &= ~((1 << (128 - bits)) - 1)
            text = _v6(addr, bits)
        out.append({"name": "%s-%05d" % (side, i), "cidr": text})
    return out


def _v6(addr, bits):
    groups = ["%x" % ((addr >> (112 - 16 * k)) & 0xFFFF) for k in range(8)]
    return "%s/%d" % (":".join(groups), bits)


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--sample", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)

    nodes = synthetic_nodes(args.n, rng)
    t_matrix, result = timed(lambda: matrix.build(nodes, job_image_cuda="12.4",
                                                  api_server_versions={"cloud": "1.31.0"}))
    t_sort, _ = timed(lambda: sorted(tuple(str(v) for v in matrix.normalise(n, i).values())
                                     for i, n in enumerate(nodes)))
    print("matrix: %d nodes -> %d rows, %d violations, %d holds in %.3f s; plain sort baseline %.3f s; "
          "ratio %.1fx" % (args.n, len(result["rows"]), len(result["violations"]), len(result["holds"]),
                           t_matrix, t_sort, t_matrix / t_sort if t_sort else float("inf")))

    half = args.n // 2
    onprem = synthetic_ranges(half, rng, "onprem")
    cloud = synthetic_ranges(args.n - half, rng, "cloud")
    t_sweep, pairs = timed(lambda: cidr.overlaps(onprem, cloud))
    sample = min(args.sample, half)
    sub_on, sub_cl = rng.sample(onprem, sample), rng.sample(cloud, sample)
    t_brute_sample, brute_pairs = timed(lambda: cidr.brute_force(sub_on, sub_cl))
    assert cidr.overlaps(sub_on, sub_cl) == brute_pairs
    scale = (half / float(sample)) * ((args.n - half) / float(sample))
    t_brute = t_brute_sample * scale
    print("cidr: %d ranges -> %d overlapping pairs in %.3f s (sweep); brute force on %d+%d took %.3f s, "
          "scaled to %d ranges %.1f s; ratio brute/sweep %.1fx" % (
              args.n, len(pairs), t_sweep, sample, sample, t_brute_sample, args.n, t_brute,
              t_brute / t_sweep if t_sweep else float("inf")))


if __name__ == "__main__":
    main()
