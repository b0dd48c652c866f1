"""Per-node manifest: merge per section, identities, atomic write, stable reruns, and what
onboarding created (never what the node had before), judged by the node_manifest module."""
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import manifest
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import removal

from hgpu_testenv import REPO


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


# --- what onboarding created, through the module the roles call --------------------------

# The node's standalone state before onboarding (standalone_state's shape): it already had
# the Prometheus node exporter, its user and /etc/hybridgpu.
PRE = {"recorded_at": "2026-01-01T00:00:00Z", "active_units": ["ssh.service", "prometheus-node-exporter.service"],
       "nft_ruleset": "", "packages": {"prometheus-node-exporter": "1.5.0-1", "hybridgpu-node-agent": None},
       "paths": {"/etc/hybridgpu": True, "/etc/hybridgpu/node-agent": False, "/var/lib/hybridgpu": True},
       "users": ["root", "prometheus"]}

# What the agents and the join install, as the roles declare it (everything they touch).
AGENTS = [
    {"kind": "package", "name": "prometheus-node-exporter", "agent": "prometheus-node-exporter"},
    {"kind": "user", "name": "prometheus", "agent": "prometheus-node-exporter"},
    {"kind": "unit", "name": "prometheus-node-exporter.service", "agent": "prometheus-node-exporter"},
    {"kind": "user", "name": "hgpu-gpu-exporter", "agent": "hybridgpu-gpu-exporter"},
]
JOIN = [
    {"kind": "package", "name": "hybridgpu-node-agent"},
    {"kind": "directory", "path": "/etc/hybridgpu/node-agent", "mode": "0700"},
    {"kind": "directory", "path": "/etc/hybridgpu"},
    {"kind": "directory", "path": "/var/lib/hybridgpu", "record_always": True},
    {"kind": "file", "path": "/var/lib/hybridgpu/manifest.json"},
]


