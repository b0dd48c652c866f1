"""The api_guard module run end to end with the real `nft`, each test in a network namespace of
its own (`unshare -n`: this host's tables are never touched); systemctl is a fake that logs."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import api_guard

from hgpu_testenv import ROOT

MODULE = os.path.join(ROOT, "plugins", "modules", "api_guard.py")
NFT = shutil.which("nft") or "/usr/sbin/nft"
UNSHARE = shutil.which("unshare")
SYSTEMCTL = """#!/bin/sh
echo "$@" >> "$(dirname "$0")/systemctl.log"
case "$1" in is-enabled) grep -qx "enable $3" "$(dirname "$0")/systemctl.log" && \
  ! grep -qx "disable $3" "$(dirname "$0")/systemctl.log" ;; esac
"""


def _can_unshare():
    if not UNSHARE or not os.path.exists(NFT):
        return False
    return subprocess.run([UNSHARE, "-n", NFT, "list", "ruleset"], capture_output=True, check=False).returncode == 0


pytestmark = pytest.mark.skipif(not _can_unshare(), reason="needs root, unshare -n and nft")


class Host:
    """One network namespace kept open by a sleeping process; commands enter it with nsenter."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.proc = subprocess.Popen([UNSHARE, "-n", "sleep", "300"])
        # until unshare has made the namespace, the process is still in this host's
        deadline = time.monotonic() + 10
        while os.readlink("/proc/%d/ns/net" % self.proc.pid) == os.readlink("/proc/self/ns/net"):
            assert time.monotonic() < deadline, "unshare -n did not make a namespace"
            time.sleep(0.01)
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        (self.bin / "systemctl").write_text(SYSTEMCTL)
        (self.bin / "systemctl").chmod(0o755)
        self.units = tmp_path / "units"
        self.units.mkdir()
        self.state = tmp_path / "state"

    def sh(self, *argv):
        return subprocess.run(["nsenter", "-t", str(self.proc.pid), "-n"] + list(argv),
                              capture_output=True, text=True, check=False, timeout=60)

    def module(self, check=False, diff=False, **args):
        args.setdefault("state_dir", str(self.state))
        args.setdefault("unit_dir", str(self.units))
        args.update(_ansible_check_mode=check, _ansible_diff=diff)
        path = self.tmp / "args.json"
        path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".collections"),
                   PATH="%s:/usr/sbin:/usr/bin:/sbin:/bin" % self.bin)
        proc = subprocess.run(["nsenter", "-t", str(self.proc.pid), "-n", sys.executable, MODULE, str(path)],
                              env=env, capture_output=True, text=True, timeout=60, check=False)
        return json.loads(proc.stdout)

    def members(self, table="hybridgpu_api_guard"):
        out = self.sh(NFT, "-j", "list", "set", "inet", table, "members")
        if out.returncode != 0:
            return None
        return [e for item in json.loads(out.stdout)["nftables"] for e in item.get("set", {}).get("elem", [])]

    def systemctl(self):
        log = self.bin / "systemctl.log"
        return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def host(tmp_path):
    h = Host(tmp_path)
    yield h
    h.proc.kill()
    h.proc.wait()


GUARD = {"managed_sources": ["10.213.77.8/29"], "ports": [6443]}
UNIT = "hybridgpu-nft-hybridgpu_api_guard.service"


def test_create_add_rerun_delete(host):
    first = host.module(members=["10.213.77.11"], seed=["10.213.77.12"], **GUARD)
    assert first["changed"] and first["created"] and first["added"] == ["10.213.77.11", "10.213.77.12"]
    assert host.members() == ["10.213.77.11", "10.213.77.12"]
    listing = host.sh(NFT, "list", "table", "inet", "hybridgpu_api_guard").stdout
    assert "policy accept" in listing and "priority filter - 5" in listing
    assert "ip saddr 10.213.77.8/29 ip saddr != @members tcp dport 6443 counter packets 0 bytes 0 drop" in listing
    # the second run changes nothing; a seed is used only when the table is created
    again = host.module(members=["10.213.77.11"], seed=["10.213.77.13"], **GUARD)
    assert not again["changed"] and host.members() == ["10.213.77.11", "10.213.77.12"]
    added = host.module(members=["10.213.77.13"], **GUARD)
    assert added["changed"] and added["added"] == ["10.213.77.13"] and not added["created"]
    assert host.members() == ["10.213.77.11", "10.213.77.12", "10.213.77.13"]
    gone = host.module(state="absent", members=["10.213.77.12", "10.213.77.99"])
    assert gone["changed"] and gone["removed"] == ["10.213.77.12"]
    assert host.members() == ["10.213.77.11", "10.213.77.13"]
    assert not host.module(state="absent", members=["10.213.77.12"])["changed"]


