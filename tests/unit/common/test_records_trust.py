"""The records folder as an attacker with write access to it sees it: the ledger of used change
ids, its temporary files and the audit trail. Each test drives the attack through the entry point
the playbooks use (change_approval and audit_log run by ansible-playbook on localhost, or
approval.gate and ledger.mark_done as the destructive modules call them) and asserts that the
effect did not happen: the second use is refused, the link's target is unchanged, the rewrite is
named."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lifecycle"))
import lifecycle_support as ls  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval, audit, audit_anchor, audit_verify, ledger  # noqa: E402

REPO = ls.REPO
CID = "CHG-RT-1"


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    return ls.make_approvers(str(tmp_path_factory.mktemp("approvers")))


@pytest.fixture(scope="module")
def checkpoint_key(tmp_path_factory):
    key = str(tmp_path_factory.mktemp("audit-key") / "audit_checkpoint_key")
    ls.keygen(key, "audit checkpoint key")
    return key


def play(tmp_path, people, tasks, extra=None, inventory_vars=None):
    """Run ``tasks`` on localhost with an inventory that pins the boundary, its signers and the
    records folder (and ``inventory_vars``); returns (exit status, {task name: result})."""
    inv_vars = {"hgpu_boundary_signers": people["signers"], "hgpu_boundary_path": people["boundary"],
                "hgpu_records_dir": str(tmp_path / "records")}
    inv_vars.update(inventory_vars or {})
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}, "vars": inv_vars}}))
    book = tmp_path / "play.yml"
    book.write_text(yaml.safe_dump([{"name": "records", "hosts": "localhost", "gather_facts": False,
                                     "tasks": tasks}], sort_keys=False))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), str(book)]
    if extra:
        cmd += ["-e", json.dumps(extra)]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    doc = json.loads(out.stdout)
    return out.returncode, {t["task"]["name"]: t["hosts"]["localhost"] for t in doc["plays"][0]["tasks"]}


def record(people, tmp_path, targets=("node-1", "node-2")):
    text = ls.record_text(change_id=CID, action="remove", targets=targets, requester="ops-lead")
    return ls.write_record(str(tmp_path), "chg.yml", text, people["keys"]["sec-owner"])


def approve(people, tmp_path, targets, path):
    """Run change_approval for ``targets`` under the record at ``path``: (status, task result)."""
    rc, tasks = play(tmp_path, people, [{"name": "approve", "hybridgpu.fleet.change_approval": {
        "record_path": path, "action": "remove", "playbook": "remove.yml", "targets": list(targets),
        "executor": "ops-lead"}}])
    return rc, tasks["approve"]


def ledger_folder(tmp_path):
    return tmp_path / "records" / "approvals"


def claims(tmp_path):
    log = tmp_path / "records" / "audit" / "audit.jsonl"
    return [e for e in map(json.loads, log.read_text().splitlines()) if e["action"] == "change_claim"]


# --- a change id is used once, whatever happens to one file --------------------------------
def test_change_id_used_again_after_its_ledger_entry_is_deleted(people, tmp_path):
    path = record(people, tmp_path)
    rc, first = approve(people, tmp_path, ["node-1"], path)
    assert rc == 0 and first["approval"]["ledger"]["resumed"] is False, first
    os.remove(str(ledger_folder(tmp_path) / ("%s.json" % CID)))
    rc, second = approve(people, tmp_path, ["node-2"], path)
    assert rc != 0 and "CHG-RT-1 was already used" in second["msg"] and "differs in targets" in second["msg"]
    assert [c["details"]["targets"] for c in claims(tmp_path)] == [["node-1"]]
    # the same run again resumes, and the ledger entry is written again from the audit log
    rc, again = approve(people, tmp_path, ["node-1"], path)
    assert rc == 0 and again["approval"]["ledger"]["resumed"] is True
    assert json.loads((ledger_folder(tmp_path) / ("%s.json" % CID)).read_text())["targets"] == ["node-1"]


def test_change_id_used_again_after_the_ledger_entry_s_targets_are_edited(people, tmp_path):
    path = record(people, tmp_path)
    assert approve(people, tmp_path, ["node-1"], path)[0] == 0
    entry_path = ledger_folder(tmp_path) / ("%s.json" % CID)
    entry = json.loads(entry_path.read_text())
    entry["targets"] = ["node-2"]
    entry_path.write_text(json.dumps(entry))
    rc, second = approve(people, tmp_path, ["node-2"], path)
    assert rc != 0 and "does not match the audit log" in second["msg"] and "targets" in second["msg"]
    assert [c["details"]["targets"] for c in claims(tmp_path)] == [["node-1"]]


def test_change_id_used_again_through_an_approvals_folder_linked_to_an_empty_one(people, tmp_path):
    path = record(people, tmp_path)
    assert approve(people, tmp_path, ["node-1"], path)[0] == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    os.rename(str(ledger_folder(tmp_path)), str(tmp_path / "records" / "approvals.real"))
    os.symlink(str(empty), str(ledger_folder(tmp_path)))
    rc, second = approve(people, tmp_path, ["node-2"], path)
    assert rc != 0 and "is a symbolic link" in second["msg"]
    assert not os.path.exists(str(empty / ("%s.json" % CID)))
    assert [c["details"]["targets"] for c in claims(tmp_path)] == [["node-1"]]


def test_a_symlinked_records_folder_is_refused(people, tmp_path):
    path = record(people, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(str(elsewhere), str(tmp_path / "records"))
    rc, first = approve(people, tmp_path, ["node-1"], path)
    assert rc != 0 and "is a symbolic link" in first["msg"]
    assert not os.path.exists(str(elsewhere / "approvals" / ("%s.json" % CID)))


def test_the_audit_chain_decides_when_the_ledger_is_deleted_with_the_log_edited(people, tmp_path):
    """Editing the claim in the log (chain recomputed) is caught by the anchors, so a replay
    that also deletes the ledger entry is still refused."""
    path = record(people, tmp_path)
    assert approve(people, tmp_path, ["node-1"], path)[0] == 0
    os.remove(str(ledger_folder(tmp_path) / ("%s.json" % CID)))
    log = str(tmp_path / "records" / "audit" / "audit.jsonl")
    rows = [json.loads(x) for x in open(log).read().splitlines()]
    rows[0]["change_id"] = "CHG-OTHER"
    rows[0]["hash"] = audit.entry_hash(rows[0])
    with open(log, "w") as fh:
        fh.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    rc, second = approve(people, tmp_path, ["node-2"], path)
    assert rc != 0 and "does not verify" in second["msg"] and "rewritten" in second["msg"]


# --- the ledger write never goes through a link ---------------------------------------------
def gate_params(people, path, ledger_dir, targets=("node-1",)):
    return {"boundary": people["boundary"], "boundary_signers": people["signers"], "record_path": path,
            "action": "remove", "targets": list(targets), "playbook": "remove.yml", "executor": "ops-lead",
            "ledger_dir": ledger_dir}


def test_a_link_planted_at_the_ledger_s_temporary_file_is_not_written_through(people, tmp_path):
    path = record(people, tmp_path)
    folder = str(ledger_folder(tmp_path))
    approval.gate(gate_params(people, path, folder))
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    entry_path = os.path.join(folder, "%s.json" % CID)
    for name in ("%s.tmp" % entry_path, os.path.join(folder, ".%s.json.tmp" % CID)):
        os.symlink(str(victim), name)
    entry = ledger.mark_done(folder, CID, "node-1", {"package": "nvidia-driver"})
    assert victim.read_text() == "precious\n"
    assert not os.path.islink(entry_path) and entry["done"]["node-1"]["package"] == "nvidia-driver"
    # the done mark is in the audit chain too, and a later run reads it from there
    again = approval.gate(gate_params(people, path, folder))
    assert again["ledger"]["resumed"] is True and "node-1" in again["ledger"]["done"]


def test_a_ledger_entry_replaced_by_a_link_is_refused(people, tmp_path):
    path = record(people, tmp_path)
    folder = str(ledger_folder(tmp_path))
    approval.gate(gate_params(people, path, folder))
    victim = tmp_path / "victim.json"
    entry_path = os.path.join(folder, "%s.json" % CID)
    shutil.copy(entry_path, str(victim))
    before = victim.read_text()
    os.remove(entry_path)
    os.symlink(str(victim), entry_path)
    with pytest.raises(approval.ApprovalError, match="symbolic link"):
        ledger.mark_done(folder, CID, "node-1", {"package": "nvidia-driver"})
    with pytest.raises(approval.ApprovalError, match="symbolic link"):
        approval.gate(gate_params(people, path, folder))
    assert victim.read_text() == before


def test_a_done_mark_removed_from_the_ledger_is_still_done(people, tmp_path):
    path = record(people, tmp_path)
    folder = str(ledger_folder(tmp_path))
    approval.gate(gate_params(people, path, folder))
    ledger.mark_done(folder, CID, "node-1", {"package": "nvidia-driver"})
    entry_path = os.path.join(folder, "%s.json" % CID)
    entry = json.loads(open(entry_path).read())
    del entry["done"]
    with open(entry_path, "w") as fh:
        json.dump(entry, fh)
    again = approval.gate(gate_params(people, path, folder))
    assert "node-1" in again["ledger"]["done"]


# --- the audit trail: checkpoints signed with the pinned key, a rewrite fails ---------------
def audit_task(name, **over):
    args = {"path": "{{ hgpu_records_dir }}/audit/audit.jsonl", "change_id": CID, "approver": "sec-owner",
            "executor": "ops-lead", "target": "node-1", "action": "cordon", "result": "changed", "syslog": False}
    args.update(over)
    return {"name": name, "hybridgpu.fleet.audit_log": args}


def verify_task(**over):
    args = {"path": "{{ hgpu_records_dir }}/audit/audit.jsonl", "state": "verified", "syslog_heads": "none"}
    args.update(over)
    return {"name": "verify", "hybridgpu.fleet.audit_log": args, "ignore_errors": True}


def write_log(tmp_path, people, key, count=5):
    tasks = [audit_task("append %d" % i, target="node-%d" % i) for i in range(1, count + 1)]
    rc, res = play(tmp_path, people, tasks, inventory_vars={"hgpu_audit_checkpoint_key": key})
    assert rc == 0, res
    return str(tmp_path / "records" / "audit" / "audit.jsonl")


def test_every_append_signs_a_checkpoint_with_the_pinned_key(people, tmp_path, checkpoint_key):
    log = write_log(tmp_path, people, checkpoint_key, count=3)
    records, dummy = audit_anchor.read(log + ".anchors")
    assert [r["seq"] for r in records if r["type"] == "checkpoint"] == [1, 2, 3]
    rc, res = play(tmp_path, people, [verify_task()], inventory_vars={"hgpu_audit_checkpoint_key": checkpoint_key})
    assert rc == 0 and res["verify"]["verification"]["ok"] and res["verify"]["verification"]["anchors"]["required"]


def test_the_checkpoint_key_is_never_an_extra_var_nor_a_task_s_choice(people, tmp_path, checkpoint_key):
    other = str(tmp_path / "launcher-key")
    ls.keygen(other, "launcher")
    rc, res = play(tmp_path, people, [audit_task("append")], extra={"hgpu_audit_checkpoint_key": other},
                   inventory_vars={"hgpu_audit_checkpoint_key": checkpoint_key})
    assert rc != 0 and "hgpu_audit_checkpoint_key given as an extra var" in res["append"]["msg"]
    rc, res = play(tmp_path, people, [audit_task("append", checkpoint_key=other)],
                   inventory_vars={"hgpu_audit_checkpoint_key": checkpoint_key})
    assert rc != 0 and "the checkpoint key is pinned" in res["append"]["msg"]
    assert not os.path.exists(str(tmp_path / "records" / "audit" / "audit.jsonl"))


def rewrite_line(log, seq, **changes):
    """Edit the entry at ``seq`` and recompute the chain from there; returns the new rows."""
    rows = [json.loads(x) for x in open(log).read().splitlines()]
    rows[seq - 1].update(changes)
    prev = rows[seq - 2]["hash"] if seq > 1 else audit.GENESIS
    for row in rows[seq - 1:]:
        row["prev"] = prev
        row["hash"] = audit.entry_hash(row)
        prev = row["hash"]
    with open(log, "w") as fh:
        fh.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return rows


def rewrite_anchors(log, rows, keep_checkpoints_below):
    """The anchor heads rewritten to match ``rows``; checkpoints at or after the edit dropped."""
    records, dummy = audit_anchor.read(log + ".anchors")
    out = [json.dumps(audit_anchor.head_record(r["seq"], r["hash"], r["time"])) for r in rows]
    out += [json.dumps(dict((k, v) for k, v in r.items() if k != "line")) for r in records
            if r["type"] == "checkpoint" and r["seq"] < keep_checkpoints_below]
    with open(log + ".anchors", "w") as fh:
        fh.write("\n".join(out) + "\n")


def test_a_rewrite_with_the_later_checkpoints_dropped_fails_verification(people, tmp_path, checkpoint_key):
    log = write_log(tmp_path, people, checkpoint_key)
    rows = rewrite_line(log, 3, target="someone-else")
    rewrite_anchors(log, rows, keep_checkpoints_below=3)
    rc, res = play(tmp_path, people, [verify_task()], inventory_vars={"hgpu_audit_checkpoint_key": checkpoint_key})
    assert res["verify"]["failed"], res["verify"]
    bad = res["verify"]["verification"]["first_bad"]
    assert bad["kind"] == "rewritten" and "no signed checkpoint at the head seq 5" in bad["problem"]


def test_a_rewrite_re_signed_with_another_key_fails_verification(people, tmp_path, checkpoint_key):
    log = write_log(tmp_path, people, checkpoint_key, count=3)
    rows = rewrite_line(log, 2, target="someone-else")
    rewrite_anchors(log, rows, keep_checkpoints_below=2)
    mallory = str(tmp_path / "mallory")
    ls.keygen(mallory, "mallory")
    with open(log + ".anchors", "a") as fh:
        for row in rows[1:]:
            fh.write(json.dumps(audit_anchor.checkpoint_record(mallory, row["seq"], row["hash"], row["time"])) + "\n")
    rc, res = play(tmp_path, people, [verify_task()], inventory_vars={"hgpu_audit_checkpoint_key": checkpoint_key})
    bad = res["verify"]["verification"]["first_bad"]
    assert res["verify"]["failed"] and bad["kind"] == "rewritten" and "does not verify" in bad["problem"]


def test_a_log_deleted_with_its_anchors_and_started_again_fails(people, tmp_path, checkpoint_key):
    path = record(people, tmp_path)
    assert approve(people, tmp_path, ["node-1"], path)[0] == 0
    log = write_log(tmp_path, people, checkpoint_key, count=2)
    os.remove(log)
    os.remove(log + ".anchors")
    # an append refuses to start a fresh chain: the ledger names an audit entry
    rc, res = play(tmp_path, people, [audit_task("append")], inventory_vars={"hgpu_audit_checkpoint_key": checkpoint_key})
    assert rc != 0 and "refusing to start a fresh chain" in res["append"]["msg"]
    # a fresh chain written by hand (and signed with the key) does not verify either
    entry = dict(audit.make_event(CID, "sec-owner", "ops-lead", "node-1", "cordon", "changed"), seq=1,
                 prev=audit.GENESIS)
    entry["hash"] = audit.entry_hash(entry)
    with open(log, "w") as fh:
        fh.write(json.dumps(entry, sort_keys=True) + "\n")
    with open(log + ".anchors", "w") as fh:
        fh.write(json.dumps(audit_anchor.checkpoint_record(checkpoint_key, 1, entry["hash"], entry["time"])) + "\n")
    rc, res = play(tmp_path, people, [verify_task()], inventory_vars={"hgpu_audit_checkpoint_key": checkpoint_key})
    bad = res["verify"]["verification"]["first_bad"]
    assert res["verify"]["failed"] and bad["kind"] == "rewritten" and "approvals" in bad["problem"]


def test_a_restarted_log_contradicts_the_heads_syslog_kept(people, tmp_path, checkpoint_key):
    log = write_log(tmp_path, people, checkpoint_key, count=2)
    rows = [json.loads(x) for x in open(log).read().splitlines()]
    syslog = tmp_path / "syslog"
    syslog.write_text("".join("Dec  4 10:00:00 ctl hybridgpu-audit: %s\n" % audit_anchor.syslog_text(log, r["seq"], r["hash"])
                              for r in rows))
    os.remove(log)
    os.remove(log + ".anchors")
    write_log(tmp_path, people, checkpoint_key, count=1)
    rc, res = play(tmp_path, people, [verify_task(syslog_heads=str(syslog))],
                   inventory_vars={"hgpu_audit_checkpoint_key": checkpoint_key})
    bad = res["verify"]["verification"]["first_bad"]
    assert res["verify"]["failed"] and bad["kind"] == "rewritten" and "syslog" in bad["problem"], bad
    assert res["verify"]["verification"]["syslog"] == {"source": str(syslog), "heads": 2}


def test_an_unsigned_entry_appended_at_the_head_fails_verification(people, tmp_path, checkpoint_key):
    log = write_log(tmp_path, people, checkpoint_key, count=2)
    audit.append(log, audit.make_event(CID, "sec-owner", "ops-lead", "node-9", "cordon", "changed"))
    rc, res = play(tmp_path, people, [verify_task()], inventory_vars={"hgpu_audit_checkpoint_key": checkpoint_key})
    bad = res["verify"]["verification"]["first_bad"]
    assert res["verify"]["failed"] and "no signed checkpoint at the head seq 3" in bad["problem"]


def test_a_symlinked_audit_log_is_refused(people, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    folder = tmp_path / "records" / "audit"
    folder.mkdir(parents=True)
    os.symlink(str(victim), str(folder / "audit.jsonl"))
    rc, res = play(tmp_path, people, [audit_task("append")])
    assert rc != 0 and "symbolic link" in res["append"]["msg"]
    assert victim.read_text() == "precious\n"


def test_checkpoints_further_apart_than_the_setting_fail_verification(people, tmp_path, checkpoint_key):
    log = write_log(tmp_path, people, checkpoint_key, count=5)
    records, dummy = audit_anchor.read(log + ".anchors")
    with open(log + ".anchors", "w") as fh:
        fh.write("".join(json.dumps(dict((k, v) for k, v in r.items() if k != "line")) + "\n" for r in records
                         if r["type"] == "head" or r["seq"] not in (2, 3)))
    keyed = {"hgpu_audit_checkpoint_key": checkpoint_key}
    rc, res = play(tmp_path, people, [verify_task(checkpoint_every=2)], inventory_vars=keyed)
    bad = res["verify"]["verification"]["first_bad"]
    assert res["verify"]["failed"] and "no signed checkpoint between seq 1 and seq 4" in bad["problem"]
    rc, res = play(tmp_path, people, [verify_task(checkpoint_every=3)], inventory_vars=keyed)
    assert rc == 0 and res["verify"]["verification"]["ok"]


def test_a_key_set_on_a_log_written_without_one_signs_from_then_on(people, tmp_path, checkpoint_key):
    log = str(tmp_path / "records" / "audit" / "audit.jsonl")
    for i in range(3):
        audit.append(log, audit.make_event(CID, "sec-owner", "ops-lead", "node-%d" % i, "cordon", "changed"))
    path = record(people, tmp_path)
    folder = str(ledger_folder(tmp_path))
    verified = approval.gate(dict(gate_params(people, path, folder), ledger_dir=None))
    entry = ledger.claim(folder, verified, checkpoint_key=checkpoint_key)
    assert entry["audit"]["seq"] == 4
    records, dummy = audit_anchor.read(log + ".anchors")
    assert [r["seq"] for r in records if r["type"] == "checkpoint"] == [4]
    rc, res = play(tmp_path, people, [verify_task(checkpoint_every=2)],
                   inventory_vars={"hgpu_audit_checkpoint_key": checkpoint_key})
    assert rc == 0 and res["verify"]["verification"]["ok"], res["verify"]
    assert res["verify"]["verification"]["ledger"]["references"] == 1


def test_links_planted_at_the_audit_page_and_anchors_are_not_followed(tmp_path):
    log = str(tmp_path / "records" / "audit" / "audit.jsonl")
    audit.append(log, audit.make_event(CID, "sec-owner", "ops-lead", "node-1", "cordon", "changed"))
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    os.remove(str(tmp_path / "records" / "audit" / "audit.html"))
    os.symlink(str(victim), str(tmp_path / "records" / "audit" / "audit.html"))
    audit.append(log, audit.make_event(CID, "sec-owner", "ops-lead", "node-2", "cordon", "changed"))
    assert victim.read_text() == "precious\n"
    assert not os.path.islink(str(tmp_path / "records" / "audit" / "audit.html"))
    os.rename(log + ".anchors", str(tmp_path / "anchors"))
    os.symlink(str(victim), log + ".anchors")
    with pytest.raises(audit.AuditError, match="symbolic link"):
        audit.append(log, audit.make_event(CID, "sec-owner", "ops-lead", "node-3", "cordon", "changed"))
    assert victim.read_text() == "precious\n" and len(open(log).read().splitlines()) == 2
    res = audit_verify.verify(log)
    assert not res["ok"] and res["first_bad"]["kind"] == "refused"


# --- the pinned checkpoint key reaches the ledger ------------------------------------------
def approve_keyed(people, tmp_path, path, key, **task):
    """change_approval for node-1 under the record at ``path``, with ``key`` pinned in the inventory."""
    args = {"record_path": path, "action": "remove", "playbook": "remove.yml", "targets": ["node-1"],
            "executor": "ops-lead"}
    args.update(task)
    rc, tasks = play(tmp_path, people, [{"name": "approve", "hybridgpu.fleet.change_approval": args}],
                     inventory_vars={"hgpu_audit_checkpoint_key": key})
    return rc, tasks["approve"]


def test_the_pinned_key_signs_the_head_of_a_claim(people, tmp_path, checkpoint_key):
    path = record(people, tmp_path)
    rc, res = approve_keyed(people, tmp_path, path, checkpoint_key)
    assert rc == 0, res
    claim_seq = res["approval"]["ledger"]["audit"]["seq"]
    assert [c["seq"] for c in claims(tmp_path)] == [claim_seq]
    log = str(tmp_path / "records" / "audit" / "audit.jsonl")
    records, dummy = audit_anchor.read(log + ".anchors")
    assert [r["seq"] for r in records if r["type"] == "checkpoint"] == [claim_seq]
    res = audit_verify.verify(log, checkpoint_key=checkpoint_key)
    assert res["ok"] and res["anchors"]["required"] and res["anchors"]["signers"], res


def test_a_task_cannot_pass_its_own_checkpoint_key_to_change_approval(people, tmp_path, checkpoint_key):
    other = str(tmp_path / "launcher-key")
    ls.keygen(other, "launcher")
    path = record(people, tmp_path)
    rc, res = approve_keyed(people, tmp_path, path, checkpoint_key, checkpoint_key=other)
    assert rc != 0 and "checkpoint_key may not be set by a task" in res["msg"]
    assert not os.path.exists(str(ledger_folder(tmp_path) / ("%s.json" % CID)))
    assert not os.path.exists(str(tmp_path / "records" / "audit" / "audit.jsonl"))


def test_a_linked_ledger_folder_is_refused_before_the_newest_boundary_is_noted(people, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "records").mkdir()
    os.symlink(str(elsewhere), str(ledger_folder(tmp_path)))
    path = record(people, tmp_path)
    rc, res = approve(people, tmp_path, ["node-1"], path)
    assert rc != 0 and "symbolic link" in res["msg"]
    assert os.listdir(str(elsewhere)) == []


def test_a_link_planted_at_the_newest_boundary_record_is_not_followed(people, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    folder = ledger_folder(tmp_path)
    folder.mkdir(parents=True)
    os.symlink(str(victim), str(folder / "boundary-seen.json"))
    path = record(people, tmp_path)
    rc, res = approve(people, tmp_path, ["node-1"], path)
    assert rc != 0 and "boundary-seen.json" in res["msg"] and "symbolic link" in res["msg"]
    assert victim.read_text() == "precious\n"
    assert not os.path.exists(str(folder / ("%s.json" % CID)))


def verify_cli(*args):
    return subprocess.run([sys.executable, os.path.join(REPO, "bin", "hgpu-audit-verify")] + list(args),
                          capture_output=True, text=True, check=False)


def test_the_verifier_command_requires_the_checkpoints_of_its_key(people, tmp_path, checkpoint_key):
    log = write_log(tmp_path, people, checkpoint_key)
    ok = verify_cli(log, "--checkpoint-key", checkpoint_key, "--syslog-heads", "none")
    assert ok.returncode == 0 and "5 checkpoints" in ok.stdout, ok.stdout + ok.stderr
    rows = rewrite_line(log, 3, target="someone-else")
    rewrite_anchors(log, rows, keep_checkpoints_below=3)
    bad = verify_cli(log, "--checkpoint-key", checkpoint_key, "--syslog-heads", "none")
    assert bad.returncode == 1 and "no signed checkpoint at the head seq 5" in bad.stdout, bad.stdout + bad.stderr
    # checkpoints further apart than --checkpoint-every are a rewrite too
    spread = verify_cli(log, "--checkpoint-key", checkpoint_key, "--checkpoint-every", "1", "--syslog-heads", "none")
    assert spread.returncode == 1


def test_the_verifier_command_checks_the_syslog_heads_it_is_given(people, tmp_path):
    log = str(tmp_path / "records" / "audit" / "audit.jsonl")
    entry = audit.append(log, audit.make_event(CID, "sec-owner", "ops-lead", "node-1", "cordon", "changed"))
    syslog = tmp_path / "syslog"
    syslog.write_text("Dec  4 10:00:00 ctl hybridgpu-audit: %s\n"
                      % audit_anchor.syslog_text(os.path.abspath(log), entry["seq"], "f" * 64))
    bad = verify_cli(log, "--syslog-heads", str(syslog))
    assert bad.returncode == 1 and "syslog" in bad.stdout, bad.stdout + bad.stderr
    assert verify_cli(log, "--syslog-heads", "none").returncode == 0
