"""The lab's node boot wait: a container that stops while booting is restarted without waiting out
the timeout, one podman cannot restart is made again, and the bridge runs no DNS server."""
import os
import subprocess
import sys

import pytest

LAB = os.path.join(os.path.dirname(__file__), "..", "..", "lab")
if LAB not in sys.path:
    sys.path.insert(0, LAB)

from lablib import nodes, util  # noqa: E402
from lablib.util import LabError  # noqa: E402


class FakePodman:
    """Answers `systemctl is-system-running` with `before` until the container is restarted or
    made again, then with `after`; records the podman calls."""

    def __init__(self, before, after, restart_rc=0):
        self.state = before
        self.after = after
        self.restart_rc = restart_rc
        self.calls = []
        self.timed_out = []

    def run(self, cmd, check=True, timeout=None, **_):
        self.calls.append(cmd)
        if cmd[:2] == ["podman", "restart"]:
            rc, err = self.restart_rc, "Error: cannot start a container that has stopped"
        else:
            rc, err = 0, ""
        if (cmd[:2] == ["podman", "restart"] and not rc) or cmd[:2] == ["podman", "rm"]:
            self.state = self.after
        if check and rc:
            raise LabError("command failed (rc=%d): %s" % (rc, " ".join(cmd)))
        return subprocess.CompletedProcess(cmd, rc, "", err)

    def boot_state(self, _name):
        return self.state

    def wait_for(self, what, probe, timeout, interval=0.5):
        """The lab's wait, polling faster; a wait that runs out its timeout is recorded."""
        try:
            return util.wait_for(what, probe, timeout, interval=0.05)
        except LabError:
            self.timed_out.append(what)
            raise


STOPPED = "Error: OCI runtime error: runc: exec failed: cannot exec in a stopped container"


@pytest.fixture
def podman(monkeypatch):
    def make(before, after, restart_rc=0):
        fake = FakePodman(before, after, restart_rc)
        monkeypatch.setattr(nodes, "run", fake.run)
        monkeypatch.setattr(nodes, "boot_state", fake.boot_state)
        monkeypatch.setattr(nodes, "boot_report", lambda name: "report of %s" % name)
        monkeypatch.setattr(nodes, "STOPPED_GRACE_S", 0.2)
        monkeypatch.setattr(nodes, "wait_for", fake.wait_for)
        return fake
    return make


def test_a_stopped_container_is_restarted_before_the_timeout(podman):
    fake = podman(STOPPED, "running")
    assert nodes.wait_until_booted("owned-a100-1", timeout=3) == "running"
    assert fake.timed_out == [], "waited out the boot timeout on a stopped container"
    assert ["podman", "restart", "-t", "5", "owned-a100-1"] in fake.calls


def test_a_container_podman_cannot_restart_is_made_again(podman):
    fake = podman(STOPPED, "running", restart_rc=125)
    made = []
    assert nodes.wait_until_booted("owned-a100-1", 30, recreate=lambda: made.append(1)) == "running"
    assert made == [1]
    assert ["podman", "rm", "-f", "-t", "5", "owned-a100-1"] in fake.calls


def test_without_a_way_to_make_it_again_the_restart_failure_is_named(podman):
    podman(STOPPED, "running", restart_rc=125)
    with pytest.raises(LabError, match=r"(?s)podman restart owned-a100-1 failed .*cannot start a container"):
        nodes.wait_until_booted("owned-a100-1", 30)


def test_a_container_that_stops_again_fails_with_its_report(podman):
    podman(STOPPED, STOPPED)
    with pytest.raises(LabError, match=r"(?s)owned-a100-1 stopped again while booting.*report of owned-a100-1"):
        nodes.wait_until_booted("owned-a100-1", 30)


def test_the_lab_bridge_is_made_without_dns(monkeypatch):
    calls = []
    monkeypatch.setattr(nodes, "network_exists", lambda: False)
    monkeypatch.setattr(nodes, "run", lambda cmd, **_: calls.append(cmd))
    assert nodes.ensure_network() is True
    assert calls[-1][:4] == ["podman", "network", "create", "--disable-dns"]


def test_a_node_made_afresh_leaves_its_earlier_records_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(nodes.config, "ROOT", str(tmp_path))
    records = tmp_path / "records"
    (records / "manifests").mkdir(parents=True)
    for name in ("owned-a100-1", "owned-a100-2"):
        (records / "manifests" / (name + ".json")).write_text('{"node": "%s"}' % name)
        (records / "manifests" / (name + ".html")).write_text("<html></html>")
        (records / "removals" / name).mkdir(parents=True)
        (records / "removals" / name / "CHG-1.json").write_text("{}")
    assert nodes.retire_records(["owned-a100-2", "owned-l40s-1"]) == ["owned-a100-2"]
    assert sorted(p.name for p in (records / "manifests").iterdir()) == ["owned-a100-1.html", "owned-a100-1.json"]
    assert sorted(p.name for p in (records / "removals").iterdir()) == ["owned-a100-1"]
    (stamp,) = (records / "retired").iterdir()
    assert sorted(p.name for p in (stamp / "manifests").iterdir()) == ["owned-a100-2.html", "owned-a100-2.json"]
    assert (stamp / "removals" / "owned-a100-2" / "CHG-1.json").exists()


def test_the_records_of_removed_light_nodes_are_retired(tmp_path, monkeypatch):
    monkeypatch.setattr(nodes.config, "ROOT", str(tmp_path))
    records = tmp_path / "records"
    (records / "manifests").mkdir(parents=True)
    (records / "removals" / "owned-light-03").mkdir(parents=True)
    for name in ("owned-a100-1", "owned-light-01", "owned-light-02", "owned-light-03"):
        (records / "manifests" / (name + ".json")).write_text('{"node": "%s"}' % name)
        (records / "manifests" / (name + ".html")).write_text("<html></html>")
    assert nodes.recorded_light_nodes(1) == ["owned-light-02", "owned-light-03"]
    assert nodes.recorded_light_nodes(3) == []
    assert nodes.retire_records(nodes.recorded_light_nodes(1)) == ["owned-light-02", "owned-light-03"]
    assert sorted(p.name for p in (records / "manifests").iterdir()) == [
        "owned-a100-1.html", "owned-a100-1.json", "owned-light-01.html", "owned-light-01.json"]
    assert list((records / "removals").iterdir()) == []
    assert nodes.recorded_light_nodes(0) == ["owned-light-01"]
