#!/usr/bin/env python3
"""The main job on the embedded lab (`make demo`): one wave end to end.

  preflight -> onboard -> validate (playbooks/wave.yml, wave1)
  -> driver-upgrade rehearsal on the wave's spare node (signed change record)
  -> change-managed removal of that node, then onboarding it again
  -> overflow failure drill on both local queues
  -> records/index.html, the page a person reads first.

Approver keys are generated for the run under .lab/demo/ (never committed); the change
records are signed with them exactly as an approver would with `bin/hgpu-sign-change`, and
the boundary naming them is signed with the lab's pinned boundary signer (.lab/approvers,
`bin/hgpu-sign-change sign-boundary`) as a site's security owner signs theirs.
Each step's Ansible output goes to records/demo/<step>.log; the terminal gets a live line at least
every 5 s (step, task done/listed, latest node, task, elapsed) and a summary line per step.
"""
import argparse
import datetime
import html
import json
import os
import re
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "lifecycle"))
import lifecycle_support as approvals  # noqa: E402  (keys, boundary with keys, signed records)
import yaml  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, ".collections"))
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.drills import UNSAFE_NAMES as UNSAFE_DRILLS  # noqa: E402

BIN = os.path.dirname(sys.executable)
RECORDS = os.path.join(ROOT, "records")
LOGS = os.path.join(RECORDS, "demo")
DEMO_DIR = os.path.join(ROOT, ".lab", "demo")
INVENTORY = os.path.join(ROOT, "inventories", "lab", "hosts.yml")


TASK_RE = re.compile(r"^(TASK|RUNNING HANDLER) \[(.*)\]")
RESULT_RE = re.compile(r"^(ok|changed|skipping|fatal|failed|included): \[([^\]]+)\]")
STATUS_EVERY = 5.0  # seconds between live lines when nothing new happens


def planned_tasks(cmd, env):
    """Tasks the playbook lists (ansible-playbook --list-tasks), the denominator of the live line;
    tasks included at run time are not listed, so the count is a floor."""
    res = subprocess.run(cmd + ["--list-tasks"], capture_output=True, text=True, env=env, cwd=ROOT,
                         stdin=subprocess.DEVNULL, check=False)
    return sum(1 for ln in res.stdout.splitlines() if ln.startswith("      ") and "TAGS:" in ln) or None


class Progress:
    """Follows the playbook's output and prints a live line: step, task done/total, the node the
    latest result came from, elapsed seconds. A line at least every STATUS_EVERY seconds."""

    def __init__(self, step, total):
        self.step, self.total = step, total
        self.tasks, self.task, self.node, self.results = 0, "starting", "-", 0
        self.start = time.monotonic()
        self.lock = threading.Lock()

    def feed(self, line):
        m = TASK_RE.match(line)
        with self.lock:
            if m:
                self.tasks += 1
                self.task = m.group(2)
                return
            m = RESULT_RE.match(line)
            if m:
                self.results += 1
                self.node = m.group(2).split(" ")[0]

    def line(self):
        with self.lock:
            # The listed count leaves out tasks included at run time: a floor, shown as such.
            total = " (%d listed)" % self.total if self.total else ""
            return "    [%s] task %d%s  %-22s  %-46.46s %5.0f s" % (
                self.step, self.tasks, total, self.node, self.task, time.monotonic() - self.start)


def site_inventory(boundary):
    """The lab's inventory plus one that gives every host the demo's boundary (hgpu_boundary_path
    is a site setting the destructive playbooks take only from the inventory)."""
    def names(group):
        found = list((group.get("hosts") or {}))
        for child in (group.get("children") or {}).values():
            found += names(child or {})
        return found
    with open(INVENTORY) as fh:
        hosts = names(yaml.safe_load(fh)["all"])
    path = os.path.join(DEMO_DIR, "site.json")
    with open(path, "w") as fh:
        json.dump({"all": {"hosts": {h: {"hgpu_boundary_path": boundary} for h in hosts}}}, fh)
    return ["-i", INVENTORY, "-i", path]


def control_inventory(boundary):
    """localhost (the drill's play runs there) with the demo's boundary, as site_inventory gives the nodes."""
    path = os.path.join(DEMO_DIR, "control.json")
    with open(path, "w") as fh:
        json.dump({"all": {"hosts": {"localhost": {"ansible_connection": "local", "hgpu_boundary_path": boundary,
                                                   "ansible_python_interpreter": sys.executable}}}}, fh)
    return path


