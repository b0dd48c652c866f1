"""Audit log: hash chain, tamper detection naming the first bad line, concurrent appends, anchors outside
the log (truncation, rewrite, deletion), torn tails and signed checkpoints (real ssh-keygen keys)."""
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import audit, audit_verify

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VERIFY = os.path.join(REPO, "bin", "hgpu-audit-verify")


def ev(action="cordon", target="owned-a100-2", result="changed", **details):
    return audit.make_event("CHG-1", "sec-owner", "ops-oncall", target, action, result, details)


@pytest.fixture
def log(tmp_path):
    path = str(tmp_path / "audit" / "audit.jsonl")
    for action in ("cordon", "drain", "driver_upgrade", "uncordon"):
        audit.append(path, ev(action))
    return path


def lines(path):
    with open(path) as fh:
        return fh.read().splitlines()


def write(path, rows):
    with open(path, "w") as fh:
        fh.write("\n".join(rows) + "\n")


def test_chain_is_intact_and_linked(log):
    res = audit_verify.verify(log)
    assert res["ok"] and res["entries"] == 4
    rows = [json.loads(x) for x in lines(log)]
    assert rows[0]["prev"] == audit.GENESIS and [r["seq"] for r in rows] == [1, 2, 3, 4]
    assert all(rows[i]["prev"] == rows[i - 1]["hash"] for i in range(1, 4))
    assert res["head"] == rows[-1]["hash"]
    assert set(audit.FIELDS) <= set(rows[0]) and rows[0]["time"].endswith("Z")


def test_edited_line_is_named(log):
    rows = lines(log)
    rows[2] = rows[2].replace('"result":"changed"', '"result":"ok"').replace(
        '"result": "changed"', '"result": "ok"')
    assert rows[2] != lines(log)[2]
    write(log, rows)
    res = audit_verify.verify(log)
    assert not res["ok"] and res["first_bad"]["line"] == 3 and res["first_bad"]["seq"] == 3
    assert "edited" in res["first_bad"]["problem"]


def test_rehashed_edit_breaks_the_next_link(log):
    rows = [json.loads(x) for x in lines(log)]
    rows[1]["executor"] = "mallory"
    rows[1]["hash"] = audit.entry_hash(rows[1])
    write(log, [json.dumps(r, sort_keys=True) for r in rows])
    res = audit_verify.verify(log)
    assert res["first_bad"]["line"] == 3 and "prev does not match" in res["first_bad"]["problem"]


def test_removed_and_reordered_lines(log):
    rows = lines(log)
    write(log, rows[:1] + rows[2:])
    assert "removed or reordered" in audit_verify.verify(log)["first_bad"]["problem"]
    write(log, [rows[1], rows[0]] + rows[2:])
    assert audit_verify.verify(log)["first_bad"]["line"] == 1


def test_truncation_without_anchors_needs_the_head(log):
    head = audit_verify.verify(log)["head"]
    write(log, lines(log)[:3])
    os.remove(log + ".anchors")
    assert audit_verify.verify(log)["ok"]
    res = audit_verify.verify(log, head)
    assert not res["ok"] and "cut off the end" in res["first_bad"]["problem"]


def test_garbage_line_and_refusal_to_append_after_it(log):
    with open(log, "a") as fh:
        fh.write("not json\n")
    assert audit_verify.verify(log)["first_bad"]["line"] == 5
    with pytest.raises(audit.AuditError, match="not an audit entry"):
        audit.append(log, ev())


def test_event_fields_are_checked():
    with pytest.raises(audit.AuditError, match="missing approver"):
        audit.make_event("CHG-1", "", "x", "n", "drain", "ok")
    with pytest.raises(audit.AuditError, match="is not one of"):
        audit.make_event("CHG-1", "a", "x", "n", "explode", "ok")


def test_concurrent_appends_keep_the_chain(tmp_path):
    path = str(tmp_path / "a.jsonl")

    def worker(n):
        for i in range(20):
            audit.append(path, ev(details_n=n, details_i=i))
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    res = audit_verify.verify(path)
    assert res["ok"] and res["entries"] == 80


