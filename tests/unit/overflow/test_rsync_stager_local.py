"""The rsync stager end to end on this machine: rsync and the remote commands go through a stand-in `ssh`
that runs them locally, so the real rsync, sha256sum and the storage layout are exercised without a host."""
import hashlib
import os
import shutil
import stat
import types

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends, rsync_stager

pytestmark = pytest.mark.skipif(not shutil.which("rsync") or not shutil.which("sha256sum"),
                                reason="needs rsync and sha256sum")

FAKE_SSH = """#!/bin/sh
# drop the SSH options and the destination, run the remote command here
echo "$*" >> "$(dirname "$0")/calls.log"
while [ $# -gt 0 ]; do
  case "$1" in storage|*@storage) shift; break ;; esac
  shift
done
exec sh -c "$*"
"""


@pytest.fixture
def stager(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    ssh = bindir / "ssh"
    ssh.write_text(FAKE_SSH)
    ssh.chmod(ssh.stat().st_mode | stat.S_IXUSR)
    st = rsync_stager.RsyncStager("storage", "/keys/id", str(tmp_path / "onprem"), remote_root=str(tmp_path / "remote"))
    monkeypatch.setattr(st, "_ssh_base", lambda port=None: [str(ssh)])
    st.calls = bindir / "calls.log"
    return st


def _write(path, size, seed):
    block = hashlib.sha256(seed).digest()
    path.write_bytes((block * (size // 32 + 1))[:size])
    return str(path)


def _rsync_runs(st):
    return sum(1 for line in st.calls.read_text().splitlines() if "rsync --server" in line) if st.calls.exists() else 0


def test_one_rsync_per_job_then_warm_and_changed_behind_the_back(stager, tmp_path):
    a = _write(tmp_path / "a.bin", 300_000, b"a")
    b = _write(tmp_path / "b.bin", 100_000, b"b")
    ds = _write(tmp_path / "ds.bin", 200_000, b"d")
    inputs = [{"name": "in-a", "path": a}, {"name": "in-b", "path": b}, {"name": "ds", "path": ds, "shared": True}]
    got = stager.stage_inputs("job-1", inputs)
    assert got["bytes_sent"] == 600_000 and got["throughput_Bps"] > 0
    assert _rsync_runs(stager) == 1, "one rsync for all the job's files"
    remote = tmp_path / "remote"
    assert (remote / "jobs/job-1/inputs/in-a").read_bytes() == open(a, "rb").read()
    assert (remote / "shared/ds").read_bytes() == open(ds, "rb").read()
    assert not os.path.islink(remote / "shared/ds")
    assert "%s  ds" % rsync_stager.file_sha256(ds) in (remote / "shared/MANIFEST.sha256").read_text()
    again = stager.stage_inputs("job-1", inputs)
    assert again["bytes_sent"] == 0 and again["warm_shared"] == ["ds"] and _rsync_runs(stager) == 1
    assert stager.warm_state([{"name": "ds", "path": ds}]) == {"ds": "warm"}
    (remote / "jobs/job-1/inputs/in-b").write_bytes(b"\0" * 100_000)
    fixed = stager.stage_inputs("job-1", inputs)
    assert fixed["bytes_sent"] == 100_000
    assert (remote / "jobs/job-1/inputs/in-b").read_bytes() == open(b, "rb").read()


def test_warm_shared_refreshes_a_changed_dataset(stager, tmp_path):
    ds = _write(tmp_path / "ds.bin", 50_000, b"1")
    assert stager.warm_shared("ds", ds)["bytes_sent"] == 50_000
    _write(tmp_path / "ds.bin", 50_000, b"2")
    assert stager.warm_state([{"name": "ds", "path": ds}]) == {"ds": "stale"}
    assert stager.warm_shared("ds", ds)["bytes_sent"] > 0
    assert stager.warm_state([{"name": "ds", "path": ds}]) == {"ds": "warm"}


def test_outputs_come_back_into_a_fresh_folder_with_the_landed_digest(stager, tmp_path):
    out = tmp_path / "remote/jobs/job-2/att-1/output"
    out.mkdir(parents=True)
    _write(out / "r.bin", 70_000, b"r")
    (out / "log.txt").write_text("ok\n")
    job = types.SimpleNamespace(attempt_id="att-1")
    stager.corrupt_next = 1
    first = stager.fetch_outputs("job-2", job)
    assert first["checksum"] != rsync_stager.tree_digest(str(out))
    again = stager.fetch_outputs("job-2", job)        # a damaged landing of the same size is replaced
    assert again["checksum"] == rsync_stager.tree_digest(str(out)) == rsync_stager.tree_digest(again["ref"])
    shutil.rmtree(out)
    with pytest.raises(backends.ReturnFailed):
        stager.fetch_outputs("job-2", job)
    assert os.listdir(again["ref"]) == [], "a failed return kept an earlier landing"
