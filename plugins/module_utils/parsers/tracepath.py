# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parser for iputils ``tracepath`` / ``tracepath -6`` / ``tracepath -n``. Pure stdlib."""

from __future__ import annotations

import re

__all__ = ["parse"]

_HOP = re.compile(r"^\s*(\d+)(\?)?:\s+(.*?)\s*$")
_RESUME = re.compile(r"^\s*Resume:\s+pmtu\s+(\d+)(?:\s+hops\s+(\d+))?(?:\s+back\s+(\d+))?")
_TOO_MANY = re.compile(r"^\s*Too many hops:\s+pmtu\s+(\d+)")
_IP = re.compile(r"^(\d+\.\d+\.\d+\.\d+|[0-9A-Fa-f:]*:[0-9A-Fa-f:.]+)$")


def _hop(ttl, probe, rest):
    hop = {"ttl": ttl, "probe": probe, "host": None, "address": None, "rtt_ms": None,
           "asymm": None, "pmtu": None, "reached": False, "no_reply": False, "localhost": False}
    if rest == "no reply":
        hop["no_reply"] = True
        return hop
    tokens = rest.split()
    if tokens:
        hop["host"] = tokens.pop(0)
        hop["localhost"] = hop["host"] == "[LOCALHOST]"
        if tokens and tokens[0].startswith("(") and tokens[0].endswith(")"):
            hop["address"] = tokens.pop(0)[1:-1]
        elif _IP.match(hop["host"]):
            hop["address"] = hop["host"]
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.endswith("ms") and re.match(r"^[\d.]+ms$", tok):
            hop["rtt_ms"] = float(tok[:-2])
        elif tok == "asymm" and i + 1 < len(tokens) and tokens[i + 1].isdigit():
            hop["asymm"] = int(tokens[i + 1])
            i += 1
        elif tok == "pmtu" and i + 1 < len(tokens) and tokens[i + 1].isdigit():
            hop["pmtu"] = int(tokens[i + 1])
            i += 1
        elif tok == "reached":
            hop["reached"] = True
        i += 1
    return hop


def parse(text):
    """Parse one tracepath run.

    Returns a dict: hops ([{ttl, probe (the ``1?:`` first probe), host, address, rtt_ms,
    asymm, pmtu, reached, no_reply, localhost}] in printed order, repeats kept),
    initial_pmtu, pmtu_changes ([{ttl, pmtu}] each time the pmtu printed differs from the
    previous one), final_pmtu (Resume, else Too many hops, else last pmtu seen),
    reached (bool), too_many_hops (bool), resume ({pmtu, hops, back} or None),
    no_reply_count, asymmetric_ttls (ttls marked asymm), max_ttl, unparsed.
    """
    result = {"hops": [], "initial_pmtu": None, "pmtu_changes": [], "final_pmtu": None,
              "reached": False, "too_many_hops": False, "resume": None, "no_reply_count": 0,
              "asymmetric_ttls": [], "max_ttl": None, "unparsed": []}
    current = None
    for line in (text or "").replace("\r\n", "\n").split("\n"):
        if not line.strip():
            continue
        match = _RESUME.match(line)
        if match:
            result["resume"] = {"pmtu": int(match.group(1)),
                                "hops": int(match.group(2)) if match.group(2) else None,
                                "back": int(match.group(3)) if match.group(3) else None}
            continue
        match = _TOO_MANY.match(line)
        if match:
            result["too_many_hops"] = True
            pmtu = int(match.group(1))
            if current is not None and pmtu != current:
                result["pmtu_changes"].append({"ttl": None, "pmtu": pmtu})
            current = pmtu
            continue
        match = _HOP.match(line)
        if not match:
            result["unparsed"].append(line.strip())
            continue
        hop = _hop(int(match.group(1)), bool(match.group(2)), match.group(3))
        result["hops"].append(hop)
        if hop["pmtu"] is not None:
            if current is None:
                result["initial_pmtu"] = hop["pmtu"]
            elif hop["pmtu"] != current:
                result["pmtu_changes"].append({"ttl": hop["ttl"], "pmtu": hop["pmtu"]})
            current = hop["pmtu"]
        if hop["reached"]:
            result["reached"] = True
        if hop["no_reply"]:
            result["no_reply_count"] += 1
        if hop["asymm"] is not None and hop["ttl"] not in result["asymmetric_ttls"]:
            result["asymmetric_ttls"].append(hop["ttl"])
    result["final_pmtu"] = result["resume"]["pmtu"] if result["resume"] else current
    result["max_ttl"] = max((h["ttl"] for h in result["hops"]), default=None)
    return result
