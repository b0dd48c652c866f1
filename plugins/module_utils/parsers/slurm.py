# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers for Slurm queue tools: ``squeue`` (default, ``-o``, ``-O`` with delimiters,
0x1F/0x1E separated, noheader), ``squeue --json``, ``squeue -o`` with per-call marks
(split_marked), ``scontrol show job`` and ``sprio`` (default, ``-n``, ``-w``). Pure Python 3
standard library.

A job's name and comment are the user's: they may hold any delimiter a fixed format uses.
parse_squeue_json and split_marked read jobs in forms a name cannot break (JSON strings, or
delimiters drawn at random for each call), and refuse an unreadable job on its own.
"""

from __future__ import annotations

import json
import re

__all__ = ["parse_squeue", "parse_squeue_json", "split_marked", "parse_scontrol_jobs", "parse_sprio",
           "STATE_CODES"]

STATE_CODES = {
    "PD": "PENDING", "R": "RUNNING", "CG": "COMPLETING", "CD": "COMPLETED", "CA": "CANCELLED",
    "F": "FAILED", "TO": "TIMEOUT", "NF": "NODE_FAIL", "PR": "PREEMPTED", "S": "SUSPENDED",
    "OOM": "OUT_OF_MEMORY", "CF": "CONFIGURING", "RQ": "REQUEUED", "RH": "REQUEUE_HOLD",
    "RF": "REQUEUE_FED", "RS": "RESIZING", "RV": "REVOKED", "SI": "SIGNALING",
    "SE": "SPECIAL_EXIT", "SO": "STAGE_OUT", "ST": "STOPPED", "BF": "BOOT_FAIL", "DL": "DEADLINE",
}
_CODE_OF = dict((v, k) for k, v in STATE_CODES.items())
DEFAULT_SQUEUE_FIELDS = ["JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES", "NODELIST(REASON)"]
_NULLS = ("(null)", "N/A", "")
_HEADER_WORD = re.compile(r"^[A-Z][A-Z0-9_:()%]*$")
_ARRAY = re.compile(r"^(\d+)_(\d+|\[[^\]]*\])$")
_HET = re.compile(r"^(\d+)\+(\d+)$")


def _null(value):
    return None if value is None or value.strip() in _NULLS else value.strip()


def _int(value):
    value = _null(value)
    return int(value) if value is not None and re.match(r"^-?\d+$", value) else None


def _records(text):
    """Split squeue output into (cells lists, delimiter kind)."""
    text = (text or "").replace("\r\n", "\n")
    if "\x1f" in text:
        rows = []
        for record in re.split(r"\x1e|\n", text):
            if not record.strip("\n"):
                continue
            cells = record.split("\x1f")
            if cells and cells[-1] == "":
                cells.pop()
            rows.append(cells)
        return rows, "unit-separator"
    if "|#" in text:
        rows = []
        for line in text.split("\n"):
            if not line.strip():
                continue
            cells = line.split("|#")
            if cells and cells[-1] == "":
                cells.pop()
            rows.append(cells)
        return rows, "|#"
    return [ln for ln in text.split("\n") if ln.strip()], "whitespace"


def _job_from(raw):
    """Normalise one squeue record {COLUMN: text}."""
    col = dict((k.upper(), v) for k, v in raw.items())
    job = {"job_id": _null(col.get("JOBID") or col.get("JOB_ID")), "array_job_id": None,
           "array_task_id": None, "het_job_id": None, "het_offset": None,
           "partition": _null(col.get("PARTITION")), "name": _null(col.get("NAME")),
           "user": _null(col.get("USER")), "state": _null(col.get("STATE")),
           "state_code": _null(col.get("ST")), "time": _null(col.get("TIME")),
           "nodes": _int(col.get("NODES")), "nodelist": _null(col.get("NODELIST")),
           "reason": _null(col.get("REASON")), "submit_time": _null(col.get("SUBMIT_TIME")),
           "priority": _null(col.get("PRIORITY")), "raw": raw}
    both = col.get("NODELIST(REASON)")
    if both is not None:
        both = both.strip()
        if both.startswith("(") and both.endswith(")"):
            job["reason"] = both[1:-1]
        else:
            job["nodelist"] = _null(both)
    if job["reason"] == "None":
        job["reason"] = None
    if job["state"] is None and job["state_code"]:
        job["state"] = STATE_CODES.get(job["state_code"], job["state_code"])
    if job["state_code"] is None and job["state"]:
        job["state_code"] = _CODE_OF.get(job["state"])
    if job["job_id"]:
        match = _ARRAY.match(job["job_id"])
        if match:
            job["array_job_id"], job["array_task_id"] = match.group(1), match.group(2)
        match = _HET.match(job["job_id"])
        if match:
            job["het_job_id"], job["het_offset"] = match.group(1), int(match.group(2))
    if _null(col.get("ARRAY_JOB_ID")) and job["array_job_id"] is None:
        job["array_job_id"] = _null(col.get("ARRAY_JOB_ID"))
    job["pending"] = job["state"] == "PENDING"
    reason = job["reason"] or ""
    job["held"] = "held" in reason.lower() or reason in ("JobHeldUser", "JobHeldAdmin")
    return job


def parse_squeue(text, fields=None):
    """Parse squeue output.

    ``fields``: column names for output without a header (``--noheader``, ``grep``); for
    ``-O``/``-o`` with delimiters pass the names in order (``colN`` placeholders are fine).
    Without a header and without ``fields``, the default squeue layout is assumed.

    Returns {format ("whitespace", "|#" or "unit-separator"), header (bool), columns,
    jobs: [{job_id, array_job_id, array_task_id, het_job_id, het_offset, partition, name,
    user, state (full name), state_code (PD, R ...), time, nodes, nodelist, reason,
    submit_time, priority, pending, held, raw {column: text}}], errors}.
    ``(null)``, ``N/A`` and empty cells become None.
    """
    rows, kind = _records(text)
    result = {"format": kind, "header": False, "columns": [], "jobs": [], "errors": []}
    if not rows:
        return result
    if kind == "whitespace":
        first = rows[0].split()
        has_header = all(_HEADER_WORD.match(w) for w in first)
    else:
        first = [c.strip() for c in rows[0]]
        has_header = all(_HEADER_WORD.match(c) for c in first if c)
    if has_header:
        names, rows = first, rows[1:]
        result["header"] = True
    else:
        names = list(fields) if fields else list(DEFAULT_SQUEUE_FIELDS)
    unique = []
    for name in names:
        label, n = name, 2
        while label in unique:
            label, n = "%s#%d" % (name, n), n + 1
        unique.append(label)
    result["columns"] = unique
    for row in rows:
        if kind == "whitespace":
            cells = row.split(None, len(unique) - 1)
        else:
            cells = row
        if len(cells) != len(unique):
            result["errors"].append("record has %d cells, expected %d: %r" % (len(cells), len(unique), row))
            continue
        result["jobs"].append(_job_from(dict(zip(unique, cells))))
    return result


# ---------------------------------------------------------------- squeue --json

_NUMERIC_ID = re.compile(r"^[0-9]+$")


def json_number(value):
    """A --json number: plain (Slurm 22.05), or {"set", "infinite", "number"} (23.02 on).
    None when unset or infinite; ValueError when it is not a number."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("not a number: %r" % (value,))
    return value


