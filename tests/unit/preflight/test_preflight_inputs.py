"""Preflight input documents: every refused input names the file and the field; the real
input folders load cleanly; the preflight_inputs module reports every problem at once."""
import copy
import glob
import importlib
import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.schema import SchemaError
from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import inputs as pi

from hgpu_testenv import REPO

# Every input folder the collection ships: each inventory's preflight/ and the Molecule scenario's.
INPUT_DIRS = sorted(glob.glob(os.path.join(REPO, "inventories", "*", "preflight"))) + [
    os.path.join(REPO, "roles", "preflight", "molecule", "default", "inputs")]
FILES = {"matrix": "matrix.yml", "cloud": "cloud.yml",
         "onprem_ranges": "onprem-ranges.yml", "cloud_ranges": "cloud-ranges.yml"}
CHECKS = {"matrix": pi.check_matrix, "cloud": pi.check_cloud,
          "onprem_ranges": pi.check_ranges, "cloud_ranges": pi.check_ranges}
HOSTS = {"control": "10.213.77.1", "owned-a100-1": "10.213.77.11"}


def _lab(kind):
    with open(os.path.join(REPO, "inventories", "lab", "preflight", FILES[kind])) as handle:
        return yaml.safe_load(handle)


def _set(path, value):
    """An edit that sets doc[path...] = value (creating mappings on the way)."""
    def edit(doc):
        for key in path[:-1]:
            doc = doc[key] if isinstance(doc, list) else doc.setdefault(key, {})
        doc[path[-1]] = value
    return edit


def _drop(key):
    def edit(doc):
        del doc[key]
    return edit


REFUSED = [
    # (kind, edit of the lab document, the error line)
    ("matrix", _set(["job_image_cuda"], 12.4),
     'matrix.yml: job_image_cuda: expected a quoted version like "12.4", got number 12.4'),
    ("matrix", _set(["job_image_cuda"], "twelve"), "matrix.yml: job_image_cuda: 'twelve' is not a version like 12.4"),
    ("matrix", _set(["job_image_cuda"], "12"), "matrix.yml: job_image_cuda: '12' is not a version like 12.4"),
    ("matrix", _set(["cuda_compat"], "loose"), "matrix.yml: cuda_compat: 'loose' is not one of strict, minor_compat"),
    ("matrix", _set(["max_generation_distance"], -1), "matrix.yml: max_generation_distance: -1 is below the minimum 0"),
    ("matrix", _set(["max_generation_distance"], "2"), "matrix.yml: max_generation_distance: expected an integer, got string"),
    ("matrix", _set(["holds"], ["owned-a100-1"]), "matrix.yml: holds: expected a mapping, got list"),
    ("matrix", _set(["holds", "owned-a100-1"], "air_gapped"), "matrix.yml: holds.owned-a100-1: expected a mapping, got string"),
    ("matrix", _set(["holds", "owned-a100-1", "air_gapped"], "yes"),
     "matrix.yml: holds.owned-a100-1.air_gapped: expected true or false, got string"),
    ("matrix", _set(["holds", "owned-a100-1", "quarantined"], True),
     "matrix.yml: holds.owned-a100-1.quarantined: unknown key (allowed: air_gapped, security_signoff, shared_non_ai_production)"),
    ("matrix", _set(["cuda_driver_table", "12"], "550.54.15"),
     "matrix.yml: cuda_driver_table.12: key '12' does not match major.minor like 12.4"),
    ("matrix", _set(["cuda_driver_table", "12.4"], 550.54),
     'matrix.yml: cuda_driver_table.12.4: expected a quoted version like "550.54.15", got number 550.54'),
    ("matrix", _set(["gpu"], {"model": "A100"}),
     "matrix.yml: gpu: unknown key (allowed: cuda_compat, cuda_driver_table, holds, job_image_cuda, max_generation_distance)"),
    ("cloud", _set(["worker_spec"], "H200"), "cloud.yml: worker_spec: expected a mapping, got string"),
    ("cloud", _set(["worker_spec", "gpu_count"], "eight"), "cloud.yml: worker_spec.gpu_count: expected an integer, got string"),
    ("cloud", _set(["worker_spec", "gpu_count"], -8), "cloud.yml: worker_spec.gpu_count: -8 is below the minimum 0"),
    ("cloud", _set(["worker_spec", "gpu_memory_mib"], True),
     "cloud.yml: worker_spec.gpu_memory_mib: expected an integer, got boolean"),
    ("cloud", _set(["worker_spec", "driver_version"], "570"),
     "cloud.yml: worker_spec.driver_version: '570' is not a version like 550.54.15"),
    ("cloud", _set(["worker_spec", "cuda_version"], 12.8),
     'cloud.yml: worker_spec.cuda_version: expected a quoted version like "12.4", got number 12.8'),
    ("cloud", _set(["worker_spec", "gpu"], "H200"),
     "cloud.yml: worker_spec.gpu: unknown key (allowed: container_runtime, cuda_version, driver_version, gpu_count, "
     "gpu_memory_mib, gpu_model, kernel, mig_mode)"),
    ("cloud", _set(["node_count"], -2), "cloud.yml: node_count: -2 is below the minimum 0"),
    ("cloud", _set(["node_count"], "2"), "cloud.yml: node_count: expected an integer, got string"),
    ("cloud", _set(["kubernetes_version"], 1.31),
     'cloud.yml: kubernetes_version: expected a quoted version like "1.31.2", got number 1.31'),
    ("cloud", _set(["kubernetes_version"], "latest"), "cloud.yml: kubernetes_version: 'latest' is not a version like 1.31.2"),
    ("cloud", _set(["os_image"], ""), "cloud.yml: os_image: must not be empty"),
    ("cloud", _set(["region"], "eu"),
     "cloud.yml: region: unknown key (allowed: data_centre, kubernetes_version, name, node_count, os_image, worker_spec)"),
    ("onprem_ranges", _set([0, "cidr"], "10.213.77.1/24"),
     "onprem-ranges.yml: [0].cidr: '10.213.77.1/24' has host bits set; did you mean 10.213.77.0/24?"),
    ("onprem_ranges", _set([1, "cidr"], "10.244.0.0"), "onprem-ranges.yml: [1].cidr: '10.244.0.0' is not a CIDR (address/prefix)"),
    ("onprem_ranges", _set([1, "cidr"], "10.244.0.300/16"),
     "onprem-ranges.yml: [1].cidr: '10.244.0.300/16' is not a valid CIDR: '10.244.0.300/16' does not appear to be an "
     "IPv4 or IPv6 network"),
    ("onprem_ranges", _set([2, "zone"], "a"), "onprem-ranges.yml: [2].zone: unknown key (allowed: cidr, kind, name)"),
    ("onprem_ranges", _drop(0), None),  # still valid: one range fewer
    ("cloud_ranges", _set([0], "10.0.0.0/8"), "cloud-ranges.yml: [0]: expected a mapping, got string"),
    ("cloud_ranges", lambda doc: doc[1].pop("cidr"), "cloud-ranges.yml: [1].cidr: is required"),
]


