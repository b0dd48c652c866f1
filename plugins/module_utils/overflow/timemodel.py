# -*- coding: utf-8 -*-
"""Completion-time model for overflow: local path versus cloud path, from the moment the trigger fires.

local = remaining local wait + local runtime
cloud = dispatch + input transfer + image pull and startup + cloud queue wait + cloud runtime + result return

Units are decimal, as link speeds are sold: 1 TB = 1e12 bytes, 5 Gbps = 5e9 bit/s.
Transfer time = bytes * 8 / effective (sustained) link bit/s.
"""
from __future__ import annotations

import math
import re

_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
    "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15,
}
_RATE_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
# Rate unit: optional decimal prefix, then bits ('bps', 'bit/s', 'b/s') or bytes ('B/s', 'Bps').
_RATE_UNIT = re.compile(r"^([kKmMgGtT]?)(bps|bit/s|b/s|B/s|Bps)$")
_DUR_UNITS = {
    "": 1, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
}
_NUM_UNIT = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z/]*)\s*$")


class UnitError(ValueError):
    """A size, rate or duration string could not be read."""


def _split(value, what):
    match = _NUM_UNIT.match(str(value))
    if not match:
        raise UnitError("cannot read %s %r (expected a number with an optional unit)" % (what, value))
    return float(match.group(1)), match.group(2)


def parse_size(value):
    """Bytes from an int/float or a string like '2TB', '40 GB', '1.5TiB'. Returns int."""
    if isinstance(value, bool):
        raise UnitError("cannot read size %r" % (value,))
    if isinstance(value, (int, float)):
        if value < 0:
            raise UnitError("size %r is negative" % (value,))
        return int(value)
    num, unit = _split(value, "size")
    key = unit.lower()
    if key not in _SIZE_UNITS:
        raise UnitError("unknown size unit %r in %r (use B, KB, MB, GB, TB, PB or KiB..PiB)" % (unit, value))
    return int(round(num * _SIZE_UNITS[key]))


def parse_rate(value):
    """Bit/s from a number (bit/s) or a string like '5Gbps', '10 Gbit/s', '625MB/s' (bytes)."""
    if isinstance(value, bool):
        raise UnitError("cannot read rate %r" % (value,))
    if isinstance(value, (int, float)):
        rate = float(value)
    else:
        num, unit = _split(value, "rate")
        match = _RATE_UNIT.match(unit)
        if not match:
            raise UnitError("unknown rate unit %r in %r (use bps, Mbps, Gbps, Gbit/s, MB/s, GB/s)" % (unit, value))
        rate = num * _RATE_PREFIX[match.group(1).lower()] * (8 if match.group(2) in ("B/s", "Bps") else 1)
    if rate <= 0:
        raise UnitError("rate %r must be above zero" % (value,))
    return rate


def parse_duration(value):
    """Seconds (float) from a number (seconds) or a string like '4h', '15 min', '90s'."""
    if isinstance(value, bool):
        raise UnitError("cannot read duration %r" % (value,))
    if isinstance(value, (int, float)):
        if value < 0:
            raise UnitError("duration %r is negative" % (value,))
        return float(value)
    num, unit = _split(value, "duration")
    key = unit.lower()
    if key not in _DUR_UNITS:
        raise UnitError("unknown duration unit %r in %r (use s, min, h, d)" % (unit, value))
    return num * _DUR_UNITS[key]


def transfer_seconds(nbytes, link_bps):
    """Seconds to move nbytes over a link of link_bps effective bit/s."""
    nbytes = parse_size(nbytes)
    link_bps = parse_rate(link_bps)
    return nbytes * 8.0 / link_bps


def local_completion(remaining_wait, runtime):
    """Breakdown of the local path. Durations in seconds or unit strings."""
    parts = {
        "remaining_wait_s": parse_duration(remaining_wait),
        "runtime_s": parse_duration(runtime),
    }
    parts["total_s"] = parts["remaining_wait_s"] + parts["runtime_s"]
    return parts


