# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers for ``timedatectl status``, ``timedatectl show[-timesync]`` and
``timedatectl timesync-status``. Pure Python 3 standard library.

Every parser returns the same normalised keys (None when the form does not print
them): ``format``, ``synchronized``, ``ntp_service``, ``server_name``,
``server_address``, ``stratum``, ``offset_s``, ``poll_interval_s``, plus the
form's own keys.
"""

from __future__ import annotations

import re

__all__ = ["parse", "parse_status", "parse_show", "parse_timesync_status", "parse_timespan"]

_UNITS = {"us": 1e-6, "\u00b5s": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3, "s": 1.0, "sec": 1.0,
          "min": 60.0, "m": 60.0, "h": 3600.0, "hr": 3600.0, "d": 86400.0, "w": 604800.0}
_SPAN_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(us|\u00b5s|usec|ms|msec|min|sec|hr|s|m|h|d|w)\b")


def parse_timespan(text):
    """systemd time span to seconds: ``-1.087495s`` -> -1.087495, ``+3ms``, ``-123us``,
    ``34min 8s`` -> 2048.0, ``0`` -> 0.0. Returns None for text that is not a span."""
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    sign = 1.0
    if text[0] in "+-":
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:].strip()
    if re.match(r"^\d+(?:\.\d+)?$", text):
        return sign * float(text)
    parts = _SPAN_PART.findall(text)
    if not parts or _SPAN_PART.sub("", text).strip():
        return None
    return sign * sum(float(n) * _UNITS[u] for n, u in parts)


def _yes(value):
    if value is None:
        return None
    value = value.strip().lower()
    if value in ("yes", "true", "1", "active"):
        return True
    if value in ("no", "false", "0", "inactive"):
        return False
    return None


def _base(fmt):
    return {"format": fmt, "synchronized": None, "ntp_service": None, "server_name": None,
            "server_address": None, "stratum": None, "offset_s": None, "poll_interval_s": None,
            "errors": []}


def parse_status(text):
    """``timedatectl status`` (new "System clock synchronized"/"NTP service" and old
    "NTP enabled"/"NTP synchronized" layouts, Ubuntu 18.04's
    "systemd-timesyncd.service active"). Adds local_time, universal_time, rtc_time,
    time_zone, ntp_enabled, rtc_in_local_tz, dst_active, warnings (list of text)."""
    result = _base("status")
    result.update({"local_time": None, "universal_time": None, "rtc_time": None, "time_zone": None,
                   "ntp_enabled": None, "rtc_in_local_tz": None, "dst_active": None, "warnings": []})
    warning = None
    last_key = None
    for line in (text or "").replace("\r\n", "\n").split("\n"):
        if not line.strip():
            warning = None
            continue
        if line.startswith("Warning:"):
            warning = line[len("Warning:"):].strip()
            result["warnings"].append(warning)
            continue
        if warning is not None:
            result["warnings"][-1] += " " + line.strip()
            continue
        match = re.match(r"^\s*([A-Za-z][\w .-]*?):\s+(.*?)\s*$", line)
        if not match:
            if last_key in ("Last DST change", "Next DST change"):
                continue  # continuation lines of a DST change block
            result["errors"].append("unparsed line: %r" % line)
            continue
        key, value = match.group(1).strip(), match.group(2)
        last_key = key
        if key == "Local time":
            result["local_time"] = value
        elif key == "Universal time":
            result["universal_time"] = value
        elif key == "RTC time":
            result["rtc_time"] = value
        elif key == "Time zone":
            result["time_zone"] = value
        elif key in ("System clock synchronized", "NTP synchronized"):
            result["synchronized"] = _yes(value)
        elif key == "NTP service":
            result["ntp_service"] = value
            result["ntp_enabled"] = _yes(value)
        elif key == "NTP enabled":
            result["ntp_enabled"] = _yes(value)
            result["ntp_service"] = "active" if _yes(value) else "inactive"
        elif key.endswith(".service active"):
            result["ntp_service"] = "active" if _yes(value) else "inactive"
            result["ntp_enabled"] = _yes(value)
        elif key == "RTC in local TZ":
            result["rtc_in_local_tz"] = _yes(value)
        elif key == "DST active":
            result["dst_active"] = _yes(value)
    return result


def _ntp_message(value):
    """``{ Leap=0, Version=4, ... Ignored=no PacketCount=1, Jitter=0 }`` -> dict."""
    body = value.strip().lstrip("{").rstrip("}")
    fields = {}
    for item in re.split(r",\s*|\s+(?=[A-Z][A-Za-z]+=)", body):
        if "=" in item:
            key, dummy, val = item.partition("=")
            fields[key.strip()] = val.strip()
    return fields


def parse_show(text):
    """``timedatectl show`` / ``show-timesync [--all]`` (Key=Value lines).

    Adds properties (all Key=Value as printed), ntp_message (dict), leap (int),
    root_delay_s, root_dispersion_s, jitter_s, packet_count, frequency, timezone,
    local_rtc, fallback_servers (list)."""
    result = _base("show")
    props = {}
    for line in (text or "").replace("\r\n", "\n").split("\n"):
        if not line.strip():
            continue
        if "=" not in line:
            result["errors"].append("unparsed line: %r" % line)
            continue
        key, dummy, value = line.partition("=")
        props[key.strip()] = value.strip()
    result["properties"] = props
    message = _ntp_message(props["NTPMessage"]) if "NTPMessage" in props else {}
    result["ntp_message"] = message
    result["server_name"] = props.get("ServerName") or None
    result["server_address"] = props.get("ServerAddress") or None
    result["poll_interval_s"] = parse_timespan(props.get("PollIntervalUSec"))
    result["fallback_servers"] = (props.get("FallbackNTPServers") or "").split()
    stratum = message.get("Stratum")
    result["stratum"] = int(stratum) if stratum and stratum.isdigit() else None
    leap = message.get("Leap")
    result["leap"] = int(leap) if leap and leap.isdigit() else None
    result["root_delay_s"] = parse_timespan(message.get("RootDelay"))
    result["root_dispersion_s"] = parse_timespan(message.get("RootDispersion"))
    result["jitter_s"] = parse_timespan(message.get("Jitter"))
    count = message.get("PacketCount")
    result["packet_count"] = int(count) if count and count.isdigit() else None
    freq = props.get("Frequency")
    result["frequency"] = int(freq) if freq and re.match(r"^-?\d+$", freq) else None
    result["timezone"] = props.get("Timezone")
    result["local_rtc"] = _yes(props.get("LocalRTC"))
    if "NTPSynchronized" in props:
        result["synchronized"] = _yes(props["NTPSynchronized"])
    if "NTP" in props:
        result["ntp_service"] = "active" if _yes(props["NTP"]) else "inactive"
    return result


def parse_timesync_status(text):
    """``timedatectl timesync-status``. Adds leap, version, reference, precision_s,
    root_distance_s, delay_s, jitter_s, packet_count, frequency_ppm, poll_min_s,
    poll_max_s. ``server_address`` is None when systemd printed ``(null)``."""
    result = _base("timesync-status")
    result.update({"leap": None, "version": None, "reference": None, "precision_s": None,
                   "root_distance_s": None, "delay_s": None, "jitter_s": None, "packet_count": None,
                   "frequency_ppm": None, "poll_min_s": None, "poll_max_s": None})
    for line in (text or "").replace("\r\n", "\n").split("\n"):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            result["errors"].append("unparsed line: %r" % line)
            continue
        key, value = key.strip(), value.strip()
        if key == "Server":
            match = re.match(r"^(\S+)\s*\((.*)\)$", value)
            address, name = (match.group(1), match.group(2)) if match else (value, None)
            result["server_address"] = None if address == "(null)" else address
            result["server_name"] = name
        elif key == "Poll interval":
            match = re.match(r"^(.*?)\s*\(min:\s*(.*?);\s*max\s*(.*?)\)$", value)
            if match:
                result["poll_interval_s"] = parse_timespan(match.group(1))
                result["poll_min_s"] = parse_timespan(match.group(2))
                result["poll_max_s"] = parse_timespan(match.group(3))
            else:
                result["poll_interval_s"] = parse_timespan(value)
        elif key == "Leap":
            result["leap"] = value
        elif key == "Version":
            result["version"] = int(value) if value.isdigit() else None
        elif key == "Stratum":
            result["stratum"] = int(value) if value.isdigit() else None
        elif key == "Reference":
            result["reference"] = value
        elif key == "Precision":
            result["precision_s"] = parse_timespan(value.split("(")[0])
        elif key == "Root distance":
            result["root_distance_s"] = parse_timespan(value.split("(")[0])
        elif key == "Offset":
            result["offset_s"] = parse_timespan(value)
        elif key == "Delay":
            result["delay_s"] = parse_timespan(value)
        elif key == "Jitter":
            result["jitter_s"] = parse_timespan(value)
        elif key == "Packet count":
            result["packet_count"] = int(value) if value.isdigit() else None
        elif key == "Frequency":
            match = re.match(r"^([-+]?\d+(?:\.\d+)?)\s*ppm$", value)
            result["frequency_ppm"] = float(match.group(1)) if match else None
    # a server that answered with a stratum and a leap state other than "not synchronized"
    if result["stratum"] is not None and result["leap"] is not None:
        result["synchronized"] = result["stratum"] > 0 and "not" not in result["leap"]
    return result


def parse(text):
    """Detect the form and parse it (see the per-form functions)."""
    lines = [ln for ln in (text or "").replace("\r\n", "\n").split("\n") if ln.strip()]
    if not lines:
        return _base(None)
    if all("=" in ln and ":" not in ln.split("=", 1)[0] for ln in lines):
        return parse_show(text)
    if re.match(r"^\s*Server:", lines[0]) or any(re.match(r"^\s*Poll interval:", ln) for ln in lines):
        return parse_timesync_status(text)
    return parse_status(text)
