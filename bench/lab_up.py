#!/usr/bin/env python3
"""Benchmark the lab: `lab up` times (cold and warm) and per-node SSH round-trip latency.

    bench/lab_up.py [--purge] [--no-cycle] [-n 20]

--purge      also time a truly cold `lab up` (cached images and rootfs removed first)
--no-cycle   skip `lab down; lab up` and only measure latency against the running lab
HGPU_LAB_UP_ARGS adds flags to every `lab up`, as in the integration tests.

Latency per node, each measured N times: `podman exec NODE true` (the baseline, no network),
`ssh -o ControlMaster=no` (a new connection each time) and ssh over a ControlPersist master
(what Ansible does), printed as median/mean in ms and as a ratio to the baseline.
The lab is left up afterwards.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB = os.path.join(ROOT, "tests", "lab", "lab")
sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))

from lablib import config  # noqa: E402
from lablib.nodes import SSH_OPTS, key_path  # noqa: E402


def timed(cmd):
    t = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True)
    took = time.monotonic() - t
    if res.returncode != 0:
        sys.exit("%s failed:\n%s%s" % (" ".join(cmd), res.stdout, res.stderr))
    return took


def lab(*args):
    if args[0] == "up":  # same extra flags as the integration tests
        args += tuple(os.environ.get("HGPU_LAB_UP_ARGS", "").split())
    return timed([LAB, *args])


def sample(cmd, n):
    out = []
    for _ in range(n):
        t = time.monotonic()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out.append((time.monotonic() - t) * 1000)
    return out


def ssh_base():
    """The lab's ssh options without ControlMaster=no."""
    opts = []
    for i in range(0, len(SSH_OPTS), 2):
        if SSH_OPTS[i + 1] != "ControlMaster=no":
            opts += SSH_OPTS[i:i + 2]
    return ["ssh", "-i", key_path(), *opts]


def latency(n):
    rows = []
    with tempfile.TemporaryDirectory(prefix="hgpu-bench-") as tmp:
        for node in config.NODES:
            target = "root@" + node["ip"]
            base = sample(["podman", "exec", node["name"], "true"], n)
            fresh = sample(["ssh", "-i", key_path(), *SSH_OPTS, target, "true"], n)
            sock = os.path.join(tmp, node["name"] + ".sock")
            master = ssh_base() + ["-o", "ControlMaster=yes", "-o", "ControlPersist=60",
                                       "-S", sock, "-fN", target]
            subprocess.run(master, check=True)
            try:
                reused = sample(ssh_base() + ["-S", sock, target, "true"], n)
            finally:
                subprocess.run(["ssh", "-S", sock, "-O", "exit", target],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            rows.append((node["name"], base, fresh, reused))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--purge", action="store_true")
    p.add_argument("--no-cycle", action="store_true")
    p.add_argument("-n", type=int, default=20)
    a = p.parse_args()
    times = []
    if a.purge:
        lab("down", "--purge")
        times.append(("cold lab up (no cached image, debootstrap included)", lab("up")))
    if not a.no_cycle:
        lab("down")
        times.append(("lab up after lab down (image cached)", lab("up")))
        times.append(("warm lab up (everything running)", lab("up")))
    else:
        lab("up")
    for what, secs in times:
        print("%-55s %7.1f s" % (what, secs))
    print()
    print("SSH round trip, %d samples per node, ms (median / mean), ratio = median / baseline median" % a.n)
    print("%-14s %17s %17s %7s %17s %7s" % ("node", "podman exec", "ssh new conn", "ratio",
                                            "ssh ControlPersist", "ratio"))
    for name, base, fresh, reused in latency(a.n):
        mb = statistics.median(base)

        def fmt(v):
            return "%7.1f / %7.1f" % (statistics.median(v), statistics.mean(v))
        print("%-14s %17s %17s %6.2fx %17s %6.2fx" % (
            name, fmt(base), fmt(fresh), statistics.median(fresh) / mb,
            fmt(reused), statistics.median(reused) / mb))


if __name__ == "__main__":
    main()