def _json_text(job, key):
    value = job.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("%s is not text: %r" % (key, value))
    return value or None


def _json_job(job):
    """One job of ``squeue --json`` (or ``scontrol show job --json``) -> row; ValueError when unreadable."""
    if not isinstance(job, dict):
        raise ValueError("the job is not an object")
    try:
        jid = json_number(job.get("job_id"))
    except ValueError:
        jid = None
    if not isinstance(jid, int) or not _NUMERIC_ID.match(str(jid)):
        raise ValueError("job_id %r is not a Slurm job ID" % (job.get("job_id"),))
    state = job.get("job_state")
    if isinstance(state, list):
        state = state[0] if state else None
    if not isinstance(state, str) or not re.match(r"^[A-Z_]+$", state):
        raise ValueError("job_state %r is not a Slurm job state" % (job.get("job_state"),))
    reason = _json_text(job, "state_reason")
    times = {}
    for key in ("submit_time", "start_time"):
        value = json_number(job.get(key))
        times[key] = float(value) if value else None
    cpus = json_number(job.get("cpus"))
    row = {"job_id": str(jid), "name": job.get("name") if isinstance(job.get("name"), str) else None,
           "state": state, "reason": None if reason == "None" else reason,
           "submit": times["submit_time"], "start": times["start_time"],
           "cpus": int(cpus) if cpus else 0, "comment": _json_text(job, "comment"),
           "partition": _json_text(job, "partition"), "qos": _json_text(job, "qos"),
           "account": _json_text(job, "account")}
    held = row["reason"] or ""
    row["held"] = "held" in held.lower() or held in ("JobHeldUser", "JobHeldAdmin")
    return row


