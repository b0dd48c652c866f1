#!/usr/bin/python3
"""Lab stand-in for nccl-tests' all_reduce_perf.

Prints the nccl-tests 2.13 output format (header, device lines, the out-of-place/in-place
table, the out-of-bounds and average bus bandwidth summary) for the GPUs of the node's spec
(/etc/hybridgpu-lab/gpu-spec.json, env HGPU_GPU_SPEC). The numbers follow a simple model:
time = latency + bytes / peak algorithm bandwidth, and busbw = algbw * 2(n-1)/n, the real
all_reduce formula, so busbw saturates at spec nccl.busbw_gbps for large messages.
Faults: nccl_busbw_factor scales bandwidth, nccl_wrong > 0 puts wrong values on the largest
rows and makes the run fail like the real test. Deterministic for a given spec and flags.

Multi-node: started by the lab's mpirun stand-in (OMPI_COMM_WORLD_SIZE > 1, the hosts in
HGPU_LAB_MPI_HOSTS), or with the lab extension `--nodes host1,host2` / env HGPU_NCCL_NODES;
ranks are then listed per node with one GPU per process, as under mpirun, and bandwidth
saturates at spec nccl.multinode_busbw_gbps (default: busbw_gbps).
"""
import argparse
import hashlib
import json
import os
import socket
import sys

SPEC_PATH = "/etc/hybridgpu-lab/gpu-spec.json"
TYPES = {"int8": 1, "char": 1, "uint8": 1, "int32": 4, "int": 4, "uint32": 4, "int64": 8,
         "uint64": 8, "half": 2, "float16": 2, "float": 4, "float32": 4, "double": 8,
         "float64": 8, "bfloat16": 2}
TYPE_NAMES = {"char": "int8", "int": "int32", "float16": "half", "float32": "float",
              "float64": "double"}
OPS = ("sum", "prod", "max", "min", "avg", "all")


def parse_size(text):
    """nccl-tests size syntax: a number with an optional K/M/G suffix (powers of 1024)."""
    text = text.strip()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(text[-1:].upper())
    if mult:
        return int(float(text[:-1]) * mult)
    return int(text)


def build_parser():
    p = argparse.ArgumentParser(prog="all_reduce_perf", add_help=True)
    p.add_argument("-t", "--nthreads", type=int, default=1)
    p.add_argument("-g", "--ngpus", type=int, default=1)
    p.add_argument("-b", "--minbytes", type=parse_size, default=32 << 20)
    p.add_argument("-e", "--maxbytes", type=parse_size, default=32 << 20)
    p.add_argument("-i", "--stepbytes", type=parse_size, default=1 << 20)
    p.add_argument("-f", "--stepfactor", type=int, default=1)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-m", "--agg_iters", type=int, default=1)
    p.add_argument("-w", "--warmup_iters", type=int, default=5)
    p.add_argument("-p", "--parallel_init", type=int, default=0)
    p.add_argument("-c", "--check", type=int, default=1)
    p.add_argument("-o", "--op", default="sum")
    p.add_argument("-d", "--datatype", default="float")
    p.add_argument("-r", "--root", type=int, default=0)
    p.add_argument("-z", "--blocking", type=int, default=0)
    p.add_argument("-G", "--cudagraph", type=int, default=0)
    p.add_argument("-a", "--average", type=int, default=1)
    p.add_argument("--nodes", default=None, help="lab extension: comma-separated node names")
    return p


def sizes(opts, word):
    """Message sizes in bytes, as nccl-tests steps them (factor or fixed increment)."""
    out = []
    size = opts.minbytes
    while size <= opts.maxbytes:
        count = size // word
        out.append((count * word, count))
        if opts.stepfactor > 1:
            size *= opts.stepfactor
        else:
            if opts.stepbytes <= 0:
                break
            size += opts.stepbytes
        if len(out) > 4096:
            break
    return out


def _jitter(seed, *parts):
    """Deterministic +-1 % noise so the table looks measured but is reproducible."""
    digest = hashlib.sha256(("|".join([seed] + [str(p) for p in parts])).encode()).digest()
    return 1.0 + (int.from_bytes(digest[:4], "big") / 0xFFFFFFFF - 0.5) * 0.02


def fmt_time(usec):
    if usec >= 10000.0:
        return "%7.0f" % usec
    if usec >= 100.0:
        return "%7.1f" % usec
    return "%7.2f" % usec


def measure(spec, nranks, multinode, size, place):
    """(time_us, algbw GB/s, busbw GB/s) for one message size."""
    nccl = spec.get("nccl") or {}
    faults = spec.get("faults") or {}
    peak_bus = float(nccl.get("busbw_gbps", 100.0))
    if multinode:
        peak_bus = float(nccl.get("multinode_busbw_gbps", peak_bus))
    peak_bus *= float(faults.get("nccl_busbw_factor", 1.0) if faults.get("nccl_busbw_factor")
                      is not None else 1.0)
    ratio = 2.0 * (nranks - 1) / nranks if nranks > 1 else 1.0
    peak_alg = max(peak_bus / ratio, 1e-6)
    latency = float(nccl.get("latency_us", 25.0))
    usec = (latency + size / (peak_alg * 1e3)) * _jitter(spec.get("uuid_seed", ""), size, place)
    algbw = size / 1e3 / usec
    busbw = algbw * (2.0 * (nranks - 1) / nranks if nranks > 1 else 0.0)
    return usec, algbw, busbw


