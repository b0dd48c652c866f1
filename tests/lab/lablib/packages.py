"""Lab apt repository (.lab/apt, built by tests/lab/packages/build.py) and the
pre-onboarding package state of each node (driver branch + nccl-tests; agent on cloud nodes)."""
import os

from . import config
from .nodes import wait_booted
from .util import LabError, log, run

PKG_SRC = os.path.join(config.LAB_SRC, "packages")
STAMP = ".build-hash"  # written by build.py


def ensure_repo():
    """Build the apt repository (build.py skips itself when its inputs are unchanged).
    Returns True when the repository changed."""
    build = os.path.join(PKG_SRC, "build.py")
    if not os.path.exists(build):
        raise LabError("tests/lab/packages/build.py is missing: cannot build the lab apt repository")
    out = config.path("apt")
    os.makedirs(out, exist_ok=True)
    before = _read(os.path.join(out, STAMP))
    # Built in place: the directory is bind-mounted into running nodes.
    run([os_python(), build, out], timeout=600)
    if not os.path.exists(os.path.join(out, "Packages")):
        raise LabError("tests/lab/packages/build.py wrote no Packages index in " + out)
    changed = _read(os.path.join(out, STAMP)) != before
    if changed:
        log("lab apt repository built in " + out)
    return changed


def _read(path):
    try:
        with open(path) as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def os_python():
    venv = os.path.join(config.ROOT, ".venv", "bin", "python")
    return venv if os.path.exists(venv) else "python3"


# What a GPU node runs pods with (stand-ins in tests/lab/packages): the container toolkit
# (its install configures containerd's nvidia runtime) and DCGM's dcgmi.
GPU_STACK = ["nvidia-container-toolkit", "datacenter-gpu-manager"]
# The modprobe stand-in: the node's NVIDIA module is loaded at boot and by `modprobe nvidia`,
# so a driver package changed under a loaded module needs a reload or a reboot, as for real.
KMOD = "hybridgpu-lab-nvidia-kmod"


def fabricmanager(row):
    return row["driver"].replace("nvidia-driver-", "nvidia-fabricmanager-")


def wanted(node):
    row = config.ROWS[node["row"]]
    pkgs = [row["driver"], KMOD] + GPU_STACK
    if not node.get("light"):  # a light node runs no collectives (config.light_nodes)
        pkgs[1:1] = ["nccl-tests", "hybridgpu-lab-mpirun"]
    if "SXM" in row["spec"]["model"] and row["spec"]["count"] >= 8:
        pkgs.append(fabricmanager(row))  # NVSwitch board: fabric manager in lockstep with the driver
    if node["role"] == "cloud":
        pkgs.append("hybridgpu-node-agent")
    return pkgs


def installed(node, pkgs):
    res = run(["podman", "exec", node["name"], "dpkg-query", "-W", "-f",
               "${Package} ${db:Status-Abbrev}\\n"] + pkgs, check=False)
    return {ln.split()[0] for ln in res.stdout.splitlines()
            if len(ln.split()) > 1 and ln.split()[1].startswith("ii")}


def installed_drivers(node):
    """{package: (version, held)} of the NVIDIA driver and fabric manager packages installed."""
    res = run(["podman", "exec", node["name"], "dpkg-query", "-W", "-f",
               "${Package} ${Version} ${db:Status-Abbrev}\\n", "nvidia-driver-*", "nvidia-fabricmanager-*"],
              check=False)
    out = {}
    for ln in res.stdout.splitlines():
        parts = ln.split()
        if len(parts) == 3 and parts[2][1:2] == "i":
            out[parts[0]] = (parts[1], parts[2].startswith("h"))
    return out


def declared_drivers(node):
    """{package: version}: the row's driver and, on NVSwitch boards, its fabric manager."""
    row = config.ROWS[node["row"]]
    return {p: row["driver_version"] for p in wanted(node) if p in (row["driver"], fabricmanager(row))}


def restore_driver(node, drivers):
    """Put the node back on its row's declared driver (and fabric manager) in one apt transaction
    (unhold, install the declared release, purge the others), keeping a hold when the node had
    one, and restart the node's kubelet so its driver label follows. Returns a line saying what
    changed."""
    row = config.ROWS[node["row"]]
    declared = declared_drivers(node)
    held = any(h for p, (v, h) in drivers.items() if p.startswith("nvidia-driver-"))
    others = sorted(p for p in drivers if p not in declared)
    script = ["apt-get update -qq", "apt-mark unhold %s >/dev/null" % " ".join(sorted(drivers)),
              "apt-get install -y -q --allow-downgrades --no-install-recommends %s >/dev/null"
              % " ".join("%s=%s" % kv for kv in sorted(declared.items()))]
    if others:
        script.append("apt-get purge -y -q %s >/dev/null" % " ".join(others))
    if held:
        script.append("apt-mark hold %s >/dev/null" % row["driver"])
    # The new module in place of the loaded one (when the modprobe stand-in is installed and
    # nothing holds the devices), then the units that use it.
    script.append("if command -v modprobe >/dev/null; then modprobe -r nvidia_uvm nvidia_drm nvidia_modeset nvidia "
                  "2>/dev/null && modprobe nvidia || true; fi")
    script.append("for u in nvidia-fabricmanager kubelet hybridgpu-node-agent; do "
                  "systemctl try-restart $u.service 2>/dev/null || true; done")
    run(["podman", "exec", node["name"], "env", "DEBIAN_FRONTEND=noninteractive", "sh", "-ec",
         " && ".join(script)], timeout=600)
    if run(["podman", "exec", node["name"], "nvidia-smi", "-L"], check=False).returncode != 0:
        # Something holds the old module: a reboot loads the new one.
        run(["podman", "restart", "-t", "10", node["name"]], timeout=120)
        wait_booted(node)
    was = ", ".join("%s %s%s" % (p, v, " (held)" if h else "") for p, (v, h) in sorted(drivers.items()))
    return "%s: driver was %s, declared %s %s: put back" % (node["name"], was, row["driver"], row["driver_version"])


