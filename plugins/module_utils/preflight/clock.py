# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Logic of ``clock_probe``, run on the real source host.

NTP-style exchange of timestamps with a small UDP responder on the control host
(RTT-compensated offset), plus chrony / timesyncd status. The result has the probe
shape ``{observed: open|closed|error, elapsed_ms, evidence}`` plus the offset, and a
verdict. Sockets and command runners are passed in, so it is testable without a network.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import socket
import time

from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import chrony
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import timedatectl

CLOCK_MAGIC = b"HGPUCLK1"


def encode_request(t1, nonce):
    return b"%s Q %r %s" % (CLOCK_MAGIC, t1, nonce.encode("ascii"))


def encode_stop():
    return CLOCK_MAGIC + b" S"


def encode_bye(name):
    return b"%s B %s" % (CLOCK_MAGIC, name.encode("utf-8"))


def answer(data, now):
    """Server side: one datagram in, the reply out (None for anything else).

    ``now()`` is read at receive time (t2) and again just before the reply (t3).
    """
    t2 = now()
    parts = data.split()
    if len(parts) != 4 or parts[0] != CLOCK_MAGIC or parts[1] != b"Q":
        return None
    try:
        float(parts[2])
    except ValueError:
        return None
    return b"%s A %s %s %r %r" % (CLOCK_MAGIC, parts[2], parts[3], t2, now())


def parse_answer(data, nonce):
    parts = data.split()
    if len(parts) != 6 or parts[0] != CLOCK_MAGIC or parts[1] != b"A" or parts[3] != nonce.encode("ascii"):
        return None
    return float(parts[2]), float(parts[4]), float(parts[5])


def offset_from_samples(samples):
    """NTP on-wire math on (t1, t2, t3, t4) samples; the lowest-delay sample wins.

    t1/t4 client send/receive, t2/t3 server receive/send. Returns (offset_s, delay_s) with
    offset = client clock minus server clock (positive: this node is ahead).
    """
    best = None
    for t1, t2, t3, t4 in samples:
        delay = (t4 - t1) - (t3 - t2)
        server_minus_client = ((t2 - t1) + (t3 - t4)) / 2.0
        if best is None or delay < best[1]:
            best = (-server_minus_client, delay)
    return best


def serve(sock, serve_seconds, expect_clients=0, now=time.time, monotonic=time.monotonic):
    """Answer clock requests until every expected client said bye, a stop datagram came
    from the responder's own address, or time runs out."""
    own = sock.getsockname()[0]
    stopped = False
    deadline = monotonic() + serve_seconds
    requests = 0
    clients = set()
    while not stopped and monotonic() < deadline and (not expect_clients or len(clients) < expect_clients):
        sock.settimeout(max(0.05, min(0.5, deadline - monotonic())))
        try:
            data, peer = sock.recvfrom(512)
        except socket.timeout:
            continue
        if data == encode_stop() and peer[0] == own:
            stopped = True
            continue
        if data.startswith(CLOCK_MAGIC + b" B "):
            clients.add(data[len(CLOCK_MAGIC) + 3:].decode("utf-8", "replace"))
            continue
        reply = answer(data, now)
        if reply is not None:
            sock.sendto(reply, peer)
            requests += 1
    return {"requests": requests, "clients": sorted(clients), "stopped": stopped,
            "complete": bool(expect_clients) and len(clients) >= expect_clients}


def query(sock, address, port, samples=8, timeout=1.0, name="node", now=time.time, nonce_base="n"):
    """Client side: ``samples`` exchanges; returns the list of (t1, t2, t3, t4) and losses."""
    out = []
    lost = 0
    sock.settimeout(timeout)
    for i in range(samples):
        nonce = "%s%d" % (nonce_base, i)
        t1 = now()
        sock.sendto(encode_request(t1, nonce), (address, port))
        got = None
        while got is None:
            try:
                data, dummy = sock.recvfrom(512)
            except socket.timeout:
                break
            t4 = now()
            parsed = parse_answer(data, nonce)
            if parsed is not None:
                got = (parsed[0], parsed[1], parsed[2], t4)
        if got is None:
            lost += 1
        else:
            out.append(got)
    try:
        sock.sendto(encode_bye(name), (address, port))
    except OSError:
        pass
    return out, lost


def time_sync_status(run):
    """chrony (``chronyc -n tracking``) and systemd (``timedatectl show``) status."""
    status = {"chrony": None, "timedatectl": None, "synchronised": None, "sources": []}
    rc, out, err = run(["chronyc", "-n", "tracking"])
    if rc == 0 and out.strip():
        tracking = chrony.parse_tracking(out)
        status["chrony"] = {k: tracking[k] for k in ("ref_id", "ref_name", "stratum", "leap_status",
                                                     "system_time_offset_s", "synchronised")}
        status["sources"].append("chrony")
    rc, out, err = run(["timedatectl", "show"])
    if rc == 0 and out.strip():
        parsed = timedatectl.parse(out)
        status["timedatectl"] = {k: parsed.get(k) for k in ("synchronized", "ntp_service", "server_name")}
        status["sources"].append("timedatectl")
    votes = []
    if status["chrony"] is not None:
        votes.append(status["chrony"]["synchronised"])
    if status["timedatectl"] is not None and status["timedatectl"]["synchronized"] is not None:
        votes.append(status["timedatectl"]["synchronized"])
    status["synchronised"] = any(votes) if votes else None
    return status


def clock_result(samples, lost, sync, max_offset_ms, require_sync, server):
    """Judge one node's clock: |offset| within max_offset_ms and (optionally) synchronised."""
    res = {"server": server, "samples": len(samples), "lost": lost, "offset_ms": None, "rtt_ms": None,
           "sync": sync, "max_offset_ms": max_offset_ms}
    if not samples:
        res.update(observed="error", verdict="fail",
                   evidence="no answer from the reference time responder %s (%d lost)" % (server, lost))
        return res
    offset, delay = offset_from_samples(samples)
    res["offset_ms"] = round(offset * 1000.0, 3)
    res["rtt_ms"] = round(delay * 1000.0, 3)
    problems = []
    if abs(offset * 1000.0) > max_offset_ms:
        problems.append("clock offset %+.1f ms against %s exceeds %s ms" % (offset * 1000.0, server, max_offset_ms))
    if require_sync and not sync.get("synchronised"):
        problems.append("time sync not established (%s)" % (
            ", ".join(sync.get("sources") or []) or "neither chrony nor timedatectl answered"))
    detail = "offset %+.3f ms (rtt %.3f ms, best of %d, %d lost); synchronised=%s via %s" % (
        offset * 1000.0, delay * 1000.0, len(samples), lost, sync.get("synchronised"),
        ",".join(sync.get("sources") or []) or "none")
    res.update(observed="open", verdict="fail" if problems else "pass",
               evidence="; ".join(problems + [detail]))
    return res