def render(opts, spec, hostname, pid):
    """Return (text, exit code)."""
    word = TYPES.get(opts.datatype)
    if word is None or opts.op not in OPS:
        return ("Invalid %s: %s\n" % ("datatype" if word is None else "op",
                                     opts.datatype if word is None else opts.op), 1)
    type_name = TYPE_NAMES.get(opts.datatype, opts.datatype)
    nodes = [n.strip() for n in (opts.nodes or "").split(",") if n.strip()]
    multinode = len(nodes) > 1
    if not nodes:
        nodes = [hostname]
    faults = spec.get("faults") or {}
    have = int(spec.get("count", 0)) - int(faults.get("hide_gpus", 0) or 0)
    per_proc = opts.ngpus * opts.nthreads
    # Multi-node with -g 1 stands for mpirun with one process per GPU on every node.
    per_node = have if (multinode and per_proc == 1) else per_proc
    if per_proc > have or have <= 0:
        return ("%s: Test CUDA failure common.cu:892 'invalid device ordinal'\n"
                " .. %s pid %d: Test failure common.cu:1070\n" % (hostname, hostname, pid), 2)
    nranks = per_node * len(nodes)
    model = spec.get("model", "NVIDIA A100-SXM4-80GB")
    bus_base = int(spec.get("pci_base", "00000000:10:00.0").split(":")[1], 16)
    step = int(spec.get("pci_bus_step", 16))

    out = []
    step_text = ("%d(factor)" % opts.stepfactor) if opts.stepfactor > 1 else ("%d(bytes)" % opts.stepbytes)
    out.append("# nThread %d nGpus %d minBytes %d maxBytes %d step: %s warmup iters: %d iters: %d "
               "agg iters: %d validation: %d graph: %d" % (
                   opts.nthreads, opts.ngpus, opts.minbytes, opts.maxbytes,
                   step_text, opts.warmup_iters, opts.iters, opts.agg_iters, opts.check,
                   opts.cudagraph))
    if opts.blocking:
        out.append("# Blocking Enabled: wait for completion and barrier after each collective ")
    out.append("#")
    out.append("# Using devices")
    rank = 0
    for node_index, node in enumerate(nodes):
        for dev in range(per_node):
            rank_pid = pid + rank if (multinode and per_proc == 1) else pid + node_index
            out.append("#  Rank %2d Group %2d Pid %6d on %10s device %2d [0x%02x] %s" % (
                rank, 0, rank_pid, node, dev, (bus_base + dev * step) & 0xFF, model))
            rank += 1
    out.append("#")
    out.append("#                                                              out-of-place                       in-place          ")
    out.append("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong")
    out.append("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ")

    rows = sizes(opts, word)
    wrong_total = int(faults.get("nccl_wrong", 0) or 0)
    # Wrong values land on the largest sizes, split over out-of-place and in-place.
    wrong_cells = {}
    if wrong_total > 0 and opts.check and rows:
        last = len(rows) - 1
        wrong_cells[(last, "out")] = (wrong_total + 1) // 2
        if wrong_total // 2:
            wrong_cells[(last, "in")] = wrong_total // 2
    errors = 0
    bw_sum = 0.0
    bw_count = 0
    for row_index, (size, count) in enumerate(rows):
        line = "%12d  %12d  %8s  %6s  %6d" % (size, count, type_name, opts.op, -1)
        for place in ("out", "in"):
            usec, algbw, busbw = measure(spec, nranks, multinode, size, place)
            wrong = wrong_cells.get((row_index, place), 0)
            if wrong:
                errors += 1
            line += "  %s  %6.2f  %6.2f  %5s" % (fmt_time(usec), algbw, busbw,
                                                 str(wrong) if opts.check else "N/A")
            bw_sum += busbw
            bw_count += 1
        out.append(line)
    avg = bw_sum / bw_count if bw_count else 0.0
    min_bw = os.environ.get("NCCL_TESTS_MIN_BW")
    check = float(min_bw) if min_bw else -1.0
    out.append("# Out of bounds values : %d %s" % (errors, "FAILED" if errors else "OK"))
    verdict = "" if check == -1.0 else ("FAILED" if avg < check * 0.9 else "OK")
    out.append("# Avg bus bandwidth    : %s %s" % (("%g" % avg), verdict))
    out.append("#")
    failed = errors or (check != -1.0 and avg < check * 0.9)
    return "\n".join(out) + "\n", (1 if failed else 0)


def main(argv=None):
    opts = build_parser().parse_args(argv)
    if opts.nodes is None:
        opts.nodes = os.environ.get("HGPU_NCCL_NODES") or None
    if opts.nodes is None and int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1") or 1) > 1:
        # started by the lab's mpirun: the world's hosts come with it
        hosts = [h.rpartition(":")[0] or h for h in os.environ.get("HGPU_LAB_MPI_HOSTS", "").split(",") if h]
        opts.nodes = ",".join(hosts) or None
    try:
        with open(os.environ.get("HGPU_GPU_SPEC", SPEC_PATH), encoding="utf-8") as handle:
            spec = json.load(handle)
    except (OSError, ValueError) as err:
        sys.stderr.write("all_reduce_perf: cannot read GPU spec: %s\n" % err)
        return 2
    text, code = render(opts, spec, socket.gethostname(), os.getpid())
    sys.stdout.write(text)
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
