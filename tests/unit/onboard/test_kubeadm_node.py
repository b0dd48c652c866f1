"""A kubeadm node's join state, JoinConfiguration and join unit in one module run (kubeadm_node),
against doubles of systemctl, systemd-run, dpkg-query and journalctl that keep the units' state,
and the real openssl on a certificate made for the test."""
import hashlib
import os
import subprocess

import pytest

import hgpu_testenv

SYSTEMCTL = r"""#!/bin/sh
# systemctl double: the kubelet's enablement in $STATE_DIR/enabled, the join unit's properties
# in $STATE_DIR/join (written by the systemd-run double); every call logged.
echo "systemctl $*" >> "$STATE_DIR/calls"
case "$1" in
  is-enabled) [ -e "$STATE_DIR/enabled" ] && { echo enabled; exit 0; }; echo disabled; exit 1 ;;
  show) if [ -e "$STATE_DIR/join" ]; then cat "$STATE_DIR/join"; else
          printf 'LoadState=not-found\nActiveState=inactive\nSubState=dead\nResult=success\nExecMainStatus=0\nExecMainExitTimestampMonotonic=0\n'; fi ;;
  enable) touch "$STATE_DIR/enabled" ;;
  stop) rm -f "$STATE_DIR/join" ;;
  reset-failed) exit 0 ;;
esac
"""
SYSTEMD_RUN = r"""#!/bin/sh
echo "systemd-run $*" >> "$STATE_DIR/calls"
printf 'LoadState=loaded\nActiveState=active\nSubState=running\nResult=success\nExecMainStatus=0\nExecMainExitTimestampMonotonic=0\n' > "$STATE_DIR/join"
"""
DPKG_QUERY = r"""#!/bin/sh
# dpkg-query double: the packages listed in $STATE_DIR/dpkg ("name status version" lines).
shift 2
rc=0
for p in "$@"; do
  line=$(grep "^$p " "$STATE_DIR/dpkg" 2>/dev/null) && echo "$line" || { echo "dpkg-query: no packages found matching $p" >&2; rc=1; }
done
exit $rc
"""
JOURNALCTL = "#!/bin/sh\necho 'discovery: could not reach the API server'\necho 'error execution phase preflight'\n"
KUBEADM = "#!/bin/sh\nexit 0\n"

ENDED_OK = ("LoadState=loaded\nActiveState=active\nSubState=exited\nResult=success\nExecMainStatus=0\n"
            "ExecMainExitTimestampMonotonic=123456\n")
ENDED_FAILED = ("LoadState=loaded\nActiveState=failed\nSubState=failed\nResult=exit-code\nExecMainStatus=1\n"
                "ExecMainExitTimestampMonotonic=123456\n")


@pytest.fixture
def node(tmp_path):
    bin_dir, state, etc = tmp_path / "bin", tmp_path / "state", tmp_path / "etc"
    for folder in (bin_dir, state, etc):
        folder.mkdir()
    for name, text in (("systemctl", SYSTEMCTL), ("systemd-run", SYSTEMD_RUN), ("dpkg-query", DPKG_QUERY),
                       ("journalctl", JOURNALCTL), ("kubeadm", KUBEADM)):
        (bin_dir / name).write_text(text)
        os.chmod(bin_dir / name, 0o755)
    paths = {"kubelet_conf": str(etc / "kubelet.conf"), "client_certificate": str(etc / "client.pem")}

    run = hgpu_testenv.module_on_doubles("kubeadm_node", paths, bin_dir, state)

    def calls():
        return run.calls(skip=("show", "is-enabled"))

    run.state, run.etc, run.paths = state, etc, paths
    run.calls_made = calls
    return run


def test_a_node_that_has_not_joined_reads_as_such(node):
    (node.state / "dpkg").write_text("kubeadm ii 1.30.4-1.1\n")
    res = node({"packages": ["kubeadm", "kubelet"]})
    assert not res.get("failed") and res["changed"] is False, res
    assert res["joined"] is False and res["kubelet_enabled"] is False
    assert res["packages"] == {"kubeadm": "1.30.4-1.1", "kubelet": None}
    assert res["packages_ready"] is False
    assert res["client_certificate"] == {}
    assert res["join"]["finished"] is False and res["join"]["state"] == "inactive"
    assert node.calls_made() == []


def test_a_joined_node_reads_its_packages_unit_and_certificate(node):
    (node.state / "dpkg").write_text("kubeadm ii 1.30.4-1.1\nkubelet ii 1.30.4-1.1\n")
    (node.state / "enabled").touch()
    (node.etc / "kubelet.conf").write_text("apiVersion: v1\n")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(node.etc / "key.pem"),
                    "-out", node.paths["client_certificate"], "-days", "2", "-subj", "/CN=system:node:n1",
                    "-set_serial", "0xABCDEF"], check=True, capture_output=True)
    res = node({"packages": ["kubeadm=1.30.*", "kubelet"]})
    assert res["joined"] is True and res["kubelet_enabled"] is True and res["packages_ready"] is True, res
    cert = res["client_certificate"]
    assert cert["serial"] == "abcdef" and cert["path"] == node.paths["client_certificate"], cert
    assert cert["not_after"].endswith("Z") and len(cert["not_after"]) == len("2026-12-04 06:00:00Z"), cert
    # a pinned version that is not the installed one is not ready
    assert node({"packages": ["kubeadm=1.31.*", "kubelet"]})["packages_ready"] is False


