# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Logic of the network preflight probes that run on the real source host.

- ``net_probe``: TCP connect, UDP exchange and ICMP echo reachability;
- ``pmtu_probe``: DF pings with a binary search for the effective path MTU, black hole
  detection (small pings pass, large DF packets vanish without "frag needed").

Every probe result has the shape path_map.evaluate consumes:
``{observed: open|closed|error, elapsed_ms, evidence}`` (plus probe-specific keys).
Command runners and sockets are passed in, so all of it is testable without a network.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import concurrent.futures
import errno
import socket
import time

from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import ping
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import tracepath

IPV4_HEADERS = 28  # IPv4 header (20) + ICMP header (8): ping -s N sends N + 28 bytes
TCP_IPV4_HEADERS = 40  # IPv4 (20) + TCP (20): MSS = MTU - 40

# Errors on connect() that mean "the path refuses this port" (RST, ICMP unreachable or
# administratively prohibited, or a local firewall rejecting the packet).
_REFUSED = {
    errno.ECONNREFUSED: "refused (TCP RST or ICMP port unreachable)",
    errno.EHOSTUNREACH: "ICMP host unreachable / administratively prohibited",
    errno.EACCES: "rejected (ICMP administratively prohibited)",
    errno.EPERM: "rejected by a local firewall rule",
}


class ProbeError(ValueError):
    """Bad probe input; the message names the probe and the field."""


def _ms(start, end):
    return round((end - start) * 1000.0, 3)


def validate_net_probes(probes):
    """Check the probe list the module receives; returns it normalised."""
    out = []
    seen = set()
    for i, probe in enumerate(probes or []):
        where = "probes[%d]" % i
        if not isinstance(probe, dict):
            raise ProbeError("%s: expected a mapping" % where)
        pid = probe.get("id")
        if not pid or not isinstance(pid, str):
            raise ProbeError("%s.id: required (a string)" % where)
        if pid in seen:
            raise ProbeError("%s.id: duplicate probe id %r" % (where, pid))
        seen.add(pid)
        proto = probe.get("protocol")
        if proto not in ("tcp", "udp", "icmp"):
            raise ProbeError("%s (%s).protocol: %r is not tcp, udp or icmp" % (where, pid, proto))
        if not probe.get("address"):
            raise ProbeError("%s (%s).address: required" % (where, pid))
        port = probe.get("port")
        if proto != "icmp":
            if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
                raise ProbeError("%s (%s).port: %r is not a port 1-65535" % (where, pid, port))
        out.append({"id": pid, "protocol": proto, "address": str(probe["address"]),
                    "port": port if proto != "icmp" else None, "payload": probe.get("payload")})
    return out


def tcp_probe(address, port, timeout, connect=None, clock=time.monotonic):
    """One TCP connect. open = handshake completed; closed = refused/rejected or no answer."""
    connect = connect or socket.create_connection
    start = clock()
    try:
        sock = connect((address, port), timeout)
    except socket.timeout:
        return {"observed": "closed", "elapsed_ms": _ms(start, clock()),
                "evidence": "tcp %s:%s no answer within %ss (dropped/filtered)" % (address, port, timeout)}
    except OSError as exc:
        end = clock()
        if exc.errno in _REFUSED:
            return {"observed": "closed", "elapsed_ms": _ms(start, end),
                    "evidence": "tcp %s:%s %s [%s]" % (address, port, _REFUSED[exc.errno],
                                                       errno.errorcode.get(exc.errno, exc.errno))}
        if exc.errno == errno.ETIMEDOUT:
            return {"observed": "closed", "elapsed_ms": _ms(start, end),
                    "evidence": "tcp %s:%s connect timed out (dropped/filtered)" % (address, port)}
        return {"observed": "error", "elapsed_ms": _ms(start, end),
                "evidence": "tcp %s:%s: %s" % (address, port, exc)}
    end = clock()
    try:
        local = sock.getsockname()
        sock.close()
    except OSError:
        local = None
    return {"observed": "open", "elapsed_ms": _ms(start, end),
            "evidence": "tcp %s:%s handshake completed%s" % (
                address, port, " from %s:%s" % tuple(local[:2]) if local else "")}