def playbook(step, name, *extra, site=()):
    """Run one playbook, log to records/demo/<step>.log with a live line on the terminal,
    return (ok, seconds, log path)."""
    os.makedirs(LOGS, exist_ok=True)
    log = os.path.join(LOGS, "%s.log" % step)
    cmd = [os.path.join(BIN, "ansible-playbook"), os.path.join(ROOT, "playbooks", name), *site]
    for item in extra:
        cmd += ["-e", item]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "tests", "lab", "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=BIN + os.pathsep + os.environ.get("PATH", ""), PYTHONUNBUFFERED="1")
    progress = Progress(step, planned_tasks(cmd, env))
    start = time.monotonic()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                stdin=subprocess.DEVNULL, text=True, bufsize=1)

        def pump():
            for ln in proc.stdout:
                fh.write(ln)
                progress.feed(ln)
        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        while reader.is_alive():
            reader.join(STATUS_EVERY)
            if reader.is_alive():
                print(progress.line(), flush=True)
        rc = proc.wait()
    took = time.monotonic() - start
    result = "ok" if rc == 0 else "FAILED rc=%d" % rc
    print("  %-28s %s in %5.1f s, %d tasks   (%s)" % (step, result, took, progress.tasks, os.path.relpath(log, ROOT)),
          flush=True)
    return rc == 0, took, log


def signed_record(name, action, target, requester, signer, manifests=None):
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    text = approvals.record_text(manifests=manifests,
        change_id="CHG-DEMO-%s-%s" % (action.upper().replace("_", "-"), now.strftime("%Y%m%d%H%M%S")),
        action=action, targets=(target,), requester=requester,
        start=now - datetime.timedelta(minutes=5), end=now + datetime.timedelta(hours=2),
        reason="lab demo: %s rehearsal on the wave's spare node" % action)
    return approvals.write_record(DEMO_DIR, name, text, signer_key=APPROVERS["keys"][signer])


def newest(pattern_dir, suffix):
    found = []
    for base, _dirs, files in os.walk(pattern_dir):
        found += [os.path.join(base, f) for f in files if f.endswith(suffix) and not f.startswith(".")]
    return sorted(found, key=os.path.getmtime)


def json_beside(page):
    """The JSON a record page was rendered from: same base name (.json, or .jsonl for the audit
    trail); a preflight folder's index.html sits beside preflight.json."""
    stem = os.path.splitext(page)[0]
    names = [stem + ".json", stem + ".jsonl"]
    if os.path.basename(stem) == "index":
        names.append(os.path.join(os.path.dirname(page), "preflight.json"))
    return next((n for n in names if os.path.exists(n)), None)


# The sections of records/index.html: (title, folder under records/); each lists its newest pages.
SECTIONS = (("Preflight records", "wave1"), ("Validation and wave records", "validation"),
            ("Onboarding manifests", "manifests"), ("Upgrade records", "upgrades"),
            ("Removal records", "removals"), ("Overflow drill reports", "overflow"),
            ("Audit trail", "audit"))


def write_index(results):
    """records/index.html: one self-contained page linking every record page of this run, each
    with its JSON beside it."""
    links = []
    for title, sub in SECTIONS:
        pages = newest(os.path.join(RECORDS, sub), ".html")[-8:]
        links.append((title, [(os.path.relpath(f, RECORDS), json_beside(f) and os.path.relpath(json_beside(f), RECORDS))
                              for f in pages]))
    rows = "".join("<tr><td>%s</td><td class=%s>%s</td><td>%.1f s</td><td><a href='%s'>log</a></td></tr>"
                   % (html.escape(s), "ok" if ok else "bad", "ok" if ok else "FAILED", t,
                      html.escape(os.path.relpath(log, RECORDS)))
                   for s, (ok, t, log) in results.items())
    sections = "".join("<h2>%s</h2><ul>%s</ul>" % (html.escape(t), "".join(
        "<li><a href='%s'>%s</a>%s</li>" % (html.escape(page), html.escape(page), " (<a href='%s'>%s</a>)" % (
            html.escape(data), html.escape(os.path.basename(data))) if data else "")
        for page, data in fs) or "<li>none</li>")
        for t, fs in links)
    page = ("<!doctype html><meta charset=utf-8><title>hybridgpu.fleet lab run</title><style>"
            "body{font:14px system-ui,sans-serif;margin:2em;max-width:70em}td{padding:.2em .8em}"
            ".ok{color:#176f2c}.bad{color:#b00020;font-weight:bold}</style>"
            "<h1>hybridgpu.fleet: lab run %s</h1><table><tr><th>step</th><th>result</th><th>time</th>"
            "<th></th></tr>%s</table><p>Each record is a page to read first, with its JSON beside it.</p>%s"
            % (html.escape(datetime.datetime.now().isoformat(timespec="seconds")), rows, sections))
    os.makedirs(RECORDS, exist_ok=True)
    tmp = os.path.join(RECORDS, ".index.html.tmp")
    with open(tmp, "w") as fh:
        fh.write(page)
    os.replace(tmp, os.path.join(RECORDS, "index.html"))
    return links


