# -*- coding: utf-8 -*-
"""Cost of an overflow scenario, every component on one row.

GPU time is billed per started minute per GPU (a 61 s run on 8 GPUs bills 2 min x 8).
With prepaid capacity, committed GPU-hours are consumed first (running, then retries, then the warm
pool, in that order); only minutes beyond them are billed on demand. The commitment itself is a line.
Storage (GB-month, prorated by the second) and network transfer are their own lines.
Engineering time counts for operator-driven moves. Retries are GPU time of attempts that did not
deliver, on their own line.
The total is divided by jobs completed AND returned, not by jobs dispatched.
"""
from __future__ import annotations

import math

SECONDS_PER_MONTH = 30 * 86400.0

PRICE_FIELDS = ("gpu_hour", "warm_pool_gpu_hour", "storage_gb_month", "ingress_per_gb", "egress_per_gb",
                "engineer_hour", "prepaid_gpu_hours", "prepaid_gpu_hour")


class CostError(ValueError):
    pass


def billed_minutes(seconds):
    """Minutes billed for one run: every started minute counts."""
    if seconds < 0:
        raise CostError("run time %r is negative" % (seconds,))
    return int(math.ceil(seconds / 60.0 - 1e-9)) if seconds > 0 else 0


def _price(prices, key, default=0.0):
    value = prices.get(key, default)
    if value is None:
        value = default
    if value < 0:
        raise CostError("price %s is negative" % key)
    return float(value)


def scenario_row(scenario, prices):
    """One row for a scenario.

    scenario: {
      "name", "path": "operator"|"policy",
      "jobs_dispatched": int, "jobs_completed_returned": int,
      "runs": [{"gpus": int, "seconds": float, "retry": bool}],   # each cloud attempt
      "warm_pool": [{"gpus": int, "seconds": float}],             # pool GPUs waiting idle
      "storage": [{"bytes": int, "seconds": float}],              # staged data and how long it stayed
      "transfer": {"in_bytes": int, "out_bytes": int},
      "operator_minutes": float,                                  # hands-on time for operator-driven moves
    }
    prices: {"gpu_hour", "warm_pool_gpu_hour" (default gpu_hour), "storage_gb_month", "ingress_per_gb",
             "egress_per_gb", "engineer_hour", "prepaid_gpu_hours" (0 = pure pay-as-you-go), "prepaid_gpu_hour"}
    """
    for key in prices:
        if key not in PRICE_FIELDS:
            raise CostError("unknown price %r (allowed: %s)" % (key, ", ".join(PRICE_FIELDS)))
    gpu_min = _price(prices, "gpu_hour") / 60.0
    pool_min = _price(prices, "warm_pool_gpu_hour", _price(prices, "gpu_hour")) / 60.0
    prepaid_left = int(round(_price(prices, "prepaid_gpu_hours") * 60))
    prepaid_total = prepaid_left

    def bill(minutes, rate):
        nonlocal prepaid_left
        from_prepaid = min(prepaid_left, minutes)
        prepaid_left -= from_prepaid
        return (minutes - from_prepaid) * rate, from_prepaid

    run_min = sum(billed_minutes(r["seconds"]) * int(r["gpus"]) for r in scenario.get("runs", [])
                  if not r.get("retry"))
    retry_min = sum(billed_minutes(r["seconds"]) * int(r["gpus"]) for r in scenario.get("runs", []) if r.get("retry"))
    pool_minutes = sum(billed_minutes(p["seconds"]) * int(p["gpus"]) for p in scenario.get("warm_pool", []))
    gpu_run, used1 = bill(run_min, gpu_min)
    gpu_retries, used2 = bill(retry_min, gpu_min)
    gpu_pool, used3 = bill(pool_minutes, pool_min)

    gb_seconds = sum(s["bytes"] / 1e9 * s["seconds"] for s in scenario.get("storage", []))
    storage = gb_seconds / SECONDS_PER_MONTH * _price(prices, "storage_gb_month")
    transfer = scenario.get("transfer", {})
    network = (transfer.get("in_bytes", 0) / 1e9 * _price(prices, "ingress_per_gb")
               + transfer.get("out_bytes", 0) / 1e9 * _price(prices, "egress_per_gb"))
    engineering = scenario.get("operator_minutes", 0) / 60.0 * _price(prices, "engineer_hour")
    commitment = _price(prices, "prepaid_gpu_hours") * _price(prices, "prepaid_gpu_hour")

    total = gpu_run + gpu_retries + gpu_pool + storage + network + engineering + commitment
    done = int(scenario.get("jobs_completed_returned", 0))
    return {
        "scenario": scenario.get("name"),
        "path": scenario.get("path"),
        "billing": "prepaid" if prepaid_total else "per_minute",
        "gpu_running": round(gpu_run, 6),
        "gpu_retries": round(gpu_retries, 6),
        "gpu_warm_pool": round(gpu_pool, 6),
        "storage": round(storage, 6),
        "network": round(network, 6),
        "engineering": round(engineering, 6),
        "prepaid_commitment": round(commitment, 6),
        "total": round(total, 6),
        "billed_gpu_minutes": run_min + retry_min + pool_minutes,
        "prepaid_minutes_used": used1 + used2 + used3,
        "jobs_dispatched": int(scenario.get("jobs_dispatched", 0)),
        "jobs_completed_returned": done,
        "cost_per_completed_job": round(total / done, 6) if done else None,
    }


def cost_table(scenarios, prices):
    return [scenario_row(s, prices) for s in scenarios]
