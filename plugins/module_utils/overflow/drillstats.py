# -*- coding: utf-8 -*-
"""Pure helpers for the overflow drill: when to stop adding runs, and checkpoint curve comparison.

Stopping rule: after each run, for every tracked metric (e.g. transfer time, queue time) compare the
spread (IQR = p75 - p25, or p90 - p10) of all runs with the spread without the newest run. The drill
stops once every metric's spread moved by at most `rel_tol` (relative to the earlier spread; an
absolute floor `abs_floor` keeps near-zero spreads from never settling) for `consecutive` runs in a
row, after at least `min_runs`. It always stops at `max_runs` and then says the spread never settled.
"""
from __future__ import annotations

from .history import percentile

SPREADS = {"iqr": (25.0, 75.0), "p10-p90": (10.0, 90.0)}


def spread(values, kind="iqr"):
    if kind not in SPREADS:
        raise ValueError("spread kind must be one of %s, not %r" % (sorted(SPREADS), kind))
    if not values:
        return 0.0
    s = sorted(values)
    lo, hi = SPREADS[kind]
    return percentile(s, hi) - percentile(s, lo)


def _settled_at(values, n, kind, rel_tol, abs_floor):
    before = spread(values[:n - 1], kind)
    after = spread(values[:n], kind)
    return abs(after - before) <= rel_tol * max(abs(before), abs_floor), before, after


def should_stop(series, rel_tol=0.10, min_runs=5, max_runs=30, kind="iqr", consecutive=2, abs_floor=1e-9):
    """series: {metric name: [value per run, in run order]}, all the same length.

    Returns {"stop": bool, "runs": n, "reason": str, "spreads": {metric: {"spread", "previous", "change"}}}.
    """
    if not series:
        raise ValueError("no metrics given")
    lengths = set(len(v) for v in series.values())
    if len(lengths) != 1:
        raise ValueError("every metric needs one value per run; got lengths %s" % sorted(lengths))
    if min_runs < 2 or max_runs < min_runs or consecutive < 1:
        raise ValueError("need 2 <= min_runs <= max_runs and consecutive >= 1")
    n = lengths.pop()
    report = {}
    for name, values in series.items():
        if n >= 2:
            ok, before, after = _settled_at(values, n, kind, rel_tol, abs_floor)
            report[name] = {"spread": after, "previous": before,
                            "change": (after - before) / max(abs(before), abs_floor)}
        else:
            report[name] = {"spread": spread(values, kind), "previous": None, "change": None}
    rule = "%s of every metric moves <= %.0f%% for %d added run(s); min %d, max %d runs" % (
        kind, rel_tol * 100, consecutive, min_runs, max_runs)
    if n >= max_runs:
        return {"stop": True, "runs": n, "settled": _stable(series, n, kind, rel_tol, abs_floor, consecutive),
                "reason": "max runs reached (%s)" % rule, "spreads": report, "rule": rule}
    if n < min_runs:
        return {"stop": False, "runs": n, "settled": False, "reason": "fewer than %d runs" % min_runs,
                "spreads": report, "rule": rule}
    settled = _stable(series, n, kind, rel_tol, abs_floor, consecutive)
    return {"stop": settled, "runs": n, "settled": settled,
            "reason": "spread settled" if settled else "spread still shifting", "spreads": report, "rule": rule}


def _stable(series, n, kind, rel_tol, abs_floor, consecutive):
    if n - consecutive < 1:
        return False
    for k in range(n - consecutive + 1, n + 1):
        if k < 2:
            return False
        for values in series.values():
            if not _settled_at(values, k, kind, rel_tol, abs_floor)[0]:
                return False
    return True


def _points(curve):
    if isinstance(curve, dict):
        items = curve.items()
    else:
        items = curve
    return {int(step): float(value) for step, value in items}


def compare_curves(reference, candidate, abs_tol=None, rel_tol=None):
    """Compare a metric curve (e.g. loss per step) with a reference run against tolerances fixed beforehand.

    Curves are {step: value} or [(step, value)]. A point passes when |cand - ref| <= abs_tol + rel_tol*|ref|.
    Every reference step must be present in the candidate. At least one tolerance must be given.
    """
    if abs_tol is None and rel_tol is None:
        raise ValueError("set abs_tol and/or rel_tol before comparing")
    abs_tol = float(abs_tol or 0.0)
    rel_tol = float(rel_tol or 0.0)
    ref = _points(reference)
    cand = _points(candidate)
    missing = sorted(set(ref) - set(cand))
    worst_step, worst = None, 0.0
    failures = []
    for step in sorted(set(ref) & set(cand)):
        diff = abs(cand[step] - ref[step])
        if diff > worst:
            worst, worst_step = diff, step
        if diff > abs_tol + rel_tol * abs(ref[step]):
            failures.append(step)
    ok = not missing and not failures and bool(ref)
    return {"ok": ok, "compared": len(set(ref) & set(cand)), "missing_steps": missing,
            "failed_steps": failures, "max_abs_diff": worst, "worst_step": worst_step,
            "tolerance": {"abs": abs_tol, "rel": rel_tol}}
