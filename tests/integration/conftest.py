"""Integration tests against the podman lab. A session fixture brings the lab up when it is
not already up, and leaves it running (`tests/lab/lab down` is the CI script's job)."""
import fcntl
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAB_SRC = os.path.join(ROOT, "tests", "lab")
LAB = os.path.join(LAB_SRC, "lab")
if LAB_SRC not in sys.path:
    sys.path.insert(0, LAB_SRC)

from lablib import config  # noqa: E402
from lablib.nodes import SSH_OPTS, key_path  # noqa: E402


def node(name):
    return next(n for n in config.NODES if n["name"] == name)


# `lab up` and any extra flags from HGPU_LAB_UP_ARGS (e.g. "--no-k8s").
UP = ["up", *os.environ.get("HGPU_LAB_UP_ARGS", "").split()]


def lab_cmd(*args, timeout=1200):
    return subprocess.run([LAB, *args], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="session")
def lab():
    """The running lab. `lab up` is idempotent and fast when warm, so it always runs;
    HGPU_LAB_UP_ARGS passes extra flags (e.g. "--no-k8s")."""
    if os.geteuid() != 0:
        pytest.fail("the lab tests need root (rootful podman)")
    # Lanes (pytest-xdist workers) start together: one runs `lab up`, the others find it warm.
    os.makedirs(config.LAB_DIR, exist_ok=True)
    with open(config.path("up.lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        res = lab_cmd(*UP)
    assert res.returncode == 0, "lab up failed:\n%s\n%s" % (res.stdout, res.stderr)
    return config


def ssh(name, command, timeout=30, check=True):
    """Run a command on a node over SSH with the lab key, as the inventory would."""
    n = node(name)
    res = subprocess.run(["ssh", "-i", key_path(), *SSH_OPTS, "root@" + n["ip"], command],
                         capture_output=True, text=True, timeout=timeout, check=False)
    if check:
        assert res.returncode == 0, "ssh %s %r failed (rc=%d): %s" % (
            name, command, res.returncode, res.stderr)
    return res


def guard_members():
    """The API guard's members on the lab host (api-front), or None without the table."""
    res = subprocess.run(["nft", "-j", "list", "set", "inet", "hybridgpu_api_guard", "members"],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        return None
    return [e for item in json.loads(res.stdout)["nftables"] for e in item.get("set", {}).get("elem", [])]


def podman_exec(name, *cmd, timeout=30):
    return subprocess.run(["podman", "exec", name, *cmd], capture_output=True, text=True,
                          timeout=timeout, check=False)


# The lab is one estate, so the files run in the order its users work: the lab itself,
# preflight, onboarding, validation, the rehearsals, then the packaging checks.
# Each test still sets up and restores what it needs; the order only keeps the run realistic.
ORDER = ["test_nodes", "test_nft", "test_k8s", "test_lifecycle", "test_preflight",
         "test_onboard", "test_validate", "test_upgrade", "test_removal", "test_boundary_revocation",
         "test_overflow", "test_awx_runner", "test_installed_collection", "test_ee"]

# Lanes for `pytest -n N --dist loadgroup` (make integration): files that share no node run
# beside the estate. Overflow uses the Slurm controller, the storage host and its own namespaces
# of the cloud cluster; the EE build only needs podman. Everything else is the estate lane, in ORDER.
LANES = {"test_overflow": "overflow", "test_ee": "ee"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    def rank(item):
        name = item.fspath.purebasename
        return ORDER.index(name) if name in ORDER else len(ORDER)
    items.sort(key=rank)  # stable: keeps the order inside each file
    for item in items:
        item.add_marker(pytest.mark.xdist_group(LANES.get(item.fspath.purebasename, "estate")))
