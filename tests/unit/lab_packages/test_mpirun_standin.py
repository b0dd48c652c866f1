"""The lab's mpirun stand-in: Open MPI's command line (hostfile, -H, -np, -x, root guard),
every remote host checked on SSH before the launch, and the lab's all_reduce_perf started
under it printing one rank per slot on each host of the hostfile."""
import os
import socket
import subprocess
import sys

import pytest

from lab_packages_support import ALL_REDUCE, PACKAGES, Node

MPIRUN = os.path.join(PACKAGES, "mpirun", "mpirun.py")


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


def mpirun(node, *args, **env):
    return subprocess.run([sys.executable, MPIRUN] + list(args), env=node.env(**env), capture_output=True,
                          text=True, timeout=30, check=False)


def test_hostfile_launch_lists_one_rank_per_slot(node, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# nodes of the group\n%s slots=8\nlocalhost slots=8\n" % socket.gethostname())
    res = mpirun(node, "--allow-run-as-root", "--bind-to", "none", "-x", "NCCL_DEBUG=WARN", "-np", "16",
                 "--hostfile", str(hostfile), sys.executable, ALL_REDUCE, "-b", "1G", "-e", "1G", "-g", "1")
    assert res.returncode == 0, res.stderr
    ranks = [line for line in res.stdout.splitlines() if line.startswith("#  Rank")]
    assert len(ranks) == 16 and "on  localhost device  7" in ranks[-1]


def test_unreachable_peer_fails_before_launch(node, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("%s slots=8\nno-such-node.invalid slots=8\n" % socket.gethostname())
    res = mpirun(node, "--allow-run-as-root", "-np", "16", "--hostfile", str(hostfile), sys.executable, ALL_REDUCE)
    assert res.returncode == 1 and res.stdout == ""
    assert "Could not resolve hostname no-such-node.invalid" in res.stderr
    assert "ORTE was unable to reliably start one or more daemons" in res.stderr


def test_more_ranks_than_slots(node):
    res = mpirun(node, "--allow-run-as-root", "-np", "17", "-H", "%s:8,localhost:8" % socket.gethostname(),
                 sys.executable, ALL_REDUCE)
    assert res.returncode == 1 and "There are not enough slots available in the system to satisfy the 17" in res.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="the root guard only applies to root")
def test_root_needs_the_override(node):
    res = mpirun(node, "-np", "1", sys.executable, ALL_REDUCE)
    assert res.returncode == 1 and "mpirun has detected an attempt to run as root" in res.stderr
    ok = mpirun(node, "-np", "1", sys.executable, ALL_REDUCE, OMPI_ALLOW_RUN_AS_ROOT="1",
                OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    assert ok.returncode == 0, ok.stderr


def test_peer_without_sshd_fails(node):
    # a peer given by address: the check connects to its port 22, where nothing listens here
    res = mpirun(node, "--allow-run-as-root", "-np", "2", "-H", "%s:1,127.0.0.2:1" % socket.gethostname(),
                 sys.executable, ALL_REDUCE, "-b", "1M", "-e", "1M", "-g", "1")
    assert res.returncode == 1 and "ssh: connect to host 127.0.0.2 port 22" in res.stderr
