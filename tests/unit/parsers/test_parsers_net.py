"""ping / tracepath parsers beyond the real samples."""
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import ping, tracepath


def test_local_error_without_frag_needed():
    out = ping.parse("PING 10.213.77.12 (10.213.77.12) 1472(1500) bytes of data.\n"
                     "ping: local error: message too long, mtu=1380\n\n"
                     "--- 10.213.77.12 ping statistics ---\n"
                     "1 packets transmitted, 0 received, +1 errors, 100% packet loss, time 0ms\n")
    assert out["verdict"] == "local_error" and out["mtu"] == 1380


def test_empty_output_is_unknown():
    assert ping.parse("")["verdict"] == "unknown"


def test_tracepath_empty():
    out = tracepath.parse("")
    assert out["hops"] == [] and out["final_pmtu"] is None and out["reached"] is False
