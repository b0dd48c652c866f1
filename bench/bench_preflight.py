#!/usr/bin/env python3
"""Preflight wall time for the lab wave and SSH round trips per node, each against a plain
baseline measured in the same run.

- wall time: `ansible-playbook playbooks/preflight.yml` vs. a plain `ssh <node> true` to every
  node of the wave, one after the other (the cost of merely touching each node once);
- round trips: `SSH: EXEC` lines per host in the playbook's -vvvv output vs. the same count
  for a one-task `ansible -m ping` (one module run = the floor per node).
Traffic goes only to the lab (10.213.77.0/24). Usage: bench/bench_preflight.py [--runs N]
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"],
           ANSIBLE_CONFIG=os.path.join(ROOT, "tests", "lab", "ansible.cfg"))
HOSTS = {"owned-a100-1": "10.213.77.11", "owned-a100-2": "10.213.77.12", "owned-l40s-1": "10.213.77.13",
         "cloud-h200-1": "10.213.77.21", "cloud-h200-2": "10.213.77.22"}
EXEC = re.compile(r"<(10\.213\.77\.\d+)> SSH: EXEC")


def count_exec(text):
    by_ip = collections.Counter(EXEC.findall(text))
    return {name: by_ip.get(ip, 0) for name, ip in HOSTS.items()}


def timed(cmd):
    start = time.monotonic()
    res = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True)
    return time.monotonic() - start, res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    key = os.path.join(ROOT, ".lab", "ssh", "id_ed25519")
    ssh_opts = ["-i", key, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "LogLevel=ERROR", "-o", "BatchMode=yes"]
    out = {"runs": []}
    for _ in range(args.runs):
        base_s = 0.0
        for ip in HOSTS.values():
            dur, res = timed(["ssh"] + ssh_opts + ["root@" + ip, "true"])
            if res.returncode != 0:
                sys.exit("baseline ssh to %s failed: %s" % (ip, res.stderr))
            base_s += dur
        with tempfile.TemporaryDirectory() as records:
            pf_s, pf = timed(["ansible-playbook", "-vvvv", "playbooks/preflight.yml",
                              "-e", "preflight_records_dir=%s" % records])
        if pf.returncode != 0:
            sys.exit("preflight failed:\n" + pf.stdout[-3000:])
        _, ping = timed(["ansible", "owned:cloud", "-vvvv", "-m", "ansible.builtin.ping"])
        pf_rt, ping_rt = count_exec(pf.stdout), count_exec(ping.stdout)
        out["runs"].append({
            "preflight_wall_s": round(pf_s, 2), "baseline_ssh_true_all_nodes_s": round(base_s, 2),
            "wall_ratio": round(pf_s / base_s, 1) if base_s else None,
            "ssh_exec_per_node": pf_rt, "baseline_module_run_exec_per_node": ping_rt,
            "round_trip_ratio_per_node": {h: round(pf_rt[h] / ping_rt[h], 1) if ping_rt[h] else None
                                          for h in HOSTS},
        })
    print(json.dumps(out, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