def parse_squeue_json(text):
    """``squeue --json`` -> {jobs: [{job_id, name, state, reason, submit, start (epoch seconds or
    None), cpus, comment, partition, qos, account, held}], refused: [{job_id, reason}], errors}.

    A job whose fields cannot be read is refused on its own, with its job ID when that can be read;
    errors (not JSON, no ``jobs`` list) concern the whole output."""
    result = {"jobs": [], "refused": [], "errors": []}
    try:
        doc = json.loads(text or "")
    except ValueError as exc:
        result["errors"].append("squeue --json output is not JSON: %s" % exc)
        return result
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        result["errors"].append("squeue --json output has no 'jobs' list")
        return result
    for i, job in enumerate(jobs):
        try:
            result["jobs"].append(_json_job(job))
        except (TypeError, ValueError) as exc:
            jid = job.get("job_id") if isinstance(job, dict) else None
            try:
                jid = json_number(jid)
            except ValueError:
                pass
            result["refused"].append({"job_id": str(jid) if isinstance(jid, int) else "entry %d" % i,
                                      "reason": "squeue --json entry cannot be read: %s" % exc})
    return result


# ---------------------------------------------------------------- squeue -o with marks

def split_marked(text, mark, sep, names):
    """Records of ``squeue -h -o '<mark><f1><sep><f2>...'`` where `mark` and `sep` were drawn at
    random for this call, so no job name or comment can hold them. Each record starts with `mark`
    (a value may hold newlines); it must have exactly len(names) values.
    Returns {rows: [{name: text}], refused: [{job_id, reason}]} (job_id: the first value, or None)."""
    out = {"rows": [], "refused": []}
    chunks = re.split(r"(?:^|\n)" + re.escape(mark), text or "")
    for chunk in chunks[1:]:
        if chunk.endswith("\n"):
            chunk = chunk[:-1]
        values = chunk.split(sep)
        if len(values) != len(names):
            out["refused"].append({"job_id": values[0] if _NUMERIC_ID.match(values[0]) else None,
                                   "reason": "squeue record has %d fields, expected %d" % (len(values), len(names))})
            continue
        out["rows"].append(dict(zip(names, values)))
    return out


# ---------------------------------------------------------------- scontrol show job

_KV = re.compile(r"([A-Za-z][A-Za-z0-9_:/]*)=(.*?)(?=\s+[A-Za-z][A-Za-z0-9_:/]*=|\s*$)")


def _time_or_none(value):
    value = _null(value)
    return None if value in (None, "Unknown", "None") else value


def parse_scontrol_jobs(text):
    """Parse ``scontrol show job`` (one or many records; a cut-off last record is kept).

    Returns {jobs: [{job_id, name, user, uid, state, reason, priority, partition, nodelist,
    array_job_id, array_task_id, submit_time, start_time, end_time, time_limit, run_time,
    num_nodes, num_cpus, exit_code, tres ({key: value}), fields ({Key: text as printed})}],
    errors}. ``Name=`` (old Slurm) and ``JobName=`` both give ``name``; ``Reason=None``
    gives reason None.
    """
    result = {"jobs": [], "errors": []}
    current = None
    for line in (text or "").replace("\r\n", "\n").split("\n"):
        if not line.strip():
            continue
        pairs = _KV.findall(line.strip())
        if not pairs:
            result["errors"].append("unparsed line: %r" % line)
            continue
        if pairs[0][0] == "JobId":
            current = {}
            result["jobs"].append(current)
        if current is None:
            result["errors"].append("line before any JobId=: %r" % line)
            continue
        for key, value in pairs:
            current[key] = value
    result["jobs"] = [_scontrol_job(fields) for fields in result["jobs"]]
    return result


