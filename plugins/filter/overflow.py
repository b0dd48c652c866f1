# -*- coding: utf-8 -*-
"""Filters exposing the overflow time model and cost rows to playbooks.

  {{ params | hybridgpu.fleet.overflow_completion }}        -> decision, reason, breakdowns (seconds)
  {{ '2TB' | hybridgpu.fleet.overflow_transfer_seconds('5Gbps') }}  -> 3200.0
  {{ scenario | hybridgpu.fleet.overflow_cost(prices) }}   -> one cost row
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import cost, timemodel

_COMPLETION_KEYS = ("local_wait", "local_runtime", "link_bps", "cloud_runtime", "input_bytes", "output_bytes",
                    "dispatch", "cloud_queue_wait", "image_bytes", "image_cached", "startup", "inputs_in_cloud",
                    "return_link_bps", "min_gain")


def overflow_completion(params):
    """Local versus cloud completion time from the moment the trigger fires."""
    if not isinstance(params, dict):
        raise AnsibleFilterError("overflow_completion expects a dict of parameters, got %s" % type(params).__name__)
    unknown = sorted(set(params) - set(_COMPLETION_KEYS))
    if unknown:
        raise AnsibleFilterError("overflow_completion: unknown parameter(s) %s (allowed: %s)"
                                 % (", ".join(unknown), ", ".join(_COMPLETION_KEYS)))
    for key in ("local_wait", "local_runtime", "link_bps"):
        if key not in params:
            raise AnsibleFilterError("overflow_completion: %s is required" % key)
    try:
        return timemodel.compare(**params)
    except timemodel.UnitError as exc:
        raise AnsibleFilterError("overflow_completion: %s" % exc)


def overflow_transfer_seconds(size, link_bps):
    try:
        return timemodel.transfer_seconds(size, link_bps)
    except timemodel.UnitError as exc:
        raise AnsibleFilterError("overflow_transfer_seconds: %s" % exc)


def overflow_cost(scenario, prices):
    try:
        return cost.scenario_row(scenario, prices)
    except (cost.CostError, KeyError, TypeError) as exc:
        raise AnsibleFilterError("overflow_cost: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {
            "overflow_completion": overflow_completion,
            "overflow_transfer_seconds": overflow_transfer_seconds,
            "overflow_cost": overflow_cost,
        }
