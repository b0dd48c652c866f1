#!/usr/bin/env python3
"""Benchmark a wave on the lab: wall time and SSH round trips per node for onboarding and
validation, and how they grow from 1 to 3 owned nodes.

    bench/bench_wave.py [--phases onboard,validate] [--sizes 1,2,3] [--repeat 1] [--json FILE]

For each wave size N (the first N of owned-a100-1, owned-a100-2, owned-l40s-1):
- baseline: a plain playbook with one `ansible.builtin.command: true` task on the same
  hosts (Ansible start-up + one SSH round trip per host), measured in the same run;
- same-shape plain play: a plain playbook with as many tasks per host as the first onboarding
  rerun measured (its PLAY RECAP), as many of them a command on the node as it made SSH
  invocations per node and the others a `debug` on the control host: what ansible-core itself
  costs for a play of that shape, and how that grows with the wave, in the same run;
- onboard: playbooks/onboard.yml limited to those hosts, measuring the idempotent rerun (what a
  wave rerun costs): before the rows, a lab without wave1's preflight record gets one, and the
  three nodes are onboarded once (printed as the preparation);
- validate: playbooks/validate.yml with the NCCL baseline (`--tags baseline`) followed by
  steps inventory, reference_job, collectives and placement (link interruption and telemetry
  are fixed waits by design and are left out).
With --light 3,12,24 the wave is measured at scale instead: `tests/lab/lab up --owned <sum>` adds
that many light owned nodes (config.light_nodes), preflight runs once for the wave of all owned
nodes (wave_scale), and each size onboards its own fresh light nodes, first run then rerun,
counting also the Kubernetes API calls the control host made (the emulators' request logs).

SSH round trips are counted by an ssh wrapper (ANSIBLE_SSH_EXECUTABLE) that logs every
invocation; with pipelining and ControlPersist each invocation is one round trip on the
shared connection. Reported: wall seconds, ratio to the baseline, seconds and SSH calls per
node. Records go to a temporary folder; the lab is left as it was found (onboarding is
idempotent; validation cleans up its Jobs and restores what it changes).
"""
import argparse
import json
import os
import shutil
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODES = ["owned-a100-1", "owned-a100-2", "owned-l40s-1"]
MATRIX = {
    "a100-535": {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_count": 8, "gpu_memory_mib": 81920},
    "l40s-550": {"gpu_model": "NVIDIA L40S", "gpu_count": 4, "gpu_memory_mib": 46068},
}
PLAIN = """---
- name: Plain baseline, one command per host
  hosts: all
  gather_facts: false
  tasks:
    - name: Run true
      ansible.builtin.command: /bin/true
      changed_when: false
"""


RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=\d+\s+unreachable=\d+\s+failed=(\d+)\s+skipped=(\d+)", re.M)


def task_results(output):
    """Task results per host (ok, failed and skipped) from the PLAY RECAP: the tasks the play ran or
    evaluated for that host."""
    return dict((m.group(1), int(m.group(2)) + int(m.group(3)) + int(m.group(4))) for m in RECAP.finditer(output))


def shape_playbook(folder, tasks, node_runs):
    """A plain play of the given shape: per host `tasks` tasks, `node_runs` of them a command on the
    node (one SSH round trip each), spread evenly, the others a debug message on the control host.
    It measures what ansible-core itself costs for a play of that shape."""
    every = max(1, tasks // max(1, node_runs))
    body = []
    for i in range(tasks):
        if node_runs and i % every == every - 1 and sum(1 for t in body if "command" in t) < node_runs:
            body.append("    - name: Node task %d\n      ansible.builtin.command: /bin/true\n"
                        "      changed_when: false\n" % i)
        else:
            body.append("    - name: Control task %d\n      ansible.builtin.debug:\n"
                        "        msg: \"{{ inventory_hostname }} %d\"\n" % (i, i))
    path = os.path.join(folder, "shape.yml")
    with open(path, "w") as fh:
        fh.write("---\n- name: Plain play of the onboarding rerun's shape\n  hosts: all\n"
                 "  gather_facts: false\n  tasks:\n" + "".join(body))
    return path


def ssh_wrapper(folder):
    """An ssh that logs one line per invocation, then runs the real ssh."""
    log = os.path.join(folder, "ssh.log")
    path = os.path.join(folder, "ssh")
    real = shutil.which("ssh")
    with open(path, "w") as fh:
        fh.write("#!/bin/sh\necho \"$$\" >> %s\nexec %s \"$@\"\n" % (log, real))
    os.chmod(path, 0o755)
    return path, log


def workspace():
    """A temporary folder with the ssh wrapper, its log, the plain baseline playbook and a
    records folder (the lab inventory's hgpu_lab_records_dir: the records variable itself is
    pinned in group_vars and refused as an extra var)."""
    work = tempfile.mkdtemp(prefix="hgpu-bench-wave-")
    wrapper, log = ssh_wrapper(work)
    plain = os.path.join(work, "plain.yml")
    with open(plain, "w") as fh:
        fh.write(PLAIN)
    return work, wrapper, log, plain, os.path.join(work, "records")


def lab_records():
    """The lab's records folder, as the generated lab inventory names it."""
    with open(os.path.join(ROOT, "inventories", "lab", "hosts.yml")) as fh:
        found = re.search(r'hgpu_lab_records_dir: "([^"]+)"', fh.read())
    if not found:
        sys.exit("inventories/lab/hosts.yml names no records folder: run tests/lab/lab up first")
    return found.group(1)


def prepare(wrapper, log):
    """Make the measured runs reruns on a lab in any state: a lab that has not run a wave yet gets
    wave1's preflight record, and the nodes their first onboarding (printed, not in the rows)."""
    if not os.path.exists(os.path.join(lab_records(), "wave1", "preflight.json")):
        t, calls, _ = run(os.path.join("playbooks", "preflight.yml"), ["all"], wrapper, log,
                          extra={"preflight_wave": "wave1"})
        print("preparation: preflight of wave1, %.1fs, %d SSH invocations" % (t, calls), flush=True)
    t, calls, _ = run(os.path.join("playbooks", "onboard.yml"), NODES, wrapper, log,
                      extra={"onboard_wave": "owned", "onboard_wave_name": "wave1"})
    print("preparation: onboarding of %d nodes (a rerun where they are onboarded already), %.1fs, "
          "%d SSH invocations" % (len(NODES), t, calls), flush=True)


def run(playbook, hosts, wrapper, log, extra=None, tags=None, forks=None):
    if os.path.exists(log):
        os.unlink(log)
    cmd = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), playbook, "--limit", ",".join(hosts), "-vvv"]
    if forks:
        cmd += ["--forks", str(forks)]
    if extra:
        cmd += ["-e", json.dumps(extra)]
    if tags:
        cmd += ["--tags", tags]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "tests", "lab", "ansible.cfg"),
               ANSIBLE_SSH_EXECUTABLE=wrapper,
               PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"])
    start = time.monotonic()
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    took = time.monotonic() - start
    if res.returncode != 0:
        sys.exit("%s on %s failed (rc=%d):\n%s" % (playbook, hosts, res.returncode, res.stdout[-4000:]))
    calls = 0
    if os.path.exists(log):
        with open(log) as fh:
            calls = sum(1 for _ in fh)
    by_task = ssh_by_task(res.stdout)
    by_task[RESULTS] = task_results(res.stdout)
    return took, calls, by_task


