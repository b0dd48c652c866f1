"""Lab hosts that are not GPU nodes: shared helpers for site-sched (Slurm) and cloud-storage.

Their host keys go into the lab's known_hosts like the nodes' (nodes.record_host_keys)."""
import json
import os

from . import config, nodes
from .nodes import key_path, record_host_keys, ssh_ok
from .util import LabError, log, run, wait_for


def inspect(name):
    res = run(["podman", "container", "inspect", name], check=False)
    return json.loads(res.stdout)[0] if res.returncode == 0 else None


def ensure_container(host, image, extra_args=()):
    """Create/start a lab host container from `image` (recreated when the image changed).
    Returns 'created', 'started' or 'ok'. The lab SSH key is installed before first boot."""
    name = host["name"]
    info = inspect(name)
    if info is not None and (info["Config"].get("Labels") or {}).get(config.NODE_LABEL_KEY) != name:
        raise LabError("a container named %s exists but was not made by the lab; remove it" % name)
    if info is not None and info.get("ImageName") != image:
        log("%s runs %s, wanted %s: recreating" % (name, info.get("ImageName"), image))
        run(["podman", "rm", "-f", "-t", "5", name])
        info = None
    state = "ok"

    def create():
        run(["podman", "create", "--name", name, "--hostname", name, "--network", config.NETWORK,
             "--ip", host["ip"], "--systemd=always", "--cap-add", "NET_ADMIN", "--cap-add", "AUDIT_WRITE",
             "--label", "%s=%s" % (config.NODE_LABEL_KEY, name), *extra_args, image, "/sbin/init"])
        run(["podman", "cp", key_path() + ".pub", "%s:/root/.ssh/authorized_keys" % name])
        run(["podman", "start", name])
    if info is None:
        create()
        state = "created"
    elif not info["State"]["Running"]:
        run(["podman", "start", name])
        state = "started"
    nodes.wait_until_booted(name, 150, create)
    wait_for("sshd on %s (%s)" % (name, host["ip"]), lambda: ssh_ok(host), 60)
    record_host_keys(host)
    return state


def remove(names):
    present = [n for n in names if inspect(n) is not None]
    if present:
        run(["podman", "rm", "-f", "-t", "5", *present], check=False, timeout=300)
    return present


def exec_(name, *cmd, check=True, timeout=120, input=None):
    return run(["podman", "exec", "-i" if input is not None else "-t", name, *cmd] if input is not None
               else ["podman", "exec", name, *cmd], check=check, timeout=timeout, input=input)


def status_line(host):
    info = inspect(host["name"])
    if info is None:
        return "  %-14s %-14s absent" % (host["name"], host["ip"]), False
    running = info["State"]["Running"]
    ok = running and ssh_ok(host)
    return "  %-14s %-14s %-8s ssh %s" % (host["name"], host["ip"], "running" if running else "stopped",
                                          "ok" if ok else "FAIL"), ok


def lab_file(*parts):
    p = config.path(*parts)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    return p
