"""Time model: the seed's worked example reproduced exactly, plus unit parsing."""
import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import timemodel

SEED = dict(local_wait="9h", local_runtime="4h", link_bps="5Gbps", dispatch="10min",
            cloud_queue_wait="15min", image_cached=True, output_bytes="40GB")


def test_seed_example_2tb_moves():
    r = timemodel.compare(input_bytes="2TB", **SEED)
    cloud, local = r["cloud"], r["local"]
    # 2e12 B * 8 / 5e9 bit/s = 3200 s = 53.3 min
    assert cloud["input_transfer_s"] == pytest.approx(3200.0)
    assert round(cloud["input_transfer_s"] / 60) == 53
    # 40 GB back: 64 s, about a minute
    assert cloud["result_return_s"] == pytest.approx(64.0)
    assert cloud["image_pull_s"] == 0.0
    assert local["total_s"] == 13 * 3600
    # 600 + 3200 + 900 + 14400 + 64 = 19164 s = 5.32 h
    assert cloud["total_s"] == pytest.approx(19164.0)
    assert round(cloud["total_s"] / 3600, 1) == 5.3
    assert r["decision"] == "move"
    assert "5.32 h" in r["reason"] and "13.00 h" in r["reason"]


def test_seed_example_40tb_stays():
    r = timemodel.compare(input_bytes="40TB", **SEED)
    # 40e12 * 8 / 5e9 = 64000 s = 17.8 h, "about 18 hours" of transfer alone
    assert r["cloud"]["input_transfer_s"] == pytest.approx(64000.0)
    assert round(r["cloud"]["input_transfer_s"] / 3600, 1) == 17.8
    assert r["decision"] == "stay"
    assert "input_transfer" in r["reason"]
    assert r["gain_s"] < 0


def test_seed_example_40tb_moves_when_data_already_in_cloud():
    r = timemodel.compare(input_bytes="40TB", inputs_in_cloud=True, **SEED)
    assert r["cloud"]["input_transfer_s"] == 0.0
    assert r["decision"] == "move"


def test_cold_image_pull_counted():
    kw = dict(SEED)
    kw["image_cached"] = False
    r = timemodel.compare(input_bytes="2TB", image_bytes="25GB", **kw)
    assert r["cloud"]["image_pull_s"] == pytest.approx(40.0)


def test_min_gain_keeps_marginal_job_local():
    r = timemodel.compare(local_wait="1h", local_runtime="1h", link_bps="5Gbps", dispatch="10min",
                          cloud_queue_wait="15min", input_bytes="100GB", min_gain="1h")
    assert r["decision"] == "stay"


@pytest.mark.parametrize("text,expected", [
    ("2TB", 2 * 10**12), ("40 GB", 40 * 10**9), ("1KiB", 1024), ("1.5TiB", int(1.5 * 2**40)), (123, 123),
])
def test_parse_size(text, expected):
    assert timemodel.parse_size(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("5Gbps", 5e9), ("10 Gbit/s", 1e10), ("625MB/s", 5e9), ("100Mb/s", 1e8), (1e9, 1e9),
])
def test_parse_rate(text, expected):
    assert timemodel.parse_rate(text) == pytest.approx(expected)


@pytest.mark.parametrize("text,expected", [("4h", 14400), ("15 min", 900), ("90s", 90), ("1d", 86400), (30, 30)])
def test_parse_duration(text, expected):
    assert timemodel.parse_duration(text) == expected


@pytest.mark.parametrize("bad", ["fast", "5 parsecs", "-3h", True])
def test_parse_duration_rejects(bad):
    with pytest.raises(timemodel.UnitError):
        timemodel.parse_duration(bad)


def test_parse_rate_rejects_zero_and_unknown():
    with pytest.raises(timemodel.UnitError):
        timemodel.parse_rate("0Gbps")
    with pytest.raises(timemodel.UnitError):
        timemodel.parse_rate("5 furlongs")


def test_measured_image_pull_replaces_the_estimate():
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import timemodel
    est = timemodel.cloud_completion("5Gbps", "1h", image_bytes="25GB", image_cached=False)
    assert abs(est["image_pull_s"] - 40.0) < 1e-9
    got = timemodel.cloud_completion("5Gbps", "1h", image_bytes="25GB", image_cached=False, image_pull_s=12.5)
    assert got["image_pull_s"] == 12.5 and abs(got["total_s"] - 3612.5) < 1e-9
