"""`lab up` is idempotent: a second run recreates nothing, changes nothing and is fast."""
import json
import subprocess
import time

import pytest

from conftest import UP, config, lab_cmd

pytestmark = pytest.mark.lab


def container_ids():
    out = subprocess.run(["podman", "ps", "-a", "--filter", "label=" + config.NODE_LABEL_KEY,
                          "--format", "json"], capture_output=True, text=True, check=True).stdout
    return {c["Names"][0]: (c["Id"], c["State"]) for c in json.loads(out)}


def emulator_pids():
    pids = {}
    for cluster in config.CLUSTERS:
        with open(config.path("k8s", cluster, "emulator.pid")) as fh:
            pids[cluster] = fh.read().strip()
    return pids


def test_lab_up_twice_is_idempotent(lab):
    before = (container_ids(), emulator_pids(), open(config.INVENTORY).read())
    t0 = time.monotonic()
    res = lab_cmd(*UP)
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    assert "warm" in res.stdout and "0/%d nodes" % len(config.NODES) in res.stdout, res.stdout
    after = (container_ids(), emulator_pids(), open(config.INVENTORY).read())
    assert after == before
    assert took < 60, "warm lab up took %.1fs" % took


def test_status_is_green(lab):
    res = lab_cmd("status", timeout=120)
    assert res.returncode == 0, res.stdout
    for node in config.NODES:
        line = next(ln for ln in res.stdout.splitlines() if ln.split()[:1] == [node["name"]])
        assert "running" in line and "ssh ok" in line, line
    assert res.stdout.count("reachable") - res.stdout.count("NOT reachable") == len(config.CLUSTERS)
