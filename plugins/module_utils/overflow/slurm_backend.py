# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Overflow local queue on a real Slurm, driven over SSH on the Slurm controller.

The overflow job ID is Slurm's numeric job ID, which never changes through hold and release; the
job name is the user's and identifies nothing. The job class comes from facts the site sets, never from the user:
the job's partition, QOS and account, matched against the `slurm` block of each class in the job
classes file (jobclass.slurm_class). The Comment carries only the collection's own markers: holding
appends `ovf-hold=<epoch>` so our holds are told apart from holds someone else placed.
- hold: `scontrol hold` (refused by Slurm once the job runs: ALREADY_STARTED), then the marker.
- release: `scontrol release`, marker removed.
- withdraw: marker `ovf-withdrawn=<epoch>`, then `scancel` (the job finished in the cloud).
- read_jobs: one SSH round trip for a batch of jobs runs `scontrol --json show job` (where
  Slurm has it, else squeue -o with random marks, as below) and `scontrol write batch_script <id> -` for each;
  parsed by module_utils/parsers/slurm_job.py into the job's TRES, working directory and batch
  script (what carry.slurm_pod_spec runs).
- queue wait: one SSH round trip per poll runs `squeue --json` (every job Slurm knows) and
  `sprio`; where squeue has no --json, `squeue -h -a -t all -o` with a record mark and a field
  separator drawn at random for that call, so no job name or comment can move a field. The user's
  free text (name, comment) is never split on. A job whose fields cannot be read is refused on
  its own (QueueSnapshot.refused names it and why) and every other job is judged. squeue's
  StartTime is the scheduler's own start estimate (ignored when Slurm only parks it a year ahead).