def test_joining_writes_the_configuration_root_only_and_starts_the_join_once(node):
    config = str(node.etc / "kubernetes" / "join.yaml")
    args = {"state": "joining", "config_path": config, "config_text": "token: abc.def\n", "timeout": 120}
    assert node(args, check_mode=True)["changed"] is True
    assert not os.path.exists(config) and node.calls_made() == []

    res = node(args)
    assert res["changed"] is True and res["join_started"] is True, res
    assert "abc.def" not in str(res)
    with open(config) as fh:
        assert fh.read() == "token: abc.def\n"
    assert os.stat(config).st_mode & 0o7777 == 0o600
    started = [c for c in node.calls_made() if c.startswith("systemd-run")]
    assert len(started) == 1, started
    assert "--unit=hybridgpu-kubeadm-join.service" in started[0] and "--property=RuntimeMaxSec=120" in started[0]
    assert started[0].endswith("kubeadm join --config " + config), started[0]

    # a join still running is not started again
    again = node(args)
    assert again["changed"] is False and again["join_started"] is False, again
    assert not [c for c in node.calls_made() if c.startswith("systemd-run")]


def test_joining_enables_the_kubelet_first_in_the_same_run(node):
    config = str(node.etc / "join.yaml")
    args = {"state": "joining", "config_path": config, "config_text": "token: abc.def\n", "enable_kubelet": True}
    dry = node(args, check_mode=True)
    assert dry["kubelet_enabled_now"] is True and dry["changed"] is True, dry
    assert node.calls_made() == [] and not (node.state / "enabled").exists()
    res = node(args)
    assert res["kubelet_enabled_now"] is True and res["kubelet_enabled"] is True and res["join_started"], res
    made = node.calls_made()
    assert made[0] == "systemctl enable kubelet.service" and made[-1].startswith("systemd-run"), made
    # enabled now and the join running: nothing to do
    again = node(args)
    assert again["changed"] is False and again["kubelet_enabled_now"] is False, again
    assert node.calls_made() == []
    # without the option the kubelet is left as it is
    (node.state / "enabled").unlink()
    node({"state": "absent", "config_path": config})
    node.calls_made()
    plain = node(dict(args, enable_kubelet=False))
    assert plain["kubelet_enabled_now"] is False and "systemctl enable kubelet.service" not in node.calls_made()


@pytest.mark.parametrize("props, succeeded", [(ENDED_OK, True), (ENDED_FAILED, False)])
def test_the_join_unit_says_when_the_join_ended_and_how(node, props, succeeded):
    (node.state / "join").write_text(props)
    join = node({})["join"]
    assert join["finished"] is True and join["succeeded"] is succeeded, join
    if succeeded:
        assert join["exit_status"] == 0 and join["log"] == []
    else:
        assert join["exit_status"] == 1 and join["result"] == "exit-code"
        assert "discovery: could not reach the API server" in join["log"], join


def test_absent_stops_a_running_join_and_removes_the_configuration(node):
    config = node.etc / "join.yaml"
    config.write_text("token: abc.def\n")
    (node.state / "join").write_text(
        "LoadState=loaded\nActiveState=active\nSubState=running\nResult=success\nExecMainStatus=0\n"
        "ExecMainExitTimestampMonotonic=0\n")
    assert node({"state": "absent", "config_path": str(config)}, check_mode=True)["changed"] is True
    assert config.exists() and node.calls_made() == []
    res = node({"state": "absent", "config_path": str(config)})
    assert res["changed"] is True and res["config_present"] is False
    assert not config.exists()
    assert node.calls_made() == ["systemctl stop hybridgpu-kubeadm-join.service",
                                 "systemctl reset-failed hybridgpu-kubeadm-join.service"]
    assert node({"state": "absent", "config_path": str(config)})["changed"] is False
    assert node.calls_made() == []


def test_absent_unloads_an_ended_join(node):
    (node.state / "join").write_text(ENDED_FAILED)
    res = node({"state": "absent", "config_path": str(node.etc / "join.yaml")})
    assert res["changed"] is True and not (node.state / "join").exists(), res


@pytest.mark.parametrize("args, needle", [
    ({"packages": ["kubeadm; rm -rf /"]}, "packages"),
    ({"kubelet_unit": "../kubelet.service"}, "kubelet_unit"),
    ({"join_unit": "join unit"}, "join_unit"),
    ({"kubeadm": "kubeadm && true"}, "kubeadm"),
    ({"state": "joining", "config_path": "/tmp/x.yaml", "config_text": "a: b", "timeout": 0}, "timeout"),
    ({"state": "joining", "config_path": "/tmp/x.yaml"}, "config_text"),
])
def test_bad_input_is_refused_naming_the_option(node, args, needle):
    res = node(args)
    assert res["failed"] is True and needle in res["msg"], res
    assert node.calls_made() == []


def test_the_manifest_copy_state_comes_with_the_read(node):
    copy = node.etc / "manifest.json"
    assert "manifest_copy_state" not in node({})
    assert node({"manifest_copy": str(copy)})["manifest_copy_state"] is None
    copy.write_text('{"node": "n1"}')
    copy.chmod(0o600)
    res = node({"manifest_copy": str(copy)}, check_mode=True)
    assert res["manifest_copy_state"] == {"sha256": hashlib.sha256(b'{"node": "n1"}').hexdigest(), "mode": "0600"}, res
    assert res["changed"] is False
    # a folder where the copy should be is an error naming the path
    bad = node({"manifest_copy": str(node.etc)})
    assert bad["failed"] and str(node.etc) in bad["msg"], bad
