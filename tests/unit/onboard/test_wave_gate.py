"""The onboarding gate: a node is stopped by an unverified boundary, a missing or partial preflight
record, a hold, or a finding at or above the configured severity that concerns it; a signed
hold_override record naming the node and the finding lets it past once, and is audited. The
last tests run onboard.yml's gate tasks through ansible-playbook on local hosts."""
import copy
import json
import os
import subprocess
import sys

import pytest
import yaml

from hgpu_testenv import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "lifecycle"))
import lifecycle_support as ls  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import gate  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.modules import wave_gate  # noqa: E402

NODES = ["node-a", "node-b", "node-c"]


def clean_record():
    return {"wave": "w1", "verdicts_digest": "cd" * 32,
            "verdicts": {"matrix": {"rows": ["owned-a100", "owned-l40s"], "violations": []},
                         "holds": [], "wave": {"nodes": [], "uncovered_rows": []},
                         "paths": {"p1:allow:node-a": "pass"}, "cidr_overlaps": [],
                         "connection_direction": {"verdict": "pass", "reasons": []}},
            "details": {"matrix": {"rows": [{"id": "owned-a100", "nodes": ["node-a", "node-b"]},
                                            {"id": "owned-l40s", "nodes": ["node-c"]}]},
                        "probes": [{"id": "p1:allow:node-a", "source": "control", "destination": "node-a"}]}}


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    return ls.make_approvers(str(tmp_path_factory.mktemp("gate-approvers")))


def params(people, tmp_path, record, **kw):
    path = tmp_path / "preflight.json"
    if record is not None:
        path.write_text(json.dumps(record))
    out = {"preflight_record": str(path), "boundary": people["boundary"], "nodes": list(NODES),
           "min_severity": "error", "overrides": [], "executor": "ops-lead",
           "audit_log": str(tmp_path / "audit" / "audit.jsonl"), "dest": str(tmp_path / "gate.json"),
           "now": None, "boundary_signers": people["signers"], "ledger_dir": str(tmp_path / "approvals"),
           "awx_user": None}
    out.update(kw)
    return out


def decisions(result):
    return dict((n, d["decision"]) for n, d in result["nodes"].items())


def override(people, tmp_path, name="ovr.yml", signer="sec-owner", overrides=("hold:air_gapped",),
             targets=("node-b",), requester="ops-lead", change_id="CHG-OVR-1"):
    doc = yaml.safe_load(ls.record_text(change_id=change_id, action="hold_override", targets=targets,
                                        requester=requester, playbook="onboard.yml", reason="accepted risk"))
    if overrides is not None:
        doc["overrides"] = list(overrides)
    return {"record_path": ls.write_record(str(tmp_path), name, yaml.safe_dump(doc, sort_keys=False),
                                           people["keys"][signer])}


def test_a_clean_record_and_a_verified_boundary_admit_every_node(people, tmp_path):
    result = wave_gate.run(params(people, tmp_path, clean_record()), False)
    assert decisions(result) == dict.fromkeys(NODES, "admitted")
    assert result["stopped"] == {} and result["admitted"] == NODES
    assert json.loads((tmp_path / "gate.json").read_text())["admitted"] == NODES


def test_an_unsigned_boundary_stops_every_node(people, tmp_path):
    other = ls.boundary_signer(str(tmp_path / "other-signer"))
    with open(other[1]) as fh:
        result = wave_gate.run(params(people, tmp_path, clean_record(), boundary_signers=fh.read()), False)
    assert decisions(result) == dict.fromkeys(NODES, "stopped")
    assert all(r.startswith("boundary: ") for r in result["stopped"].values()), result["stopped"]


def test_an_expired_boundary_stops_every_node(people, tmp_path):
    result = wave_gate.run(params(people, tmp_path, clean_record(), now="2036-01-01T00:00:00Z"), False)
    assert decisions(result) == dict.fromkeys(NODES, "stopped")
    assert "expired" in result["stopped"]["node-a"], result["stopped"]


def test_no_record_or_a_node_preflight_did_not_judge_stops(people, tmp_path):
    result = wave_gate.run(params(people, tmp_path, None), False)
    assert decisions(result) == dict.fromkeys(NODES, "stopped")
    assert "no preflight record" in result["stopped"]["node-a"]
    result = wave_gate.run(params(people, tmp_path, clean_record(), nodes=NODES + ["node-z"]), False)
    assert decisions(result)["node-z"] == "stopped" and decisions(result)["node-a"] == "admitted"
    assert "preflight did not judge" in result["stopped"]["node-z"]


