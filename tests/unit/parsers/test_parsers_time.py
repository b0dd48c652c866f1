"""chrony / timedatectl parsers beyond the real samples."""
import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import chrony, timedatectl


@pytest.mark.parametrize("text,seconds", [
    ("-1.090s", -1.09), ("+3ms", 0.003), ("-123us", -0.000123), ("34min 8s", 2048.0),
    ("0", 0.0), ("1h 2min", 3720.0), ("5s", 5.0), ("91us", 0.000091),
])
def test_timespan(text, seconds):
    assert timedatectl.parse_timespan(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "5 parsecs", None])
def test_timespan_rejects(text):
    assert timedatectl.parse_timespan(text) is None


def test_timedatectl_show_properties():
    out = timedatectl.parse("Timezone=UTC\nLocalRTC=no\nCanNTP=yes\nNTP=yes\nNTPSynchronized=no\n")
    assert out["format"] == "show"
    assert out["synchronized"] is False and out["ntp_service"] == "active" and out["local_rtc"] is False


def test_chrony_garbage_lines_are_errors():
    out = chrony.parse_tracking("506 Cannot talk to daemon\n")
    assert out["synchronised"] is False and out["errors"]
