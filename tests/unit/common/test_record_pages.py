"""Every JSON record under the records folder has a page beside it (same base name, .html),
written with the JSON from the same data: the key facts first, every value escaped, unchanged
on a rerun with the same content, and nothing written in check mode."""
import importlib.util
import json
import os
import subprocess
import sys

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import audit, audit_verify, ledger, manifest, record_page
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import removal, upgrade_record
from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate import validation, wave_record

from hgpu_testenv import REPO

HOSTILE = '<script>alert("x")</script>'
ESCAPED = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"


def page_of(path):
    with open(record_page.html_path(path), encoding="utf-8") as handle:
        return handle.read()


def assert_escaped(text):
    assert "<script" not in text
    assert ESCAPED in text


def run_module(name, args, check_mode=False):
    """One run of plugins/modules/<name>.py as a process, as Ansible runs it."""
    args = dict(args, _ansible_check_mode=check_mode)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".collections"))
    proc = subprocess.run([sys.executable, os.path.join(REPO, "plugins", "modules", name + ".py")],
                          input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    return json.loads(proc.stdout)


# -- validation records -------------------------------------------------------------------

def node_rec(written_at="2026-01-01T00:00:00Z"):
    steps = [{"step": "gpu_health", "passed": True, "reasons": []},
             {"step": "nccl", "passed": False, "reasons": ["busbw 3.1 GB/s below 80% of baseline " + HOSTILE]}]
    return validation.node_record("owned-a100-1", "owned", "ng_a100", steps, {"written_at": written_at})


def test_validation_page_beside_the_json_with_verdict_and_reasons(tmp_path):
    folder = str(tmp_path / "validation" / "wave1")
    res = wave_record.write_node_record(folder, node_rec())
    assert res["changed"] is True
    path = os.path.join(folder, "validate-owned-a100-1.json")
    assert res["files"] == [path, os.path.join(folder, "validate-owned-a100-1.html")]
    text = page_of(path)
    summary = text[:text.index("<h2>")]  # the facts come before any detail
    assert "owned-a100-1" in summary and '<span class="fail">failed</span>' in summary
    assert "nccl: busbw 3.1 GB/s below 80% of baseline" in summary
    assert_escaped(text)
    assert 'href="validate-owned-a100-1.json"' in text


def test_validation_page_rerun_check_mode_and_missing_page(tmp_path):
    folder = str(tmp_path)
    path = os.path.join(folder, "validate-owned-a100-1.json")
    wave_record.write_node_record(folder, node_rec())
    before = page_of(path)
    # only the run block differs: no change, the page stays byte-identical
    assert wave_record.write_node_record(folder, node_rec("2026-02-02T00:00:00Z"))["changed"] is False
    assert page_of(path) == before
    os.unlink(record_page.html_path(path))
    assert wave_record.write_node_record(folder, node_rec(), check_mode=True)["changed"] is True
    assert not os.path.exists(record_page.html_path(path))
    assert wave_record.write_node_record(folder, node_rec())["changed"] is True
    assert page_of(path) == before


def test_wave_page_links_the_node_pages(tmp_path):
    folder = str(tmp_path)
    wave_record.write_node_record(folder, node_rec())
    recs = wave_record.load_node_records(folder, ["owned-a100-1"])
    rec = wave_record.build_wave_record("wave1", "wave1", recs, {}, {})
    res = wave_record.write_wave_record(folder, rec, recs)
    text = page_of(os.path.join(folder, "wave.json"))
    assert 'href="validate-owned-a100-1.html">page</a>' in text and 'href="validate-owned-a100-1.json"' in text
    assert_escaped(text)
    assert res["changed"] is True
    assert wave_record.write_wave_record(folder, rec, recs)["changed"] is False


def test_baseline_page_and_the_module_change_check(tmp_path):
    folder = str(tmp_path / "baselines")
    verdict = {"metric": "avg_busbw_gbps", "low": 9.0, "high": 12.1, "measured": [10.0, 11.0], "margin": 0.1,
               "step": "baseline", "passed": True, "reasons": [HOSTILE]}
    args = {"kind": "baseline", "folder": folder, "node_group": "ng_a100", "baseline": verdict}
    path = os.path.join(folder, "ng_a100.json")
    assert run_module("validation_record", args, check_mode=True)["changed"] is True
    assert not os.path.exists(path) and not os.path.exists(record_page.html_path(path))
    assert run_module("validation_record", args)["changed"] is True
    with open(path, encoding="utf-8") as handle:
        assert json.load(handle) == dict(verdict, node_group="ng_a100")  # what the collectives step reads
    text = page_of(path)
    assert "ng_a100" in text[:text.index("<h2>")] and "9.0 to 12.1" in text
    assert_escaped(text)
    assert run_module("validation_record", args)["changed"] is False
    os.unlink(record_page.html_path(path))
    assert run_module("validation_record", args)["changed"] is True
    assert page_of(path) == text


# -- onboarding manifests -----------------------------------------------------------------

def manifest_doc():
    doc = manifest.merge(None, "owned-a100-1", pre_onboarding={"recorded_at": "2026-01-01T00:00:00Z"})
    return manifest.merge(doc, "owned-a100-1", "join", [{"kind": "file", "path": "/etc/" + HOSTILE, "mode": "0600"},
                                                        {"kind": "package", "name": "agent"}])


def test_manifest_page_beside_the_json_and_stable(tmp_path):
    path = str(tmp_path / "manifests" / "owned-a100-1.json")
    assert manifest.write(path, manifest_doc()) is True
    text = page_of(path)
    summary = text[:text.index("<h2>")]
    assert "owned-a100-1" in summary and "2026-01-01T00:00:00Z" in summary and "join (2 artefacts)" in summary
    assert_escaped(text)
    assert manifest.write(path, manifest.merge(manifest.load(path), "owned-a100-1", "join",
                                               [{"kind": "package", "name": "agent"}])) is False
    assert page_of(path) == text
    with open(record_page.html_path(path), "w", encoding="utf-8") as handle:
        handle.write("stale")
    assert manifest.page_current(path) is False
    assert manifest.write(path, manifest_doc()) is True
    assert page_of(path) == text


def test_node_manifest_module_counts_the_page(tmp_path):
    path = str(tmp_path / "owned-a100-1.json")
    args = {"path": path, "node": "owned-a100-1", "pre_onboarding": {"recorded_at": "2026-01-01T00:00:00Z"}}
    assert run_module("node_manifest", args, check_mode=True)["changed"] is True
    assert not os.path.exists(path) and not os.path.exists(record_page.html_path(path))
    assert run_module("node_manifest", args)["changed"] is True
    assert os.path.exists(record_page.html_path(path))
    assert run_module("node_manifest", args)["changed"] is False
    os.unlink(record_page.html_path(path))
    assert run_module("node_manifest", args, check_mode=True)["changed"] is True
    assert not os.path.exists(record_page.html_path(path))
    assert run_module("node_manifest", args)["changed"] is True
    assert os.path.exists(record_page.html_path(path))


def test_a_moved_manifest_takes_its_page_along(tmp_path):
    path = str(tmp_path / "manifests" / "owned-a100-1.json")
    manifest.write(path, manifest_doc())
    dest = str(tmp_path / "removals" / "CHG-1.manifest.json")
    os.makedirs(os.path.dirname(dest))
    manifest.move(path, dest)
    assert not os.path.exists(path) and not os.path.exists(record_page.html_path(path))
    assert 'href="CHG-1.manifest.json"' in page_of(dest)
    assert manifest.page_current(dest)


# -- removal states -----------------------------------------------------------------------

def test_removal_page_names_change_approver_and_phases(tmp_path):
    st = removal.RemovalState(str(tmp_path / "removals"), "owned-a100-1", "CHG-RM-1")
    approval = {"change_id": "CHG-RM-1", "approver": "sec-owner", "requester": "ops-lead", "executor": HOSTILE}
    assert st.start(manifest_doc(), approval) is True
    assert st.mark("approval") is True
    text = page_of(st.path)
    summary = text[:text.index("<h2>")]
    assert "owned-a100-1" in summary and "CHG-RM-1" in summary and "sec-owner" in summary
    assert "not finished" in summary and "drain" in summary
    assert_escaped(text)
    # a rerun of the same phase changes nothing, the page included
    st2 = removal.RemovalState(str(tmp_path / "removals"), "owned-a100-1", "CHG-RM-1")
    assert st2.start(manifest_doc(), approval) is False
    assert st2.mark("approval") is False
    assert page_of(st.path) == text
    # a missing page is a change, and check mode does not write it
    os.unlink(record_page.html_path(st.path))
    assert st2.mark("approval", check_mode=True) is True
    assert not os.path.exists(record_page.html_path(st.path))
    assert st2.mark("approval") is True
    assert page_of(st.path) == text


# -- driver upgrade records ---------------------------------------------------------------

def upgrade_rec():
    return {"kind": "driver_upgrade_rehearsal", "node": "owned-a100-2", "change_id": "CHG-UP-1",
            "approved_by": "ops-lead", "requested_by": "ops-oncall", "executed_by": "ops-oncall",
            "driver_before": {"version": "535"}, "driver_after": {"version": "550"},
            "left_service_at": "2026-01-01T00:00:00Z", "reentered_service_at": "2026-01-01T00:05:00Z",
            "validation": {"passed": "False", "steps": [{"step": "gpu_health", "passed": False,
                                                         "reasons": ["Xid 79 " + HOSTILE]}]}}


def test_upgrade_page_beside_the_json(tmp_path):
    path = str(tmp_path / "upgrades" / "upgrade-owned-a100-2-CHG-UP-1.json")
    res = upgrade_record.write(path, upgrade_rec())
    assert res["changed"] is True and res["html_path"] == path[:-5] + ".html"
    text = page_of(path)
    summary = text[:text.index("<h2>")]
    for fact in ("owned-a100-2", "CHG-UP-1", "ops-lead", '<span class="fail">failed</span>', "gpu_health: Xid 79",
                 "535 -&gt; 550"):
        assert fact in summary
    assert_escaped(text)
    with open(path, encoding="utf-8") as handle:
        assert json.load(handle) == upgrade_rec()
    assert upgrade_record.write(path, upgrade_rec())["changed"] is False
    assert page_of(path) == text


def test_upgrade_record_module_check_mode_and_rerun(tmp_path):
    path = str(tmp_path / "upgrades" / "upgrade-owned-a100-2-CHG-UP-1.json")
    args = {"path": path, "record": upgrade_rec()}
    res = run_module("upgrade_record", args, check_mode=True)
    assert res["changed"] is True and not os.path.exists(path) and not os.path.exists(res["html_path"])
    res = run_module("upgrade_record", args)
    assert res["changed"] is True and res["dest"] == path and os.path.exists(res["html_path"])
    assert run_module("upgrade_record", args)["changed"] is False
    changed = dict(upgrade_rec(), approved_by="someone-else")
    assert run_module("upgrade_record", {"path": path, "record": changed})["changed"] is True
    assert "someone-else" in page_of(path)


# -- audit trail --------------------------------------------------------------------------

def test_audit_page_after_each_append_keeps_the_chain(tmp_path):
    path = str(tmp_path / "audit" / "audit.jsonl")
    audit.append(path, audit.make_event("CHG-1", "sec-owner", "ops-oncall", "owned-a100-1", "cordon", "changed"))
    first = page_of(path)
    assert "CHG-1" in first and "sec-owner" in first and "cordon" in first
    audit.append(path, audit.make_event("CHG-2", "ops-lead", "ops-oncall", HOSTILE, "drain", "failed",
                                        {"why": HOSTILE}))
    text = page_of(path)
    assert text != first
    summary = text[:text.index("<h2>")]
    assert "Entries</th><td>2</td>" in summary and "seq 2 drain failed on" in summary
    assert text.index("CHG-2") < text.index("CHG-1", text.index("<h2>Entries"))  # newest first
    assert_escaped(text)
    assert audit_verify.verify(path)["ok"] is True  # the log and its anchors are as before
    assert sorted(os.listdir(os.path.dirname(path))) == ["audit.html", "audit.jsonl", "audit.jsonl.anchors"]


def test_audit_page_failure_is_a_warning_not_a_lost_entry(tmp_path):
    path = str(tmp_path / "audit.jsonl")
    os.makedirs(record_page.html_path(path))  # a folder where the page goes: it cannot be written
    res = audit.write(path, audit.make_event("CHG-1", "sec-owner", "ops-oncall", "n1", "cordon", "changed"))
    assert res["entry"]["seq"] == 1 and any("audit page" in w for w in res["warnings"])
    assert audit_verify.verify(path)["ok"] is True


# -- approvals ledger ---------------------------------------------------------------------

def test_ledger_entry_page_names_change_approver_and_targets(tmp_path):
    folder = str(tmp_path / "approvals")
    found = {"change_id": "CHG-UP-1", "playbook": "upgrade_rehearsal.yml", "action": "driver_upgrade",
             "targets": ["owned-a100-2"], "member": None, "executor": HOSTILE, "approver": "ops-lead"}
    assert ledger.claim(folder, found)["resumed"] is False
    path = os.path.join(folder, "CHG-UP-1.json")
    text = page_of(path)
    summary = text[:text.index("<h2>")]
    assert "CHG-UP-1" in summary and "ops-lead" in summary and "owned-a100-2" in summary and "none yet" in summary
    assert_escaped(text)
    assert ledger.claim(folder, found)["resumed"] is True
    assert page_of(path) == text  # resuming changes neither the entry nor its page
    ledger.mark_done(folder, "CHG-UP-1", "owned-a100-2")
    assert "owned-a100-2 at " in page_of(path)
    os.unlink(record_page.html_path(path))
    ledger.claim(folder, found)
    assert os.path.exists(record_page.html_path(path))


# -- records/index.html of the lab run ----------------------------------------------------

def test_demo_index_lists_pages_first_with_json_beside(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("hgpu_demo", os.path.join(REPO, "tests", "lab", "demo.py"))
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    monkeypatch.setattr(demo, "RECORDS", str(tmp_path))
    manifest.write(str(tmp_path / "manifests" / "owned-a100-1.json"), manifest_doc())
    wave_record.write_node_record(str(tmp_path / "validation" / "wave1"), node_rec())
    audit.append(str(tmp_path / "audit" / "audit.jsonl"),
                 audit.make_event("CHG-1", "sec-owner", "ops-oncall", "n1", "cordon", "changed"))
    links = dict(demo.write_index({}))
    assert links["Onboarding manifests"] == [("manifests/owned-a100-1.html", "manifests/owned-a100-1.json")]
    assert links["Validation and wave records"] == [("validation/wave1/validate-owned-a100-1.html",
                                                     "validation/wave1/validate-owned-a100-1.json")]
    assert links["Audit trail"] == [("audit/audit.html", "audit/audit.jsonl")]
    with open(str(tmp_path / "index.html"), encoding="utf-8") as handle:
        index = handle.read()
    assert "<a href='manifests/owned-a100-1.html'>manifests/owned-a100-1.html</a> (<a href='manifests/owned-a100-1.json'>" in index
