#!/usr/bin/env python3
"""Benchmark: staging throughput with checksums, as a ratio to a plain copy of the same data.

Measured: RsyncStager.stage_inputs of F files of S MB to the lab's cloud-storage host
(local sha256, remote checksum listing, rsync --partial --append-verify, verification after
the copy). Sustained throughput = bytes / wall time of the whole staging.
Baseline in the same run: one plain `scp` of the same files to another directory on the same
host (no checksums). Prints both rates and their ratio; no thresholds. Removes what it wrote.

    .venv/bin/python bench/bench_staging.py [--files 4] [--mb 32]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.rsync_stager import (  # noqa: E402
    SSH_OPTS, RsyncStager)

HOST = "10.213.77.30"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--mb", type=int, default=32)
    ap.add_argument("--key", default=os.path.join(ROOT, ".lab", "ssh", "id_ed25519"))
    a = ap.parse_args()
    root = "/srv/cloud-storage/bench-%d" % os.getpid()
    with tempfile.TemporaryDirectory() as tmp:
        inputs = []
        for i in range(a.files):
            p = os.path.join(tmp, "in-%d.bin" % i)
            with open(p, "wb") as fh:
                fh.write(os.urandom(a.mb * 1_000_000))
            inputs.append({"name": os.path.basename(p), "path": p})
        total = a.files * a.mb * 1_000_000
        st = RsyncStager(HOST, a.key, os.path.join(tmp, "onprem"), remote_root=root)
        try:
            got = st.stage_inputs("bench", inputs)
            staged_s = got["seconds"]
            st.ssh("mkdir -p %s/plain" % root)
            t = time.monotonic()
            subprocess.run(["scp", "-q", "-i", a.key] + SSH_OPTS + [i["path"] for i in inputs] +
                           ["root@%s:%s/plain/" % (HOST, root)], check=True)
            plain_s = time.monotonic() - t
        finally:
            st.ssh("rm -rf %s" % root, check=False)
    print("data: %d files x %d MB = %.0f MB" % (a.files, a.mb, total / 1e6))
    print("staging with checksums: %.2f s  (%.1f MB/s sustained)" % (staged_s, total / staged_s / 1e6))
    print("plain scp copy:         %.2f s  (%.1f MB/s)" % (plain_s, total / plain_s / 1e6))
    print("ratio (staged / plain throughput): %.2f" % (plain_s / staged_s))


if __name__ == "__main__":
    main()
