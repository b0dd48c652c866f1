"""Every input document the collection reads, fuzzed: it loads, or it fails with the loader's
documented error whose message names the file. Any other exception is a crash in the loader.

Documents come from three sources: arbitrary YAML/JSON-like structures, mutations of the real
lab files (a value replaced, a key dropped or added) and arbitrary text. Examples per document:
HGPU_FUZZ_EXAMPLES (default 100; ``make soak`` runs 2,000), e.g. ``HGPU_FUZZ_EXAMPLES=5000 .venv/bin/pytest tests/unit/test_input_fuzz.py``.
"""
import copy
import datetime
import json
import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval, boundary, manifest, path_map
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import schema
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import jobclass
from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import inputs, matrix

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFLIGHT = os.path.join(ROOT, "inventories", "lab", "preflight")
EXAMPLES = int(os.environ.get("HGPU_FUZZ_EXAMPLES", "100"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


def _read_yaml(*parts):
    with open(os.path.join(ROOT, *parts)) as fh:
        return yaml.safe_load(fh)


RECORD = {
    "change_id": "CHG-2026-0042", "action": "driver_upgrade", "playbook": "upgrade_rehearsal.yml",
    "targets": ["owned-a100-2"],
    "window": {"start": "2026-03-01T08:00:00Z", "end": "2026-03-01T12:00:00+02:00"},
    "requester": "ops-oncall", "reason": "driver branch 550", "notes": "rollback: pin 535",
}
MANIFEST = manifest.merge(None, "owned-a100-2", "agents",
                          artefacts=[{"kind": "file", "path": "/etc/hgpu/agent.conf"},
                                     {"kind": "package", "name": "hgpu-node-agent"}],
                          facts={"version": "1.2.0"},
                          pre_onboarding={"packages": ["curl"], "files": ["/etc/hosts"], "services": []})
NODES = [
    {"hostname": "owned-a100-1", "side": "owned", "node_group": "owned",
     "gpu": {"model": "NVIDIA A100-SXM4-80GB", "count": 8, "memory_mib": 81920, "mig_mode": "Disabled"},
     "driver_version": "535.230.02", "cuda_version": "12.2", "kernel": "6.1.0-28-amd64",
     "os": {"pretty": "Debian GNU/Linux 12 (bookworm)", "id": "debian", "version_id": "12"},
     "image_id": "localhost/hgpu-node:lab", "container_runtime": None, "agent_version": None},
    {"hostname": "cloud-h200-1", "side": "cloud",
     "gpu": {"model": "NVIDIA H200", "count": 8, "memory_mib": 143771, "mig_mode": "Disabled"},
     "driver_version": "570.172.08", "cuda_version": "12.8", "agent_version": "v1.31.2"},
]

# -- strategies ---------------------------------------------------------------------------------
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2 ** 40, max_value=2 ** 40),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["", "12.4", "v1.31.2", "10.0.0.0/8", "10.0.0.1/8", "5Gbps", "30min", "2h", "20GB", "A100",
                     "2026-03-01T08:00:00Z", "2026-03-01T08:00:00", "2026-03-01", "driver_upgrade", "owned",
                     "cloud", "ssh-ed25519 AAAA", "-1", "1e400", "None", "true", "{}", "[]"]),
    st.dates(), st.datetimes(),
)
KEYS = st.one_of(st.text(max_size=12), st.sampled_from(
    ["name", "id", "kind", "cidr", "gpu", "model", "count", "classes", "defaults", "cost", "window", "start", "end",
     "hosts", "paths", "people", "node", "sections", "artefacts", "worker_spec", "holds", "prices"]),
    st.integers(min_value=-3, max_value=3), st.booleans(), st.none())
VALUES = st.recursive(SCALARS,
                      lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=5)),
                      max_leaves=20)


def _paths(doc, prefix=()):
    """Every path into doc (dict keys and list indexes), the root included."""
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, prefix + (key,))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += _paths(value, prefix + (i,))
    return out