def run_module(args, check_mode=False):
    """One run of plugins/modules/node_manifest.py as a process, as Ansible runs it."""
    args = dict(args, _ansible_check_mode=check_mode)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".collections"))
    proc = subprocess.run([sys.executable, os.path.join(REPO, "plugins", "modules", "node_manifest.py")],
                          input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    return json.loads(proc.stdout)


def onboard(path, node="n1"):
    """The onboarding steps in order: baseline, agents, join."""
    base = run_module({"path": path, "node": node, "pre_onboarding": PRE})
    assert base["changed"] and not base.get("failed"), base
    agents = run_module({"path": path, "node": node, "section": "agents", "artefacts": AGENTS, "created_only": True})
    join = run_module({"path": path, "node": node, "section": "join", "artefacts": JOIN, "created_only": True})
    return agents, join


def test_what_the_node_had_before_is_never_recorded_and_never_removed(tmp_path):
    path = str(tmp_path / "manifests" / "n1.json")
    agents, join = onboard(path)
    assert not agents.get("failed") and not join.get("failed"), (agents, join)
    doc = manifest.load(path)
    recorded = [(a["kind"], a.get("name") or a.get("path")) for a in manifest.artefacts(doc)]
    assert ("package", "prometheus-node-exporter") not in recorded
    assert ("user", "prometheus") not in recorded
    assert ("directory", "/etc/hybridgpu") not in recorded
    assert ("package", "hybridgpu-node-agent") in recorded
    assert ("user", "hgpu-gpu-exporter") in recorded
    assert ("directory", "/etc/hybridgpu/node-agent") in recorded
    # what was left out is said, not silently dropped
    # the exporter's unit was active before onboarding: the node's own, never stopped by removal
    assert [a["name"] for a in agents["had"]] == ["prometheus-node-exporter", "prometheus",
                                                  "prometheus-node-exporter.service"]
    assert [a["path"] for a in join["had"]] == ["/etc/hybridgpu"]
    # the manifest's own folder stays listed, marked as not created by onboarding
    folder = [a for a in manifest.artefacts(doc, "directory") if a["path"] == "/var/lib/hybridgpu"]
    assert folder == [{"kind": "directory", "path": "/var/lib/hybridgpu", "created": False, "section": "join"}]
    # the node copy is the same text as the control-host file
    assert join["text"] == open(path, encoding="utf-8").read()
    # and so removal never touches them
    plan = removal.plan(doc)
    assert plan["packages"] == ["hybridgpu-node-agent"]
    assert plan["users"] == ["hgpu-gpu-exporter"]
    assert "/etc/hybridgpu" not in plan["directories"] and "/var/lib/hybridgpu" not in plan["directories"]
    assert "prometheus-node-exporter" in plan["restore"]["packages"]
    assert "prometheus-node-exporter.service" not in plan["units"]
    assert "prometheus-node-exporter.service" in plan["restore"]["units"]
    # a rerun changes nothing
    assert [r["changed"] for r in onboard_again(path)] == [False, False]


def onboard_again(path):
    return [run_module({"path": path, "node": "n1", "section": "agents", "artefacts": AGENTS, "created_only": True}),
            run_module({"path": path, "node": "n1", "section": "join", "artefacts": JOIN, "created_only": True})]


def test_created_splits_what_onboarding_made_from_what_the_node_had():
    made, had = manifest.created(PRE, AGENTS + JOIN)
    assert ("package", "prometheus-node-exporter") in [(a["kind"], a.get("name")) for a in had]
    assert all("record_always" not in a for a in made + had)
    assert manifest.created({}, [{"kind": "package", "name": "x"}]) == ([{"kind": "package", "name": "x"}], [])


def _no_manifest(tmp_path):
    return str(tmp_path / "absent.json")


def _not_json(tmp_path):
    (tmp_path / "m.json").write_text("{\"node\": \"n1\",")
    return str(tmp_path / "m.json")


def _a_list(tmp_path):
    (tmp_path / "m.json").write_text("[]\n")
    return str(tmp_path / "m.json")


def _no_baseline(tmp_path):
    (tmp_path / "m.json").write_text(manifest.dumps(manifest.empty("n1")))
    return str(tmp_path / "m.json")


def _unreadable(tmp_path):
    (tmp_path / "m.json").mkdir()  # a folder: open() fails as for a file that cannot be read
    return str(tmp_path / "m.json")


@pytest.mark.parametrize("make, says", [
    (_no_manifest, "does not exist: the node's standalone state was never recorded (the node was never onboarded)"),
    (_not_json, "is not valid JSON"),
    (_a_list, "holds a JSON list, not a manifest object"),
    (_no_baseline, "has no pre_onboarding block"),
    (_unreadable, "cannot be read"),
])
@pytest.mark.parametrize("args", [
    {"section": "agents", "artefacts": AGENTS, "created_only": True},
    {"read": True, "created_only": True},
], ids=["record", "check_before_change"])
def test_missing_or_broken_manifest_stops_the_step(tmp_path, make, says, args):
    path = make(tmp_path)
    before = sorted(os.listdir(str(tmp_path)))
    out = run_module(dict(args, path=path, node="n1"))
    assert out.get("failed") is True, out
    assert path in out["msg"] and says in out["msg"], out["msg"]
    if make in (_no_manifest, _no_baseline):
        assert "run onboarding's baseline step first" in out["msg"]
    else:
        assert "fix it or move it aside" in out["msg"] or "permissions" in out["msg"]
    assert sorted(os.listdir(str(tmp_path))) == before  # nothing written


def test_baseline_step_creates_the_manifest_and_reads_a_missing_one_as_not_recorded(tmp_path):
    path = str(tmp_path / "manifests" / "n1.json")
    first = run_module({"path": path, "node": "n1", "read": True})
    assert first["changed"] is False and first["manifest"] is None and first["baseline_recorded"] is False
    assert not os.path.exists(path)
    check = run_module({"path": path, "node": "n1", "pre_onboarding": PRE}, check_mode=True)
    assert check["changed"] is True and not os.path.exists(path)  # check mode writes nothing
    assert run_module({"path": path, "node": "n1", "pre_onboarding": PRE})["changed"] is True
    assert run_module({"path": path, "node": "n1", "read": True})["baseline_recorded"] is True
    assert run_module({"path": path, "node": "n1", "read": True, "created_only": True}).get("failed") is not True


def test_a_broken_manifest_stops_the_baseline_step_too(tmp_path):
    path = _a_list(tmp_path)
    out = run_module({"path": path, "node": "n1", "read": True})
    assert out["failed"] is True and "holds a JSON list" in out["msg"]


def test_a_node_onboarded_under_another_records_folder_keeps_its_standalone_state(tmp_path):
    """The node's own copy fills a missing manifest (adopt): its standalone state and sections are
    taken, never the onboarded state read now; a manifest with a baseline is not touched; check mode
    writes nothing; another node's copy or one without a baseline is refused, naming why."""
    first = str(tmp_path / "old" / "n1.json")
    onboard(first)
    node_copy = json.loads(open(first).read())
    path = str(tmp_path / "awx" / "manifests" / "n1.json")

    dry = run_module({"path": path, "node": "n1", "adopt": node_copy}, check_mode=True)
    assert dry["changed"] and not os.path.exists(path), dry
    got = run_module({"path": path, "node": "n1", "adopt": node_copy})
    assert got["changed"] and got["baseline_recorded"], got
    assert json.loads(open(path).read()) == node_copy
    # the removal plan from the adopted manifest is the one from the original
    assert removal.plan(manifest.load(path)) == removal.plan(manifest.load(first))
    again = run_module({"path": path, "node": "n1", "adopt": dict(node_copy, pre_onboarding={"active_units": ["kubelet.service"]})})
    assert not again["changed"] and json.loads(open(path).read()) == node_copy, again

    other = run_module({"path": str(tmp_path / "x" / "n2.json"), "node": "n2", "adopt": node_copy})
    assert other["failed"] and "belongs to node 'n1', not 'n2'" in other["msg"], other
    bare = run_module({"path": str(tmp_path / "y" / "n1.json"), "node": "n1",
                       "adopt": {k: v for k, v in node_copy.items() if k != "pre_onboarding"}})
    assert bare["failed"] and "no pre_onboarding block" in bare["msg"], bare
    assert not os.path.exists(str(tmp_path / "y" / "n1.json"))
    # the copy's text as slurped from the node: parsed here, and a broken one named
    text = run_module({"path": str(tmp_path / "t" / "n1.json"), "node": "n1", "adopt": json.dumps(node_copy)})
    assert text["changed"] and json.loads(open(str(tmp_path / "t" / "n1.json")).read()) == node_copy, text
    broken = run_module({"path": str(tmp_path / "b" / "n1.json"), "node": "n1", "adopt": '{"node": "n1", "pre_'})
    assert broken["failed"] and "for node n1: the node's copy (adopt) is not JSON" in broken["msg"], broken
    assert not os.path.exists(str(tmp_path / "b" / "n1.json"))
