# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every overlapping pair between on-prem and cloud address ranges (IPv4 and IPv6).

Ranges are sorted by first address and swept once, keeping one heap of "open" ranges per
side ordered by last address: O(n log n + k) for n ranges and k overlapping pairs.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import heapq

try:
    import netaddr
except ImportError:  # pragma: no cover - netaddr is a collection requirement
    netaddr = None

SIDES = ("onprem", "cloud")


class CidrError(ValueError):
    """Bad input; the message names the entry."""


def parse_ranges(entries, side):
    """Entries are {'name', 'cidr', 'kind'?} dicts, or a {name: cidr} mapping.

    Returns tuples (version, first, last, side, index, name, cidr, kind).
    """
    if isinstance(entries, dict):
        entries = [{"name": k, "cidr": v} for k, v in sorted(entries.items())]
    if not isinstance(entries, list):
        raise CidrError("%s: expected a list of ranges or a name: cidr mapping" % side)
    out = []
    for i, entry in enumerate(entries):
        where = "%s[%d]" % (side, i)
        if isinstance(entry, str):
            entry = {"name": entry, "cidr": entry}
        if not isinstance(entry, dict) or "cidr" not in entry:
            raise CidrError("%s: expected a mapping with a 'cidr' key, got %r" % (where, entry))
        name = str(entry.get("name") or entry["cidr"])
        where = "%s[%d] (%s)" % (side, i, name)
        unknown = set(entry) - {"name", "cidr", "kind"}
        if unknown:
            raise CidrError("%s: unknown key(s) %s" % (where, ", ".join(sorted(unknown))))
        text = entry["cidr"]
        if not isinstance(text, str) or "/" not in text:
            raise CidrError("%s: %r is not a CIDR (address/prefix)" % (where, text))
        try:
            net = netaddr.IPNetwork(text)
        except (netaddr.AddrFormatError, ValueError, TypeError) as exc:
            raise CidrError("%s: %r is not a valid CIDR: %s" % (where, text, exc))
        if net.ip != net.network:
            raise CidrError("%s: %r has host bits set; did you mean %s?" % (where, text, net.cidr))
        out.append((net.version, net.first, net.last, side, i, name, str(net.cidr), entry.get("kind")))
    return out


def _relation(a, b):
    if a[1] == b[1] and a[2] == b[2]:
        return "equal"
    if a[1] <= b[1] and b[2] <= a[2]:
        return "contains"
    if b[1] <= a[1] and a[2] <= b[2]:
        return "contained_by"
    return "partial"


def _pair(a, b):
    # Report on-prem first; within one side, input order.
    if (SIDES.index(a[3]), a[4]) > (SIDES.index(b[3]), b[4]):
        a, b = b, a
    return {
        "a": {"side": a[3], "name": a[5], "cidr": a[6], "kind": a[7]},
        "b": {"side": b[3], "name": b[5], "cidr": b[6], "kind": b[7]},
        "relation": _relation(a, b),
        "ip_version": a[0],
        "overlap": str(netaddr.IPRange(netaddr.IPAddress(max(a[1], b[1]), a[0]),
                                       netaddr.IPAddress(min(a[2], b[2]), a[0]))),
    }


def sweep(ranges, within=False):
    """Yield (a, b) tuples of overlapping ranges. Cross-side always; same side if ``within``."""
    items = sorted(ranges, key=lambda r: (r[0], r[1], -r[2], SIDES.index(r[3]), r[4]))
    open_ = {side: [] for side in SIDES}
    version = None
    for item in items:
        if item[0] != version:
            version = item[0]
            open_ = {side: [] for side in SIDES}
        for side in SIDES:
            heap = open_[side]
            while heap and heap[0][0] < item[1]:
                heapq.heappop(heap)
            if side != item[3] or within:
                for _last, _seq, other in heap:
                    yield other, item
        heapq.heappush(open_[item[3]], (item[2], (item[4], item[1]), item))


def overlaps(onprem, cloud, within_side=False):
    """Return the sorted list of overlapping pairs (see _pair for each entry's shape)."""
    ranges = parse_ranges(onprem, "onprem") + parse_ranges(cloud, "cloud")
    pairs = [_pair(a, b) for a, b in sweep(ranges, within_side)]
    pairs.sort(key=lambda p: (p["a"]["side"] != "onprem", p["a"]["name"], p["a"]["cidr"],
                              p["b"]["side"], p["b"]["name"], p["b"]["cidr"]))
    return pairs


def brute_force(onprem, cloud, within_side=False):
    """All-pairs reference used by tests and the benchmark baseline."""
    ranges = parse_ranges(onprem, "onprem") + parse_ranges(cloud, "cloud")
    found = []
    for i, a in enumerate(ranges):
        for b in ranges[i + 1:]:
            if a[0] != b[0] or (a[3] == b[3] and not within_side):
                continue
            if a[1] <= b[2] and b[1] <= a[2]:
                found.append(_pair(a, b))
    found.sort(key=lambda p: (p["a"]["side"] != "onprem", p["a"]["name"], p["a"]["cidr"],
                              p["b"]["side"], p["b"]["name"], p["b"]["cidr"]))
    return found
