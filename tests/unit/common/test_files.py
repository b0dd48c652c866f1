"""The atomic writer: content and mode land together, and a write that fails half-way leaves
the old file (or no file) and no temporary file."""
import os
import stat

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import files


def mode_of(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


def test_text_and_bytes_land_with_their_mode(tmp_path):
    target = tmp_path / "state.json"
    files.write(str(target), "{\"ä\": 1}\n", mode=0o640)
    assert target.read_bytes() == "{\"ä\": 1}\n".encode("utf-8")
    assert mode_of(target) == 0o640
    files.write(str(target), b"\x00\xff", mode=0o600)
    assert target.read_bytes() == b"\x00\xff" and mode_of(target) == 0o600
    assert os.listdir(str(tmp_path)) == ["state.json"]


def test_without_a_mode_a_file_keeps_its_mode_and_a_new_one_follows_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        files.write(str(tmp_path / "new"), "x")
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "new") == 0o640
    kept = tmp_path / "kept"
    kept.write_text("old")
    kept.chmod(0o604)
    files.write(str(kept), "new")
    assert kept.read_text() == "new" and mode_of(kept) == 0o604


def _fail(*args, **kwargs):
    raise OSError("disk full")


@pytest.mark.parametrize("where", ["write", "fsync", "replace"])
def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path, monkeypatch, where):
    target = tmp_path / "wave.json"
    target.write_text("old content\n")
    target.chmod(0o644)
    if where == "write":
        # the first bytes reach the temporary file, then the write fails
        real_fdopen = os.fdopen

        def fdopen(fd, *args, **kwargs):
            handle = real_fdopen(fd, *args, **kwargs)
            real_write = handle.write

            def half(data):
                real_write(data[:3])
                handle.flush()
                _fail()
            handle.write = half
            return handle
        monkeypatch.setattr(os, "fdopen", fdopen)
    elif where == "fsync":
        monkeypatch.setattr(os, "fsync", _fail)
    else:
        monkeypatch.setattr(os, "replace", _fail)
    with pytest.raises(OSError, match="disk full"):
        files.write(str(target), "new content, longer than the old one\n", mode=0o600)
    monkeypatch.undo()
    assert target.read_text() == "old content\n" and mode_of(target) == 0o644
    assert os.listdir(str(tmp_path)) == ["wave.json"]


def test_a_failed_first_write_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "fsync", _fail)
    with pytest.raises(OSError, match="disk full"):
        files.write(str(tmp_path / "new.json"), "{}\n", mode=0o644)
    assert os.listdir(str(tmp_path)) == []


def test_the_folder_is_synced_after_the_rename(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real_fsync(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    files.write(str(tmp_path / "f"), "x", mode=0o644)
    assert synced == [False, True]


def test_write_folder_replaces_a_folder_and_keeps_the_old_one_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "wave-1"
    files.write_folder(str(target), {"a.json": "1\n", "index.html": "<p>1</p>\n"})
    assert sorted(os.listdir(str(target))) == ["a.json", "index.html"] and mode_of(target) == 0o755
    files.write_folder(str(target), {"a.json": "2\n"})
    assert os.listdir(str(target)) == ["a.json"] and (target / "a.json").read_text() == "2\n"
    real_rename = os.rename

    def rename(src, dst):
        if ".tmp-" in src:
            _fail()
        real_rename(src, dst)
    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError, match="disk full"):
        files.write_folder(str(target), {"a.json": "3\n"})
    monkeypatch.undo()
    assert os.listdir(str(tmp_path)) == ["wave-1"] and (target / "a.json").read_text() == "2\n"


def test_move_renames_across_folders(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "m.json").write_text("{}")
    files.move(str(tmp_path / "a" / "m.json"), str(tmp_path / "b" / "old.json"))
    assert os.listdir(str(tmp_path / "a")) == [] and (tmp_path / "b" / "old.json").read_text() == "{}"
