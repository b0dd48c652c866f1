"""nftables inside a lab container blocks a sibling's real TCP connection, not the host's.

The pair is the storage host and the Slurm controller: no playbook puts a firewall on them, so the
test holds on a fresh lab and on one a wave has onboarded (owned nodes then refuse SSH from peers)."""
import socket

import pytest

from conftest import podman_exec
from lablib import slurm, storage

pytestmark = pytest.mark.lab

TARGET, SIBLING = storage.HOST, slurm.HOST
PROBE = ("import socket,sys\n"
         "try:\n"
         "    socket.create_connection((sys.argv[1], 22), timeout=3).close(); print('open')\n"
         "except OSError as e:\n"
         "    print('blocked', e)\n")


def sibling_connects():
    res = podman_exec(SIBLING["name"], "python3", "-c", PROBE, TARGET["ip"])
    return res.stdout.strip().startswith("open")


def host_connects():
    try:
        socket.create_connection((TARGET["ip"], 22), timeout=3).close()
        return True
    except OSError:
        return False


def nft(command):
    res = podman_exec(TARGET["name"], "sh", "-c", command)
    assert res.returncode == 0, "%s on %s: %s" % (command, TARGET["name"], res.stderr)
    return res.stdout


@pytest.fixture
def clean_table(lab):
    nft("nft delete table inet hgpu_labtest 2>/dev/null; true")
    yield
    nft("nft delete table inet hgpu_labtest 2>/dev/null; true")


def test_nft_rule_blocks_sibling_but_not_host(clean_table):
    assert sibling_connects() and host_connects()
    nft("nft add table inet hgpu_labtest && "
        "nft add chain inet hgpu_labtest input '{ type filter hook input priority 0; }' && "
        "nft add rule inet hgpu_labtest input ip saddr %s tcp dport 22 drop" % SIBLING["ip"])
    listed = nft("nft list table inet hgpu_labtest")
    assert "tcp dport 22 drop" in listed
    assert not sibling_connects()
    assert host_connects()
    nft("nft delete table inet hgpu_labtest")
    assert sibling_connects()
