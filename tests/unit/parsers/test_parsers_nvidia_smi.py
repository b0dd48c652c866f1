"""nvidia-smi parsers against every real sample (CSV, default table, XML)."""
import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import nvidia_smi
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import nvidia_smi_table

import realsamples

PARSERS = {
    "nvidia-smi-csv": lambda text, args: nvidia_smi.parse_query_csv(text, **args),
    "nvidia-smi-table": lambda text, args: nvidia_smi_table.parse_table(text),
    "nvidia-smi-xml": lambda text, args: nvidia_smi.parse_xml(text),
}


@pytest.mark.parametrize("tool", sorted(PARSERS))
def test_every_sample_has_an_expected_entry(tool):
    assert realsamples.coverage_problems(tool) == []


@pytest.mark.parametrize("tool,name", realsamples.cases(PARSERS))
def test_real_sample(tool, name):
    entry = realsamples.load_expected(tool).get(name)
    assert entry, "no expected entry for %s/%s" % (tool, name)
    result = PARSERS[tool](realsamples.read_sample(tool, name), entry.get("_args", {}))
    realsamples.check(result, entry, "%s/%s" % (tool, name))


def test_convert_value_placeholders_and_units():
    assert nvidia_smi.convert_value("memory.total", "81559 MiB", "MiB") == 81559
    assert nvidia_smi.convert_value("power.draw", "28.16", "W") == 28.16
    for raw in ("[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", ""):
        assert nvidia_smi.convert_value("fan.speed", raw) is None
    # versions and compute capability stay strings
    assert nvidia_smi.convert_value("driver_version", "595.80") == "595.80"
    assert nvidia_smi.convert_value("compute_cap", "9.0") == "9.0"


def test_csv_crlf_and_field_mismatch():
    text = "index, name, memory.total [MiB]\r\n0, NVIDIA L40S, 46068 MiB\r\n1, NVIDIA L40S, 46068 MiB\r\n"
    out = nvidia_smi.parse_query_csv(text, fields=["index", "name", "memory.total"])
    assert out["errors"] == []
    assert [r["index"] for r in out["rows"]] == [0, 1]
    bad = nvidia_smi.parse_query_csv(text, fields=["index", "uuid", "memory.total"])
    assert bad["errors"] and "differ" in bad["errors"][0]
    short = nvidia_smi.parse_query_csv("0, NVIDIA L40S\n", fields=["index", "name", "memory.total"])
    assert short["rows"] == [] and "2 cells" in short["errors"][0]


def test_table_and_xml_reject_other_text():
    with pytest.raises(nvidia_smi.NvidiaSmiParseError):
        nvidia_smi_table.parse_table("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    with pytest.raises(nvidia_smi.NvidiaSmiParseError):
        nvidia_smi.parse_xml("<html/>")
    with pytest.raises(nvidia_smi.NvidiaSmiParseError):
        nvidia_smi.parse_xml("not xml")


def test_summarize_gpus():
    rows = [{"name": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920, "mig_mode": "Disabled"}] * 2
    assert nvidia_smi.summarize_gpus(rows) == {
        "count": 2, "models": ["NVIDIA A100-SXM4-80GB"], "model": "NVIDIA A100-SXM4-80GB",
        "memory_mib": 81920, "mig_mode": "Disabled"}
    mixed = rows + [{"name": "NVIDIA L40S", "memory_mib": 46068, "mig_mode": "Enabled"}]
    summary = nvidia_smi.summarize_gpus(mixed)
    assert summary["model"] is None and summary["memory_mib"] == 46068 and summary["mig_mode"] == "Enabled"
    assert nvidia_smi.summarize_gpus([])["count"] == 0