@pytest.mark.parametrize("kind,edit,error", REFUSED, ids=["%s-%d" % (c[0], i) for i, c in enumerate(REFUSED)])
def test_refused_input_names_file_and_field(kind, edit, error):
    doc = copy.deepcopy(_lab(kind))
    edit(doc)
    if error is None:
        CHECKS[kind](doc, FILES[kind])
        return
    with pytest.raises(SchemaError) as info:
        CHECKS[kind](doc, FILES[kind])
    assert error in info.value.errors, info.value.errors


@pytest.mark.parametrize("folder", INPUT_DIRS, ids=[os.path.relpath(d, REPO) for d in INPUT_DIRS])
def test_real_input_folders_load_cleanly(folder):
    files = {kind: os.path.join(folder, name) for kind, name in FILES.items()}
    result, problems = pi.load_inputs(files)
    assert problems == []
    with open(files["cloud"]) as handle:
        assert result["cloud"] == yaml.safe_load(handle)  # as written: absent keys keep the matrix defaults
    assert result["matrix"]["cuda_compat"] in pi.CUDA_COMPAT
    assert result["onprem_ranges"] and result["cloud_ranges"]


def test_lab_settings_pmtu_targets_resolve():
    with open(os.path.join(REPO, "inventories", "lab", "preflight", "settings.yml")) as handle:
        targets = yaml.safe_load(handle)["preflight_pmtu_targets"]
    with open(os.path.join(REPO, "inventories", "lab", "preflight", "paths.yml")) as handle:
        hosts = yaml.safe_load(handle)["hosts"]
    out = pi.resolve_pmtu_targets(targets, hosts, "preflight_pmtu_targets")
    assert [(t["id"], t["address"]) for t in out] == [("tunnel-cloud-to-l40s", "10.213.77.13"),
                                                      ("control-to-a100-1", "10.213.77.11")]


def test_matrix_defaults_and_empty_files():
    assert pi.check_matrix(None, "matrix.yml") == pi.MATRIX_DEFAULTS
    assert pi.check_matrix({"job_image_cuda": "12.4.1"}, "m.yml")["job_image_cuda"] == "12.4.1"
    assert pi.check_cloud(None, "cloud.yml") == {}
    assert pi.check_ranges({"nodes": "10.0.0.0/8"}, "r.yml") == {"nodes": "10.0.0.0/8"}
    assert pi.check_cloud({"kubernetes_version": "v1.31.2"}, "c.yml")
    with pytest.raises(SchemaError) as info:
        pi.check_ranges(None, "r.yml")
    assert info.value.errors == ["r.yml: <root>: expected a list, got null"]
    with pytest.raises(SchemaError) as info:
        pi.check_ranges({"nodes": "10.0.0.1/8"}, "r.yml")
    assert info.value.errors == ["r.yml: nodes: '10.0.0.1/8' has host bits set; did you mean 10.0.0.0/8?"]


