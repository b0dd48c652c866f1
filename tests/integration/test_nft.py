"""nftables inside a node blocks a sibling's real TCP connection, not the host's."""
import socket

import pytest

from conftest import node, podman_exec, ssh

pytestmark = pytest.mark.lab

TARGET, SIBLING = "owned-a100-1", "owned-a100-2"
PROBE = ("import socket,sys\n"
         "try:\n"
         "    socket.create_connection((sys.argv[1], 22), timeout=3).close(); print('open')\n"
         "except OSError as e:\n"
         "    print('blocked', e)\n")


def sibling_connects():
    res = podman_exec(SIBLING, "python3", "-c", PROBE, node(TARGET)["ip"])
    return res.stdout.strip().startswith("open")


def host_connects():
    try:
        socket.create_connection((node(TARGET)["ip"], 22), timeout=3).close()
        return True
    except OSError:
        return False


@pytest.fixture
def clean_table(lab):
    ssh(TARGET, "nft delete table inet hgpu_labtest 2>/dev/null; true")
    yield
    ssh(TARGET, "nft delete table inet hgpu_labtest 2>/dev/null; true")


def test_nft_rule_blocks_sibling_but_not_host(clean_table):
    assert sibling_connects() and host_connects()
    ssh(TARGET, "nft add table inet hgpu_labtest && "
                "nft add chain inet hgpu_labtest input '{ type filter hook input priority 0; }' && "
                "nft add rule inet hgpu_labtest input ip saddr %s tcp dport 22 drop" % node(SIBLING)["ip"])
    listed = ssh(TARGET, "nft list table inet hgpu_labtest").stdout
    assert "tcp dport 22 drop" in listed
    assert not sibling_connects()
    assert host_connects()
    ssh(TARGET, "nft delete table inet hgpu_labtest")
    assert sibling_connects()