@st.composite
def mutated(draw, base):
    """The real document with one to three mutations: a value replaced, a key or item dropped,
    or a key added."""
    doc = copy.deepcopy(base)
    for _step in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(_paths(doc)))
        if not path:
            doc = draw(VALUES) if draw(st.integers(0, 9)) == 0 else doc
            continue
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        how = draw(st.sampled_from(["replace", "replace", "drop", "add"]))
        if how == "replace":
            parent[path[-1]] = draw(VALUES)
        elif how == "drop":
            del parent[path[-1]]
        elif isinstance(parent[path[-1]], dict):
            parent[path[-1]][draw(KEYS)] = draw(VALUES)
        elif isinstance(parent[path[-1]], list):
            parent[path[-1]].append(draw(VALUES))
    return doc


def documents(base):
    return st.one_of(mutated(base), mutated(base), VALUES)


def _yaml_text(doc):
    try:
        return yaml.safe_dump(doc, sort_keys=False)
    except yaml.YAMLError:  # keys such as None or floats dump fine; anything else falls back to JSON-ish
        return repr(doc)


TEXT = st.one_of(st.text(max_size=200),
                 st.sampled_from(["", "---", "- a\n- b\n", "a: [", "a: 1\na: 2\n", ": :",
                                  "!!python/object:os.system x", "\x00", "[]", "12"]))


def _write(directory, name, text):
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as fh:
        fh.write(text)
    return path


def expect(call, errors, name):
    """Run call(); it returns, or raises one of `errors` with `name` in the message."""
    try:
        return call()
    except errors as exc:
        assert name in str(exc), "%s does not name the file %s" % (exc, name)
        return None


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("fuzz"))


# -- YAML documents read through a file -----------------------------------------------------------
YAML_DOCS = {
    "boundary": (_read_yaml("inventories", "lab", "preflight", "boundary.yml"), boundary.load_boundary,
                 schema.SchemaError),
    "boundary-unsigned": (_read_yaml("inventories", "lab", "preflight", "boundary-unsigned.yml"),
                          boundary.load_boundary, schema.SchemaError),
    "paths": (_read_yaml("inventories", "lab", "preflight", "paths.yml"), path_map.load_path_table,
              schema.SchemaError),
    "job_classes": (_read_yaml("tests", "lab", "overflow", "job_classes.yml"), jobclass.load,
                    jobclass.JobClassError),
    "job_classes_cost": (_read_yaml("tests", "lab", "overflow", "job_classes.yml"), jobclass.load_cost,
                         jobclass.JobClassError),
}
INPUT_DOCS = {
    "matrix": _read_yaml("inventories", "lab", "preflight", "matrix.yml"),
    "cloud": _read_yaml("inventories", "lab", "preflight", "cloud.yml"),
    "onprem_ranges": _read_yaml("inventories", "lab", "preflight", "onprem-ranges.yml"),
    "cloud_ranges": _read_yaml("inventories", "lab", "preflight", "cloud-ranges.yml"),
}


def _yaml_case(kind):
    base, load, error = YAML_DOCS[kind]

    @FUZZ
    @given(doc=documents(base))
    def case(workdir, doc):
        path = _write(workdir, kind + ".yml", _yaml_text(doc))
        expect(lambda: load(path), error, kind + ".yml")

    @FUZZ
    @given(text=TEXT)
    def text_case(workdir, text):
        path = _write(workdir, kind + ".yml", text)
        expect(lambda: load(path), error, kind + ".yml")
    return case, text_case


test_boundary, test_boundary_text = _yaml_case("boundary")
test_boundary_unsigned, test_boundary_unsigned_text = _yaml_case("boundary-unsigned")
test_path_table, test_path_table_text = _yaml_case("paths")
test_job_classes, test_job_classes_text = _yaml_case("job_classes")
test_job_classes_cost, test_job_classes_cost_text = _yaml_case("job_classes_cost")


def _inputs_case(kind):
    def check(workdir, text):
        name = kind + ".yml"
        path = _write(workdir, name, text)
        result, problems = inputs.load_inputs({kind: path})
        assert (kind in result) != bool(problems)
        for problem_kind, errors in problems:
            assert problem_kind == kind and errors
            assert all(error.startswith(name + ": ") for error in errors), errors
        inputs.failure_message(problems)

    @FUZZ
    @given(doc=documents(INPUT_DOCS[kind]))
    def case(workdir, doc):
        check(workdir, _yaml_text(doc))

    @FUZZ
    @given(text=TEXT)
    def text_case(workdir, text):
        check(workdir, text)
    return case, text_case


