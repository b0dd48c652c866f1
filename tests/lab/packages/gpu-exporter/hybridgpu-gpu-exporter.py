#!/usr/bin/python3
"""hybridgpu-gpu-exporter: the lab's stand-in for NVIDIA dcgm-exporter (stdlib only).

Serves DCGM-style metrics on http://<addr>:<port>/metrics with dcgm-exporter's label set
(gpu, UUID, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION).

As dcgm-exporter does (its -c/--collect-interval, 30000 ms by default), the GPU readings come
from one collection per interval, here `nvidia-smi --query-gpu`, and scrapes between two
collections are answered from the last one. Only one collection runs at a time, however many
scrapes arrive together. A change of the lab GPU spec (a hidden GPU, say) starts a new
collection at the next scrape, so a drill never reads the GPUs of the one before. The Xid
faults are read on every scrape from the lab GPU spec (/etc/hybridgpu-lab/gpu-spec.json,
faults.xid: a list of {"gpu": i, "xid": code} or codes for GPU 0), so an injected Xid shows
up at the next scrape, like a real one.
"""
import argparse
import json
import os
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FIELDS = ["index", "uuid", "name", "driver_version", "utilization.gpu", "utilization.memory",
          "memory.used", "memory.free", "temperature.gpu", "power.draw", "clocks.sm", "clocks.mem"]
# metric, help, query field (None: computed)
METRICS = [
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "clocks.sm"),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", "clocks.mem"),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temperature.gpu"),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power.draw"),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "utilization.gpu"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "utilization.memory"),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "memory.free"),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "memory.used"),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", None),
]


def _num(text):
    try:
        return float(text)
    except ValueError:
        return 0.0


def read_gpus(nvidia_smi):
    out = subprocess.run([nvidia_smi, "--query-gpu=" + ",".join(FIELDS), "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=20, check=True).stdout
    gpus = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == len(FIELDS):
            gpus.append(dict(zip(FIELDS, parts)))
    return gpus


class Collector:
    """The last nvidia-smi reading, taken again once it is older than the interval."""

    def __init__(self, nvidia_smi, interval_s, spec_path=None, clock=time.monotonic, read=read_gpus):
        self.nvidia_smi, self.interval_s, self.spec_path = nvidia_smi, interval_s, spec_path
        self.clock, self.read = clock, read
        self.lock = threading.Lock()
        self.taken = None
        self.spec_seen = None
        self.gpus = None

    def _spec_stamp(self):
        try:
            st = os.stat(self.spec_path)
        except (OSError, TypeError):
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def get(self):
        """The GPUs of the last collection, collecting first if it is too old or the spec changed."""
        with self.lock:
            stamp = self._spec_stamp()
            if self.taken is None or self.clock() - self.taken >= self.interval_s or stamp != self.spec_seen:
                # A failed collection is not kept: the next scrape tries again.
                self.gpus = self.read(self.nvidia_smi)
                self.taken, self.spec_seen = self.clock(), stamp
            return self.gpus


def read_xids(spec_path):
    try:
        with open(spec_path, encoding="utf-8") as fh:
            faults = (json.load(fh).get("faults") or {}).get("xid") or []
    except (OSError, ValueError):
        return {}
    last = {}
    for item in faults:
        if isinstance(item, dict):
            gpu, code = int(item.get("gpu", 0)), int(item.get("xid", item.get("code", 0)))
        else:
            gpu, code = 0, int(item)
        last[gpu] = code
    return last


def render(gpus, xids, hostname):
    def esc(v):
        return str(v).replace("\\", "\\\\").replace('"', '\\"')
    lines = []
    for metric, text, field in METRICS:
        lines.append("# HELP %s %s" % (metric, text))
        lines.append("# TYPE %s gauge" % metric)
        for g in gpus:
            idx = int(g["index"])
            labels = 'gpu="%d",UUID="%s",device="nvidia%d",modelName="%s",Hostname="%s",DCGM_FI_DRIVER_VERSION="%s"' % (
                idx, esc(g["uuid"]), idx, esc(g["name"]), esc(hostname), esc(g["driver_version"]))
            value = xids.get(idx, 0) if field is None else _num(g[field])
            lines.append("%s{%s} %s" % (metric, labels, ("%g" % value)))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=9400)
    ap.add_argument("--nvidia-smi", default="nvidia-smi")
    ap.add_argument("--spec", default="/etc/hybridgpu-lab/gpu-spec.json")
    ap.add_argument("-c", "--collect-interval", type=int, default=30000,
                    help="milliseconds between two GPU collections (dcgm-exporter's default: 30000)")
    args = ap.parse_args()
    hostname = socket.gethostname()
    collector = Collector(args.nvidia_smi, args.collect_interval / 1000.0, args.spec)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            try:
                body = render(collector.get(), read_xids(args.spec), hostname).encode()
                code = 200
            except (OSError, subprocess.SubprocessError) as err:
                body, code = ("# nvidia-smi failed: %s\n" % err).encode(), 500
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    ThreadingHTTPServer((args.listen, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