def test_a_hold_stops_its_node_whatever_the_severity(people, tmp_path):
    record = clean_record()
    record["verdicts"]["holds"] = [{"node": "node-b", "row": "owned-a100",
                                    "reasons": [{"reason": "air_gapped", "detail": "no permitted outbound path"}]}]
    result = wave_gate.run(params(people, tmp_path, record), False)
    assert decisions(result) == {"node-a": "admitted", "node-b": "stopped", "node-c": "admitted"}
    assert result["stopped"]["node-b"].startswith("hold:air_gapped: held by preflight: air_gapped")
    page = (tmp_path / "gate.html").read_text()  # the page beside gate.json: the stopped node and why, first
    summary = page[:page.index("<h2>")]
    assert "node-b: hold:air_gapped: held by preflight: air_gapped" in summary and "nodes stopped" in summary


def test_the_gate_page_escapes_what_it_shows(people, tmp_path):
    record = clean_record()
    record["verdicts"]["holds"] = [{"node": "node-b", "row": "owned-a100",
                                    "reasons": [{"reason": "air_gapped", "detail": "<script>alert(1)</script>"}]}]
    wave_gate.run(params(people, tmp_path, record), False)
    page = (tmp_path / "gate.html").read_text()
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_violations_stop_their_row_at_or_above_the_severity(people, tmp_path):
    record = clean_record()
    record["verdicts"]["matrix"]["violations"] = [
        {"rule": "kubelet-apiserver-skew", "severity": "error", "rows": ["owned-l40s"], "nodes": ["node-c"], "message": "too old"},
        {"rule": "os-image-match", "severity": "warning", "rows": ["owned-a100"], "nodes": ["node-a", "node-b"], "message": "differs"}]
    result = wave_gate.run(params(people, tmp_path, record), False)
    assert decisions(result) == {"node-a": "admitted", "node-b": "admitted", "node-c": "stopped"}
    assert "violation:kubelet-apiserver-skew:owned-l40s" in result["stopped"]["node-c"]
    result = wave_gate.run(params(people, tmp_path, record, min_severity="warning"), False)
    assert decisions(result) == dict.fromkeys(NODES, "stopped")
    assert "violation:os-image-match:owned-a100" in result["stopped"]["node-a"]


def test_a_failed_probe_stops_the_hosts_it_names(people, tmp_path):
    record = clean_record()
    record["verdicts"]["paths"]["p1:allow:node-a"] = "fail"
    result = wave_gate.run(params(people, tmp_path, record), False)
    assert decisions(result) == {"node-a": "stopped", "node-b": "admitted", "node-c": "admitted"}
    assert "path:p1:allow:node-a" in result["stopped"]["node-a"]


@pytest.mark.parametrize("change, finding", [
    (("cidr_overlaps", [{"a": "10.0.0.0/16", "b": "10.0.1.0/24", "relation": "contains"}]),
     "cidr_overlap:10.0.0.0/16~10.0.1.0/24"),
    (("connection_direction", {"verdict": "fail", "reasons": ["cloud reaches the site"]}), "connection_direction:fail"),
])
def test_estate_wide_findings_stop_every_node(people, tmp_path, change, finding):
    record = clean_record()
    record["verdicts"][change[0]] = change[1]
    result = wave_gate.run(params(people, tmp_path, record), False)
    assert decisions(result) == dict.fromkeys(NODES, "stopped")
    assert all(finding in r for r in result["stopped"].values())


def held_record():
    record = clean_record()
    record["verdicts"]["holds"] = [{"node": "node-b", "row": "owned-a100",
                                    "reasons": [{"reason": "air_gapped", "detail": "no permitted outbound path"}]}]
    return record


def test_a_signed_override_lets_its_node_past_once_and_is_audited(people, tmp_path):
    item = override(people, tmp_path)
    result = wave_gate.run(params(people, tmp_path, held_record(), overrides=[item]), False)
    assert decisions(result) == dict.fromkeys(NODES, "admitted") | {"node-b": "overridden"}, result
    assert result["nodes"]["node-b"]["overridden"][0]["change_id"] == "CHG-OVR-1" and result["changed"]
    ledger = json.loads((tmp_path / "approvals" / "CHG-OVR-1.json").read_text())
    assert ledger["action"] == "hold_override" and ledger["targets"] == ["node-b"]
    page = (tmp_path / "gate.html").read_text()
    assert "node-b: hold:air_gapped by change CHG-OVR-1 (approved by sec-owner)" in page[:page.index("<h2>")]
    events = [json.loads(line) for line in (tmp_path / "audit" / "audit.jsonl").read_text().splitlines()]
    # the first use of the change id is an audit entry too (the ledger entry names it)
    assert [(e["action"], e["change_id"]) for e in events if e["action"] == "change_claim"] == [("change_claim", "CHG-OVR-1")]
    assert [(e["action"], e["target"], e["change_id"], e["details"]["finding"]) for e in events
            if e["action"] != "change_claim"] == [("hold_override", "node-b", "CHG-OVR-1", "hold:air_gapped")]
    # The same run again resumes; a different run with the same change id is refused.
    again = wave_gate.run(params(people, tmp_path, held_record(), overrides=[item], nodes=["node-b", "node-c"]), False)
    assert decisions(again)["node-b"] == "overridden" and not again["changed"]
    refused = wave_gate.run(params(people, tmp_path, held_record(), overrides=[override(
        people, tmp_path, targets=("node-b", "node-a"))]), False)
    assert decisions(refused)["node-b"] == "stopped"
    assert "already used" in " ".join(refused["override_problems"]["CHG-OVR-1"])


