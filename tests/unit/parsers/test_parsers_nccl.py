"""nccl parser: behaviour beyond the real samples (wrong counts, launcher prefixes)."""
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import nccl

HEADER = """# nThread 1 nGpus 8 minBytes 8 maxBytes 128 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#  Rank  0 Group  0 Pid   11 on owned-a100-1 device  0 [0x10] NVIDIA A100-SXM4-80GB
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""


def test_wrong_counts_fail_the_run():
    text = HEADER + (
        "          64            16     float     sum      -1    25.00    0.00    0.00      0    25.00    0.00    0.00      0\n"
        "         128            32     float     sum      -1    25.00    0.01    0.01      3    25.00    0.01    0.01      1\n"
        "# Out of bounds values : 4 FAILED\n# Avg bus bandwidth    : 0.005\n")
    summary = nccl.summarize(nccl.parse(text))
    assert summary["total_wrong"] == 4
    assert summary["passed"] is False


def test_labelled_and_tagged_lines_parse_alike():
    rows = HEADER.splitlines() + [
        "         128            32     float     sum      -1    25.00    0.01    0.01      0    25.00    0.01    0.01      0"]
    plain = nccl.parse("\n".join(rows))
    srun = nccl.parse("\n".join("1: " + r for r in rows))
    mpi = nccl.parse("\n".join("[1,3]<stdout>:" + r for r in rows))
    assert plain["rows"] == srun["rows"] == mpi["rows"]
    assert (srun["prefix"], mpi["prefix"]) == ("srun", "mpirun")
    assert plain["devices"][0]["host"] == "owned-a100-1"


def test_row_with_missing_cells_is_reported():
    parsed = nccl.parse(HEADER + "         128            32     float     sum      -1    25.00    0.01\n")
    assert parsed["rows"] == []
    assert parsed["errors"] and "unparsed table row" in parsed["errors"][0]
    assert nccl.summarize(parsed)["passed"] is False


def test_empty_output_is_not_a_pass():
    assert nccl.summarize(nccl.parse(""))["passed"] is False
