"""Preflight modules: main logic, complete docs, and one real run per module as a process."""
import datetime
import importlib
import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.schema import SchemaError

from hgpu_testenv import REPO
from lab_facts import lab

MODULES = ["compat_matrix", "cidr_overlap", "access_boundary", "path_table", "preflight_record", "preflight_inputs"]


def _mod(name):
    return importlib.import_module("ansible_collections.hybridgpu.fleet.plugins.modules." + name)


@pytest.mark.parametrize("name", MODULES)
def test_docs_complete(name):
    mod = _mod(name)
    doc = yaml.safe_load(mod.DOCUMENTATION)
    assert doc["module"] == name
    # check_mode/diff_mode come through the attributes fragments; test_collection.py checks
    # them as ansible-doc renders them.
    assert "hybridgpu.fleet.attributes" in doc["extends_documentation_fragment"]
    for opt, spec in doc["options"].items():
        assert spec.get("type"), "%s.%s has no type" % (name, opt)
        if spec["type"] == "list":
            assert spec.get("elements"), "%s.%s has no elements" % (name, opt)
    assert yaml.safe_load(mod.EXAMPLES)
    assert yaml.safe_load(mod.RETURN)


def _run_process(name, args):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".collections"))
    proc = subprocess.run([sys.executable, os.path.join(REPO, "plugins", "modules", name + ".py")],
                          input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    return json.loads(proc.stdout)


def test_compat_matrix_logic_and_failure():
    mod = _mod("compat_matrix")
    params = {"nodes": lab(), "job_image_cuda": "12.4", "fail_on_violation": True}
    result, failure = mod.run(params)
    assert failure.startswith("version rules violated: cuda-driver-minimum on a100-535")
    params["job_image_cuda"] = "12.2"
    assert mod.run(params)[1] is None


def test_compat_matrix_process_reports_bad_input():
    out = _run_process("compat_matrix", {"nodes": [{"gpu": {}}]})
    assert out["failed"] is True
    assert out["msg"] == "compat_matrix: bad input: nodes[0]: no hostname"


def test_cidr_overlap_module():
    out = _run_process("cidr_overlap", {"onprem": [{"name": "nodes", "cidr": "10.213.77.0/24"}],
                                        "cloud": [{"name": "vpc", "cidr": "10.0.0.0/8"}]})
    assert out["changed"] is False and out["count"] == 1
    out = _run_process("cidr_overlap", {"onprem": [{"name": "nodes", "cidr": "10.213.77.0/24"}],
                                        "cloud": [{"name": "vpc", "cidr": "10.0.0.0/8"}],
                                        "fail_on_overlap": True})
    assert out["failed"] and "nodes 10.213.77.0/24 overlaps vpc 10.0.0.0/8" in out["msg"]
    out = _run_process("cidr_overlap", {"onprem": [{"name": "bad", "cidr": "10.0.0.1/8"}], "cloud": []})
    assert out["failed"] and "onprem[0] (bad)" in out["msg"]


def test_access_boundary_module(lab_file):
    mod = _mod("access_boundary")
    result, failure = mod.run({"path": lab_file("boundary.yml"), "now": "2026-01-01T00:00:00Z"})
    assert failure is None and result["status"]["status"] == "signed"
    assert result["actions"]["driver_upgrade"]["four_eyes"] is True
    dummy, failure = mod.run({"path": lab_file("boundary-unsigned.yml"), "require_signed": True})
    assert failure == "boundary-unsigned.yml: boundary is unsigned: not signed"
    out = _run_process("access_boundary", {"path": lab_file("paths.yml")})
    assert out["failed"] and "boundary.yml" not in out["msg"] and "paths.yml: people: is required" in out["errors"]


def test_path_table_module(lab_file):
    mod = _mod("path_table")
    result = mod.run({"path": lab_file("paths.yml")})
    assert result["connection_direction"]["verdict"] == "unverified"
    assert {p["verdict"] for p in result["probes"]} == {"not_run"}
    with pytest.raises(SchemaError):
        mod.run({"path": lab_file("boundary.yml")})


def test_preflight_record_module(lab_file, tmp_path):
    mod = _mod("preflight_record")
    matrix = _mod("compat_matrix").run({"nodes": lab(), "job_image_cuda": "12.4"})[0]
    params = {"dest": str(tmp_path), "wave": "wave-1", "matrix": matrix}
    assert mod.run(params, check_mode=True)["changed"] is True
    assert os.listdir(tmp_path) == []
    first = mod.run(dict(params, run={"started": datetime.datetime(2026, 1, 1).isoformat()}))
    assert first["changed"] is True
    second = mod.run(dict(params, run={"started": "later"}))
    assert second["changed"] is False
    assert second["verdicts_digest"] == first["verdicts_digest"]
    out = _run_process("preflight_record", {"dest": str(tmp_path / "x"), "wave": "a/b", "matrix": matrix})
    assert out["failed"] and "nothing written" in out["msg"]
    assert not os.path.exists(tmp_path / "x")


def test_lab_example_files(lab_file):
    with open(lab_file("cloud.yml")) as handle:
        cloud = yaml.safe_load(handle)
    owned = [n for n in lab() if n["side"] == "owned"]
    result = _mod("compat_matrix").run({"nodes": owned, "cloud": cloud, "job_image_cuda": "12.4"})[0]
    assert result["rows"][-1]["id"] == "cloud" and result["rows"][-1]["values"]["driver_branch"] == "570"
    with open(lab_file("onprem-ranges.yml")) as a, open(lab_file("cloud-ranges.yml")) as b:
        out = _mod("cidr_overlap").run({"onprem": yaml.safe_load(a), "cloud": yaml.safe_load(b)})[0]
    assert [(p["a"]["name"], p["b"]["name"]) for p in out["overlaps"]] == [
        ("lab-nodes", "default-vpc"), ("pods", "default-vpc"), ("services", "default-vpc")]
