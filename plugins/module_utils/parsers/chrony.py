# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parser for ``chronyc tracking`` (chrony 2.x to 4.x). Pure Python 3 standard library.

Sign convention: offsets and frequency are "system clock minus true time", so a
clock that chrony reports "slow of NTP time" has a negative ``system_time_offset_s``
and "ppm slow" a negative ``frequency_ppm``.
"""

from __future__ import annotations

import re

__all__ = ["parse_tracking"]

_LINE = re.compile(r"^\s*([A-Za-z][A-Za-z ()]*?)\s*:\s*(.*?)\s*$")
_SECONDS = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s+seconds?(?:\s+(slow|fast)\s+of\s+NTP\s+time)?$")
_PPM = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s+ppm(?:\s+(slow|fast))?$")
_REFID = re.compile(r"^(\S+)\s*\((.*)\)$")

_SECONDS_KEYS = {"System time": "system_time_offset_s", "Last offset": "last_offset_s",
                 "RMS offset": "rms_offset_s", "Root delay": "root_delay_s",
                 "Root dispersion": "root_dispersion_s", "Update interval": "update_interval_s"}
_PPM_KEYS = {"Frequency": "frequency_ppm", "Residual freq": "residual_freq_ppm", "Skew": "skew_ppm"}


def _signed(number, word):
    value = float(number)
    return -value if word == "slow" else value


def parse_tracking(text):
    """Parse ``chronyc tracking``.

    Returns a dict: ref_id (as printed: hex ``55C7D664`` or chrony 2.x dotted IPv4),
    ref_id_format ("hex"/"ipv4"/None), ref_name (text in parentheses, "" when empty),
    stratum (int), ref_time (string, UTC), system_time_offset_s, last_offset_s,
    rms_offset_s, root_delay_s, root_dispersion_s, update_interval_s (floats, seconds),
    frequency_ppm, residual_freq_ppm, skew_ppm (floats), leap_status (string),
    synchronised (bool: leap status is not "Not synchronised", stratum > 0 and the
    reference id is not 00000000), other ({key: text} for lines not known here),
    errors (lines that did not parse).
    """
    result = {"ref_id": None, "ref_id_format": None, "ref_name": None, "stratum": None,
              "ref_time": None, "leap_status": None, "synchronised": False,
              "other": {}, "errors": []}
    for key in list(_SECONDS_KEYS.values()) + list(_PPM_KEYS.values()):
        result[key] = None
    for line in (text or "").replace("\r\n", "\n").split("\n"):
        if not line.strip():
            continue
        match = _LINE.match(line)
        if not match:
            result["errors"].append("unparsed line: %r" % line)
            continue
        key, value = match.group(1), match.group(2)
        if key == "Reference ID":
            ref = _REFID.match(value)
            ident, name = (ref.group(1), ref.group(2)) if ref else (value, None)
            result["ref_id"], result["ref_name"] = ident, name
            if re.match(r"^[0-9A-Fa-f]{8}$", ident):
                result["ref_id_format"] = "hex"
            elif re.match(r"^\d+\.\d+\.\d+\.\d+$", ident):
                result["ref_id_format"] = "ipv4"
        elif key == "Stratum":
            result["stratum"] = int(value) if value.isdigit() else None
        elif key.startswith("Ref time"):
            result["ref_time"] = value
        elif key == "Leap status":
            result["leap_status"] = value
        elif key in _SECONDS_KEYS:
            seconds = _SECONDS.match(value)
            if seconds:
                result[_SECONDS_KEYS[key]] = _signed(seconds.group(1), seconds.group(2))
            else:
                result["errors"].append("%s: not seconds: %r" % (key, value))
        elif key in _PPM_KEYS:
            ppm = _PPM.match(value)
            if ppm:
                result[_PPM_KEYS[key]] = _signed(ppm.group(1), ppm.group(2))
            else:
                result["errors"].append("%s: not ppm: %r" % (key, value))
        else:
            result["other"][key] = value
    result["synchronised"] = bool(
        result["leap_status"] is not None and result["leap_status"] != "Not synchronised"
        and (result["stratum"] or 0) > 0 and result["ref_id"] not in (None, "00000000", "0.0.0.0"))
    return result
