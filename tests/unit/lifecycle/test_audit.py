"""Audit log: hash chain, tamper detection naming the first bad line, concurrent appends."""
import json
import os
import subprocess
import sys
import threading

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import audit

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
    res = audit.verify(log)
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
    res = audit.verify(log)
    assert not res["ok"] and res["first_bad"]["line"] == 3 and res["first_bad"]["seq"] == 3
    assert "edited" in res["first_bad"]["problem"]


def test_rehashed_edit_breaks_the_next_link(log):
    rows = [json.loads(x) for x in lines(log)]
    rows[1]["executor"] = "mallory"
    rows[1]["hash"] = audit.entry_hash(rows[1])
    write(log, [json.dumps(r, sort_keys=True) for r in rows])
    res = audit.verify(log)
    assert res["first_bad"]["line"] == 3 and "prev does not match" in res["first_bad"]["problem"]


def test_removed_and_reordered_lines(log):
    rows = lines(log)
    write(log, rows[:1] + rows[2:])
    assert "removed or reordered" in audit.verify(log)["first_bad"]["problem"]
    write(log, [rows[1], rows[0]] + rows[2:])
    assert audit.verify(log)["first_bad"]["line"] == 1


def test_truncation_needs_the_head(log):
    head = audit.verify(log)["head"]
    write(log, lines(log)[:3])
    assert audit.verify(log)["ok"]
    res = audit.verify(log, head)
    assert not res["ok"] and "cut off the end" in res["first_bad"]["problem"]


def test_garbage_line_and_refusal_to_append_after_it(log):
    with open(log, "a") as fh:
        fh.write("not json\n")
    assert audit.verify(log)["first_bad"]["line"] == 5
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
    res = audit.verify(path)
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
