"""Unit tests for plugins/module_utils/preflight/network.py (net and path-MTU probe logic)."""
import socket
import threading
import time

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import ping
from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import network

ADDR = "10.213.77.13"


def _ping_text(size, verdict, mtu=None):
    """iputils ping output for one DF echo of IP packet size `size`."""
    payload = size - 28
    head = "PING %s (%s) %d(%d) bytes of data.\n" % (ADDR, ADDR, payload, size)
    if verdict == "ok":
        return head + ("%d bytes from %s: icmp_seq=1 ttl=64 time=0.081 ms\n\n--- %s ping statistics ---\n"
                       "1 packets transmitted, 1 received, 0%% packet loss, time 0ms\n"
                       "rtt min/avg/max/mdev = 0.081/0.081/0.081/0.000 ms\n" % (size - 20, ADDR, ADDR))
    if verdict == "frag":
        return head + ("From 10.213.77.1 icmp_seq=1 Frag needed and DF set (mtu = %d)\n\n--- %s ping statistics ---\n"
                       "1 packets transmitted, 0 received, +1 errors, 100%% packet loss, time 0ms\n" % (mtu, ADDR))
    if verdict == "local":
        return head + "ping: local error: message too long, mtu=%d\n\n--- %s ping statistics ---\n" \
                      "1 packets transmitted, 0 received, +1 errors, 100%% packet loss, time 0ms\n" % (mtu, ADDR)
    return head + ("\n--- %s ping statistics ---\n1 packets transmitted, 0 received, 100%% packet loss, time 0ms\n" % ADDR)


def path(mtu, mode):
    """A fake path: packets up to `mtu` pass; above it `mode` decides what the sender sees."""
    sent = []

    def send(size):
        sent.append(size)
        if size <= mtu:
            return ping.parse(_ping_text(size, "ok"))
        return ping.parse(_ping_text(size, mode, mtu))
    return send, sent


def test_clean_path_is_two_pings():
    send, sent = path(1500, "blackhole")
    out = network.pmtu_search(send, 1500, 576)
    assert out["effective_mtu"] == 1500 and not out["blackhole"] and sent == [576, 1500]


def test_blackhole_found_by_binary_search():
    send, sent = path(1380, "blackhole")
    out = network.pmtu_search(send, 1500, 576)
    assert out["effective_mtu"] == 1380
    assert out["blackhole"] is True and out["frag_needed"] == []
    assert 1500 in out["vanished"] and all(s > 1380 for s in out["vanished"])
    assert len(sent) <= 14
    res = network.pmtu_result({"address": ADDR, "expected_mtu": 1500}, out)
    assert res["verdict"] == "fail" and res["recommended_mtu"] == 1380 and res["recommended_mss"] == 1340
    assert "PMTU black hole" in res["evidence"] and "below the expected 1500" in res["evidence"]


def test_frag_needed_is_not_a_blackhole_and_hint_is_used():
    send, sent = path(1400, "frag")
    out = network.pmtu_search(send, 1500, 576)
    assert out["effective_mtu"] == 1400 and out["blackhole"] is False
    assert sent == [576, 1500, 1400, 1401]
    res = network.pmtu_result({"address": ADDR}, out)
    assert res["verdict"] == "pass" and "PMTU discovery works" in res["evidence"]


def test_local_mtu_hint():
    send, sent = path(1280, "local")
    out = network.pmtu_search(send, 1500, 576)
    assert out["effective_mtu"] == 1280 and out["local_mtu"] == 1280 and not out["blackhole"]


def test_unreachable_target_fails():
    send, dummy = path(0, "blackhole")
    out = network.pmtu_search(send, 1500, 576)
    res = network.pmtu_result({"address": ADDR}, out)
    assert res["observed"] == "error" and res["verdict"] == "fail" and "unreachable" in res["evidence"]


def test_run_pmtu_probes_builds_df_ping_argv():
    calls = []

    def run(argv):
        calls.append(argv)
        size = int(argv[argv.index("-s") + 1]) + 28
        return 0, _ping_text(size, "ok" if size <= 1450 else "blackhole"), ""
    res = network.run_pmtu_probes([{"id": "t", "address": ADDR}], run)
    assert res["t"]["effective_mtu"] == 1450
    assert calls[0][:1] == ["ping"] and "-M" in calls[0] and calls[0][calls[0].index("-M") + 1] == "do"


@pytest.mark.parametrize("targets,msg", [
    ([{"address": ADDR}], "targets[0]: needs id and address"),
    ([{"id": "a", "address": ADDR, "max_mtu": 50}], "targets[0] (a).max_mtu"),
    ([{"id": "a", "address": ADDR, "min_mtu": 1400, "max_mtu": 1300}], "min_mtu 1400 above max_mtu 1300"),
    ([{"id": "a", "address": ADDR}, {"id": "a", "address": ADDR}], "duplicate id"),
])
def test_pmtu_target_errors(targets, msg):
    with pytest.raises(network.ProbeError) as err:
        network.validate_pmtu_targets(targets)
    assert msg in str(err.value)


@pytest.fixture
def listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    yield srv.getsockname()[1]
    srv.close()


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_tcp_open_and_closed_on_loopback(listener):
    res = network.run_net_probes([
        {"id": "open", "protocol": "tcp", "address": "127.0.0.1", "port": listener},
        {"id": "closed", "protocol": "tcp", "address": "127.0.0.1", "port": _free_port()},
    ], timeout=1.0)
    assert res["open"]["observed"] == "open" and "handshake completed" in res["open"]["evidence"]
    assert res["closed"]["observed"] == "closed" and "refused" in res["closed"]["evidence"]
    assert res["open"]["elapsed_ms"] >= 0


