# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a Slurm batch job asks for, read from ``scontrol show job`` (multi-line, ``-o`` one line
per job, or ``--json``) and from ``scontrol write batch_script <id> -`` (the script on stdout).

job_request(record) takes one job of slurm.parse_scontrol_jobs or parse_scontrol_json and returns
{job_id, name, state, gpus, gpu_type, time_limit_s, cpus, mem_mb, workdir, command}. GPUs come from
the ``gres/gpu`` entries of ReqTRES/TRES (``gres/gpu=2``, ``gres/gpu:a100=2``) or TresPerNode /
TresPerJob (``gres/gpu:a100:2``, ``gres:gpu:2``), times from Slurm's time format
(``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``; ``UNLIMITED`` is None).
parse_batch_script(text) returns {shebang, options: [(option, value)], container_image, body}: the
``#SBATCH`` lines Slurm reads (those before the first command line). Pure standard library.
"""

from __future__ import annotations

import json
import re

from . import slurm

__all__ = ["job_request", "parse_scontrol_json", "parse_batch_script", "time_seconds", "mem_megabytes"]

_UNITS = {"K": 1.0 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def time_seconds(text):
    """Slurm time limit -> seconds; None for UNLIMITED/INFINITE/empty; ValueError when unreadable."""
    text = (text or "").strip()
    if text.upper() in ("", "UNLIMITED", "INFINITE", "N/A", "NONE", "(NULL)"):
        return None
    days = 0
    if "-" in text:
        d, dummy, text = text.partition("-")
        days = int(d)
        parts = [int(p) for p in text.split(":")]
        parts += [0] * (3 - len(parts))          # D-HH, D-HH:MM, D-HH:MM:SS
        h, m, s = parts
    else:
        parts = [int(p) for p in text.split(":")]
        if len(parts) == 1:
            h, m, s = 0, parts[0], 0             # MM
        elif len(parts) == 2:
            h, m, s = 0, parts[0], parts[1]      # MM:SS
        elif len(parts) == 3:
            h, m, s = parts
        else:
            raise ValueError("not a Slurm time: %r" % text)
    return ((days * 24 + h) * 60 + m) * 60 + s


def mem_megabytes(text):
    """Slurm memory (``4G``, ``4000M``, ``4000`` = MB) -> MB as int; None when absent or 0."""
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)B?\s*$", text or "", re.I)
    if not m:
        return None
    value = int(round(float(m.group(1)) * _UNITS[(m.group(2) or "M").upper()]))
    return value or None


def _gpus_from_tres(text):
    """(count, type) from a TRES string such as ``cpu=4,mem=16G,node=1,gres/gpu=2,gres/gpu:a100=2``."""
    count, gtype = 0, None
    for item in (text or "").split(","):
        key, dummy, value = item.partition("=")
        if key == "gres/gpu" and value.isdigit():
            count = max(count, int(value))
        elif key.startswith("gres/gpu:") and value.isdigit():
            count, gtype = max(count, int(value)), key.split(":", 1)[1]
    return count, gtype


def _gpus_from_per(text):
    """(count, type) from TresPerNode/TresPerJob/Gres: ``gres/gpu:a100:2``, ``gres:gpu:2``, ``gpu:2``."""
    for item in (text or "").split(","):
        parts = re.split(r"[:/]", re.sub(r"\(.*?\)", "", item.strip()))    # gpu:v100:3(IDX:0-2)
        if "gpu" not in parts:
            continue
        rest = parts[parts.index("gpu") + 1:]
        if rest and rest[-1].isdigit():
            return int(rest[-1]), (rest[0] if len(rest) == 2 else None)
        return 1, (rest[0] if rest else None)
    return 0, None


def job_request(job):
    """Resources one job asks for (see the module text); `job` is a parse_scontrol_jobs record."""
    f = job.get("fields") or {}
    gpus, gtype = _gpus_from_tres(f.get("ReqTRES") or f.get("TRES"))
    if not gpus:
        for key in ("TresPerNode", "TresPerJob", "TresPerTask", "Gres"):
            gpus, gtype = _gpus_from_per(f.get(key))
            if gpus:
                break
    tres = dict(item.partition("=")[::2] for item in (f.get("ReqTRES") or f.get("TRES") or "").split(",") if "=" in item)
    mem = mem_megabytes(tres.get("mem")) or mem_megabytes(f.get("MinMemoryNode"))
    cpus = slurm._int(tres.get("cpu")) or job.get("num_cpus")
    workdir = slurm._null(f.get("WorkDir"))
    return {"job_id": job.get("job_id"), "name": job.get("name"), "state": job.get("state"),
            "gpus": gpus, "gpu_type": gtype, "time_limit_s": time_seconds(f.get("TimeLimit")),
            "cpus": cpus, "mem_mb": mem, "workdir": workdir, "command": slurm._null(f.get("Command")),
            "partition": job.get("partition")}


def _num(value):
    """A --json number: plain, or {"set": bool, "infinite": bool, "number": n}."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    return value if isinstance(value, (int, float)) else None


