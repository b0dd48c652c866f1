# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parser for DF ("don't fragment") ping output used to probe the path MTU.

Linux iputils ``ping -M do -s SIZE`` (old ``icmp_req=`` and new ``icmp_seq=``) and
Windows ``ping -f -l SIZE``. Pure Python 3 standard library.

Verdicts:
  ``ok``           replies came back (also when they were cut short, see ``truncated``);
  ``frag_needed``  a router answered "Frag needed and DF set (mtu = N)" (``mtu`` = the
                   smallest N), or Windows said "Packet needs to be fragmented but DF set."
                   (``mtu`` None: Windows does not say);
  ``local_error``  the sender refused before sending: "local error: message too long,
                   mtu=N" or "sendmsg: Message too long" (``mtu`` N or None);
  ``blackhole``    probes were sent and none came back, and no frag-needed was seen;
  ``unknown``      nothing to judge (no reply, no statistics, no error).
"""

from __future__ import annotations

import re

__all__ = ["parse"]

_HEADER = re.compile(r"^PING\s+(\S+)\s+\(([^)]+)\)\s+(\d+)\((\d+)\)\s+bytes of data")
_WIN_HEADER = re.compile(r"^Pinging\s+(\S+)(?:\s+\[([^\]]+)\])?\s+with\s+(\d+)\s+bytes of data")
_REPLY = re.compile(
    r"^(\d+)\s+bytes from\s+(.+?):\s+icmp_(?:seq|req)=(\d+)\s+ttl=(\d+)(?:\s+time=([\d.]+)\s*ms)?(.*)$")
_WIN_REPLY = re.compile(r"^Reply from\s+(\S+):\s+bytes=(\d+)\s+time[=<]([\d.]+)ms\s+TTL=(\d+)", re.I)
_FRAG = re.compile(r"^From\s+(\S+)\s+icmp_(?:seq|req)=(\d+)\s+Frag needed and DF set\s*\(mtu\s*=\s*(\d+)\)")
_LOCAL = re.compile(r"^ping:\s+local error:\s+(.*?)(?:,\s*mtu=(\d+))?\s*$")
_SENDMSG = re.compile(r"^ping:\s+sendmsg:\s+(.*)$")
_STATS = re.compile(
    r"^(\d+)\s+packets transmitted,\s+(\d+)\s+received(?:,\s+\+(\d+)\s+errors)?"
    r"(?:,\s+([\d.]+)%\s+packet loss)?(?:,\s+time\s+(\d+)ms)?")
_RTT = re.compile(r"^(?:rtt|round-trip)\s+min/avg/max(?:/mdev|/stddev)?\s*=\s*([\d.]+)/([\d.]+)/([\d.]+)(?:/([\d.]+))?\s*ms")
_WIN_DF = "Packet needs to be fragmented but DF set."


def parse(text):
    """Parse one DF ping run.

    Returns a dict: platform ("linux"/"windows"), target, address, payload_size (the -s/-l
    size), packet_size (IP packet size printed in parentheses, Linux), replies
    ([{bytes, source, seq, ttl, time_ms, truncated}]), frag_needed ([{source, seq, mtu}]),
    local_errors ([{message, mtu}]), transmitted, received, errors_count, loss_percent
    (as printed, or computed when transmitted > 0), time_ms, rtt ({min, avg, max, mdev} ms
    or None), interrupted (``^C`` seen), truncated (any reply cut short), verdict, mtu,
    unparsed (lines not understood).
    """
    result = {"platform": None, "target": None, "address": None, "payload_size": None,
              "packet_size": None, "replies": [], "frag_needed": [], "local_errors": [],
              "windows_df_error": False, "transmitted": None, "received": None,
              "errors_count": None, "loss_percent": None, "time_ms": None, "rtt": None,
              "interrupted": False, "truncated": False, "verdict": "unknown", "mtu": None,
              "unparsed": []}
    for raw in (text or "").replace("\r\n", "\n").split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line == _WIN_DF:
            result["windows_df_error"] = True
        elif line == "^C":
            result["interrupted"] = True
        elif line.startswith("---") and line.endswith("statistics ---"):
            continue
        elif not _read_line(line, result):
            result["unparsed"].append(line)
    result["truncated"] = any(reply["truncated"] for reply in result["replies"])
    _verdict(result)
    return result


def _linux_header(match, result):
    result.update(platform="linux", target=match.group(1), address=match.group(2),
                  payload_size=int(match.group(3)), packet_size=int(match.group(4)))


def _windows_header(match, result):
    result.update(platform="windows", target=match.group(1), address=match.group(2) or match.group(1),
                  payload_size=int(match.group(3)))


def _linux_reply(match, result):
    tail = match.group(6) or ""
    result["replies"].append({
        "bytes": int(match.group(1)), "source": match.group(2), "seq": int(match.group(3)),
        "ttl": int(match.group(4)), "time_ms": float(match.group(5)) if match.group(5) else None,
        "truncated": "(truncated)" in tail})


def _windows_reply(match, result):
    result["replies"].append({"bytes": int(match.group(2)), "source": match.group(1), "seq": None,
                              "ttl": int(match.group(4)), "time_ms": float(match.group(3)),
                              "truncated": False})


def _frag_needed(match, result):
    result["frag_needed"].append({"source": match.group(1), "seq": int(match.group(2)),
                                  "mtu": int(match.group(3))})


def _local_error(match, result):
    result["local_errors"].append({"message": match.group(1),
                                   "mtu": int(match.group(2)) if match.group(2) else None})


def _sendmsg_error(match, result):
    result["local_errors"].append({"message": "sendmsg: " + match.group(1), "mtu": None})


def _statistics(match, result):
    result["transmitted"], result["received"] = int(match.group(1)), int(match.group(2))
    result["errors_count"] = int(match.group(3)) if match.group(3) else 0
    if match.group(4) is not None:
        result["loss_percent"] = float(match.group(4))
    elif result["transmitted"]:
        result["loss_percent"] = 100.0 * (result["transmitted"] - result["received"]) / result["transmitted"]
    result["time_ms"] = int(match.group(5)) if match.group(5) else None


def _round_trip(match, result):
    result["rtt"] = {"min": float(match.group(1)), "avg": float(match.group(2)), "max": float(match.group(3)),
                     "mdev": float(match.group(4)) if match.group(4) else None}


# Line patterns and what each one records, tried in this order.
_LINES = (
    (_HEADER, _linux_header),
    (_WIN_HEADER, _windows_header),
    (_REPLY, _linux_reply),
    (_WIN_REPLY, _windows_reply),
    (_FRAG, _frag_needed),
    (_LOCAL, _local_error),
    (_SENDMSG, _sendmsg_error),
    (_STATS, _statistics),
    (_RTT, _round_trip),
)


def _read_line(line, result):
    """Record one line; returns False when no pattern matches it."""
    for pattern, record in _LINES:
        match = pattern.match(line)
        if match:
            record(match, result)
            return True
    return False


def _verdict(result):
    frag = [hop["mtu"] for hop in result["frag_needed"]]
    local = [error["mtu"] for error in result["local_errors"]]
    if frag:
        result["verdict"], result["mtu"] = "frag_needed", min(frag)
    elif result["windows_df_error"]:
        result["verdict"], result["mtu"] = "frag_needed", None
    elif result["local_errors"]:
        known = [mtu for mtu in local if mtu is not None]
        result["verdict"], result["mtu"] = "local_error", (min(known) if known else None)
    elif result["replies"] or (result["received"] or 0) > 0:
        result["verdict"] = "ok"
    elif (result["transmitted"] or 0) > 0:
        result["verdict"] = "blackhole"
    else:
        result["verdict"] = "unknown"
