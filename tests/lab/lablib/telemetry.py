"""The lab's telemetry at `lab up`: the provider's GPU exporter on cloud nodes, and the
site's Prometheus on the host (tests/lab/telemetry/prom.py).

Cloud nodes are the provider's: its GPU exporter (the same DCGM-style stand-in the
onboarding installs on owned nodes) runs there as a plain unit, as a provider would run it.
"""
import os

from . import config
from .util import log, run

EXPORTER = os.path.join(config.LAB_SRC, "packages", "gpu-exporter", "hybridgpu-gpu-exporter.py")
UNIT = "hybridgpu-provider-gpu-exporter"
TARGET = "/usr/local/lib/hybridgpu-lab/provider-gpu-exporter.py"


def _exec(node, *cmd):
    return run(["podman", "exec", node, *cmd], check=False)


def ensure_cloud_exporters():
    started = []
    for n in config.NODES:
        if n["role"] != "cloud":
            continue
        if _exec(n["name"], "systemctl", "is-active", "--quiet", UNIT).returncode == 0:
            continue
        _exec(n["name"], "mkdir", "-p", os.path.dirname(TARGET))
        run(["podman", "cp", EXPORTER, "%s:%s" % (n["name"], TARGET)])
        run(["podman", "exec", n["name"], "systemd-run", "--unit", UNIT, "--property=Restart=always",
             "/usr/bin/python3", TARGET, "--port", "9400"])
        started.append(n["name"])
    if started:
        log("provider GPU exporter started on " + " ".join(started))
    return started


def _prom():
    from telemetry import prom  # tests/lab is on sys.path (the lab CLI's own folder)
    return prom


def start_prometheus():
    return _prom().start()


def stop_prometheus():
    return _prom().stop()


def prometheus_status():
    return _prom().status()