RESULTS = "(task results per host)"
TASK = re.compile(r"^(?:TASK|RUNNING HANDLER) \[(.*)\]")
EXEC = re.compile(r"^<([^>]+)> SSH: EXEC ")


def ssh_by_task(output):
    """SSH invocations per task and host, read from ansible-playbook -vvv: the linear strategy
    runs one task on every host before the next, so each `SSH: EXEC` line belongs to the task
    header above it."""
    counts, task = {}, "(before the first task)"
    for line in output.splitlines():
        m = TASK.match(line)
        if m:
            task = m.group(1)
            continue
        m = EXEC.match(line)
        if m:
            per_host = counts.setdefault(task, {})
            per_host[m.group(1)] = per_host.get(m.group(1), 0) + 1
    return counts


def print_tasks(phase, counts, hosts):
    """What each SSH invocation of the phase was for, per node (the most a node needed)."""
    rows = [(max(per.values()), task) for task, per in counts.items() if task != RESULTS]
    total = sum(n for n, _ in rows)
    print("  %s, %d node(s): %d SSH invocations on the busiest node per task, summed over %d tasks" % (
        phase, len(hosts), total, len(rows)))
    for n, task in rows:
        print("    %2d  %s" % (n, task))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phases", default="onboard,validate")
    ap.add_argument("--sizes", default="1,2,3")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", help="also write the results as JSON to this file")
    ap.add_argument("--light", help="wave sizes on light owned nodes, e.g. 3,12,24 (see above)")
    args = ap.parse_args()
    if args.light:
        return scale(sorted(int(s) for s in args.light.split(",")), args.json)
    phases = [p for p in args.phases.split(",") if p]
    sizes = [int(s) for s in args.sizes.split(",")]
    work, wrapper, log, plain, records = workspace()
    results = []
    shape = shaped = None
    try:
        if "onboard" in phases or "validate" in phases:
            prepare(wrapper, log)
        for size in sizes:
            hosts = NODES[:size]
            for _ in range(args.repeat):
                base_t, base_calls, _ = run(plain, hosts, wrapper, log)
                row = {"nodes": size, "baseline_s": round(base_t, 2), "baseline_ssh": base_calls}
                if "onboard" in phases:
                    t, calls, by_task = run(os.path.join("playbooks", "onboard.yml"), hosts, wrapper, log,
                                            extra={"onboard_wave": "owned", "onboard_wave_name": "wave1"})
                    if calls < size:
                        sys.exit("onboarding touched no node: did its gate stop them? It reads the wave's "
                                 "preflight record (records/wave1/preflight.json)")
                    row.update(onboard_s=round(t, 2), onboard_ssh=calls)
                    print_tasks("onboard", by_task, hosts)
                    if shape is None:
                        shape = (max(by_task[RESULTS].values()), calls // size)
                        shaped = shape_playbook(work, *shape)
                        print("  same-shape plain play: %d tasks per node, %d of them a command on the node"
                              % shape, flush=True)
                    row["shape_s"] = round(run(shaped, hosts, wrapper, log)[0], 2)
                if "validate" in phases:
                    ev = {"validate_hosts": "owned", "validate_wave": "bench", "validate_matrix": MATRIX,
                          "hgpu_lab_records_dir": records, "validate_baseline_runs": 1,
                          "validate_steps": ["inventory", "reference_job", "collectives", "placement"]}
                    bt, bcalls, _ = run(os.path.join("playbooks", "validate.yml"), hosts, wrapper, log,
                                        extra=ev, tags="baseline")
                    t, calls, by_task = run(os.path.join("playbooks", "validate.yml"), hosts, wrapper, log, extra=ev)
                    print_tasks("validate", by_task, hosts)
                    row.update(nccl_baseline_s=round(bt, 2), nccl_baseline_ssh=bcalls,
                               validate_s=round(t, 2), validate_ssh=calls)
                results.append(row)
                print_row(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_growth(results, phases)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


def print_row(row):
    n = row["nodes"]
    parts = ["%d node(s): baseline %.1fs (%d ssh)" % (n, row["baseline_s"], row["baseline_ssh"])]
    for phase in ("onboard", "nccl_baseline", "validate"):
        if phase + "_s" in row:
            parts.append("%s %.1fs = %.1fx baseline, %.1fs and %.0f ssh per node" % (
                phase, row[phase + "_s"], row[phase + "_s"] / row["baseline_s"],
                row[phase + "_s"] / n, row[phase + "_ssh"] / n))
        if phase == "onboard" and "shape_s" in row:
            parts.append("same-shape plain play %.1fs" % row["shape_s"])
    print("; ".join(parts), flush=True)


def print_growth(results, phases):
    if len(results) < 2:
        return
    first, last = results[0], results[-1]
    for phase in [p for p in ("onboard", "validate") if p in phases]:
        shape = ""
        if phase == "onboard" and "shape_s" in first:
            shape = ", same-shape plain play x%.2f" % (last["shape_s"] / first["shape_s"])
        print("%s: %d -> %d nodes, wall time x%.2f (baseline x%.2f%s), ssh calls x%.2f" % (
            phase, first["nodes"], last["nodes"], last[phase + "_s"] / first[phase + "_s"],
            last["baseline_s"] / first["baseline_s"], shape, last[phase + "_ssh"] / max(1, first[phase + "_ssh"])))


LAB = os.path.join(ROOT, "tests", "lab", "lab")
API_LOGS = [os.path.join(ROOT, ".lab", "k8s", c, "emulator.log") for c in ("onprem", "cloud")]


def api_marks():
    return [os.path.getsize(p) if os.path.exists(p) else 0 for p in API_LOGS]


def api_calls_since(marks):
    """Requests the control host made (not the nodes' kubelets) since `marks`, read from the
    emulators' request logs: `<time> <cluster> <client> <user> <method> <path> <code> <ms>`."""
    calls = 0
    for path, mark in zip(API_LOGS, marks):
        if not os.path.exists(path):
            continue
        with open(path, "rb") as fh:
            fh.seek(mark)
            for line in fh.read().decode("utf-8", "replace").splitlines():
                parts = line.split()
                if len(parts) > 4 and not parts[3].startswith("system:node:"):
                    calls += 1
    return calls


def scale(sizes, json_out):
    """Onboarding at each size on its own fresh light nodes: first run, then rerun."""
    total = sum(sizes)
    env = dict(os.environ, PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"])
    t0 = time.monotonic()
    # Light nodes a previous run onboarded go first, so every "first" run is a first onboarding.
    for cmd in ([LAB, "up"], [LAB, "up", "--owned", str(total)]):
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit("%s failed:\n%s%s" % (" ".join(cmd[1:]), res.stdout[-3000:], res.stderr[-3000:]))
    print("lab up --owned %d: %.1fs" % (total, time.monotonic() - t0), flush=True)
    light = ["owned-light-%02d" % i for i in range(1, total + 1)]
    work, wrapper, log, plain, records = workspace()
    forks = max(sizes)
    results = []
    shape = shaped = None
    try:
        t, calls, _ = run(os.path.join("playbooks", "preflight.yml"), ["all"], wrapper, log, forks=forks,
                          extra={"preflight_wave": "wave_scale"})
        print("preflight of wave_scale (%d owned nodes and the cloud rows): %.1fs, %d SSH invocations" % (
            total + 3, t, calls), flush=True)
        start = 0
        for size in sizes:
            hosts = light[start:start + size]
            start += size
            base_t, base_calls, _ = run(plain, hosts, wrapper, log, forks=forks)
            row = {"nodes": size, "baseline_s": round(base_t, 2), "baseline_ssh": base_calls}
            # The lab's records folder: onboarding's gate refuses a records folder given as an
            # extra var, and reads the wave's preflight record from it.
            ev = {"onboard_wave": "wave_scale"}
            for kind in ("first", "rerun"):
                marks = api_marks()
                t, calls, by_task = run(os.path.join("playbooks", "onboard.yml"), hosts, wrapper, log,
                                        extra=ev, forks=forks)
                row.update({"onboard_%s_s" % kind: round(t, 2), "onboard_%s_ssh" % kind: calls,
                            "onboard_%s_api" % kind: api_calls_since(marks)})
                if kind == "first":
                    print_tasks("onboard (first run)", by_task, hosts)
            if shape is None:
                shape = (max(by_task[RESULTS].values()), row["onboard_rerun_ssh"] // size)
                shaped = shape_playbook(work, *shape)
                print("  same-shape plain play (the rerun's): %d tasks per node, %d of them a command on the node"
                      % shape, flush=True)
            row["shape_s"] = round(run(shaped, hosts, wrapper, log, forks=forks)[0], 2)
            results.append(row)
            print("%d light node(s): baseline %.1fs (%d ssh), same-shape plain play %.1fs" % (
                size, base_t, base_calls, row["shape_s"]), flush=True)
            for kind in ("first", "rerun"):
                t = row["onboard_%s_s" % kind]
                print("  onboard %-5s %6.1fs = %5.1fx baseline, %.2fs, %.1f ssh and %.1f API calls per node" % (
                    kind, t, t / base_t, t / size, row["onboard_%s_ssh" % kind] / size,
                    row["onboard_%s_api" % kind] / size), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if len(results) > 1:
        first = results[0]
        for last in results[1:]:
            for kind in ("first", "rerun"):
                print("onboard %s: %d -> %d nodes, wall time x%.2f (target 2.5 at 3 -> 24; linear x%.1f), "
                      "baseline x%.2f, same-shape plain play x%.2f" % (
                          kind, first["nodes"], last["nodes"],
                          last["onboard_%s_s" % kind] / first["onboard_%s_s" % kind],
                          last["nodes"] / first["nodes"], last["baseline_s"] / first["baseline_s"],
                          last["shape_s"] / first["shape_s"]))
    if json_out:
        with open(json_out, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