def test_tcp_timeout_is_closed_as_filtered():
    def connect(addr, timeout):
        raise socket.timeout("timed out")
    res = network.tcp_probe("10.213.77.13", 22, 0.1, connect=connect)
    assert res["observed"] == "closed" and "dropped/filtered" in res["evidence"]


def test_tcp_other_error_is_error():
    def connect(addr, timeout):
        raise OSError(99, "Cannot assign requested address")
    assert network.tcp_probe("10.213.77.13", 22, 0.1, connect=connect)["observed"] == "error"


def test_udp_reply_open_port_unreachable_closed_silence_error():
    srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    srv.bind(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def echo():
        data, peer = srv.recvfrom(100)
        srv.sendto(data, peer)
    t = threading.Thread(target=echo)
    t.start()
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    try:
        res = network.run_net_probes([
            {"id": "u-open", "protocol": "udp", "address": "127.0.0.1", "port": port},
            {"id": "u-closed", "protocol": "udp", "address": "127.0.0.1", "port": _free_port()},
            {"id": "u-silent", "protocol": "udp", "address": "127.0.0.1", "port": silent.getsockname()[1]},
        ], timeout=0.3)
    finally:
        t.join(2)
        srv.close()
        silent.close()
    assert res["u-open"]["observed"] == "open"
    assert res["u-closed"]["observed"] == "closed"
    assert res["u-silent"]["observed"] == "error" and "filtered, or open but silent" in res["u-silent"]["evidence"]


def test_icmp_uses_ping_parser():
    def ok(argv):
        return 0, _ping_text(84, "ok"), ""

    def lost(argv):
        return 1, _ping_text(84, "blackhole"), ""

    def missing(argv):
        return 127, "", "ping not found"
    assert network.icmp_probe(ADDR, ok)["observed"] == "open"
    assert network.icmp_probe(ADDR, lost)["observed"] == "closed"
    assert network.icmp_probe(ADDR, missing)["observed"] == "error"


@pytest.mark.parametrize("probe,msg", [
    ({"protocol": "tcp", "address": ADDR, "port": 22}, "probes[0].id: required"),
    ({"id": "x", "protocol": "sctp", "address": ADDR, "port": 22}, "probes[0] (x).protocol: 'sctp'"),
    ({"id": "x", "protocol": "tcp", "address": ADDR, "port": 70000}, "probes[0] (x).port: 70000"),
    ({"id": "x", "protocol": "tcp", "port": 22}, "probes[0] (x).address: required"),
])
def test_net_probe_input_errors(probe, msg):
    with pytest.raises(network.ProbeError) as err:
        network.validate_net_probes([probe])
    assert msg in str(err.value)


def test_tcp_probes_run_at_once_even_to_one_address():
    lock = threading.Lock()
    active = {}
    peak = {"all": 0, "one_address": 0}

    def slow_refused(addr, timeout):
        with lock:
            active[addr[0]] = active.get(addr[0], 0) + 1
            peak["all"] = max(peak["all"], sum(active.values()))
            peak["one_address"] = max(peak["one_address"], active[addr[0]])
        time.sleep(0.3)
        with lock:
            active[addr[0]] -= 1
        raise ConnectionRefusedError(111, "refused")

    probes = [{"id": "p%d-%d" % (a, port), "protocol": "tcp", "address": "10.0.0.%d" % a, "port": port}
              for port in (22, 80) for a in (1, 2, 3, 4)]
    start = time.monotonic()
    out = network.run_net_probes(probes, connect=slow_refused, timeout=1, workers=6)
    took = time.monotonic() - start
    assert list(out) == [p["id"] for p in probes]
    assert all(r["observed"] == "closed" for r in out.values()), out
    # six at a time, two of them to one address; the time only has to beat one probe after another
    assert peak["all"] == 6 and peak["one_address"] == 2 and took < 8 * 0.3, (peak, took)


def test_icmp_and_udp_probes_to_one_address_run_one_after_another():
    lock = threading.Lock()
    active, overlap, peak = {}, [], {"all": 0}

    def enter(address):
        with lock:
            if active.get(address):
                overlap.append(address)
            active[address] = active.get(address, 0) + 1
            peak["all"] = max(peak["all"], sum(active.values()))

    def leave(address):
        time.sleep(0.2)
        with lock:
            active[address] -= 1

    def ping_run(argv):
        enter(argv[-1])
        leave(argv[-1])
        return 0, "2 packets transmitted, 2 received, 0% packet loss, time 1ms\n" \
                  "rtt min/avg/max/mdev = 0.1/0.1/0.1/0.0 ms", ""

    class Refused(object):
        def settimeout(self, timeout):
            pass

        def connect(self, addr):
            self.address = addr[0]
            enter(self.address)

        def send(self, data):
            leave(self.address)
            raise ConnectionRefusedError(111, "refused")

        def close(self):
            pass

    probes = []
    for a in (1, 2):
        probes += [{"id": "i%d" % a, "protocol": "icmp", "address": "10.0.0.%d" % a},
                   {"id": "u%d-1" % a, "protocol": "udp", "address": "10.0.0.%d" % a, "port": 53},
                   {"id": "u%d-2" % a, "protocol": "udp", "address": "10.0.0.%d" % a, "port": 123}]
    out = network.run_net_probes(probes, run=ping_run, make_socket=Refused, timeout=1)
    assert out["i1"]["observed"] == "open" and out["u2-1"]["observed"] == "closed"
    assert overlap == [] and peak["all"] == 2, (overlap, peak)
