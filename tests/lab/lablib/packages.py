"""Lab apt repository (.lab/apt, built by tests/lab/packages/build.py) and the
pre-onboarding package state of each node (driver branch + nccl-tests; agent on cloud nodes)."""
import os

from . import config
from .util import LabError, hash_files, log, run

PKG_SRC = os.path.join(config.LAB_SRC, "packages")
STAMP = ".source-hash"


def ensure_repo():
    """Build the apt repository when its sources changed. Returns True when built."""
    build = os.path.join(PKG_SRC, "build.py")
    if not os.path.exists(build):
        raise LabError("tests/lab/packages/build.py is missing: cannot build the lab apt repository")
    out = config.path("apt")
    key = hash_files([PKG_SRC])
    stamp = os.path.join(out, STAMP)
    try:
        with open(stamp) as fh:
            if fh.read().strip() == key and os.path.exists(os.path.join(out, "Packages")):
                return False
    except FileNotFoundError:
        pass
    log("building lab apt repository in " + out)
    os.makedirs(out, exist_ok=True)
    # Build in place: the directory is bind-mounted into running nodes.
    run([os_python(), build, out], timeout=600)
    if not os.path.exists(os.path.join(out, "Packages")):
        raise LabError("tests/lab/packages/build.py wrote no Packages index in " + out)
    with open(stamp, "w") as fh:
        fh.write(key + "\n")
    return True


def os_python():
    venv = os.path.join(config.ROOT, ".venv", "bin", "python")
    return venv if os.path.exists(venv) else "python3"


def wanted(node):
    pkgs = [config.ROWS[node["row"]]["driver"], "nccl-tests"]
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
    run(["podman", "exec", node["name"], *env, "apt-get", "install", "-y", "-q",
         "--no-install-recommends", *todo], timeout=600)
    log("%s: installed %s" % (node["name"], " ".join(todo)))
    return todo
