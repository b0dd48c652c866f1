"""Start, stop and query the lab's Prometheus (Debian package `prometheus`, on the host).

It listens on 127.0.0.1 only (the HTTP API the validation reads) and scrapes the lab nodes on
the bridge network: job `gpu` (the DCGM-style GPU exporter, :9400, owned and cloud nodes),
job `existing` (the site's existing monitoring of owned nodes, same exporter) and job `node`
(prometheus-node-exporter, :9100, where installed). Scrape and rule evaluation every 2 s.
State lives in <lab dir>/prometheus/ (config, rules, TSDB, pid, log).

The lab CLI can call `start()` / `stop()` / `status()`; tests call them from a fixture.
    python -m telemetry.prom start|stop|status      (with tests/lab on PYTHONPATH)
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
LAB_SRC = os.path.dirname(HERE)
if LAB_SRC not in sys.path:
    sys.path.insert(0, LAB_SRC)

from lablib import config  # noqa: E402

LISTEN = "127.0.0.1:9090"
URL = "http://" + LISTEN
GPU_PORT = 9400
NODE_PORT = 9100
INTERVAL = "2s"


def state_dir():
    return config.path("prometheus")


def render_config(nodes=None):
    """prometheus.yml as a dict (JSON is YAML). Every target carries Hostname and side labels,
    like dcgm-exporter's own Hostname label, so queries group by node the same on both sides."""
    nodes = nodes or config.NODES

    def targets(port, roles):
        return [{"targets": ["%s:%d" % (n["ip"], port)],
                 "labels": {"Hostname": n["name"], "side": n["role"]}}
                for n in nodes if n["role"] in roles]
    return {
        "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL,
                   "scrape_timeout": INTERVAL},
        "rule_files": [os.path.join(state_dir(), "alerts.yml")],
        "scrape_configs": [
            {"job_name": "gpu", "static_configs": targets(GPU_PORT, ("owned", "cloud"))},
            {"job_name": "existing", "static_configs": targets(GPU_PORT, ("owned",))},
            {"job_name": "node", "static_configs": targets(NODE_PORT, ("owned", "cloud"))},
        ],
    }


def pidfile():
    return os.path.join(state_dir(), "prometheus.pid")


def _pid():
    try:
        with open(pidfile()) as fh:
            pid = int(fh.read().strip())
        os.kill(pid, 0)
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            if b"prometheus" not in fh.read():
                return None
        return pid
    except (OSError, ValueError):
        return None


def query(path, timeout=3):
    with urllib.request.urlopen(URL + path, timeout=timeout) as resp:
        return json.loads(resp.read())


def ready():
    try:
        with urllib.request.urlopen(URL + "/-/ready", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def start(binary="prometheus", timeout=30):
    """Write the config and start Prometheus unless it runs. Returns True when started."""
    if _pid() and ready():
        write_files()
        return False
    if not shutil.which(binary):
        raise RuntimeError("the Debian package `prometheus` is not installed on the host "
                           "(apt-get install --no-install-recommends prometheus)")
    cfg = write_files()
    data = os.path.join(state_dir(), "data")
    os.makedirs(data, exist_ok=True)
    log = open(os.path.join(state_dir(), "prometheus.log"), "ab")
    proc = subprocess.Popen([binary, "--config.file=" + cfg, "--storage.tsdb.path=" + data,
                             "--web.listen-address=" + LISTEN, "--web.enable-lifecycle",
                             "--storage.tsdb.retention.time=1d"],
                            stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    with open(pidfile(), "w") as fh:
        fh.write(str(proc.pid))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("prometheus exited (rc=%s); see %s" % (
                proc.returncode, os.path.join(state_dir(), "prometheus.log")))
        if ready():
            return True
        time.sleep(0.3)
    raise RuntimeError("prometheus did not become ready in %ss" % timeout)


def write_files():
    os.makedirs(state_dir(), exist_ok=True)
    shutil.copyfile(os.path.join(HERE, "alerts.yml"), os.path.join(state_dir(), "alerts.yml"))
    path = os.path.join(state_dir(), "prometheus.yml")
    text = json.dumps(render_config(), indent=2) + "\n"
    old = None
    if os.path.exists(path):
        with open(path) as fh:
            old = fh.read()
    if old != text:
        with open(path + ".tmp", "w") as fh:
            fh.write(text)
        os.replace(path + ".tmp", path)
        pid = _pid()
        if pid:
            os.kill(pid, signal.SIGHUP)  # reload
    return path


def stop(timeout=15):
    """Stop the lab's Prometheus. Returns True when one was running."""
    pid = _pid()
    if not pid:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            break
        time.sleep(0.2)
    else:
        os.kill(pid, signal.SIGKILL)
    os.unlink(pidfile())
    return True


def status():
    pid = _pid()
    return {"pid": pid, "url": URL, "ready": bool(pid) and ready()}


def main(argv=None):
    cmd = (argv or sys.argv[1:] or ["status"])[0]
    if cmd == "start":
        print("started" if start() else "already running", URL)
    elif cmd == "stop":
        print("stopped" if stop() else "not running")
    else:
        print(json.dumps(status()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
