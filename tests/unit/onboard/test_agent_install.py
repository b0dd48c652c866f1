"""A node's agents in one module run (agent_install), against doubles of useradd, usermod,
dpkg-query, apt-get and systemctl that keep their state: users before packages before units,
one apt transaction for the missing packages only, one daemon-reload for all the units, nothing
done in check mode, a second run with no change and no command that changes anything, and
names that would reach a command line or a path refused before anything runs."""
import os

import pytest

import hgpu_testenv
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import agent_install as ai

DOUBLES = {
    "useradd": 'echo "useradd $*" >> "$STATE_DIR/calls"\n',
    "usermod": 'echo "usermod $*" >> "$STATE_DIR/calls"\n',
    # installed packages are the lines of $STATE_DIR/installed, held ones those of $STATE_DIR/held
    "dpkg-query": r'''shift 2
rc=0
for p in "$@"; do
  if grep -qx "$p" "$STATE_DIR/installed" 2>/dev/null; then echo "$p ii 1.0-1"
  elif grep -qx "$p" "$STATE_DIR/held" 2>/dev/null; then echo "$p hi 1.0-1"
  else echo "dpkg-query: no packages found matching $p" >&2; rc=1; fi
done
exit $rc
''',
    "apt-get": r'''while [ "${1#-}" != "$1" ]; do case "$1" in -o) shift 2 ;; *) shift ;; esac; done
echo "apt-get $*" >> "$STATE_DIR/calls"
[ -e "$STATE_DIR/apt-fails" ] && { echo "E: Unable to locate package $2" >&2; exit 100; }
[ "$1" = install ] && { shift; for p in "$@"; do echo "$p" >> "$STATE_DIR/installed"; done; }
exit 0
''',
    "systemctl": r'''echo "systemctl $*" >> "$STATE_DIR/calls"
unit=$(echo "$*" | awk '{print $NF}')
case "$1" in
  daemon-reload) exit 0 ;;
  show) [ -e "$STATE_DIR/loaded-$unit" ] && echo loaded || echo not-found; exit 0 ;;
  is-enabled) [ -e "$STATE_DIR/enabled-$unit" ] && { echo enabled; exit 0; }; echo disabled; exit 1 ;;
  is-active) [ -e "$STATE_DIR/active-$unit" ] && exit 0; exit 3 ;;
  enable) touch "$STATE_DIR/enabled-$unit" ;;
  start|restart) touch "$STATE_DIR/active-$unit" ;;
esac
''',
}
DROPIN = "[Service]\nUser=hgpu-test-exporter\nNoNewPrivileges=yes\n"
UNIT = "[Unit]\nDescription=agent\n[Service]\nExecStart=/opt/agent/bin/agent\n"
READS = ("show", "is-enabled", "is-active")


@pytest.fixture
def node(tmp_path):
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    for name, body in DOUBLES.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    systemd = tmp_path / "etc" / "systemd" / "system"
    run = hgpu_testenv.module_on_doubles("agent_install", {"systemd_dir": str(systemd)}, bin_dir, state)
    logged = run.calls

    def calls():
        """What changed the node: the logged calls without systemctl's reads and apt's list refresh."""
        return [c for c in logged() if c.split()[1] not in READS and c != "apt-get update"]

    run.systemd, run.state, run.calls = systemd, state, calls
    return run


def args(**extra):
    """An unknown user (created), one package the node lacks, a packaged unit and a binary agent's unit."""
    base = {"users": ["hgpu-test-exporter"], "packages": ["prometheus-node-exporter"],
            "units": [{"name": "prometheus-node-exporter.service", "dropin_content": DROPIN},
                      {"name": "hgpu-agent.service", "unit_content": UNIT, "dropin_content": DROPIN}]}
    base.update(extra)
    return base


def test_users_then_packages_then_units_once_and_a_rerun_changes_nothing(node):
    (node.state / "loaded-prometheus-node-exporter.service").touch()
    dry = node(args(), check_mode=True, diff=True)
    assert dry["changed"] and dry["users_created"] == ["hgpu-test-exporter"], dry
    assert dry["packages_installed"] == ["prometheus-node-exporter"] and len(dry["diff"]) == 3, dry
    assert all(u["started"] and u["enabled_now"] for u in dry["units"].values()), dry
    assert node.calls() == [] and not node.systemd.exists()

    first = node(args())
    assert first["changed"] and first["packages_installed"] == ["prometheus-node-exporter"], first
    assert node.calls() == [
        "useradd --system --shell /usr/sbin/nologin --no-create-home --home-dir /nonexistent hgpu-test-exporter",
        "apt-get install prometheus-node-exporter",
        "systemctl daemon-reload",
        "systemctl enable prometheus-node-exporter.service",
        "systemctl start prometheus-node-exporter.service",
        "systemctl enable hgpu-agent.service",
        "systemctl start hgpu-agent.service",
    ]
    assert (node.systemd / "hgpu-agent.service").read_text() == UNIT
    dropin = node.systemd / "prometheus-node-exporter.service.d" / "hybridgpu-hardening.conf"
    assert dropin.read_text() == DROPIN and oct(dropin.stat().st_mode & 0o777) == "0o644"
    assert not (node.systemd / "prometheus-node-exporter.service").exists()

    (node.state / "calls").unlink(missing_ok=True)
    # the user exists now: a real account the doubles cannot create, with the right shell and home
    again = node(args(users=["nobody"]))
    assert not again["changed"], again
    assert node.calls() == []


