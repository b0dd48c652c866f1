"""The node's copy of its manifest (node_manifest_copy): folder and file in one module run,
atomic, unchanged on a rerun, nothing written in check mode, and content that is not the node's
manifest refused before anything is touched."""
import json
import os

import pytest

import hgpu_testenv

TEXT = json.dumps({"node": "n1", "pre_onboarding": {"active_units": ["ssh.service"]}, "sections": {}}, indent=2)


def run_module(args, check_mode=False, diff=False):
    return hgpu_testenv.run_module("node_manifest_copy", args, check_mode, diff)


def test_first_write_makes_the_folder_and_a_rerun_changes_nothing(tmp_path):
    path = tmp_path / "var" / "lib" / "hybridgpu" / "manifest.json"
    dry = run_module({"path": str(path), "content": TEXT, "node": "n1"}, check_mode=True, diff=True)
    assert dry["changed"] and dry["made_folder"] and dry["diff"]["after"] == TEXT, dry
    assert not path.parent.exists()
    first = run_module({"path": str(path), "content": TEXT, "node": "n1"})
    assert first["changed"] and first["made_folder"], first
    assert path.read_text() == TEXT
    assert oct(path.stat().st_mode & 0o777) == "0o640"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o750"
    again = run_module({"path": str(path), "content": TEXT, "node": "n1"}, diff=True)
    assert not again["changed"] and "diff" not in again, again
    assert os.listdir(path.parent) == ["manifest.json"]  # no temporary file left


def test_new_content_and_a_wrong_mode_are_put_right(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text(TEXT)
    os.chmod(path, 0o644)
    mode = run_module({"path": str(path), "content": TEXT})
    assert mode["changed"] and oct(path.stat().st_mode & 0o777) == "0o640", mode
    later = json.dumps(dict(json.loads(TEXT), sections={"join": {"artefacts": []}}))
    got = run_module({"path": str(path), "content": later, "node": "n1"}, diff=True)
    assert got["changed"] and got["diff"]["before"] == TEXT and path.read_text() == later, got


@pytest.mark.parametrize("content, node, needle", [
    ("{not json", "n1", "content is not JSON"),
    ("[1, 2]", "n1", "JSON list, not the manifest's JSON object"),
    (TEXT, "n2", "manifest of node 'n1', not of 'n2'"),
])
def test_content_that_is_not_the_nodes_manifest_is_refused(tmp_path, content, node, needle):
    path = tmp_path / "manifest.json"
    path.write_text(TEXT)
    got = run_module({"path": str(path), "content": content, "node": node})
    assert got.get("failed") and needle in got["msg"], got
    assert path.read_text() == TEXT


def test_an_impossible_mode_is_named(tmp_path):
    got = run_module({"path": str(tmp_path / "m.json"), "content": TEXT, "mode": "rw-r"})
    assert got.get("failed") and "'rw-r' is not an octal file mode" in got["msg"], got
    assert not (tmp_path / "m.json").exists()