def test_check_mode_and_diff(host):
    planned = host.module(check=True, diff=True, members=["10.213.77.11"], **GUARD)
    assert planned["changed"] and planned["created"] and host.members() is None
    assert planned["diff"]["before"] == "" and planned["diff"]["after"] == "10.213.77.11\n"
    assert not (host.state / "hybridgpu_api_guard.boot.nft").exists()
    host.module(members=["10.213.77.11"], **GUARD)
    planned = host.module(check=True, diff=True, state="absent", members=["10.213.77.11"])
    assert planned["changed"] and planned["diff"] == {"before": "10.213.77.11\n", "after": ""}
    assert host.members() == ["10.213.77.11"]
    assert not host.module(check=True, members=["10.213.77.11"], **GUARD)["changed"]


def test_rule_changed_by_hand_is_written_again_and_members_kept(host):
    host.module(members=["10.213.77.11"], **GUARD)
    host.sh(NFT, "flush", "chain", "inet", "hybridgpu_api_guard", "input")
    fixed = host.module(**GUARD)
    assert fixed["changed"] and host.members() == ["10.213.77.11"]
    assert "@members" in host.sh(NFT, "list", "chain", "inet", "hybridgpu_api_guard", "input").stdout
    wider = host.module(managed_sources=["10.213.77.8/29", "10.213.77.0/29"], ports=[6443, 443])
    assert wider["changed"] and wider["managed_sources"] == ["10.213.77.0/28"] and wider["ports"] == [443, 6443]
    assert not host.module(managed_sources=["10.213.77.0/28"], ports=[443, 6443])["changed"]
    # sources left out: the rule's are kept
    assert not host.module(members=["10.213.77.11"], ports=[443, 6443])["changed"]


def test_boot_copy_follows_the_members_and_goes_with_the_table(host):
    host.module(members=["10.213.77.11"], **GUARD)
    copy, unit = host.state / "hybridgpu_api_guard.boot.nft", host.units / UNIT
    assert "10.213.77.11" in copy.read_text() and copy.read_text().startswith("table inet hybridgpu_api_guard {}\n")
    assert "ExecStart=%s -f %s" % (NFT, copy) in unit.read_text()
    assert "enable %s" % UNIT in host.systemctl()
    host.module(members=["10.213.77.12"], **GUARD)
    assert "10.213.77.12" in copy.read_text()
    host.module(state="absent", members=["10.213.77.11"])
    assert "10.213.77.11" not in copy.read_text()
    # the copy loads the table as it was
    host.sh(NFT, "delete", "table", "inet", "hybridgpu_api_guard")
    assert host.sh(NFT, "-f", str(copy)).returncode == 0 and host.members() == ["10.213.77.12"]
    removed = host.module(state="removed")
    assert removed["changed"] and host.members() is None and not copy.exists() and not unit.exists()
    assert "disable %s" % UNIT in host.systemctl()
    assert not host.module(state="removed")["changed"]


def test_boot_off_writes_no_unit(host):
    host.module(members=["10.213.77.11"], boot=False, **GUARD)
    assert not host.units.joinpath(UNIT).exists() and host.systemctl() == []


@pytest.mark.parametrize("args, message", [
    (dict(members=["10.213.77.300"], **GUARD), "members[0]: '10.213.77.300' is not an IP address"),
    (dict(members=["fd00::1"], **GUARD), "members[0]: fd00::1 is IPv6"),
    (dict(seed=["x"], **GUARD), "seed[0]"),
    (dict(managed_sources=["10.213.77.9/29"]), "managed_sources[0]"),
    (dict(managed_sources=["0.0.0.0/0"]), "managed_sources[0]: 0.0.0.0/0 would guard every address"),
    (dict(ports=[70000], **{"managed_sources": ["10.0.0.0/8"]}), "ports[0]: 70000 is outside 1-65535"),
    (dict(table="bad;name", **GUARD), "table: 'bad;name'"),
    (dict(members=["10.213.77.11"]), "managed_sources: required to create"),
])
def test_bad_input_names_the_option(host, args, message):
    result = host.module(**args)
    assert result.get("failed") and message in result["msg"], result
    assert host.members() is None


def test_nft_failure_names_the_command():
    def run(args, data=None):
        return 1, "", "Error: Could not process rule: Operation not permitted"
    guard = api_guard.Guard(run, "hybridgpu_api_guard", "/usr/sbin/nft", "/tmp/x", "/tmp/y")
    with pytest.raises(api_guard.GuardError, match=r"/usr/sbin/nft -j list set inet hybridgpu_api_guard members failed .*not permitted"):
        api_guard.run(guard, dict(GUARD, members=["10.213.77.11"]), False)
