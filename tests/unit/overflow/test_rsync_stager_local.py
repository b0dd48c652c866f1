"""The rsync stager end to end on this machine: rsync, the input receiver and the remote commands go through a
stand-in `ssh` that runs them locally, so the real rsync, the receiver, sha256sum and the storage layout are
exercised without a host."""
import hashlib
import os
import shutil
import stat
import types

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends, input_stream, rsync_stager

pytestmark = pytest.mark.skipif(not shutil.which("rsync") or not shutil.which("sha256sum"),
                                reason="needs rsync and sha256sum")

FAKE_SSH = """#!/bin/sh
# drop the SSH options and the destination, run the remote command here
printf '%s\n' "$*" | tr '\n' ' ' >> "$(dirname "$0")/calls.log"; echo >> "$(dirname "$0")/calls.log"
while [ $# -gt 0 ]; do
  case "$1" in storage|*@storage) shift; break ;; esac
  shift
done
exec bash -c "$*"   # bash runs a lone command in its own process, so a kill reaches it
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
    st.remote_root_path = tmp_path / "remote"
    return st


def _write(path, size, seed):
    block = hashlib.sha256(seed).digest()
    path.write_bytes((block * (size // 32 + 1))[:size])
    return str(path)


def _sessions(st):
    """SSH sessions the stager opened so far."""
    return len(st.calls.read_text().splitlines()) if st.calls.exists() else 0


def _receivers(st):
    return sum(1 for line in st.calls.read_text().splitlines() if "python3 -I -S -c" in line) if st.calls.exists() else 0


@pytest.fixture(params=["zero-copy", "portable"])
def receiver(request, monkeypatch):
    """Both ends as on Linux (sendfile on the controller, os.splice on a storage host with Python 3.10 or
    later), and without either (a controller elsewhere writes the mapped pages, an older receiver reads
    and writes)."""
    if request.param == "portable":
        monkeypatch.setattr(input_stream, "LINUX", False)
        monkeypatch.setattr(input_stream, "RECEIVER", "import os\ndel os.splice\n" + input_stream.RECEIVER)
    return request.param


def test_one_session_per_job_then_warm_and_changed_behind_the_back(stager, tmp_path, receiver):
    a = _write(tmp_path / "a.bin", 300_000, b"a")
    b = _write(tmp_path / "b.bin", 100_000, b"b")
    ds = _write(tmp_path / "ds.bin", 200_000, b"d")
    inputs = [{"name": "in-a", "path": a}, {"name": "in-b", "path": b}, {"name": "ds", "path": ds, "shared": True}]
    got = stager.stage_inputs("job-1", inputs)
    assert got["bytes_sent"] == 600_000 and got["throughput_Bps"] > 0
    assert _sessions(stager) == 1 and _receivers(stager) == 1, "one SSH session for all the job's inputs"
    remote = tmp_path / "remote"
    assert (remote / "jobs/job-1/inputs/in-a").read_bytes() == open(a, "rb").read()
    assert (remote / "shared/ds").read_bytes() == open(ds, "rb").read()
    assert not os.path.islink(remote / "shared/ds")
    assert "%s  ds" % rsync_stager.file_sha256(ds) in (remote / "shared/MANIFEST.sha256").read_text()
    again = stager.stage_inputs("job-1", inputs)
    assert again["bytes_sent"] == 0 and again["warm_shared"] == ["ds"] and _sessions(stager) == 2
    assert stager.warm_state([{"name": "ds", "path": ds}]) == {"ds": "warm"}
    (remote / "jobs/job-1/inputs/in-b").write_bytes(b"\0" * 100_000)
    fixed = stager.stage_inputs("job-1", inputs)
    assert fixed["bytes_sent"] == 100_000
    assert (remote / "jobs/job-1/inputs/in-b").read_bytes() == open(b, "rb").read()
    assert not list(remote.rglob("*.partial~")), "a verified copy keeps no partial"


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


def _partial(stager, job, name):
    return stager.remote_root_path / "jobs" / job / "inputs" / (name + input_stream.PARTIAL)


def test_an_interrupted_copy_stays_partial_and_the_rest_is_sent(stager, tmp_path, receiver):
    a = _write(tmp_path / "a.bin", 3_000_000, b"a")
    remote = tmp_path / "remote"
    stager.interrupt_next, stager.interrupt_after, stager.interrupt_bwlimit = 1, 0.6, 1024
    with pytest.raises(backends.TransferInterrupted, match="interruption injected") as err:
        stager.stage_inputs("job-3", [{"name": "a", "path": a}])
    part = remote / "jobs/job-3/inputs/a.partial~"
    assert 0 < err.value.done_bytes < 3_000_000 and part.stat().st_size == err.value.done_bytes
    assert not (remote / "jobs/job-3/inputs/a").exists(), "a job may never see a half-written input"
    kept = part.stat().st_size
    got = stager.stage_inputs("job-3", [{"name": "a", "path": a}])
    assert got["resumed"] and got["bytes_sent"] == 3_000_000 - kept
    assert (remote / "jobs/job-3/inputs/a").read_bytes() == open(a, "rb").read() and not part.exists()


def test_a_partial_copy_that_is_not_a_prefix_is_removed_and_sent_whole_next_time(stager, tmp_path, receiver):
    a = _write(tmp_path / "a.bin", 500_000, b"a")
    inputs = (tmp_path / "remote/jobs/job-4/inputs")
    inputs.mkdir(parents=True)
    (inputs / "a.partial~").write_bytes(b"x" * 1000)
    with pytest.raises(backends.TransferInterrupted, match="checksum mismatch") as err:
        stager.stage_inputs("job-4", [{"name": "a", "path": a}])
    assert err.value.done_bytes == 0
    assert not (inputs / "a").exists() and not (inputs / "a.partial~").exists()
    assert stager.stage_inputs("job-4", [{"name": "a", "path": a}])["bytes_sent"] == 500_000
    assert (inputs / "a").read_bytes() == open(a, "rb").read()


def test_a_partial_copy_longer_than_the_input_is_written_anew(stager, tmp_path, receiver):
    a = _write(tmp_path / "a.bin", 10_000, b"a")
    inputs = (tmp_path / "remote/jobs/job-5/inputs")
    inputs.mkdir(parents=True)
    (inputs / "a.partial~").write_bytes(b"x" * 20_000)
    got = stager.stage_inputs("job-5", [{"name": "a", "path": a}])
    assert got["bytes_sent"] == 10_000 and not got["resumed"]
    assert (inputs / "a").read_bytes() == open(a, "rb").read()


def test_a_damaged_copy_stays_in_place_until_the_new_one_is_verified(stager, tmp_path, receiver):
    a = _write(tmp_path / "a.bin", 200_000, b"a")
    stager.stage_inputs("job-6", [{"name": "a", "path": a}])
    dest = tmp_path / "remote/jobs/job-6/inputs/a"
    before = dest.stat().st_ino
    dest.write_bytes(b"\0" * 200_000)
    assert stager.stage_inputs("job-6", [{"name": "a", "path": a}])["bytes_sent"] == 200_000
    assert dest.read_bytes() == open(a, "rb").read() and dest.stat().st_ino != before, "replaced by a rename"


def test_the_manifest_keeps_other_datasets_and_an_empty_input_is_staged(stager, tmp_path, receiver):
    shared = tmp_path / "remote/shared"
    shared.mkdir(parents=True)
    other = "%s  other.bin\n" % ("ab" * 32)
    (shared / "MANIFEST.sha256").write_text(other + "%s  ds" % ("cd" * 32))      # no newline at the end
    ds = _write(tmp_path / "ds.bin", 70_000, b"d")
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    stager.stage_inputs("job-7", [{"name": "ds", "path": ds, "shared": True}, {"name": "e", "path": str(empty)}])
    text = (shared / "MANIFEST.sha256").read_text()
    assert text == other + "%s  ds\n" % rsync_stager.file_sha256(ds)
    assert (tmp_path / "remote/jobs/job-7/inputs/e").read_bytes() == b""


def test_a_storage_host_without_the_receiver_is_named_in_the_error(stager, tmp_path, monkeypatch):
    monkeypatch.setattr(input_stream, "RECEIVER", "import sys\nsys.stderr.write('python3: not found\\n')\nsys.exit(127)")
    a = _write(tmp_path / "a.bin", 1000, b"a")
    with pytest.raises(backends.TransferInterrupted) as err:
        stager.stage_inputs("job-8", [{"name": "a", "path": a}])
    msg = str(err.value)
    assert "storage" in msg and "rc 127" in msg and "python3: not found" in msg and "job-8" in msg


def test_an_input_that_goes_away_while_staging_stops_the_copy_and_the_session(stager, tmp_path, monkeypatch):
    a = _write(tmp_path / "a.bin", 1000, b"a")
    b = _write(tmp_path / "b.bin", 1000, b"b")
    sessions = []
    real = input_stream.Session

    def recorded(*args, **kwargs):
        sessions.append(real(*args, **kwargs))
        return sessions[-1]
    monkeypatch.setattr(input_stream, "Session", recorded)
    real_send = input_stream.send_file

    def send_then_remove(session, item, rate=None):
        if item["name"] == "a":
            os.unlink(b)       # the next input goes away while the first one is sent
        return real_send(session, item, rate)
    monkeypatch.setattr(input_stream, "send_file", send_then_remove)
    with pytest.raises(backends.TransferInterrupted, match="local file .*b.bin"):
        stager.stage_inputs("job-9", [{"name": "a", "path": a}, {"name": "b", "path": b}])
    assert sessions and sessions[0].proc.poll() is not None, "the SSH session was ended"
    assert not (tmp_path / "remote/jobs/job-9/inputs/b").exists()


def test_an_input_that_shrinks_while_staging_is_a_short_read_not_a_crash(stager, tmp_path, monkeypatch, receiver):
    a = _write(tmp_path / "a.bin", 100_000, b"a")
    real_send = input_stream.send_file

    def shrink_then_send(session, item, rate=None):
        os.truncate(item["path"], 10_000)
        return real_send(session, item, rate)
    monkeypatch.setattr(input_stream, "send_file", shrink_then_send)
    with pytest.raises(backends.TransferInterrupted, match="shorter than it was"):
        stager.stage_inputs("job-10", [{"name": "a", "path": a}])
    assert not (tmp_path / "remote/jobs/job-10/inputs/a").exists()