def cloud_completion(link_bps, runtime, input_bytes=0, output_bytes=0, dispatch=0, cloud_queue_wait=0,
                     image_bytes=0, image_cached=True, startup=0, inputs_in_cloud=False,
                     return_link_bps=None, image_pull_s=None):
    """Breakdown of the cloud path.

    image_pull_s: a measured image pull time (seconds or unit string); when given it replaces the
    estimate from image_bytes and the link (a cached image measures 0).

    inputs_in_cloud: the inputs already sit in cloud storage (shared dataset kept warm), so nothing is sent.
    image_cached: the image digest on the cloud pool matches on-prem; otherwise a cold pull of image_bytes
    over the same link is counted. return_link_bps defaults to link_bps.
    """
    link = parse_rate(link_bps)
    back = parse_rate(return_link_bps) if return_link_bps is not None else link
    parts = {
        "dispatch_s": parse_duration(dispatch),
        "input_transfer_s": 0.0 if inputs_in_cloud else transfer_seconds(input_bytes, link),
        "image_pull_s": (parse_duration(image_pull_s) if image_pull_s is not None
                         else 0.0 if image_cached else transfer_seconds(image_bytes, link)),
        "startup_s": parse_duration(startup),
        "cloud_queue_wait_s": parse_duration(cloud_queue_wait),
        "runtime_s": parse_duration(runtime),
        "result_return_s": transfer_seconds(output_bytes, back),
    }
    parts["total_s"] = math.fsum(parts.values())
    return parts


def compare(local_wait, local_runtime, link_bps, cloud_runtime=None, input_bytes=0, output_bytes=0,
            dispatch=0, cloud_queue_wait=0, image_bytes=0, image_cached=True, startup=0,
            inputs_in_cloud=False, return_link_bps=None, min_gain=0, image_pull_s=None):
    """Decide move or stay. The job moves only when the cloud path finishes sooner by more than min_gain.
    image_pull_s: the measured pull of the class's image on the cloud pool (replaces the estimate).

    Returns {"decision": "move"|"stay", "reason": str, "gain_s": local-cloud, "local": {...}, "cloud": {...}}.
    """
    local = local_completion(local_wait, local_runtime)
    cloud = cloud_completion(
        link_bps, local_runtime if cloud_runtime is None else cloud_runtime,
        input_bytes=input_bytes, output_bytes=output_bytes, dispatch=dispatch,
        cloud_queue_wait=cloud_queue_wait, image_bytes=image_bytes, image_cached=image_cached,
        startup=startup, inputs_in_cloud=inputs_in_cloud, return_link_bps=return_link_bps,
        image_pull_s=image_pull_s)
    gain = local["total_s"] - cloud["total_s"]
    min_gain_s = parse_duration(min_gain)
    if gain > min_gain_s:
        decision = "move"
        reason = "cloud finishes in %s against %s locally (%s sooner)" % (
            human(cloud["total_s"]), human(local["total_s"]), human(gain))
    else:
        decision = "stay"
        biggest = max((k for k in cloud if k != "total_s"), key=lambda k: cloud[k])
        reason = "cloud would finish in %s against %s locally; largest cloud part is %s (%s)" % (
            human(cloud["total_s"]), human(local["total_s"]), biggest[:-2], human(cloud[biggest]))
    return {"decision": decision, "reason": reason, "gain_s": gain, "local": local, "cloud": cloud}


def human(seconds):
    """Short readable duration: '53.3 min', '5.32 h', '45 s'."""
    s = float(seconds)
    sign = "-" if s < 0 else ""
    s = abs(s)
    if s < 120:
        return "%s%.0f s" % (sign, s)
    if s < 2 * 3600:
        return "%s%.1f min" % (sign, s / 60.0)
    return "%s%.2f h" % (sign, s / 3600.0)
