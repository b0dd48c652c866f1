"""The all_reduce_perf stand-in prints nccl-tests' real table and summary."""
import re
from lab_packages_support import a100_spec, node, real_output  # noqa: F401 (fixtures)  pylint: disable=unused-import

ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)"
                 r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)$")


def _rows(text):
    return [ROW.match(line).groups() for line in text.splitlines() if line and not line.startswith("#")]


def test_header_and_table_layout(node, real_output):
    res = node.nccl("-b", "8", "-e", "8G", "-f", "2", "-g", "8")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == ("# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) "
                        "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0")
    ranks = [l for l in lines if l.startswith("#  Rank")]
    assert len(ranks) == 8
    assert re.match(r"^#  Rank  0 Group  0 Pid +\d+ on +\S+ device  0 \[0x10\] NVIDIA A100-SXM4-80GB$", ranks[0])
    # The three header lines of the table are the real ones, byte for byte.
    real = real_output("nccl-tests", "h100-80gb-hbm3_2nodes-x8_gcp-a3mega_all-reduce.txt").splitlines()
    start = lines.index(next(l for l in lines if "out-of-place" in l))
    real_start = real.index(next(l for l in real if "out-of-place" in l))
    assert lines[start:start + 3] == real[real_start:real_start + 3]
    rows = _rows(res.stdout)
    assert len(rows) == 31
    assert rows[0][:5] == ("8", "2", "float", "sum", "-1")
    assert lines[start + 3] .startswith("           8             2     float     sum      -1 ")
    assert lines[-3] == "# Out of bounds values : 0 OK"
    assert re.match(r"^# Avg bus bandwidth    : [\d.]+ $", lines[-2])
    assert lines[-1] == "#"


def test_busbw_formula_and_saturation(node):
    res = node.nccl("-b", "1M", "-e", "8G", "-f", "2", "-g", "8")
    rows = _rows(res.stdout)
    for row in rows:
        algbw, busbw = float(row[6]), float(row[7])
        assert abs(busbw - algbw * 2 * 7 / 8) < 0.02
    largest = float(rows[-1][7])
    assert 220 <= largest <= 235  # spec busbw_gbps 230
    assert float(rows[0][7]) < largest / 2  # latency floor at small sizes


def test_deterministic(node):
    first = node.nccl("-b", "8", "-e", "128M", "-f", "2", "-g", "8").stdout
    again = node.nccl("-b", "8", "-e", "128M", "-f", "2", "-g", "8").stdout

    def strip(text):
        return [line for line in text.splitlines() if "Pid" not in line]

    assert strip(first) == strip(again)


def test_busbw_factor_fault(node, a100_spec):
    a100_spec["faults"]["nccl_busbw_factor"] = 0.5
    node.write(a100_spec)
    rows = _rows(node.nccl("-b", "8G", "-e", "8G", "-g", "8").stdout)
    assert 110 <= float(rows[-1][7]) <= 118


def test_wrong_fault_fails_like_real(node, a100_spec):
    a100_spec["faults"]["nccl_wrong"] = 3
    node.write(a100_spec)
    res = node.nccl("-b", "1M", "-e", "64M", "-f", "2", "-g", "8")
    assert res.returncode == 1
    rows = _rows(res.stdout)
    assert (rows[-1][8], rows[-1][12]) == ("2", "1")
    assert all(r[8] == "0" and r[12] == "0" for r in rows[:-1])
    assert "# Out of bounds values : 2 FAILED" in res.stdout.splitlines()


def test_multinode_header(node):
    res = node.nccl("-b", "1G", "-e", "1G", "--nodes", "owned-a100-1,owned-a100-2")
    lines = res.stdout.splitlines()
    assert "nGpus 1 " in lines[0]
    ranks = [l for l in lines if l.startswith("#  Rank")]
    assert len(ranks) == 16
    assert "on owned-a100-2 device  7" in ranks[-1]
    busbw = float(_rows(res.stdout)[0][7])
    assert abs(busbw - float(_rows(res.stdout)[0][6]) * 2 * 15 / 16) < 0.02
    env_run = node.nccl("-b", "1G", "-e", "1G", HGPU_NCCL_NODES="a,b")
    assert len([l for l in env_run.stdout.splitlines() if l.startswith("#  Rank")]) == 16


def test_too_many_gpus(node):
    res = node.nccl("-g", "16")
    assert res.returncode != 0
    assert "invalid device ordinal" in res.stdout
