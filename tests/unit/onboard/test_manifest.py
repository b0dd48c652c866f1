"""Per-node manifest: merge per section, identities, atomic write, stable reruns."""
import json
import os

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import manifest


def test_sections_merge_and_reruns_are_stable(tmp_path):
    path = str(tmp_path / "m" / "n1.json")
    doc = manifest.merge(None, "n1", pre_onboarding={"active_units": ["ssh.service"]})
    doc = manifest.merge(doc, "n1", "join", [{"kind": "package", "name": "agent"},
                                             {"kind": "file", "path": "/etc/x", "mode": "0600"}],
                         facts={"cluster": "onprem"})
    assert manifest.write(path, doc) is True
    again = manifest.merge(manifest.load(path), "n1", "join", [{"kind": "file", "path": "/etc/x", "mode": "0600"}])
    assert manifest.write(path, again) is False  # byte-identical
    assert [a["kind"] for a in manifest.artefacts(again)] == ["file", "package"]  # earlier ones kept
    later = manifest.merge(again, "n1", pre_onboarding={"active_units": ["other"]})
    assert later["pre_onboarding"] == {"active_units": ["ssh.service"]}  # recorded once
    assert oct(os.stat(path).st_mode & 0o777) == "0o640"
    assert json.loads(open(path).read())["sections"]["join"]["facts"] == {"cluster": "onprem"}


def test_replace_makes_the_section_exact():
    doc = manifest.merge(None, "n1", "placement", [{"kind": "label", "key": "a/b", "value": "1"},
                                                   {"kind": "label", "key": "a/c", "value": "2"}])
    doc = manifest.merge(doc, "n1", "placement", [{"kind": "label", "key": "a/b", "value": "3"}], replace=True)
    assert manifest.artefacts(doc, "label") == [{"kind": "label", "key": "a/b", "value": "3", "section": "placement"}]


@pytest.mark.parametrize("art, needle", [
    ({"kind": "gizmo"}, "kind"),
    ({"kind": "taint", "key": "a/b"}, "needs effect"),
    ({"kind": "api_object", "cluster": "c", "api_version": "v1", "resource": "secrets"}, "needs name"),
    ("file", "expected a dict"),
])
def test_bad_artefacts_name_the_section(art, needle):
    with pytest.raises(manifest.ManifestError) as err:
        manifest.merge(None, "n1", "join", [art])
    assert "join.artefacts[0]" in str(err.value) and needle in str(err.value)


def test_manifest_of_another_node_is_refused():
    with pytest.raises(manifest.ManifestError, match="belongs to node"):
        manifest.merge(manifest.empty("n1"), "n2", "join", [])


def test_corrupt_file_is_reported(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{")
    with pytest.raises(manifest.ManifestError, match="not valid JSON"):
        manifest.load(str(p))
    assert manifest.load(str(tmp_path / "none.json")) is None