def test_check_mode_judges_but_writes_nothing(people, tmp_path):
    result = wave_gate.run(params(people, tmp_path, held_record(), overrides=[override(people, tmp_path)]), True)
    assert decisions(result)["node-b"] == "overridden"
    assert not (tmp_path / "approvals").exists() and not (tmp_path / "audit").exists()
    assert not (tmp_path / "gate.json").exists() and not (tmp_path / "gate.html").exists()


@pytest.mark.parametrize("kw, problem", [
    ({"overrides": ("hold:shared_non_ai_production",)}, None),
    ({"targets": ("node-a",)}, None),
    ({"signer": "ops-lead", "requester": "ops-oncall"}, "may not approve hold_override"),
    ({"requester": "sec-owner"}, "four eyes"),
])
def test_an_override_must_name_the_node_and_the_finding_and_be_approved(people, tmp_path, kw, problem):
    result = wave_gate.run(params(people, tmp_path, held_record(), overrides=[override(people, tmp_path, **kw)]), False)
    assert decisions(result)["node-b"] == "stopped", result
    assert result["stopped"]["node-b"].startswith("hold:air_gapped")
    if problem:
        assert problem in " ".join(result["override_problems"]["CHG-OVR-1"]), result["override_problems"]
    assert not (tmp_path / "approvals" / "CHG-OVR-1.json").exists()


def test_a_hold_override_record_must_name_its_findings(people, tmp_path):
    text = ls.record_text(change_id="CHG-OVR-2", action="hold_override", targets=("node-b",),
                          requester="ops-lead", playbook="onboard.yml")
    with pytest.raises(approval.ApprovalError) as err:
        approval.parse_record(text)
    assert "overrides: is required for action hold_override" in " ".join(err.value.problems)


def test_an_unverified_boundary_cannot_be_overridden(people, tmp_path):
    other = ls.boundary_signer(str(tmp_path / "other-signer"))
    with open(other[1]) as fh:
        signers = fh.read()
    result = wave_gate.run(params(people, tmp_path, held_record(), boundary_signers=signers,
                                  overrides=[override(people, tmp_path)]), False)
    assert decisions(result) == dict.fromkeys(NODES, "stopped")
    assert not (tmp_path / "approvals").exists()


def test_unknown_severity_is_refused():
    with pytest.raises(gate.GateError):
        gate.concerning(clean_record(), "node-a", "critical")


# --- onboard.yml's gate tasks through ansible-playbook --------------------------------------

def gate_play(tmp_path):
    """onboard.yml's first play up to the end of the gate, then a marker task and its set_stats."""
    with open(os.path.join(ROOT, "playbooks", "onboard.yml")) as fh:
        play = copy.deepcopy(yaml.safe_load(fh)[0])
    names = [t["name"] for t in play["tasks"]]
    end = names.index("A stopped node goes no further (the others carry on)")
    handoff = play["tasks"][-1]
    assert "set_stats" in json.dumps(handoff)
    marker = {"name": "marker", "ansible.builtin.file": {"path": str(tmp_path) + "/ran-{{ inventory_hostname }}",
                                                         "state": "touch"}}
    play["tasks"] = play["tasks"][:end + 1] + [marker, handoff]
    return [play]


def run_gate(people, tmp_path, record, extra=(), boundary=None):
    folder = tmp_path / "records" / "w1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "preflight.json").write_text(json.dumps(record))
    inventory = {"all": {"children": {"w1": {"hosts": {n: {} for n in NODES}}},
                         "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                  "hgpu_records_dir": str(tmp_path / "records"),
                                  "hgpu_boundary_path": boundary or people["boundary"], "hgpu_role": "owned",
                                  "hgpu_boundary_signers": people["signers"]}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(json.dumps(gate_play(tmp_path)))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_SHOW_CUSTOM_STATS="1")
    return subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                           str(tmp_path / "hosts.yml"), "-e", "onboard_wave=w1", *extra, str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, timeout=180, check=False, cwd=ROOT)


