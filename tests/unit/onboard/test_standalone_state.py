"""standalone_state reads the node's state and, in the same run, its own copy of its manifest
(against doubles of systemctl, nft and dpkg-query): the copy's text when it exists, null when
it does not or was not asked for, and a refusal naming the file when it is too large to be a
manifest."""
import os

import pytest

import hgpu_testenv

DOUBLES = {
    "systemctl": "echo 'ssh.service loaded active running OpenBSD Secure Shell server'\n",
    "nft": "echo 'table inet hybridgpu {'; echo '}'\n",
    "dpkg-query": "exit 1\n",
}


@pytest.fixture
def node(tmp_path):
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    for name, body in DOUBLES.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    return hgpu_testenv.module_on_doubles("standalone_state", {"paths": [str(tmp_path / "etc")]}, bin_dir, state)


def test_the_manifest_copy_comes_back_with_the_state(node, tmp_path):
    copy = tmp_path / "manifest.json"
    copy.write_text('{"node": "n1"}\n')
    got = node({"manifest_copy": str(copy)})
    assert not got.get("failed") and got["manifest_copy"] == '{"node": "n1"}\n', got
    assert got["state"]["active_units"] == ["ssh.service"] and got["nft_tables"] == [
        {"family": "inet", "name": "hybridgpu"}], got
    assert got["state"]["paths"] == {str(tmp_path / "etc"): False} and not got["changed"]


def test_no_copy_reads_as_null(node, tmp_path):
    assert node({"manifest_copy": str(tmp_path / "missing.json")})["manifest_copy"] is None
    assert node({})["manifest_copy"] is None


def test_a_copy_too_large_for_a_manifest_is_named(node, tmp_path):
    copy = tmp_path / "manifest.json"
    with open(copy, "wb") as fh:
        fh.truncate(4 * 1024 * 1024 + 1)
    got = node({"manifest_copy": str(copy)})
    assert got.get("failed") and "the manifest copy %s is larger than" % copy in got["msg"], got
    os.unlink(copy)