def purge_stray_agent(node):
    """An owned node starts without the lab's agent package (tests that join a node with it purge it
    afterwards; a killed run does not). Left installed beside a joined kubelet it would register the
    Node again after a removal deletes it."""
    if "hybridgpu-node-agent" not in installed(node, ["hybridgpu-node-agent"]):
        return False
    run(["podman", "exec", node["name"], "env", "DEBIAN_FRONTEND=noninteractive", "sh", "-ec",
         "systemctl disable --now hybridgpu-node-agent.service 2>/dev/null || true; "
         "apt-get purge -y -q hybridgpu-node-agent >/dev/null; rm -rf /etc/hybridgpu/node-agent"], timeout=300)
    log("%s: removed the agent package a test left behind (owned nodes start without it)" % node["name"])
    return True


NODE_STAMP = "/var/lib/hybridgpu-lab/apt-build-hash"


def repo_packages():
    """Names of the packages the lab repository builds (its Packages index)."""
    names = set()
    with open(os.path.join(config.path("apt"), "Packages"), encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("Package: "):
                names.add(line.split(": ", 1)[1].strip())
    return names


def refresh_lab_packages(node):
    """A node holds the lab packages of the repository build it last saw (stamp on the node).
    After a rebuild their versions stay the same but their files may not, so the installed
    ones are reinstalled and their units restarted (drivers and fabric managers keep their
    own path: restore_driver)."""
    build = _read(os.path.join(config.path("apt"), STAMP))
    seen = run(["podman", "exec", node["name"], "cat", NODE_STAMP], check=False).stdout
    if not build or seen == build:
        return []
    names = sorted(p for p in repo_packages() if not p.startswith(("nvidia-driver-", "nvidia-fabricmanager-")))
    have = sorted(installed(node, names))
    if have:
        run(["podman", "exec", node["name"], "env", "DEBIAN_FRONTEND=noninteractive", "sh", "-ec",
             "apt-get update -qq && apt-get install -y -q --reinstall --no-install-recommends %s >/dev/null && "
             "for u in kubelet hybridgpu-node-agent vendor-node-connector hybridgpu-gpu-exporter nvidia-dcgm; do "
             "systemctl try-restart $u.service 2>/dev/null || true; done" % " ".join(have)], timeout=600)
        log("%s: reinstalled %s from the rebuilt lab repository" % (node["name"], " ".join(have)))
    run(["podman", "exec", node["name"], "sh", "-c", 'mkdir -p "$(dirname "$1")" && printf %s "$2" > "$1"', "sh",
         NODE_STAMP, build])
    return have


def ensure_node_packages(node, repo_changed=False):
    """Bring the node's starting packages to the declared state: install what is missing, and put
    a driver (and fabric manager) that a rehearsal or a test changed back on the row's declared
    release (a hold on the declared driver is kept: onboarding holds it)."""
    row = config.ROWS[node["row"]]
    drivers = installed_drivers(node)
    declared = declared_drivers(node)
    # Another branch installed, or a declared package at another release (missing ones are installed below).
    drift = [p for p, (v, h) in drivers.items() if declared.get(p, v + "!") != v]
    if drift:
        log(restore_driver(node, drivers))
    if node["role"] != "cloud":
        purge_stray_agent(node)
    refresh_lab_packages(node)
    pkgs = wanted(node)
    have = installed(node, pkgs)
    todo = [p for p in pkgs if p not in have]
    if not todo:
        return []
    env = ["env", "DEBIAN_FRONTEND=noninteractive"]
    run(["podman", "exec", node["name"], *env, "apt-get", "update", "-q"], timeout=300)
    # The driver is pinned to the branch's first release: the estate before onboarding.
    spec = [p + "=" + row["driver_version"] if p in (row["driver"], fabricmanager(row)) else p for p in todo]
    run(["podman", "exec", node["name"], *env, "apt-get", "install", "-y", "-q",
         "--no-install-recommends", *spec], timeout=600)
    log("%s: installed %s" % (node["name"], " ".join(todo)))
    return todo