def test_onboard_ends_a_held_node_and_carries_on_with_the_others(people, tmp_path):
    proc = run_gate(people, tmp_path, held_record())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == ["ran-node-a", "ran-node-c"]
    assert "STOPPED node-b (nothing changed on it): hold:air_gapped" in proc.stdout
    stats = proc.stdout[proc.stdout.index("CUSTOM STATS"):]
    assert 'node-a: onboarded' in stats and 'node-b: onboarded' not in stats and 'node-b: ' in stats, stats
    gate_file = json.loads((tmp_path / "records" / "w1" / "gate.json").read_text())
    assert list(gate_file["stopped"]) == ["node-b"]


def test_onboard_lets_an_overridden_node_through(people, tmp_path):
    item = override(people, tmp_path)
    proc = run_gate(people, tmp_path, held_record(),
                    ["-e", json.dumps({"onboard_overrides": [item], "onboard_executor": "ops-lead"})])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == ["ran-node-a", "ran-node-b", "ran-node-c"]
    assert "OVERRIDDEN node-b: hold:air_gapped by CHG-OVR-1" in proc.stdout
    assert (tmp_path / "records" / "approvals" / "CHG-OVR-1.json").exists()


def test_onboard_stops_every_node_on_an_unsigned_boundary(people, tmp_path):
    os.makedirs(tmp_path / "b", exist_ok=True)
    unsigned = str(tmp_path / "b" / "boundary.yml")
    with open(people["boundary"]) as src, open(unsigned, "w") as dst:
        dst.write(src.read())
    proc = run_gate(people, tmp_path, clean_record(), boundary=unsigned)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(tmp_path.glob("ran-*")) == []
    assert proc.stdout.count("STOPPED node-") == 3 and "boundary: " in proc.stdout


def test_onboard_refuses_a_wave_holding_a_cloud_node_before_the_gate(people, tmp_path):
    proc = run_gate(people, tmp_path, clean_record())  # writes the inventory and the play
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (tmp_path / "records" / "w1" / "gate.json").unlink()
    hosts = yaml.safe_load((tmp_path / "hosts.yml").read_text())
    hosts["all"]["children"]["w1"]["hosts"]["node-b"] = {"hgpu_role": "cloud"}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(hosts))
    for ran in tmp_path.glob("ran-*"):
        ran.unlink()
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                           str(tmp_path / "hosts.yml"), "-e", "onboard_wave=w1", str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, timeout=180, check=False, cwd=ROOT)
    assert proc.returncode != 0
    assert "not owned nodes (hgpu_role): node-b=cloud; cloud nodes are joined by the provider" in proc.stdout, proc.stdout
    assert list(tmp_path.glob("ran-*")) == [] and not (tmp_path / "records" / "w1" / "gate.json").exists()


def test_the_wave_record_names_the_stopped_nodes(tmp_path):
    root = tmp_path / "records"
    (root / "w1").mkdir(parents=True)
    (root / "w1" / "preflight.json").write_text(json.dumps(clean_record()))
    (root / "w1" / "gate.json").write_text(json.dumps({"admitted": ["node-a"], "stopped": {
        "node-b": "hold:air_gapped: held by preflight: air_gapped (no permitted outbound path)"}}))
    inventory = {"all": {"children": {"w1": {"hosts": {"node-a": {}, "node-b": {}}}},
                         "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                  "hgpu_records_dir": str(root)}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                           str(tmp_path / "hosts.yml"), "-e", "wave=w1", os.path.join(ROOT, "playbooks", "wave_record.yml")],
                          capture_output=True, text=True, env=env, timeout=180, check=False, cwd=ROOT)
    wave = json.loads((root / "validation" / "w1" / "wave.json").read_text())
    assert proc.returncode != 0 and "gate" in wave["failed_stages"], proc.stdout
    assert wave["stages"]["gate"]["detail"] == (
        "stopped before any change: node-b: hold:air_gapped: held by preflight: air_gapped (no permitted outbound path)")
    assert "stopped before any change: node-b" in (root / "validation" / "w1" / "wave.html").read_text()


def test_severity_none_lets_findings_through_but_never_a_hold():
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import gate as g
    record = {"verdicts": {"holds": [{"node": "n2", "row": "r", "reasons": [{"reason": "air_gapped", "detail": "x"}]}],
                           "matrix": {"rows": ["r"], "violations": [{"rule": "cuda-driver-minimum", "severity": "error",
                                                                     "rows": ["r"], "nodes": ["n1", "n2"], "message": "m"}]},
                           "cidr_overlaps": [{"a": {"name": "a"}, "b": {"name": "b"}, "relation": "overlaps"}],
                           "connection_direction": {"verdict": "fail"}, "paths": {},
                           "wave": {"nodes": [{"node": "n1"}, {"node": "n2"}]}}}
    assert g.concerning(record, "n1", "none") == []
    assert [f["kind"] for f in g.concerning(record, "n2", "none")] == ["hold"]
    assert len(g.concerning(record, "n1", "error")) >= 2
