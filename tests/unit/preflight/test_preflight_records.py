"""Records: stable verdicts, atomic folder write, HTML escaping, bad input writes nothing."""
import datetime
import json
import os

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import boundary
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import files
from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import matrix
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import path_map
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import records

from lab_facts import lab

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def _record(lab_file, run=None, facts=None, elapsed=1.0):
    status = boundary.load_boundary(lab_file("boundary-unsigned.yml")).status(now=NOW)
    wave_matrix = matrix.build(facts or lab(), job_image_cuda="12.4", boundary_status=status,
                               api_server_versions={"cloud": "1.31.0"})
    table = path_map.load_path_table(lab_file("paths.yml"))
    results = {p["id"]: {"observed": "open" if p["expected"] == "allow" else "closed",
                         "elapsed_ms": elapsed, "evidence": "connect() <ok>"} for p in table.probes()}
    probes = path_map.evaluate(table.probes(), results)
    return records.build_record("wave-1", wave_matrix, probes, path_map.direction_verdict(table, probes), status,
                                [], run=run or {"started": "2026-01-01T00:00:00Z"})


def _listing(path):
    return sorted(os.listdir(path))


def test_rerun_gives_same_verdicts(lab_file):
    first = _record(lab_file, run={"started": "t1"}, elapsed=1.0)
    second = _record(lab_file, run={"started": "t2"}, elapsed=7.5)
    assert first["verdicts"] == second["verdicts"]
    assert first["verdicts_digest"] == second["verdicts_digest"]
    assert first["details"] != second["details"]          # timings differ, verdicts do not


def test_write_then_idempotent_rewrite(lab_file, tmp_path):
    rec = _record(lab_file)
    res = records.write_records(str(tmp_path), rec)
    assert res["changed"] is True
    assert _listing(tmp_path) == ["wave-1"]
    assert _listing(tmp_path / "wave-1") == ["index.html", "preflight.json", "wave-inventory.yml"]
    data = json.loads((tmp_path / "wave-1" / "preflight.json").read_text())
    assert data["schema_version"] == 1
    assert data["verdicts"]["boundary"]["status"] == "unsigned"
    # Same content, new run block: nothing rewritten.
    again = _record(lab_file, run={"started": "later"})
    assert records.write_records(str(tmp_path), again)["changed"] is False
    assert json.loads((tmp_path / "wave-1" / "preflight.json").read_text())["run"] == data["run"]
    assert records.write_records(str(tmp_path), again, force=True)["changed"] is True


def test_rerun_with_new_measurements_only_is_not_a_change(lab_file, tmp_path):
    records.write_records(str(tmp_path), _record(lab_file, elapsed=1.0))
    before = (tmp_path / "wave-1" / "preflight.json").read_text()
    # Timings and evidence differ (a new measurement), verdicts and facts do not.
    again = _record(lab_file, run={"started": "later"}, elapsed=9.0)
    for probe in again["details"]["probes"]:
        if probe.get("evidence"):
            probe["evidence"] = "handshake completed from 10.0.0.1:40000"
    assert records.write_records(str(tmp_path), again)["changed"] is False
    assert (tmp_path / "wave-1" / "preflight.json").read_text() == before
    # An observed state that differs is a change even when the verdict does not.
    observed = _record(lab_file)
    row = next(p for p in observed["details"]["probes"] if p.get("observed") == "closed")
    row["observed"] = "error"
    assert records.write_records(str(tmp_path), observed)["changed"] is True


def test_check_mode_writes_nothing(lab_file, tmp_path):
    res = records.write_records(str(tmp_path), _record(lab_file), check_mode=True)
    assert res["changed"] is True
    assert _listing(tmp_path) == []


@pytest.mark.parametrize("where", ["html", "rename"])
def test_failure_mid_write_leaves_old_records(lab_file, tmp_path, monkeypatch, where):
    records.write_records(str(tmp_path), _record(lab_file))
    before = (tmp_path / "wave-1" / "preflight.json").read_text()
    facts = lab()
    facts[0]["driver_version"] = "550.163.01"
    changed = _record(lab_file, facts=facts)

    def boom(*args, **kwargs):
        raise OSError("disk full")

    if where == "html":
        real = files.write

        def half(path, text, mode=None):
            if path.endswith(records.HTML_NAME):
                with open(path, "w") as handle:
                    handle.write(text[:10])
                boom()
            real(path, text, mode)
        monkeypatch.setattr(files, "write", half)
    else:
        real_rename = os.rename

        def rename(src, dst):
            # The old folder is already moved aside when the new one fails to land.
            if ".tmp-" in src:
                boom()
            real_rename(src, dst)
        monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError, match="disk full"):
        records.write_records(str(tmp_path), changed)
    monkeypatch.undo()
    assert _listing(tmp_path) == ["wave-1"]                 # no temp or backup folder left
    assert (tmp_path / "wave-1" / "preflight.json").read_text() == before


def test_bad_input_writes_nothing(lab_file, tmp_path):
    with pytest.raises(records.RecordError, match="wave: '../x' must be a simple name"):
        records.build_record("../x", {"rows": [], "wave": {}})
    with pytest.raises(records.RecordError, match="matrix: expected the compat_matrix result"):
        records.build_record("wave-1", {"nope": 1})
    with pytest.raises(records.RecordError, match=r"probes\[0\]: expected an evaluated probe"):
        records.build_record("wave-1", matrix.build(lab()), probes=[{"id": "x"}])
    with pytest.raises(records.RecordError, match="not JSON-serialisable"):
        records.build_record("wave-1", matrix.build(lab()), run={"t": object()})
    assert _listing(tmp_path) == []


def test_html_is_self_contained_and_escaped(lab_file):
    facts = lab()
    facts[2]["gpu"]["model"] = "<script>alert(1)</script> L40S"
    page = records.render_html(_record(lab_file, facts=facts))
    assert "<script>" not in page
    assert "&lt;script&gt;" in page
    assert "http://" not in page and "<link" not in page and "src=" not in page
    assert '<th class="diff">GPU model</th>' in page
    assert "cuda-driver-minimum" in page
    assert "unsigned_boundary" in page
    assert "connect() &lt;ok&gt;" in page