"""
from __future__ import annotations

import calendar
import os
import re
import secrets
import shlex
import subprocess
import tempfile
import time

from ..parsers import slurm, slurm_job
from . import backends
from . import jobclass
from .remote import UnsafeName, check_name, command, ssh_options
from .trigger import QueueJob, QueueSnapshot

# squeue -o fields of the fallback read, all but the comment set by Slurm or the site; the comment last.
# %A is the numeric job ID (one per array task).
PLAIN_FIELDS = (("slurm_id", "%A"), ("state", "%T"), ("reason", "%r"), ("submit", "%V"), ("start", "%S"),
                ("cpus", "%C"), ("partition", "%P"), ("qos", "%q"), ("account", "%a"), ("comment", "%k"))
# What read_jobs asks squeue for where scontrol has no --json: the scontrol names job_request reads.
REQUEST_FIELDS = (("JobId", "%A"), ("JobState", "%T"), ("Partition", "%P"), ("NumCPUs", "%C"), ("TimeLimit", "%l"),
                  ("MinMemoryNode", "%m"), ("TresPerNode", "%b"), ("WorkDir", "%Z"), ("Command", "%o"))
SITE_NAME = re.compile(r"^[A-Za-z0-9_.+-]*$")     # partition, QOS and account names (admin-made)
FAR = 200 * 86400     # a start "estimate" further away than this is Slurm's placeholder, not a forecast


class SlurmError(Exception):
    pass


def _epoch(text):
    if not text or text in ("N/A", "Unknown", "None"):
        return None
    try:
        return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def comment_fields(text):
    out = {}
    for word in (text or "").split():
        k, dummy, v = word.partition("=")
        if k.startswith("ovf-"):
            out[k] = v
    return out


def _slurm_id(row):
    """The numeric Slurm job ID of a squeue row (refused when squeue gave anything else)."""
    sid = row["slurm_id"] or ""
    if not re.fullmatch(r"[0-9]+(_[0-9]+)?", sid):
        raise SlurmError("squeue gave job %r a Slurm job ID that is not a number: %r" % (row["name"], sid))
    return sid


def _comment(fields):
    return " ".join("%s=%s" % kv for kv in sorted(fields.items()))


class SlurmLocalQueue(backends.LocalQueue):
    """`classes` (job class name -> settings from jobclass.load) gives GPU count and type per job."""

    def __init__(self, host, ssh_key, user="root", classes=None, timeout=60, known_hosts=None):
        self.host = host
        self.known_hosts = known_hosts
        self.user = user
        self.ssh_key = ssh_key
        self.classes = classes or {}
        self.timeout = timeout
        self.round_trips = 0
        self._ctl = os.path.join(tempfile.gettempdir(), "ovf-slurm-%d-%%C" % os.getpid())

    def run(self, command, check=True):
        """One SSH round trip (multiplexed over a ControlMaster); returns (rc, stdout, stderr)."""
        self.round_trips += 1
        cmd = ["ssh", "-i", self.ssh_key] + ssh_options(self.known_hosts) + [
            "-o", "ControlMaster=auto", "-o", "ControlPersist=60", "-o", "ControlPath=" + self._ctl,
            "%s@%s" % (self.user, self.host), command]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout, check=False)
        if check and res.returncode != 0:
            tail = (res.stderr or res.stdout).strip()[-400:]
            raise SlurmError("on %s: %s: rc %d: %s" % (self.host, command[:120], res.returncode, tail))
        return res.returncode, res.stdout, res.stderr

    # -- queue reading ------------------------------------------------------------------------
    def jobs(self):
        """Every job Slurm still knows and could be read, oldest first:
        [{slurm_id, name, state, reason, held, submit, start, comment, cpus, partition, qos, account}]."""
        return self.read_queue()[0]

    def read_queue(self, extra=""):
        """(rows, refused, output of `extra`) from one SSH round trip: the queue (queue_command)
        then the shell command `extra`, whose output follows a mark of its own."""
        mark, sep = "ovf-%s" % secrets.token_hex(8), "|ovf-%s|" % secrets.token_hex(8)
        end = "--- ovf-%s" % secrets.token_hex(8)
        cmd = "%s; echo %s $?; %s true" % (queue_command(mark, sep), shlex.quote(end), extra + ";" if extra else "")
        dummy, out, dummy = self.run(cmd)
        queue, dummy, rest = out.partition(end + " ")
        status, dummy, rest = rest.partition("\n")
        if status.strip() != "0":
            raise SlurmError("on %s: squeue failed (rc %s): %s" % (self.host, status.strip() or "unknown",
                                                                   queue.strip()[-400:]))
        rows, refused = parse_queue(queue, mark, sep)
        return rows, refused, rest

    def _find(self, job_id, rows=None):
        """The Slurm job with this job ID (None when Slurm has no such job)."""
        rows = self.jobs() if rows is None else rows
        mine = [r for r in rows if r["slurm_id"] == str(job_id)]
        return mine[-1] if mine else None

    def read_jobs(self, job_ids):
        """{job ID: {"request": slurm_job.job_request, "script": slurm_job.parse_batch_script}} for
        each job, in one SSH round trip; a job Slurm does not know is left out."""
        ids = [str(j) for j in job_ids]
        for sid in ids:
            if not re.fullmatch(r"[0-9]+(_[0-9]+)?", sid):
                raise SlurmError("not a Slurm job ID: %r" % sid)
        if not ids:
            return {}
        mark = "--- ovf-%s" % secrets.token_hex(8)
        rec, sep = "ovf-%s" % secrets.token_hex(8), "|ovf-%s|" % secrets.token_hex(8)
        fmt = rec + sep.join(code for dummy, code in REQUEST_FIELDS)
        parts = []
        for sid in ids:
            parts.append("echo %s; { %s 2>/dev/null || { echo %s; %s 2>/dev/null; }; }; echo %s; %s 2>/dev/null" % (
                shlex.quote("%s job %s" % (mark, sid)), command("scontrol", "--json", "show", "job", sid),
                shlex.quote(rec + "-plain"), command("squeue", "-h", "-a", "-t", "all", "-j", sid, "-o", fmt),
                shlex.quote("%s script %s" % (mark, sid)), command("scontrol", "write", "batch_script", sid, "-")))
        dummy, out, dummy = self.run("; ".join(parts) + "; true")
        return parse_read(out, mark, rec, sep)

    @staticmethod
    def _state_of(row):
        if row is None:
            return backends.Q_GONE
        c = row["comment"]
        if "ovf-withdrawn" in c:
            return backends.Q_WITHDRAWN
        st = row["state"]
        if st == "PENDING":
            return backends.Q_HELD if (row["held"] and "ovf-hold" in c) else backends.Q_QUEUED
        if st in ("RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED"):
            return backends.Q_RUNNING
        if st in ("COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"):
            return backends.Q_DONE
        return backends.Q_GONE         # cancelled by someone else, or vanished

    def state(self, job_id):
        return self._state_of(self._find(job_id))

    # -- changes ----------------------------------------------------------------------------------
    def enqueue(self, job_id, job_class, script, cpus=1):
        """Submit a job (what a user does) to the partition, QOS and account that the job classes
        file maps to `job_class`. Returns the Slurm job ID."""
        try:
            check_name("job ID", job_id)
        except UnsafeName as exc:
            raise SlurmError(str(exc))
        match = (self.classes.get(job_class) or {}).get("slurm")
        if not match:
            raise SlurmError("job class %r has no slurm partition, qos or account in the job classes file" % (job_class,))
        args = ["sbatch", "--parsable", "-J", job_id, "-c", "%d" % cpus]
        for key, flag in (("partition", "--partition"), ("qos", "--qos"), ("account", "--account")):
            if match.get(key):
                args += [flag, match[key]]
        dummy, out, dummy = self.run(command(*(args + ["--wrap", script])))
        return out.strip().split(";")[0]

    def hold(self, job_id):
        row = self._find(job_id)
        st = self._state_of(row)
        if st in (backends.Q_GONE, backends.Q_WITHDRAWN):
            return backends.GONE
        if st in (backends.Q_RUNNING, backends.Q_DONE):
            return backends.ALREADY_STARTED
        if st == backends.Q_HELD:
            return backends.HELD
        c = dict(row["comment"], **{"ovf-hold": "%d" % time.time()})
        # Slurm refuses to hold a job that has started: that answer decides, in the same round trip.
        sid = _slurm_id(row)
        rc, out, err = self.run("%s && %s" % (command("scontrol", "hold", sid),
                                              command("scontrol", "update", "jobid=" + sid, "comment=" + _comment(c))),
                                check=False)
        if rc == 0:
            return backends.HELD
        after = self._state_of(self._find(job_id))
        if after in (backends.Q_RUNNING, backends.Q_DONE):
            return backends.ALREADY_STARTED
        if after in (backends.Q_GONE, backends.Q_WITHDRAWN):
            return backends.GONE
        raise SlurmError("scontrol hold of %s (%s) failed: %s" % (job_id, row["slurm_id"], (err or out).strip()))

    def release(self, job_id):
        row = self._find(job_id)
        if self._state_of(row) != backends.Q_HELD:
            return False
        c = dict(row["comment"])
        c.pop("ovf-hold", None)
        sid = _slurm_id(row)
        self.run("%s && %s" % (command("scontrol", "update", "jobid=" + sid, "comment=" + _comment(c)),
                               command("scontrol", "release", sid)))
        return True

    def withdraw(self, job_id):
        row = self._find(job_id)
        if self._state_of(row) != backends.Q_HELD:
            return False
        c = dict(row["comment"], **{"ovf-withdrawn": "%d" % time.time()})
        sid = _slurm_id(row)
        self.run("%s && %s" % (command("scontrol", "update", "jobid=" + sid, "comment=" + _comment(c)),
                               command("scancel", sid)))
        return True

    # -- trigger input ------------------------------------------------------------------------------
    def snapshot(self, now=None, total_gpus=None):
        """QueueSnapshot from one SSH round trip (squeue + sprio). GPUs per job come from its class;
        free GPUs of a type = total - GPUs of running jobs of that type."""
        now = time.time() if now is None else now
        rows, refused, sp = self.read_queue("sprio -h -o '%.15i %.10Y' 2>/dev/null")
        prio = {}
        for line in sp.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit():
                prio[parts[0]] = int(parts[1])
        jobs = []
        used = {}
        for r in rows:
            # the class comes from partition/QOS/account (site facts)
            cls_name = jobclass.slurm_class(self.classes, r["partition"], r["qos"], r["account"])
            cls = self.classes.get(cls_name, {})
            st = self._state_of(r)
            gpus, gtype = int(cls.get("gpus", 1)), cls.get("gpu_type")
            if st == backends.Q_RUNNING and gtype:
                used[gtype] = used.get(gtype, 0) + gpus
            if st not in (backends.Q_QUEUED, backends.Q_HELD, backends.Q_RUNNING) or not cls_name:
                continue
            start = r["start"] if r["start"] and r["start"] - now < FAR else None
            state = {backends.Q_QUEUED: "pending", backends.Q_HELD: "held", backends.Q_RUNNING: "running"}[st]
            jobs.append(QueueJob(r["slurm_id"], cls_name, r["submit"] or now, state, gpus, gtype,
                                 expected_start=start if state == "pending" else None))
        total = dict(total_gpus or {})
        free = dict((t, max(0, n - used.get(t, 0))) for t, n in total.items())
        snap = QueueSnapshot(now, jobs, free, total)
        snap.refused = refused
        snap.priorities = dict((r["slurm_id"], prio.get(r["slurm_id"])) for r in rows if r["slurm_id"] in prio)
        return snap


def queue_command(mark, sep):
    """`squeue --json`, else squeue -o with `mark` before each job and `sep` between its fields."""
    fmt = mark + sep.join(code for dummy, code in PLAIN_FIELDS)
    return "{ squeue --json 2>/dev/null || { echo %s; squeue -h -a -t all -o %s; }; }" % (
        shlex.quote(mark + "-plain"), shlex.quote(fmt))


def _plain_row(raw):
    """One squeue -o record -> row; ValueError names the field that cannot be read."""
    sid = raw["slurm_id"].strip()
    if not re.fullmatch(r"[0-9]+", sid):
        raise ValueError("job ID %r is not a number" % sid)
    state = raw["state"].strip()
    if not re.fullmatch(r"[A-Z_]+", state):
        raise ValueError("state %r is not a Slurm job state" % state)
    site = {}
    for key in ("partition", "qos", "account"):
        value = raw[key].strip()
        if not SITE_NAME.match(value):
            raise ValueError("%s %r is not a site name" % (key, value))
        site[key] = slurm._null(value)
    cpus = raw["cpus"].strip()
    reason = slurm._null(raw["reason"])
    held = reason or ""
    return dict(site, slurm_id=sid, name=None, state=state, reason=None if reason == "None" else reason,
                held="held" in held.lower() or held in ("JobHeldUser", "JobHeldAdmin"),
                submit=_epoch(raw["submit"].strip()), start=_epoch(raw["start"].strip()),
                cpus=int(cpus) if cpus.isdigit() else 0, comment=slurm._null(raw["comment"]))


def parse_queue(text, mark, sep):
    """(rows, refused) from queue_command's output: squeue --json, or the marked squeue -o records.
    A job that cannot be read is refused on its own: {job_id, reason}."""
    names = [name for name, dummy in PLAIN_FIELDS]
    if (mark + "-plain") in (text or ""):
        got = slurm.split_marked(text.split(mark + "-plain", 1)[1], mark, sep, names)
        rows, refused = [], list(got["refused"])
        for raw in got["rows"]:
            try:
                rows.append(_plain_row(raw))
            except ValueError as exc:
                sid = raw["slurm_id"].strip()
                refused.append({"job_id": sid if sid.isdigit() else None, "reason": "squeue: %s" % exc})
    else:
        parsed = slurm.parse_squeue_json(text)
        if parsed["errors"]:
            raise SlurmError("squeue output not understood: %s" % "; ".join(parsed["errors"][:3]))
        rows = [dict(j, slurm_id=j["job_id"]) for j in parsed["jobs"]]
        for row in rows:
            del row["job_id"]
        refused = parsed["refused"]
    for row in rows:
        row["comment"] = comment_fields(row["comment"])
    rows.sort(key=lambda r: int(r["slurm_id"]))
    return rows, refused


def _plain_request(body, rec, sep):
    """read_jobs' squeue -o fallback -> {jobs, errors} shaped like slurm.parse_scontrol_jobs."""
    got = slurm.split_marked(body.split(rec + "-plain", 1)[1], rec, sep, [name for name, dummy in REQUEST_FIELDS])
    jobs = []
    for raw in got["rows"]:
        fields = dict((k, v.strip() if k not in ("WorkDir", "Command") else v) for k, v in raw.items())
        jobs.append({"job_id": fields["JobId"], "name": None, "state": fields["JobState"],
                     "partition": slurm._null(fields["Partition"]), "num_cpus": slurm._int(fields["NumCPUs"]),
                     "fields": fields})
    return {"jobs": jobs, "errors": [r["reason"] for r in got["refused"]]}


def parse_read(text, mark, rec=None, sep=None):
    """Split read_jobs output at its marks (a script need not end with a newline) and parse each
    job's record (scontrol --json, else the squeue -o fallback with the marks `rec` and `sep`) and
    script. A record in any other form is not read: its job is left out."""
    parts = re.split(re.escape(mark) + r" (job|script) ([0-9_]+)\n", text or "")
    chunks = dict(((parts[i], parts[i + 1]), parts[i + 2]) for i in range(1, len(parts) - 2, 3))
    out = {}
    for (kind, sid), body in chunks.items():
        if kind != "job":
            continue
        if body.lstrip().startswith("{"):
            parsed = slurm_job.parse_scontrol_json(body)
        elif rec and (rec + "-plain") in body:
            parsed = _plain_request(body, rec, sep)
        else:
            continue
        mine = [j for j in parsed["jobs"] if j["job_id"] == sid]
        if not mine:
            continue
        script = chunks.get(("script", sid)) or ""
        if not script.strip():
            continue
        out[sid] = {"request": slurm_job.job_request(mine[0]), "script": slurm_job.parse_batch_script(script)}
    return out
