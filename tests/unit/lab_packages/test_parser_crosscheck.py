"""The stand-ins' output parses with the collection's real-format parsers."""
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import nccl, nvidia_smi, nvidia_smi_table
from lab_packages_support import a100_spec, node  # noqa: F401 (fixtures)  pylint: disable=unused-import


def test_query_csv_parses(node):
    fields = ["index", "name", "uuid", "memory.total", "mig.mode.current", "driver_version", "compute_cap"]
    for fmt in ("csv", "csv,noheader", "csv,noheader,nounits"):
        text = node.smi("--query-gpu=" + ",".join(fields), "--format=" + fmt).stdout
        parsed = nvidia_smi.parse_query_csv(text, fields)
        assert not parsed["errors"], (fmt, parsed["errors"])
        assert len(parsed["rows"]) == 8
        row = parsed["rows"][0]
        assert row["memory.total"] == 81920
        assert row["name"] == "NVIDIA A100-SXM4-80GB"
        assert row["driver_version"] == "535.230.02"


def test_table_parses(node):
    parsed = nvidia_smi_table.parse_table(node.smi().stdout)
    assert not parsed["errors"]
    assert (parsed["driver_version"], parsed["cuda_version"]) == ("535.230.02", "12.2")
    assert len(parsed["gpus"]) == 8
    assert parsed["gpus"][0]["memory_total_mib"] == 81920
    assert parsed["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"


def test_xml_parses(node):
    parsed = nvidia_smi.parse_xml(node.smi("-q", "-x").stdout)
    assert not parsed["errors"]
    assert parsed["cuda_version"] == "12.2" and parsed["attached_gpus"] == 8
    assert parsed["gpus"][0]["memory_total_mib"] == 81920
    assert parsed["gpus"][0]["mig_mode"] == "Disabled"


def test_nccl_parses_and_verdicts(node, a100_spec):
    parsed = nccl.parse(node.nccl("-b", "8", "-e", "1G", "-f", "2", "-g", "8").stdout)
    assert not parsed["errors"] and parsed["ranks"] == 8
    summary = nccl.summarize(parsed)
    assert summary["passed"] and 220 <= summary["max_busbw"] <= 235
    a100_spec["faults"]["nccl_wrong"] = 4
    node.write(a100_spec)
    bad = nccl.summarize(nccl.parse(node.nccl("-b", "8", "-e", "1G", "-f", "2", "-g", "8").stdout))
    assert not bad["passed"] and bad["total_wrong"] == 4
    multi = nccl.parse(node.nccl("-b", "1G", "-e", "1G", "--nodes", "owned-a100-1,owned-a100-2").stdout)
    assert multi["hosts"] == ["owned-a100-1", "owned-a100-2"] and multi["ranks"] == 16
