# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parser for nccl-tests output (all_reduce_perf, all_gather_perf, alltoall_perf ...).

Pure Python 3 standard library. Accepts what launchers add around the tool's
output: ``srun --label`` prefixes (``0: ``), Open MPI ``--tag-output`` tags
(``[1,0]<stdout>:``), interleaved ``NCCL INFO`` lines, the current layout
(``root`` and ``#wrong`` columns), the older one (``error`` column, no ``root``),
the pre-``#`` layout and the NCCL 1.x era header (``bytes N type op ... res``).
"""

from __future__ import annotations

import re

__all__ = ["parse", "summarize"]

_MPI_TAG = re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:")
_SRUN_LABEL = re.compile(r"^\s*\d+:\s")
_PARAMS = re.compile(r"(nThread|nGpus|minBytes|maxBytes|step:|warmup iters:|iters:|agg iters:|validation:|graph:)\s*(\S+)")
_RANK = re.compile(
    r"Rank\s+(\d+)(?:\s+Group\s+(\d+))?(?:\s+Pid\s+(\d+))?\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s+(.*?)\s*$")
_OOB = re.compile(r"Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)")
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*([-+0-9.eE]+)")
_VERSION = re.compile(r"^NCCL version\s+(\S+)")
_COMPILED = re.compile(r"NCCL Tests compiled with NCCL\s+(\S+)")
_FAILURE = re.compile(r"(NCCL failure|Cuda failure|CUDA failure|Test NCCL failure|Test CUDA failure|"
                      r"unhandled cuda error|unhandled system error|NCCL WARN|\bAbort|Segmentation fault)", re.I)
_LEAD_NAMES = {"size": "size", "bytes": "size", "count": "count", "N": "count", "type": "type",
               "redop": "redop", "op": "redop", "root": "root"}
_PARAM_KEYS = {"nThread": "nthread", "nGpus": "ngpus", "minBytes": "min_bytes", "maxBytes": "max_bytes",
               "step:": "step", "warmup iters:": "warmup_iters", "iters:": "iters",
               "agg iters:": "agg_iters", "validation:": "validation", "graph:": "graph"}


def _strip_prefix(line):
    """Remove an MPI tag or srun label. Returns (line, kind)."""
    match = _MPI_TAG.match(line)
    if match:
        return line[match.end():], "mpirun"
    match = _SRUN_LABEL.match(line)
    if match and not re.match(r"^\s*\d+\s+\d", line):
        return line[match.end():], "srun"
    return line, None


def _num(text):
    if text in ("N/A", "-", ""):
        return None
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None


def _float(text):
    value = _num(text)
    return float(value) if value is not None else None


def _half(tokens, check_name):
    """One out-of-place or in-place group: time, algbw, busbw, #wrong|error|res."""
    time_us, algbw, busbw, check = tokens
    half = {"time_us": _float(time_us), "algbw": _float(algbw), "busbw": _float(busbw),
            "wrong": None, "error": None, "check_raw": check}
    value = _num(check)
    if check_name == "#wrong":
        half["wrong"] = value if isinstance(value, int) else None
    else:
        # old layouts print a max error value (e.g. 5e-07) instead of a wrong count
        half["error"] = float(value) if value is not None else None
    return half


def parse(text):
    """Parse one nccl-tests run.

    Returns a dict:
      ``params``      {nthread, ngpus, min_bytes, max_bytes, step, warmup_iters, iters,
                      agg_iters, validation, graph} as printed (ints where numeric),
      ``nccl_version`` from ``NCCL version X`` or ``compiled with NCCL X`` (or None),
      ``devices``     [{rank, group, pid, host, device, bus, name}],
      ``hosts``       hosts in rank order without repeats, ``ranks`` = len(devices),
      ``prefix``      "mpirun", "srun" or None (what was stripped),
      ``columns``     the table header words (e.g. size count type redop root time ...),
      ``check_column`` "#wrong", "error" or "res",
      ``rows``        [{size, count, type, redop, root, out_of_place: {...}, in_place: {...}}]
                      each half {time_us, algbw, busbw, wrong, error, check_raw};
                      ``wrong`` is None when the tool printed N/A,
      ``out_of_bounds`` int or None, ``out_of_bounds_verdict`` "OK"/"FAILED"/None,
      ``avg_busbw``   the tool's "Avg bus bandwidth" (float) or None,
      ``info_lines``  number of NCCL INFO lines seen,
      ``error``       first failure line (e.g. "NCCL failure all_reduce.cu:95 'unhandled cuda error'") or None,
      ``errors``      all failure lines and unparsed table rows.
    """
    result = {"params": {}, "nccl_version": None, "devices": [], "hosts": [], "ranks": 0,
              "prefix": None, "columns": [], "check_column": None, "rows": [],
              "out_of_bounds": None, "out_of_bounds_verdict": None, "avg_busbw": None,
              "info_lines": 0, "error": None, "errors": []}
    lead = []
    for raw in (text or "").replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line, kind = _strip_prefix(raw)
        if kind and not result["prefix"]:
            result["prefix"] = kind
        body = line.strip()
        if not body:
            continue
        if " NCCL INFO " in body:
            result["info_lines"] += 1
            continue
        comment = body.lstrip("#").strip()
        if _read_run_line(body, comment, result):
            continue
        words = comment.split()
        if "time" in words and "algbw" in words and ("size" in words or "bytes" in words):
            lead = _read_columns(words, result)
            continue
        if _FAILURE.search(body):
            result["errors"].append(body)
            if result["error"] is None:
                result["error"] = body
            continue
        if body.startswith("#") or not re.match(r"^\d", body):
            continue
        _read_row(body, lead, result)
    seen = []
    for dev in result["devices"]:
        if dev["host"] not in seen:
            seen.append(dev["host"])
    result["hosts"] = seen
    result["ranks"] = len(result["devices"])
    return result


def _read_run_line(body, comment, result):
    """Lines that describe the run (parameters, ranks, NCCL version, out-of-bounds and
    average bandwidth verdicts). Returns True when ``body`` was one of them."""
    if "nThread" in comment and "minBytes" in comment:
        for key, value in _PARAMS.findall(comment):
            number = _num(value)
            result["params"][_PARAM_KEYS[key]] = number if number is not None else value
        return True
    match = _RANK.search(comment) if comment.startswith("Rank") else None
    if match:
        result["devices"].append({
            "rank": int(match.group(1)),
            "group": int(match.group(2)) if match.group(2) else None,
            "pid": int(match.group(3)) if match.group(3) else None,
            "host": match.group(4), "device": int(match.group(5)), "bus": match.group(6), "name": match.group(7)})
        return True
    match = _VERSION.match(body) or _COMPILED.search(body)
    if match:
        result["nccl_version"] = match.group(1)
        return True
    match = _OOB.search(comment)
    if match:
        result["out_of_bounds"] = int(match.group(1))
        result["out_of_bounds_verdict"] = match.group(2)
        return True
    match = _AVG.search(comment)
    if match:
        result["avg_busbw"] = float(match.group(1))
        return True
    return False


def _read_columns(words, result):
    """The table header: records the columns and the check column; returns the names of
    the leading columns (size, count, type, redop, root) in their printed order."""
    result["columns"] = words
    first_time = words.index("time")
    result["check_column"] = words[first_time + 3] if len(words) > first_time + 3 else None
    return [_LEAD_NAMES.get(w, w) for w in words[:first_time]]


def _read_row(body, lead, result):
    """One table row: the leading columns, then the out-of-place and in-place halves."""
    tokens = body.split()
    if not lead or len(tokens) != len(lead) + 8:
        result["errors"].append("unparsed table row: %r" % body)
        return
    row = {"size": None, "count": None, "type": None, "redop": None, "root": None}
    for name, token in zip(lead, tokens):
        row[name] = _num(token) if name in ("size", "count", "root") else token
    check = result["check_column"]
    row["out_of_place"] = _half(tokens[len(lead):len(lead) + 4], check)
    row["in_place"] = _half(tokens[len(lead) + 4:], check)
    result["rows"].append(row)


def summarize(parsed):
    """Verdict of one parsed run.

    Returns {rows, max_busbw, max_busbw_size, avg_busbw (the tool's value when it
    printed one, else the mean of every out-of-place and in-place busbw),
    avg_busbw_source ("reported"/"computed"/None), total_wrong (sum of #wrong
    counts; N/A cells are skipped and counted in wrong_na), wrong_na,
    max_error (old layouts), error, passed}.

    ``passed`` is True only when rows were measured, no failure line was seen,
    the out-of-bounds verdict is not FAILED and every #wrong count is 0.
    """
    rows = parsed.get("rows", [])
    halves = [row[half] for row in rows for half in ("out_of_place", "in_place")]
    busbws = [(half["busbw"], row["size"]) for row in rows for half in (row["out_of_place"], row["in_place"])
              if isinstance(half["busbw"], (int, float))]
    wrong = [half["wrong"] for half in halves if half["wrong"] is not None]
    wrong_na = sum(1 for half in halves if half["wrong"] is None and half["check_raw"] == "N/A")
    errors = [half["error"] for half in halves if half["error"] is not None]
    if parsed.get("avg_busbw") is not None:
        avg, source = parsed["avg_busbw"], "reported"
    elif busbws:
        avg, source = sum(busbw for busbw, dummy in busbws) / len(busbws), "computed"
    else:
        avg, source = None, None
    best = max(busbws, key=lambda item: item[0]) if busbws else (None, None)
    total_wrong = sum(wrong)
    passed = (bool(rows) and parsed.get("error") is None
              and parsed.get("out_of_bounds_verdict") != "FAILED" and total_wrong == 0)
    return {
        "rows": len(rows),
        "max_busbw": best[0],
        "max_busbw_size": best[1],
        "avg_busbw": avg,
        "avg_busbw_source": source,
        "total_wrong": total_wrong,
        "wrong_na": wrong_na,
        "max_error": max(errors) if errors else None,
        "error": parsed.get("error"),
        "passed": passed,
    }
