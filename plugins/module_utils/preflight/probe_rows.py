# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rows for ``preflight_record`` from the results of ``pmtu_probe`` and ``clock_probe``."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type


def record_rows(kind, source, results, destination=None):
    """Extra probe rows (pmtu, clock) for preflight_record, with a verdict each."""
    rows = []
    for pid in sorted(results or {}):
        res = results[pid]
        rows.append({"id": "%s:%s" % (kind, pid), "kind": kind, "source": source,
                     "destination": destination or res.get("destination") or res.get("address"),
                     "address": res.get("address") or res.get("server"), "protocol": "icmp" if kind == "pmtu" else "udp",
                     "port": None, "expected": "pass", "observed": res.get("observed"),
                     "elapsed_ms": res.get("elapsed_ms"), "evidence": res.get("evidence"),
                     "verdict": res.get("verdict", "fail"), "path": kind, "direction": None,
                     "management": False})
    return rows