def test_cli_names_first_bad_entry(log):
    ok = subprocess.run([sys.executable, VERIFY, log], capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and "chain intact, 4 entries" in ok.stdout
    rows = lines(log)
    rows[1] = rows[1].replace("ops-oncall", "ops-lead")
    write(log, rows)
    bad = subprocess.run([sys.executable, VERIFY, log], capture_output=True, text=True, check=False)
    assert bad.returncode == 1 and "first bad entry at line 2 (seq 2)" in bad.stdout


def test_journal_line_is_compact(log):
    entry = json.loads(lines(log)[0])
    text = audit.journal_line(entry)
    assert text.startswith("hybridgpu-audit {") and '"change_id":"CHG-1"' in text


# Anchors: the head lives outside the log (anchors file, syslog, signed checkpoints).

NAMESPACE = "hybridgpu.fleet-audit"


def anchors_of(path):
    return path + ".anchors"


def cli(*args):
    return subprocess.run([sys.executable, VERIFY] + list(args), capture_output=True, text=True, check=False)


def rechain(rows):
    """Recompute seq, prev and hash of every row: a rewrite by someone who knows the scheme."""
    prev = audit.GENESIS
    for seq, row in enumerate(rows, 1):
        row.update(seq=seq, prev=prev)
        row["hash"] = audit.entry_hash(row)
        prev = row["hash"]
    return [json.dumps(r, sort_keys=True) for r in rows]


def rewrite(path):
    rows = [json.loads(x) for x in lines(path)]
    rows[1]["executor"] = "mallory"
    write(path, rechain(rows))


def truncate(path):
    write(path, lines(path)[:3])


def delete(path):
    os.remove(path)


def empty(path):
    open(path, "w").close()


@pytest.mark.parametrize("tamper, kind, line, words", [
    (rewrite, "rewritten", 2, "line 2 has hash"),
    (truncate, "truncated", 4, "anchored the head at seq 4"),
    (delete, "deleted", 0, "is missing"),
    (empty, "deleted", 0, "is empty"),
])
def test_tampering_is_named_against_the_anchors(log, tamper, kind, line, words):
    tamper(log)
    res = audit_verify.verify(log)
    assert not res["ok"]
    assert res["first_bad"]["kind"] == kind and res["first_bad"]["line"] == line
    assert res["first_bad"]["problem"].startswith(kind + ":") and words in res["first_bad"]["problem"]
    assert anchors_of(log) in res["first_bad"]["problem"]
    out = cli(log)
    assert out.returncode == 1 and "%s:" % kind in out.stdout


def test_anchors_file_holds_every_head(log):
    recs = [json.loads(x) for x in lines(anchors_of(log))]
    rows = [json.loads(x) for x in lines(log)]
    assert [(r["type"], r["seq"], r["hash"]) for r in recs] == [("head", e["seq"], e["hash"]) for e in rows]
    res = audit.write(log, ev("uncordon", result="ok"))
    assert res["head"] == {"seq": 5, "hash": res["entry"]["hash"]} and res["warnings"] == []
    assert res["anchors"] == anchors_of(log) and audit_verify.current_head(log) == res["head"]
    ok = cli(log)
    assert ok.returncode == 0 and "5 anchored heads, 0 checkpoints" in ok.stdout


@pytest.mark.parametrize("tamper, words", [
    (delete, "refusing to start a fresh chain"),
    (empty, "refusing to start a fresh chain"),
    (truncate, "its head is seq 3 but the anchors file"),
])
def test_append_over_tampered_log_is_refused(log, tamper, words):
    tamper(log)
    with pytest.raises(audit.AuditError, match=words) as err:
        audit.append(log, ev())
    assert log in str(err.value) and anchors_of(log) in str(err.value)


def test_fresh_chain_with_a_given_anchors_file(tmp_path):
    path, anchors = str(tmp_path / "a.jsonl"), str(tmp_path / "elsewhere" / "heads")
    audit.append(path, ev(), anchors=anchors)
    assert not os.path.exists(anchors_of(path)) and len(lines(anchors)) == 1
    os.remove(path)
    assert audit_verify.verify(path, anchors=anchors)["first_bad"]["kind"] == "deleted"
    with pytest.raises(audit.AuditError, match="fresh chain"):
        audit.append(path, ev(), anchors=anchors)


TORN = b'{"action": "drain", "approver": "sec-owner", "cha'


def test_torn_tail_is_detected_refused_and_repaired_by_an_audited_command(log):
    with open(log, "ab") as fh:
        fh.write(TORN)
    res = audit_verify.verify(log)
    assert res["first_bad"]["kind"] == "torn" and res["first_bad"]["line"] == 5
    assert "line 5" in res["first_bad"]["problem"] and "--repair-torn-tail" in res["first_bad"]["problem"]
    with pytest.raises(audit.AuditError, match=r"line 5 is torn.*--repair-torn-tail"):
        audit.append(log, ev())
    out = cli("--repair-torn-tail", log, "--executor", "ops-lead", "--no-syslog")
    assert out.returncode == 0, out.stderr
    moved = [n for n in os.listdir(os.path.dirname(log)) if n.startswith("audit.jsonl.torn-")]
    assert len(moved) == 1
    with open(os.path.join(os.path.dirname(log), moved[0]), "rb") as fh:
        assert fh.read() == TORN
    last = json.loads(lines(log)[-1])
    assert last["seq"] == 5 and last["action"] == "audit_repair" and last["executor"] == "ops-lead"
    assert last["details"]["sha256"] == hashlib.sha256(TORN).hexdigest() and last["details"]["bytes"] == len(TORN)
    # the audited repair and the command's output say where the torn bytes went
    aside = os.path.join(os.path.dirname(os.path.abspath(log)), moved[0])
    assert last["details"]["moved_to"] == aside
    assert "to %s;" % aside in out.stdout
    assert audit_verify.verify(log)["ok"]
    audit.append(log, ev("uncordon"))
    assert audit_verify.verify(log)["entries"] == 6


@pytest.mark.parametrize("tail, words", [
    (b"", "ends with a newline"),
    (b"not json\n", "ends with a newline"),
    (b'{"valid": "json"}', "is valid JSON"),
])
def test_repair_leaves_a_tail_that_is_not_torn(log, tail, words):
    with open(log, "ab") as fh:
        fh.write(tail)
    with open(log, "rb") as fh:
        before = fh.read()
    with pytest.raises(audit.AuditError, match=words):
        audit.repair_torn_tail(log, "ops-lead")
    out = cli("--repair-torn-tail", log, "--no-syslog")
    assert out.returncode == 1 and "nothing was changed" in out.stderr
    with open(log, "rb") as fh:
        assert fh.read() == before
    assert not [n for n in os.listdir(os.path.dirname(log)) if ".torn-" in n]


def test_entry_without_final_newline_is_continued_on_a_new_line(log):
    with open(log, "rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        fh.truncate()
    audit.append(log, ev("uncordon"))
    assert audit_verify.verify(log)["ok"] and audit_verify.verify(log)["entries"] == 5


@pytest.fixture
def operators(tmp_path):
    """An operator key in the allowed signers, and an attacker's key that is not."""
    keys = {}
    for person in ("ops-lead", "mallory"):
        key = str(tmp_path / ("key-" + person))
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", person, "-f", key], check=True)
        keys[person] = key
    signers = str(tmp_path / "allowed_signers")
    with open(keys["ops-lead"] + ".pub") as fh:
        write(signers, ['ops-lead namespaces="%s" %s' % (NAMESPACE, fh.read().strip())])
    return {"keys": keys, "signers": signers}


@pytest.fixture
def signed(tmp_path, operators):
    path = str(tmp_path / "signed" / "audit.jsonl")
    for action in ("cordon", "drain", "driver_upgrade", "uncordon"):
        audit.append(path, ev(action), checkpoint_key=operators["keys"]["ops-lead"], checkpoint_every=2)
    return path


def resign(path, key):
    """Rewrite the anchors file to match the log, checkpoints signed with ``key``."""
    rows = [json.loads(x) for x in lines(path)]
    out = []
    for row in rows:
        out.append(json.dumps({"type": "head", "seq": row["seq"], "hash": row["hash"], "time": row["time"]}))
        if row["seq"] % 2 == 0:
            when = row["time"]
            msg = ("%s checkpoint\nseq %d\nhash %s\ntime %s\n" % (NAMESPACE, row["seq"], row["hash"], when)).encode()
            sig = subprocess.run(["ssh-keygen", "-Y", "sign", "-q", "-f", key, "-n", NAMESPACE], input=msg,
                                 capture_output=True, check=True).stdout.decode()
            out.append(json.dumps({"type": "checkpoint", "seq": row["seq"], "hash": row["hash"], "time": when,
                                   "signature": sig}))
    write(anchors_of(path), out)


def test_checkpoints_are_signed_and_verified(signed, operators):
    recs = [json.loads(x) for x in lines(anchors_of(signed))]
    assert [r["seq"] for r in recs if r["type"] == "checkpoint"] == [2, 4]
    res = audit_verify.verify(signed, allowed_signers=operators["signers"])
    assert res["ok"] and res["anchors"]["signers"] == ["ops-lead", "ops-lead"] and res["warnings"] == []
    assert "not checked" in audit_verify.verify(signed)["warnings"][0]
    out = cli(signed, "--allowed-signers", operators["signers"])
    assert out.returncode == 0 and "2 checkpoints (signed by ops-lead)" in out.stdout


def forge_with_attacker_key(path, operators):
    rewrite(path)
    resign(path, operators["keys"]["mallory"])


def swap_signatures(path, operators):
    recs = [json.loads(x) for x in lines(anchors_of(path))]
    cps = [r for r in recs if r["type"] == "checkpoint"]
    cps[0]["signature"], cps[1]["signature"] = cps[1]["signature"], cps[0]["signature"]
    write(anchors_of(path), [json.dumps(r) for r in recs])


def drop_signature(path, operators):
    recs = [json.loads(x) for x in lines(anchors_of(path))]
    for rec in recs:
        rec.pop("signature", None)
    write(anchors_of(path), [json.dumps(r) for r in recs])


@pytest.mark.parametrize("forge, words", [
    (forge_with_attacker_key, "not in"),
    (swap_signatures, "does not match seq 2"),
    (drop_signature, "no SSH signature"),
])
def test_forged_checkpoint_is_a_rewrite(signed, operators, forge, words):
    forge(signed, operators)
    res = audit_verify.verify(signed, allowed_signers=operators["signers"])
    assert not res["ok"] and res["first_bad"]["kind"] == "rewritten"
    assert "checkpoint at seq 2" in res["first_bad"]["problem"] and words in res["first_bad"]["problem"]
    out = cli(signed, "--allowed-signers", operators["signers"])
    assert out.returncode == 1 and "rewritten: the checkpoint at seq 2" in out.stdout


def test_checkpoint_key_that_fails_is_a_warning(tmp_path):
    res = audit.write(str(tmp_path / "a.jsonl"), ev(), checkpoint_key=str(tmp_path / "no-such-key"), checkpoint_every=1)
    assert res["checkpoint"] is None and "was not checkpointed" in res["warnings"][0]
    assert res["entry"]["seq"] == 1 and len(lines(str(tmp_path / "a.jsonl.anchors"))) == 1


def test_syslog_gets_every_head_and_a_failure_is_a_warning(tmp_path):
    path, sock_path = str(tmp_path / "a.jsonl"), str(tmp_path / "log.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(sock_path)
    try:
        res = audit.write(path, ev(), syslog_socket=sock_path)
        got = server.recv(4096).decode()
    finally:
        server.close()
    assert res["syslog"] is True and res["warnings"] == []
    assert got.startswith("<13>hybridgpu-audit: head ") and "seq=1 hash=%s" % res["head"]["hash"] in got
    res = audit.write(path, ev(), syslog_socket=str(tmp_path / "gone.sock"))
    assert res["syslog"] is False and "seq 2" in res["warnings"][0] and "not sent to syslog" in res["warnings"][0]
    assert audit_verify.verify(path)["ok"]


def run_module(args, check=False):
    # the repository's configuration, no inventory: make test's lab inventory pins another checkpoint key
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-c", "local",
           "-m", "hybridgpu.fleet.audit_log", "-a", json.dumps(args)] + (["--check"] if check else [])
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    return json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_module_returns_the_head_and_repairs(tmp_path, operators):
    path = str(tmp_path / "m.jsonl")
    base = {"path": path, "change_id": "CHG-1", "approver": "sec-owner", "executor": "ops-oncall",
            "target": "owned-a100-2", "action": "cordon", "result": "changed", "syslog": False,
            "checkpoint_key": operators["keys"]["ops-lead"], "checkpoint_every": 1}
    first = run_module(base)
    assert first["changed"] and first["head"] == {"seq": 1, "hash": first["entry"]["hash"]}
    assert first["anchored"] == {"anchors": path + ".anchors", "syslog": False, "checkpoint": True}
    again = run_module(dict(base, once=True))
    assert not again["changed"] and again["head"] == first["head"]
    with open(path, "ab") as fh:
        fh.write(TORN)
    refused = run_module(dict(base, action="drain"))
    assert refused["failed"] and "--repair-torn-tail" in refused["msg"]
    fixed = run_module({"path": path, "state": "repaired", "executor": "ops-lead", "syslog": False})
    assert fixed["changed"] and fixed["repair"]["sha256"] == hashlib.sha256(TORN).hexdigest()
    assert fixed["entry"]["action"] == "audit_repair" and fixed["head"]["seq"] == 2
    moved_to = fixed["repair"]["moved_to"]
    assert moved_to == fixed["entry"]["details"]["moved_to"] and moved_to.startswith(path + ".torn-")
    with open(moved_to, "rb") as fh:
        assert fh.read() == TORN
    ok = run_module({"path": path, "state": "verified", "allowed_signers": operators["signers"]})
    assert ok["verification"]["ok"] and ok["verification"]["anchors"]["signers"] == ["ops-lead"]
    os.remove(path)
    gone = run_module({"path": path, "state": "verified"})
    assert gone["failed"] and "deleted:" in gone["msg"]
    fresh = run_module(base)
    assert fresh["failed"] and "refusing to start a fresh chain" in fresh["msg"]


def test_anchor_record_cut_short_is_named_and_the_next_one_kept(log):
    with open(anchors_of(log), "ab") as fh:
        fh.write(b'{"type": "head", "se')
    audit.append(log, ev("uncordon"))
    res = audit_verify.verify(log)
    assert res["ok"] and res["anchors"]["heads"] == 5
    assert res["warnings"] == ["%s line 5 is not an anchor record" % anchors_of(log)]


def test_repair_that_the_append_would_refuse_changes_nothing(log):
    truncate(log)
    with open(log, "ab") as fh:
        fh.write(TORN)
    with open(log, "rb") as fh:
        before = fh.read()
    with pytest.raises(audit.AuditError, match="its head is seq 3 but the anchors file"):
        audit.repair_torn_tail(log, "ops-lead")
    with open(log, "rb") as fh:
        assert fh.read() == before
    assert not [n for n in os.listdir(os.path.dirname(log)) if ".torn-" in n]
    with pytest.raises(audit.AuditError, match="missing approver, executor"):
        audit.repair_torn_tail(log, "")