PMTU_REFUSED = [
    ({"id": "a", "source": "control", "destination": "nohost"},
     "t: [0].destination: 'nohost' is not a host of the path table (known: control, owned-a100-1)"),
    ({"id": "a", "source": "control"}, "t: [0]: needs destination (a path-table host) or address"),
    ({"id": "a", "destination": "control"}, "t: [0].source: is required"),
    ({"id": "a", "source": "control", "address": "10.0.0.1", "expected_mtu": "1500"},
     "t: [0].expected_mtu: expected an integer, got string"),
    ({"id": "a", "source": "control", "address": "10.0.0.1", "max_mtu": 70000}, "t: [0].max_mtu: 70000 is above the maximum 65535"),
    ({"id": "a", "source": "control", "address": "10.0.0.1", "min_mtu": 1400, "max_mtu": 1300},
     "t: [0].min_mtu: 1400 is above max_mtu 1300"),
    ({"id": "a", "source": "control", "address": "10.0.0.1", "mtu": 1500},
     "t: [0].mtu: unknown key (allowed: address, destination, expected_mtu, id, max_mtu, min_mtu, source)"),
]


@pytest.mark.parametrize("target,error", PMTU_REFUSED)
def test_pmtu_target_refused(target, error):
    with pytest.raises(SchemaError) as info:
        pi.resolve_pmtu_targets([target], HOSTS, "t")
    assert error in info.value.errors, info.value.errors


def test_pmtu_targets_resolve_and_duplicates():
    out = pi.resolve_pmtu_targets([{"id": "a", "source": "control", "destination": "owned-a100-1"},
                                   {"id": "b", "source": "owned-a100-1", "address": "10.9.9.9", "destination": "x"}],
                                  HOSTS)
    assert [t["address"] for t in out] == ["10.213.77.11", "10.9.9.9"]
    with pytest.raises(SchemaError) as info:
        pi.resolve_pmtu_targets([{"id": "a", "source": "c", "address": "1.1.1.1"}] * 2, HOSTS, "t")
    assert info.value.errors == ["t: [1].id: duplicate id 'a'"]


def test_file_problems(tmp_path):
    (tmp_path / "matrix.yml").write_text("job_image_cuda: '12.4'\njob_image_cuda: '12.8'\n")
    (tmp_path / "cloud.yml").write_text("name: [cloud\n")
    files = {"matrix": str(tmp_path / "matrix.yml"), "cloud": str(tmp_path / "cloud.yml"),
             "onprem_ranges": str(tmp_path / "missing.yml")}
    result, problems = pi.load_inputs(files)
    assert result == {"pmtu_targets": []}
    errors = [e for _kind, errs in problems for e in errs]
    assert errors[0].startswith("matrix.yml: line 2, column 1: malformed YAML: duplicate key 'job_image_cuda'")
    assert errors[1].startswith("cloud.yml: line 2, column 1: malformed YAML")
    assert errors[2].startswith("missing.yml: cannot read: ")


def test_failure_message_says_what_each_file_is():
    problems = [("matrix", ["matrix.yml: job_image_cuda: bad"]), ("cloud", ["cloud.yml: worker_spec: bad"]),
                ("pmtu_targets", ["preflight_pmtu_targets: [0].id: bad"])]
    assert pi.failure_message(problems).splitlines() == [
        "matrix.yml: invalid matrix inputs: job_image_cuda: bad",
        "cloud.yml: invalid cloud row: worker_spec: bad",
        "preflight_pmtu_targets: invalid path-MTU targets: [0].id: bad"]


def _run_process(args):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".collections"))
    proc = subprocess.run([sys.executable, os.path.join(REPO, "plugins", "modules", "preflight_inputs.py")],
                          input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    return json.loads(proc.stdout)


def test_module_run_and_process(tmp_path):
    lab = os.path.join(REPO, "inventories", "lab", "preflight")
    mod = importlib.import_module("ansible_collections.hybridgpu.fleet.plugins.modules.preflight_inputs")
    result, failure = mod.run({"matrix": os.path.join(lab, "matrix.yml"), "cloud": os.path.join(lab, "cloud.yml")})
    assert failure is None and set(result) == {"matrix", "cloud", "pmtu_targets"}
    with open(os.path.join(lab, "matrix.yml")) as handle:
        doc = yaml.safe_load(handle)
    doc["job_image_cuda"] = 12.4
    (tmp_path / "matrix.yml").write_text(yaml.safe_dump(doc))
    out = _run_process({"matrix": str(tmp_path / "matrix.yml"), "cloud": os.path.join(lab, "cloud.yml"),
                        "pmtu_targets": [{"id": "x", "source": "control", "destination": "nohost"}],
                        "pmtu_targets_name": "preflight_pmtu_targets", "_ansible_check_mode": True})
    assert out["failed"] is True
    assert out["errors"] == [
        'matrix.yml: job_image_cuda: expected a quoted version like "12.4", got number 12.4',
        "preflight_pmtu_targets: [0].destination: 'nohost' is not a host of the path table (known: none)"]
    # The line the integration test looks for when matrix.yml is broken.
    assert "matrix.yml: invalid matrix inputs: job_image_cuda" in out["msg"]
    out = _run_process({"cloud": os.path.join(lab, "cloud.yml"), "_ansible_check_mode": True})
    assert out["changed"] is False and out["cloud"]["node_count"] == 2
