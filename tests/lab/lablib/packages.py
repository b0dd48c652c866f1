"""Lab apt repository (.lab/apt, built by tests/lab/packages/build.py) and the
pre-onboarding package state of each node (driver branch + nccl-tests; agent on cloud nodes)."""
import os

from . import config
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


def fabricmanager(row):
    return row["driver"].replace("nvidia-driver-", "nvidia-fabricmanager-")


def wanted(node):
    row = config.ROWS[node["row"]]
    pkgs = [row["driver"], "nccl-tests"] + GPU_STACK
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


def ensure_node_packages(node, repo_changed=False):
    """Install the node's starting packages when no driver is installed yet.
    A node whose driver was changed on purpose (by a test or playbook) is left alone."""
    pkgs = wanted(node)
    have = installed(node, pkgs + ["nvidia-driver-535", "nvidia-driver-550", "nvidia-driver-570"])
    driver_present = any(p.startswith("nvidia-driver-") for p in have)
    todo = [p for p in pkgs if p not in have and not (p.startswith("nvidia-driver-") and driver_present)]
    if not todo:
        return []
    env = ["env", "DEBIAN_FRONTEND=noninteractive"]
    run(["podman", "exec", node["name"], *env, "apt-get", "update", "-q"], timeout=300)
    row = config.ROWS[node["row"]]
    # The driver is pinned to the branch's first release: the estate before onboarding.
    spec = [p + "=" + row["driver_version"] if p in (row["driver"], fabricmanager(row)) else p for p in todo]
    run(["podman", "exec", node["name"], *env, "apt-get", "install", "-y", "-q",
         "--no-install-recommends", *spec], timeout=600)
    log("%s: installed %s" % (node["name"], " ".join(todo)))
    return todo
