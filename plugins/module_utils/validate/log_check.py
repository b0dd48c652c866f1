# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Logs from both sides (validation step 5): the line the reference job logged on the owned
node and on the cloud node must be found where the site's log path says job logs go, read on
each node: the journal (``journalctl -t <identifier>``) or a log file path."""

from __future__ import annotations


def where(source, identifier=None, path=None):
    """Words for the place the logs were read from."""
    if source == "journal":
        return "the journal (journalctl -t %s)" % identifier
    return "%s" % path


def logs_verdict(results, source, identifier=None, path=None):
    """``results``: [{side, node, marker, found (bool), error}] one per side. Returns
    {state ("pass", "fail" or "not run"), reasons, source, where, results}."""
    place = where(source, identifier, path)
    if not results:
        return {"state": "not run", "reasons": [], "source": source, "where": place, "results": [],
                "note": "no reference job log line to look for (step reference_job did not run)"}
    reasons = []
    for res in results:
        if res.get("found"):
            continue
        reasons.append("log line of the reference job on %s node %s not found in %s on %s%s" % (
            res.get("side"), res.get("node"), place, res.get("node"),
            ": %s" % res["error"] if res.get("error") else ""))
    missing = [side for side in ("owned", "cloud") if side not in {res.get("side") for res in results}]
    note = "no %s node named: that side was not read" % " or ".join(missing) if missing else None
    return {"state": "fail" if reasons else "pass", "reasons": reasons, "source": source, "where": place,
            "results": list(results), "note": note}