def main():
    global APPROVERS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spare", default="owned-a100-2", help="node for the upgrade and removal rehearsals")
    ap.add_argument("--drill-runs", default="1",
                    help="runs per drill scenario (the spread runs until the figures settle are make bench's)")
    args = ap.parse_args()

    os.makedirs(DEMO_DIR, exist_ok=True)
    # The boundary is signed by the lab's pinned boundary signer (hgpu_boundary_signers).
    APPROVERS = approvals.make_approvers(DEMO_DIR, signer=approvals.lab_boundary_signer())
    boundary = APPROVERS["boundary"]
    results = {}
    print("hybridgpu.fleet lab run (logs under records/demo/)", flush=True)

    # Validation step 5 reads the lab's Prometheus (started by `lab up`) and induces an Xid on
    # the spare; step 6 cuts the spare's management link for a window.
    results["wave (preflight, onboard, validate)"] = playbook("wave", "wave.yml", json.dumps({
        "wave": "wave1", "wave_link_nodes": [args.spare], "validate_prometheus_url": "http://127.0.0.1:9090",
        "validate_fault_node": args.spare}))

    upgrade = signed_record("upgrade.yml", "driver_upgrade", args.spare, "ops-oncall", "ops-lead")
    results["upgrade rehearsal"] = playbook(
        "upgrade", "upgrade_rehearsal.yml", "upgrade_target=%s" % args.spare, "upgrade_executor=ops-oncall",
        "change_record_path=%s" % upgrade, "validate_prometheus_url=http://127.0.0.1:9090",
        site=site_inventory(boundary))

    # the approver signs the digest of the onboarding manifest the removal undoes
    removal = signed_record("remove.yml", "remove", args.spare, "ops-lead", "sec-owner",
                            manifests={args.spare: os.path.join(RECORDS, "manifests", args.spare + ".json")})
    results["removal rehearsal"] = playbook(
        "remove", "remove.yml", "remove_targets=%s" % args.spare, "remove_executor=ops-lead",
        "change_record_path=%s" % removal, site=site_inventory(boundary))
    # The rehearsal proved the exit; the node joins again so the estate stays whole.
    results["onboard the spare again"] = playbook(
        "reonboard", "onboard.yml", "onboard_wave=%s" % args.spare, "onboard_wave_name=wave1")

    # The lab's kubelet stand-in starts a pod within half a second, so the safe drills look at their
    # test job every second (their test job runs three looks long). The unsafe drills break the
    # lab's shared parts: a record signed by an approver of overflow_drill names each of them.
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    drill = approvals.write_record(DEMO_DIR, "drill.yml", approvals.record_text(
        change_id="CHG-DEMO-OVERFLOW-DRILL-%s" % now.strftime("%Y%m%d%H%M%S"), action="overflow_drill",
        playbook="overflow_drill.yml", targets=UNSAFE_DRILLS, requester="ops-lead",
        start=now - datetime.timedelta(minutes=5), end=now + datetime.timedelta(hours=2),
        reason="lab demo: the overflow failure drill on the disposable lab"), signer_key=APPROVERS["keys"]["sec-owner"])
    results["overflow drill"] = playbook(
        "overflow-drill", "overflow_drill.yml", "overflow_drill_min_runs=%s" % args.drill_runs,
        "overflow_drill_max_runs=%s" % args.drill_runs, "overflow_drill_poll_s=1", "overflow_drill_executor=ops-lead",
        "change_record_path=%s" % drill, site=site_inventory(boundary) + ["-i", control_inventory(boundary)])

    links = write_index(results)
    print("\nRecords (open records/index.html):")
    for title, pages in links:
        print("  %s:" % title)
        for page, data in pages:
            print("    records/%s%s" % (page, "  (JSON: records/%s)" % data if data else ""))
        if not pages:
            print("    none")
    failed = [s for s, (ok, _t, _l) in results.items() if not ok]
    if failed:
        print("\nFAILED steps: %s" % ", ".join(failed))
        return 1
    print("\nAll steps passed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
