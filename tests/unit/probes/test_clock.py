"""Unit tests for plugins/module_utils/preflight/clock.py and probe_rows.py (clock probe logic, record rows)."""
import socket
import threading

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import clock
from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import probe_rows


def test_offset_math_compensates_rtt_and_picks_lowest_delay():
    # Node 2 s behind the server, 10 ms each way; a slow sample must lose.
    samples = [(100.0, 102.010, 102.011, 100.021), (200.0, 202.5, 202.5, 201.0)]
    offset, delay = clock.offset_from_samples(samples)
    assert offset == pytest.approx(-2.0, abs=1e-6) and delay == pytest.approx(0.020, abs=1e-6)


def test_serve_and_query_over_loopback_with_shifted_server_clock():
    srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    srv.bind(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    import time
    out = {}
    t = threading.Thread(target=lambda: out.update(clock.serve(srv, 5, expect_clients=1,
                                                               now=lambda: time.time() + 30.0)))
    t.start()
    cli = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    samples, lost = clock.query(cli, "127.0.0.1", port, samples=4, timeout=1.0, name="n1")
    t.join(5)
    cli.close()
    srv.close()
    assert lost == 0 and len(samples) == 4
    assert out["complete"] is True and out["clients"] == ["n1"] and out["requests"] == 4
    res = clock.clock_result(samples, lost, {"synchronised": True, "sources": ["chrony"]}, 100.0, True, "x:1")
    assert res["verdict"] == "fail" and res["offset_ms"] == pytest.approx(-30000.0, abs=50)
    assert "exceeds 100" in res["evidence"]


def test_answer_ignores_foreign_datagrams():
    assert clock.answer(b"GET / HTTP/1.0", lambda: 1.0) is None
    assert clock.answer(b"HGPUCLK1 Q notafloat n", lambda: 1.0) is None
    assert clock.parse_answer(clock.answer(clock.encode_request(1.5, "n0"), lambda: 2.0), "n1") is None


CHRONY_UNSYNC = """Reference ID    : 00000000 ()
Stratum         : 0
Ref time (UTC)  : Thu Jan 01 00:00:00 1970
System time     : 0.000000000 seconds fast of NTP time
Last offset     : +0.000000000 seconds
RMS offset      : 0.000000000 seconds
Frequency       : 0.000 ppm slow
Residual freq   : +0.000 ppm
Skew            : 0.000 ppm
Root delay      : 1.000000000 seconds
Root dispersion : 1.000000000 seconds
Update interval : 0.0 seconds
Leap status     : Not synchronised
"""
TIMEDATECTL_SYNC = "Timezone=Etc/UTC\nLocalRTC=no\nCanNTP=yes\nNTP=yes\nNTPSynchronized=yes\n"


def test_time_sync_status_with_parsers():
    outputs = {"chronyc": (0, CHRONY_UNSYNC, ""), "timedatectl": (0, TIMEDATECTL_SYNC, "")}
    st = clock.time_sync_status(lambda argv: outputs[argv[0]])
    assert st["chrony"]["synchronised"] is False and st["timedatectl"]["synchronized"] is True
    assert st["synchronised"] is True and st["sources"] == ["chrony", "timedatectl"]
    outputs["timedatectl"] = (1, "", "Failed to connect to bus")
    st = clock.time_sync_status(lambda argv: outputs[argv[0]])
    assert st["synchronised"] is False
    res = clock.clock_result([(1.0, 1.0005, 1.0006, 1.0011)], 0, st, 100.0, True, "x:1")
    assert res["verdict"] == "fail" and "time sync not established" in res["evidence"]
    res = clock.clock_result([(1.0, 1.0005, 1.0006, 1.0011)], 0, st, 100.0, False, "x:1")
    assert res["verdict"] == "pass"


def test_no_answer_fails():
    res = clock.clock_result([], 8, {"synchronised": None, "sources": []}, 100.0, False, "10.213.77.1:12123")
    assert res["observed"] == "error" and res["verdict"] == "fail"


def test_record_rows_have_ids_and_verdicts():
    rows = probe_rows.record_rows("clock", "owned-a100-1", {"owned-a100-1": {"verdict": "pass", "observed": "open",
                                                                             "server": "10.213.77.1:12123"}})
    assert rows[0]["id"] == "clock:owned-a100-1" and rows[0]["verdict"] == "pass"


def test_stop_datagram_only_from_own_address():
    import time
    srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    srv.bind(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    out = {}
    t = threading.Thread(target=lambda: out.update(clock.serve(srv, 10, expect_clients=3)))
    t.start()
    cli = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    cli.sendto(clock.encode_stop(), ("127.0.0.1", port))
    start = time.monotonic()
    t.join(5)
    cli.close()
    srv.close()
    assert out["stopped"] is True and out["complete"] is False and time.monotonic() - start < 3