def test_an_existing_user_gets_the_system_shell_and_home(node):
    # Debian's daemon account has /usr/sbin/nologin but home /usr/sbin
    got = node({"users": ["daemon", "nobody"]})
    assert got["changed"] and got["users_modified"] == ["daemon"] and got["users_created"] == [], got
    assert node.calls() == ["usermod --shell /usr/sbin/nologin --home /nonexistent daemon"]


def test_only_missing_packages_are_installed_in_one_transaction(node):
    (node.state / "installed").write_text("curl\n")
    got = node({"packages": ["curl", "prometheus-node-exporter", "jq", "curl"]})
    assert got["packages_installed"] == ["prometheus-node-exporter", "jq"], got
    assert node.calls() == ["apt-get install prometheus-node-exporter jq"]
    assert not node({"packages": ["curl", "jq"]})["changed"]
    # a held package is installed: nothing to do, every run
    (node.state / "held").write_text("nvidia-driver-550\n")
    assert not node({"packages": ["nvidia-driver-550", "curl"]})["changed"]
    assert node.calls() == []


def test_a_failed_install_reports_the_step_and_what_was_done(node):
    (node.state / "apt-fails").touch()
    got = node(args())
    assert got.get("failed") and got["msg"].startswith("installing the packages: "), got
    assert "Unable to locate package" in got["msg"] and got["users_created"] == ["hgpu-test-exporter"], got
    assert not node.systemd.exists()


def test_a_changed_dropin_or_binary_restarts_only_its_unit(node):
    (node.state / "loaded-prometheus-node-exporter.service").touch()
    node(args())
    node.calls()
    units = args()["units"]
    units[1] = dict(units[1], dropin_content=DROPIN + "PrivateTmp=yes\n")
    got = node({"units": units}, diff=True)
    assert got["units"]["hgpu-agent.service"]["restarted"], got
    assert not got["units"]["prometheus-node-exporter.service"]["changed"], got
    assert node.calls() == ["systemctl daemon-reload", "systemctl restart hgpu-agent.service"]
    units[0] = dict(units[0], restart=True)
    got = node({"units": units})
    assert node.calls() == ["systemctl restart prometheus-node-exporter.service"], got


def test_a_unit_no_package_ships_is_named(node):
    got = node({"units": [{"name": "dcgm-exporter.service", "dropin_content": DROPIN}]})
    assert got.get("failed") and "unit dcgm-exporter.service is not loaded (not-found)" in got["msg"], got


@pytest.mark.parametrize("bad, needle", [
    ({"users": ["root; reboot"]}, "users: 'root; reboot' is not a user name"),
    ({"users": ["-o"]}, "users: '-o' is not a user name"),
    ({"packages": ["--allow-unauthenticated"]}, "packages: '--allow-unauthenticated' is not a Debian package name"),
    ({"packages": ["curl jq"]}, "is not a Debian package name"),
    ({"units": [{"name": "../../etc/passwd", "dropin_content": "x"}]}, "is not a systemd service unit name"),
    ({"units": [{"name": "a.service", "dropin_content": "x"}] * 2}, "units: a.service is given twice"),
    ({"dropin_name": "../x.conf"}, "is not a drop-in file name"),
    ({"cache_valid_time": -1}, "cache_valid_time must be 0 or more seconds"),
    ({"units": [{"name": "a.service", "dropin_content": "x", "bogus": 1}]}, "bogus"),
])
def test_bad_names_are_refused_before_anything_runs(node, bad, needle):
    got = node(dict(args(), **bad))
    assert got.get("failed") and needle in got["msg"], got
    assert node.calls() == [] and not node.systemd.exists()


def test_package_lists_are_refreshed_only_when_older_than_the_valid_time(tmp_path):
    calls = []

    def run(argv, ok=(0,)):
        calls.append(argv[argv.index("apt-get") + 1:])
        return cmd.Result(0, "", "")

    stamp = tmp_path / "stamp"
    stamp.write_text("")
    os.utime(stamp, (1000, 1000))
    assert ai.lists_age(now=1500, stamps=(str(tmp_path / "missing"), str(stamp))) == 500
    assert ai.lists_age(now=1500, stamps=(str(tmp_path / "missing"),)) is None
    assert not ai.install_packages(run, ["jq"], 3600, 500)
    assert ai.install_packages(run, ["jq"], 3600, 3601)
    assert ai.install_packages(run, ["jq"], 3600, None)
    steps = [c[-2] if c[-1] == "jq" else c[-1] for c in calls]
    assert steps == ["install", "update", "install", "update", "install"]
