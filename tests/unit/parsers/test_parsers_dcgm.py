"""dcgm parsers beyond the real samples."""
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import dcgm


def test_nonzero_xid_and_escaped_labels():
    text = ('# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n'
            'DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-x",Hostname="owned-a100-1",note="a \\"q\\""} 79\n'
            'garbage line\n')
    parsed = dcgm.parse_prometheus(text)
    assert parsed["samples"][0]["labels"]["note"] == 'a "q"'
    assert len(parsed["errors"]) == 1
    summary = dcgm.exporter_summary(parsed)
    assert summary["has_xid"] and summary["xid_errors"] == [{"gpu": "1", "xid": 79, "count": None}]


def test_diag_warn_and_skip():
    text = ("|-----  Hardware  ----------+------------------------------------------------|\n"
            "| GPU Memory                | Skip                                           |\n"
            "| Diagnostic                | Warn                                           |\n")
    out = dcgm.parse_diag(text)
    assert [t["status"] for t in out["tests"]] == ["Skip", "Warn"] and out["overall"] == "Warn"