def parse_scontrol_json(text):
    """``scontrol show job --json`` -> {jobs, errors} with records shaped like parse_scontrol_jobs
    (their `fields` carry the scontrol names job_request reads)."""
    try:
        doc = json.loads(text or "")
    except ValueError as exc:
        return {"jobs": [], "errors": ["not JSON: %s" % exc]}
    jobs = []
    for j in doc.get("jobs") or []:
        state = j.get("job_state")
        state = state[0] if isinstance(state, list) and state else state
        limit = _num(j.get("time_limit"))        # minutes
        mem = _num(j.get("memory_per_node"))     # MB
        fields = {"ReqTRES": j.get("tres_req_str") or "", "TresPerNode": j.get("tres_per_node") or "",
                  "TresPerJob": j.get("tres_per_job") or "", "WorkDir": j.get("current_working_directory") or "",
                  "Command": j.get("command") or "",
                  "TimeLimit": "UNLIMITED" if limit is None else "%d" % limit,
                  "MinMemoryNode": "%dM" % mem if mem else ""}
        jobs.append({"job_id": str(j.get("job_id")), "name": j.get("name"), "state": state,
                     "partition": j.get("partition"), "num_cpus": _num(j.get("cpus")), "fields": fields})
    return {"jobs": jobs, "errors": [] if "jobs" in doc else ["no 'jobs' list in the JSON"]}


def _split_option(words):
    """['--container-image=x'] or ['--container-image', 'x'] or ['-c', '4'] -> (option, value)."""
    if not words:
        return None, None
    first = words[0]
    if first.startswith("--") and "=" in first:
        opt, dummy, value = first.partition("=")
        return opt, value
    if len(words) > 1 and not words[1].startswith("#"):
        return first, words[1]
    if first.startswith("-") and not first.startswith("--") and len(first) > 2:
        return first[:2], first[2:]              # -c4
    return first, None


def parse_batch_script(text):
    """The script and its #SBATCH options (Slurm stops reading them at the first command line)."""
    lines = (text or "").replace("\r\n", "\n").split("\n")
    shebang = lines[0] if lines and lines[0].startswith("#!") else None
    options = []
    for line in lines[1 if shebang else 0:]:
        s = line.strip()
        if not s:
            continue
        if not s.startswith("#"):
            break
        if s.startswith("#SBATCH"):
            # a comment starts at '#' after blank space ('#' inside a value, as in Pyxis images, stays)
            words = re.split(r"\s#", s[len("#SBATCH"):], maxsplit=1)[0].split()
            opt, value = _split_option(words)
            if opt:
                options.append((opt, value))
    image = None
    for opt, value in options:
        if opt == "--container-image" and value:
            image = value.strip("\"'")
    return {"shebang": shebang, "options": options, "container_image": image, "body": text or ""}
