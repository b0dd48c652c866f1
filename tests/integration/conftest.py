"""Integration tests against the podman lab. A session fixture brings the lab up when it is
not already up, and leaves it running (`tests/lab/lab down` is the CI script's job)."""
import fcntl
import json
import os
import subprocess
import sys
import time

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
    """The running lab. `lab up` is idempotent and fast when warm, so it runs unless
    HGPU_LAB_READY says the caller has just run it (the integration lanes' script does);
    HGPU_LAB_UP_ARGS passes extra flags (e.g. "--no-k8s")."""
    if os.geteuid() != 0:
        pytest.fail("the lab tests need root (rootful podman)")
    if os.environ.get("HGPU_LAB_READY") == "1":
        return config
    os.makedirs(config.LAB_DIR, exist_ok=True)
    with open(config.path("up.lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        res = lab_cmd(*UP)
    assert res.returncode == 0, "lab up failed:\n%s\n%s" % (res.stdout, res.stderr)
    return config


def wait_for_lock(fh, seconds, message, poll=1):
    """Take an exclusive flock on the open file ``fh``, waiting up to ``seconds``; fail the test
    with ``message`` after that."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                fh.close()
                pytest.fail(message)
            time.sleep(poll)


# Files that may run while the overflow lane runs (tests/run_integration_lanes.sh): they use
# only the owned nodes, the onprem cluster, podman, or read the estate. Every other lab file
# shares something with overflow (the cloud nodes and their agents, Slurm, the storage host,
# the API guard, `lab up` itself) and holds the lane lock for its whole module, as overflow does.
BESIDE_OVERFLOW = {"test_onboard", "test_upgrade", "test_removal", "test_command_join",
                   "test_installed_collection", "test_ee"}
LANE_LOCK_WAIT = 2400


@pytest.fixture(scope="module", autouse=True)
def lane_lock(request):
    """The lane lock for a file that must not run beside overflow (no-op for the others)."""
    module = request.module.__name__.rpartition(".")[2]
    if module in BESIDE_OVERFLOW:
        yield
        return
    os.makedirs(config.LAB_DIR, exist_ok=True)
    with open(config.path("lane.lock"), "a+") as fh:
        wait_for_lock(fh, LANE_LOCK_WAIT,
                      "%s waited over %d s for the lane lock %s" % (module, LANE_LOCK_WAIT, fh.name))
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


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
         "test_ee", "test_overflow", "test_awx_runner", "test_installed_collection"]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    def rank(item):
        name = item.fspath.purebasename
        return ORDER.index(name) if name in ORDER else len(ORDER)
    items.sort(key=rank)  # stable: keeps the order inside each file