def _scontrol_job(fields):
    user = fields.get("UserId", "")
    match = re.match(r"^(.*?)\((\d+)\)$", user)
    tres = {}
    for item in (_null(fields.get("TRES")) or "").split(","):
        if "=" in item:
            key, dummy, value = item.partition("=")
            tres[key] = value
    reason = _null(fields.get("Reason"))
    return {
        "job_id": fields.get("JobId"),
        "name": fields.get("JobName", fields.get("Name")),
        "user": match.group(1) if match else (user or None),
        "uid": int(match.group(2)) if match else None,
        "state": fields.get("JobState"),
        "reason": None if reason == "None" else reason,
        "priority": _int(fields.get("Priority")),
        "partition": _null(fields.get("Partition")),
        "nodelist": _null(fields.get("NodeList")),
        "array_job_id": _null(fields.get("ArrayJobId")),
        "array_task_id": _null(fields.get("ArrayTaskId")),
        "submit_time": _time_or_none(fields.get("SubmitTime")),
        "start_time": _time_or_none(fields.get("StartTime")),
        "end_time": _time_or_none(fields.get("EndTime")),
        "time_limit": _null(fields.get("TimeLimit")),
        "run_time": _null(fields.get("RunTime")),
        "num_nodes": _int(fields.get("NumNodes")),
        "num_cpus": _int(fields.get("NumCPUs")),
        "exit_code": fields.get("ExitCode"),
        "tres": tres,
        "fields": fields,
    }


# ---------------------------------------------------------------- sprio

def _number(text):
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def parse_sprio(text):
    """Parse ``sprio`` (default), ``sprio -n`` (normalised floats) and ``sprio -w``.

    Columns are right-aligned, so each value is matched to the header column whose
    right edge is nearest to the value's right edge (the ``-w`` weights row leaves
    JOBID/PARTITION/PRIORITY blank). Returns {columns, jobs: [{job_id, partition,
    priority, factors {COLUMN: number}}] (partition is the name column when PARTITION
    precedes PRIORITY, else a factor), weights ({COLUMN: number} or None), errors}.
    """
    lines = [ln.rstrip() for ln in (text or "").replace("\r\n", "\n").split("\n") if ln.strip()]
    result = {"columns": [], "jobs": [], "weights": None, "errors": []}
    if not lines:
        return result
    header = lines[0]
    spans = [(match.group(0), match.end()) for match in re.finditer(r"\S+", header)]
    result["columns"] = [name for name, dummy in spans]
    for line in lines[1:]:
        row = {}
        for match in re.finditer(r"\S+", line):
            name = min(spans, key=lambda span: abs(span[1] - match.end()))[0]
            if name in row:
                result["errors"].append("two values for %s in %r" % (name, line))
            row[name] = match.group(0)
        if row.get("JOBID") == "Weights":
            result["weights"] = dict((k, _number(v)) for k, v in row.items() if k != "JOBID")
            continue
        # PARTITION left of PRIORITY is the partition name; right of it, the partition factor
        names = [name for name, dummy in spans]
        part_is_name = "PARTITION" in names and "PRIORITY" in names and \
            names.index("PARTITION") < names.index("PRIORITY")
        skip = ("JOBID", "PRIORITY", "USER", "ACCOUNT") + (("PARTITION",) if part_is_name else ())
        factors = dict((k, _number(v)) for k, v in row.items() if k not in skip)
        result["jobs"].append({"job_id": row.get("JOBID"),
                               "partition": row.get("PARTITION") if part_is_name else None,
                               "priority": _number(row["PRIORITY"]) if "PRIORITY" in row else None,
                               "user": row.get("USER"), "factors": factors})
    return result