test_matrix_inputs, test_matrix_inputs_text = _inputs_case("matrix")
test_cloud_row, test_cloud_row_text = _inputs_case("cloud")
test_onprem_ranges, test_onprem_ranges_text = _inputs_case("onprem_ranges")
test_cloud_ranges, test_cloud_ranges_text = _inputs_case("cloud_ranges")


@FUZZ
@given(targets=documents([{"id": "wan", "source": "owned-a100-1", "destination": "cloud-h200-1", "max_mtu": 1500}]),
       hosts=st.one_of(st.none(), st.dictionaries(st.text(max_size=12), st.text(max_size=12), max_size=3),
                       st.just({"cloud-h200-1": "10.1.0.10"})))
def test_pmtu_targets(targets, hosts):
    expect(lambda: inputs.resolve_pmtu_targets(targets, hosts, "pmtu_targets"), schema.SchemaError, "pmtu_targets")


# -- the matrix's node facts (gpu_facts output) -------------------------------------------------------
@FUZZ
@given(nodes=documents(NODES), cloud=st.one_of(st.none(), documents(INPUT_DOCS["cloud"])))
def test_matrix_nodes(nodes, cloud):
    # The cloud row reaches build() only after check_cloud; anything check_cloud refuses is not fed on.
    try:
        cloud = inputs.check_cloud(cloud, "cloud.yml")
    except schema.SchemaError:
        cloud = None
    try:
        matrix.build(nodes, cloud=cloud)
    except matrix.MatrixError as exc:
        assert str(exc).startswith(("nodes", "holds", "cuda_compat")), exc


def test_gpu_as_a_string_is_refused():
    node = dict(NODES[0], gpu="A100")
    with pytest.raises(matrix.MatrixError, match=r"nodes\[0\] \(owned-a100-1\): gpu must be a mapping of model, count"):
        matrix.build([node])
    with pytest.raises(matrix.MatrixError, match=r"nodes\[0\] \(owned-a100-1\): os must be a mapping of pretty"):
        matrix.build([dict(NODES[0], os="debian 12")])


# -- change record (text) -----------------------------------------------------------------------
@FUZZ
@given(doc=documents(RECORD))
def test_change_record(doc):
    record = expect(lambda: approval.parse_record(_yaml_text(doc), "CHG.yml"), approval.ApprovalError, "CHG.yml")
    if record is not None:
        assert record["window"]["start"].tzinfo is not None and record["window"]["end"].tzinfo is not None


@FUZZ
@given(text=TEXT)
def test_change_record_text(text):
    expect(lambda: approval.parse_record(text, "CHG.yml"), approval.ApprovalError, "CHG.yml")


@pytest.mark.parametrize("start", ["2026-03-01T08:00:00", "2026-03-01", datetime.datetime(2026, 3, 1, 8)])
def test_change_window_without_a_time_zone_is_refused(start):
    doc = dict(RECORD, window={"start": start, "end": "2026-03-01T12:00:00Z"})
    with pytest.raises(approval.ApprovalError, match="CHG.yml: window.start: .*"):
        approval.parse_record(yaml.safe_dump(doc), "CHG.yml")


def test_change_window_with_an_offset_is_read_in_utc():
    record = approval.parse_record(yaml.safe_dump(RECORD), "CHG.yml")
    assert record["window"]["end"] == datetime.datetime(2026, 3, 1, 10, tzinfo=datetime.timezone.utc)


# -- manifest (JSON) -------------------------------------------------------------------------------
@FUZZ
@given(doc=st.one_of(mutated(MANIFEST), VALUES, st.text(max_size=100).map(lambda t: {"raw": t})),
       as_text=st.booleans())
def test_manifest(workdir, doc, as_text):
    text = json.dumps(doc, default=str) if not as_text else _yaml_text(doc)
    path = _write(workdir, "manifest.json", text)
    loaded = expect(lambda: manifest.load(path), manifest.ManifestError, "manifest.json")
    if loaded is not None:
        assert isinstance(loaded, dict)
        expect(lambda: manifest.baseline(loaded, path), manifest.ManifestError, "manifest.json")


@pytest.mark.parametrize("text", ["[]", "[{\"node\": \"a\"}]", "\"node\"", "12", "null"])
def test_manifest_that_is_not_an_object_is_refused(workdir, text):
    path = _write(workdir, "manifest.json", text)
    with pytest.raises(manifest.ManifestError, match="manifest.json holds a JSON"):
        manifest.load(path)
