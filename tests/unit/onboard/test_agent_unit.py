"""An agent's unit, drop-in and state in one module run (agent_unit), against a systemctl double
that keeps the unit's enablement and activity: files written once and atomically, systemd reloaded
only when they changed, a running unit restarted only for a changed file or binary, nothing done
in check mode, and names that would reach a path refused."""
import os

import pytest

import hgpu_testenv

SYSTEMCTL = r"""#!/bin/sh
# systemctl double: state in $STATE_DIR (enabled, active, loaded), every call logged.
echo "$*" >> "$STATE_DIR/calls"
case "$1" in
  daemon-reload) exit 0 ;;
  show) [ -e "$STATE_DIR/loaded" ] && echo loaded || echo not-found; exit 0 ;;
  is-enabled) [ -e "$STATE_DIR/enabled" ] && { echo enabled; exit 0; }; echo disabled; exit 1 ;;
  is-active) [ -e "$STATE_DIR/active" ] && exit 0; exit 3 ;;
  enable) touch "$STATE_DIR/enabled" ;;
  start|restart) touch "$STATE_DIR/active" ;;
esac
"""
DROPIN = "[Service]\nNoNewPrivileges=yes\nProtectSystem=strict\n"
UNIT = "[Unit]\nDescription=agent\n[Service]\nExecStart=/opt/agent/bin/agent\n"


@pytest.fixture
def node(tmp_path):
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    (bin_dir / "systemctl").write_text(SYSTEMCTL)
    os.chmod(bin_dir / "systemctl", 0o755)
    (state / "loaded").touch()
    systemd = tmp_path / "etc" / "systemd" / "system"

    run = hgpu_testenv.module_on_doubles("agent_unit", {"systemd_dir": str(systemd)}, bin_dir, state)
    logged = run.calls

    def calls():
        return logged(skip=("show", "is-enabled", "is-active"))

    run.systemd, run.state, run.calls = systemd, state, calls
    return run


def test_a_packaged_unit_gets_its_dropin_and_is_started_once(node):
    args = {"name": "prometheus-node-exporter.service", "dropin_content": DROPIN}
    dry = node(args, check_mode=True, diff=True)
    assert dry["changed"] and dry["dropin_changed"] and dry["started"] and dry["diff"][0]["after"] == DROPIN, dry
    assert node.calls() == [] and not node.systemd.exists()
    first = node(args)
    assert first["changed"] and first["enabled_now"] and first["started"] and not first["restarted"], first
    assert node.calls() == ["daemon-reload", "enable prometheus-node-exporter.service",
                            "start prometheus-node-exporter.service"]
    dropin = node.systemd / "prometheus-node-exporter.service.d" / "hybridgpu-hardening.conf"
    assert dropin.read_text() == DROPIN and oct(dropin.stat().st_mode & 0o777) == "0o644"
    again = node(args)
    assert not again["changed"], again
    assert node.calls() == []
    assert os.listdir(dropin.parent) == ["hybridgpu-hardening.conf"]


def test_a_changed_dropin_or_binary_restarts_the_running_unit(node):
    args = {"name": "agent.service", "unit_content": UNIT, "dropin_content": DROPIN}
    node(args)
    assert (node.systemd / "agent.service").read_text() == UNIT
    node.calls()
    changed = node(dict(args, dropin_content=DROPIN + "PrivateTmp=yes\n"), diff=True)
    assert changed["dropin_changed"] and changed["restarted"] and not changed["unit_changed"], changed
    assert changed["diff"][0]["before"] == DROPIN
    assert node.calls() == ["daemon-reload", "restart agent.service"]
    binary = node(dict(args, dropin_content=DROPIN + "PrivateTmp=yes\n", restart=True))
    assert binary["restarted"] and not binary["dropin_changed"], binary
    assert node.calls() == ["restart agent.service"]


def test_a_stopped_unit_is_started_not_restarted(node):
    args = {"name": "agent.service", "unit_content": UNIT, "dropin_content": DROPIN}
    node(args)
    (node.state / "active").unlink()
    node.calls()
    got = node(dict(args, unit_content=UNIT + "# changed\n"))
    assert got["started"] and not got["restarted"] and got["unit_changed"], got
    assert node.calls() == ["daemon-reload", "start agent.service"]


def test_a_unit_no_package_ships_is_named(node):
    (node.state / "loaded").unlink()
    got = node({"name": "dcgm-exporter.service", "dropin_content": DROPIN})
    assert got.get("failed") and "unit dcgm-exporter.service is not loaded (not-found)" in got["msg"], got


@pytest.mark.parametrize("args, needle", [
    ({"name": "../../etc/passwd"}, "is not a systemd service unit name"),
    ({"name": "agent.service; reboot"}, "is not a systemd service unit name"),
    ({"name": "agent.service", "dropin_name": "../x.conf"}, "is not a drop-in file name"),
])
def test_names_that_would_reach_a_path_are_refused(node, args, needle):
    got = node(dict({"dropin_content": DROPIN}, **args))
    assert got.get("failed") and needle in got["msg"], got
    assert not node.systemd.exists() and node.calls() == []