def udp_probe(address, port, timeout, payload=None, make_socket=None, clock=time.monotonic):
    """One UDP exchange on a connected socket.

    open = a datagram came back; closed = ICMP port unreachable (ECONNREFUSED).
    Silence is reported as error: UDP cannot tell a filtered port from a service that does
    not answer this payload.
    """
    make_socket = make_socket or (lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    data = (payload or "hybridgpu-preflight").encode("utf-8")
    sock = make_socket()
    start = clock()
    try:
        sock.settimeout(timeout)
        sock.connect((address, port))
        sock.send(data)
        try:
            reply = sock.recv(2048)
        except socket.timeout:
            # A second send surfaces an ICMP error that arrived after the first.
            try:
                sock.send(data)
                reply = sock.recv(2048)
            except socket.timeout:
                return {"observed": "error", "elapsed_ms": _ms(start, clock()),
                        "evidence": "udp %s:%s no reply and no ICMP port unreachable within %ss: "
                                    "filtered, or open but silent for this payload" % (address, port, timeout)}
        return {"observed": "open", "elapsed_ms": _ms(start, clock()),
                "evidence": "udp %s:%s replied with %d bytes" % (address, port, len(reply))}
    except OSError as exc:
        end = clock()
        if exc.errno in _REFUSED:
            return {"observed": "closed", "elapsed_ms": _ms(start, end),
                    "evidence": "udp %s:%s %s" % (address, port, _REFUSED[exc.errno])}
        return {"observed": "error", "elapsed_ms": _ms(start, end),
                "evidence": "udp %s:%s: %s" % (address, port, exc)}
    finally:
        sock.close()


def ping_argv(address, payload_size=None, count=1, timeout=1, df=False):
    argv = ["ping", "-n", "-c", str(count), "-W", str(timeout)]
    if count > 1:
        argv += ["-i", "0.2"]
    if df:
        argv += ["-M", "do"]
    if payload_size is not None:
        argv += ["-s", str(payload_size)]
    return argv + [address]


def icmp_probe(address, run, count=2, timeout=1, clock=time.monotonic):
    """ICMP echo: open = a reply came back, closed = none did."""
    start = clock()
    rc, out, err = run(ping_argv(address, count=count, timeout=timeout))
    end = clock()
    parsed = ping.parse(out + "\n" + err)
    if parsed["verdict"] == "ok":
        rtt = parsed["rtt"]["avg"] if parsed["rtt"] else None
        return {"observed": "open", "elapsed_ms": _ms(start, end),
                "evidence": "icmp echo %s: %s/%s replies, rtt avg %s ms" % (
                    address, parsed["received"], parsed["transmitted"], rtt)}
    if parsed["transmitted"]:
        return {"observed": "closed", "elapsed_ms": _ms(start, end),
                "evidence": "icmp echo %s: 0/%s replies" % (address, parsed["transmitted"])}
    return {"observed": "error", "elapsed_ms": _ms(start, end),
            "evidence": "ping %s failed (rc=%s): %s" % (address, rc, (err or out).strip()[:300])}


def run_net_probes(probes, run=None, timeout=2.0, icmp_count=2, connect=None, make_socket=None, workers=16):
    """Run every probe; returns {id: result} in the probes' order.

    Probes run at once (up to ``workers``), so blocked ports cost one timeout rather than one
    each. The exception is what depends on ICMP from one address: its UDP probes (a closed port
    answers with ICMP port unreachable) and its echo probes run one after another, so that
    host's ICMP rate limit sees them paced as a single prober would. TCP answers with a reset or
    nothing, so its probes need no pacing."""
    probes = validate_net_probes(probes)

    def one(probe):
        if probe["protocol"] == "tcp":
            res = tcp_probe(probe["address"], probe["port"], timeout, connect=connect)
        elif probe["protocol"] == "udp":
            res = udp_probe(probe["address"], probe["port"], timeout, probe.get("payload"),
                            make_socket=make_socket)
        else:
            res = icmp_probe(probe["address"], run, count=icmp_count, timeout=max(1, int(round(timeout))))
        res.update(protocol=probe["protocol"], address=probe["address"], port=probe["port"])
        return res

    def in_turn(group):
        return [(probe["id"], one(probe)) for probe in group]

    groups, paced = [], {}
    for probe in probes:
        if probe["protocol"] == "tcp":
            groups.append([probe])
        else:
            if probe["address"] not in paced:
                paced[probe["address"]] = []
                groups.append(paced[probe["address"]])
            paced[probe["address"]].append(probe)
    if len(groups) <= 1 or workers <= 1:
        done = dict(pair for group in groups for pair in in_turn(group))
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(workers, len(groups))) as pool:
            done = dict(pair for pairs in pool.map(in_turn, groups) for pair in pairs)
    return dict((probe["id"], done[probe["id"]]) for probe in probes)


# ------------------------------------------------------------------ path MTU

def pmtu_search(send, max_mtu=1500, min_mtu=576):
    """Binary search for the largest DF packet that gets a reply.

    ``send(packet_size)`` sends one DF echo of that IP packet size and returns ping.parse()
    output. Returns effective_mtu, blackhole, frag_needed (MTUs routers reported),
    local_mtu (sender refused above it), reachable, steps ([{size, verdict}]).
    """
    steps = []
    frag = []
    local = []

    def attempt(size):
        parsed = send(size)
        steps.append({"size": size, "verdict": parsed["verdict"]})
        if parsed["verdict"] == "frag_needed" and parsed["mtu"]:
            frag.append(parsed["mtu"])
        if parsed["verdict"] == "local_error" and parsed["mtu"]:
            local.append(parsed["mtu"])
        return parsed["verdict"] == "ok"

    out = {"effective_mtu": None, "blackhole": False, "frag_needed": frag, "local_mtu": None,
           "reachable": False, "steps": steps, "vanished": []}
    if not attempt(min_mtu):
        return out
    out["reachable"] = True
    low, high = min_mtu, max_mtu + 1  # low passes; high is the smallest known failure
    if attempt(max_mtu):
        low = max_mtu
    else:
        high = max_mtu
        hint = min(frag + local) if (frag or local) else None
        if hint and low < hint < high:
            # The sender or a router named the MTU: confirm it, then check one above it.
            if attempt(hint):
                low = hint
                if hint + 1 < high and not attempt(hint + 1):
                    high = hint + 1
            else:
                high = hint
        while high - low > 1:
            mid = (low + high) // 2
            if attempt(mid):
                low = mid
            else:
                high = mid
    out["effective_mtu"] = low
    out["local_mtu"] = min(local) if local else None
    # Sizes above the effective MTU that got neither a reply nor any frag-needed answer.
    out["vanished"] = sorted(s["size"] for s in steps if s["size"] > low and s["verdict"] == "blackhole")
    out["blackhole"] = bool(out["vanished"]) and not frag
    return out


def pmtu_result(target, search, tracepath_text=None):
    """Turn a search into the probe result (observed/evidence plus MTU/MSS advice)."""
    mtu = search["effective_mtu"]
    res = {"effective_mtu": mtu, "blackhole": search["blackhole"], "frag_needed": search["frag_needed"],
           "local_mtu": search["local_mtu"], "steps": search["steps"], "address": target["address"],
           "destination": target.get("destination"),
           "expected_mtu": target.get("expected_mtu"), "recommended_mtu": None, "recommended_mss": None}
    if tracepath_text:
        trace = tracepath.parse(tracepath_text)
        res["tracepath_pmtu"] = trace["final_pmtu"]
    if not search["reachable"]:
        res.update(observed="error", verdict="fail",
                   evidence="no reply to a %d-byte DF ping: %s unreachable" % (
                       search["steps"][0]["size"], target["address"]))
        return res
    res["recommended_mtu"] = mtu
    res["recommended_mss"] = mtu - TCP_IPV4_HEADERS
    problems = []
    if search["blackhole"]:
        problems.append("PMTU black hole: %d-byte DF pings pass, %s-byte DF pings vanish with no "
                        "ICMP frag-needed (blocked?)" % (mtu, ",".join(str(s) for s in search["vanished"][:4])))
    expected = target.get("expected_mtu")
    if expected and mtu < expected:
        problems.append("effective MTU %d below the expected %d" % (mtu, expected))
    detail = "effective path MTU %d to %s; recommend MTU %d, TCP MSS %d" % (
        mtu, target["address"], mtu, mtu - TCP_IPV4_HEADERS)
    if search["frag_needed"]:
        detail += "; routers report frag-needed mtu %s (PMTU discovery works)" % min(search["frag_needed"])
    res.update(observed="open", verdict="fail" if problems else "pass",
               evidence="; ".join(problems + [detail]))
    return res


def validate_pmtu_targets(targets):
    out = []
    seen = set()
    for i, target in enumerate(targets or []):
        where = "targets[%d]" % i
        if not isinstance(target, dict) or not target.get("id") or not target.get("address"):
            raise ProbeError("%s: needs id and address" % where)
        if target["id"] in seen:
            raise ProbeError("%s.id: duplicate id %r" % (where, target["id"]))
        seen.add(target["id"])
        max_mtu = target.get("max_mtu", 1500)
        min_mtu = target.get("min_mtu", 576)
        for field, value in (("max_mtu", max_mtu), ("min_mtu", min_mtu)):
            if isinstance(value, bool) or not isinstance(value, int) or not 68 <= value <= 65535:
                raise ProbeError("%s (%s).%s: %r is not an MTU 68-65535" % (where, target["id"], field, value))
        if min_mtu > max_mtu:
            raise ProbeError("%s (%s): min_mtu %d above max_mtu %d" % (where, target["id"], min_mtu, max_mtu))
        expected = target.get("expected_mtu")
        if expected is not None and (isinstance(expected, bool) or not isinstance(expected, int)):
            raise ProbeError("%s (%s).expected_mtu: %r is not an integer" % (where, target["id"], expected))
        out.append({"id": target["id"], "address": str(target["address"]), "max_mtu": max_mtu,
                    "min_mtu": min_mtu, "expected_mtu": expected, "destination": target.get("destination")})
    return out


def run_pmtu_probes(targets, run, timeout=1, use_tracepath=False, clock=time.monotonic):
    results = {}
    for target in validate_pmtu_targets(targets):
        def send(size, address=target["address"]):
            rc, out, err = run(ping_argv(address, payload_size=size - IPV4_HEADERS, count=1,
                                         timeout=timeout, df=True))
            return ping.parse(out + "\n" + err)
        start = clock()
        search = pmtu_search(send, target["max_mtu"], target["min_mtu"])
        trace = None
        if use_tracepath:
            rc, out, err = run(["tracepath", "-n", "-l", str(target["max_mtu"]), target["address"]])
            trace = out if rc == 0 or out else None
        res = pmtu_result(target, search, trace)
        res["elapsed_ms"] = _ms(start, clock())
        results[target["id"]] = res
    return results
