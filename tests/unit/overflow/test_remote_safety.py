"""What reaches a remote shell or a path: unsafe names are refused before any command runs, every value
is quoted on its own, host keys are checked, a Slurm job's class comes from site facts, and the
overflow_dispatch argument spec declares its sub-options and hides its secrets.

No SSH, rsync or Slurm runs: the backends' `subprocess` is replaced by a recorder."""
import hashlib
import json
import re
import shlex
import subprocess
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends as b
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import dispatch_run, jobclass
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import input_stream, rsync_stager, slurm_backend
from ansible_collections.hybridgpu.fleet.plugins.modules import overflow_dispatch

import slurm_fake

# The documented rule for job IDs, input and dataset names (plugins/module_utils/overflow/remote.py).
NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
ROOT = "/srv/cloud-storage"
A100 = "NVIDIA A100-SXM4-80GB"
INJECTION = "x'; touch /tmp/pwned; echo '"
BAD_IDS = ["..", "../../etc", "a..b", "a/b", "/abs", "-rf", ".hidden", "job\n", "a\nb", "", "a b", "x" * 129,
           "job;id", "$(id)"]
# A site's mapping: the class is the partition (what the lab's job classes file declares).
CLASSES = {
    "small-input": {"name": "small-input", "gpus": 1, "gpu_type": A100, "restricted": False,
                    "slurm": {"partition": "cloud-small"}},
    "restricted": {"name": "restricted", "gpus": 1, "gpu_type": A100, "restricted": True,
                   "slurm": {"partition": "restricted"}},
    "site-batch": {"name": "site-batch", "gpus": 8, "gpu_type": A100, "restricted": True,
                   "slurm": {"partition": "gpu"}},
}


def safe(value):
    return re.fullmatch(NAME, value) is not None and ".." not in value


class Recorder(object):
    """Stands in for the `subprocess` module of a backend: records every command, runs none.
    `reply(cmd)` gives the stdout of a run; rsync (Popen) always succeeds."""

    PIPE = subprocess.PIPE
    TimeoutExpired = subprocess.TimeoutExpired
    CompletedProcess = subprocess.CompletedProcess

    def __init__(self, reply=None):
        self.calls = []
        self.reply = reply or (lambda cmd: "")

    def run(self, cmd, **kwargs):
        self.calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, self.reply(cmd), "")

    def Popen(self, cmd, **kwargs):  # noqa: N802 (the subprocess name)
        self.calls.append(cmd)
        return types.SimpleNamespace(communicate=lambda timeout=None: ("", ""), returncode=0, kill=lambda: None)


def tokens(command):
    """Shell words of a command line, operators (; && > |) as their own words."""
    lex = shlex.shlex(command, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    return list(lex)


@pytest.fixture
def datafile(tmp_path):
    p = tmp_path / "data.bin"
    p.write_bytes(b"payload")
    return str(p)


def stager(tmp_path, **kw):
    return rsync_stager.RsyncStager("storage.example", "/keys/id", str(tmp_path / "onprem"), remote_root=ROOT, **kw)


# -- refused before any command runs ---------------------------------------------------------------

def test_injection_in_an_input_name_is_refused_before_any_command(monkeypatch, tmp_path, datafile):
    rec = Recorder()
    monkeypatch.setattr(rsync_stager, "subprocess", rec)
    monkeypatch.setattr(input_stream, "subprocess", rec)
    with pytest.raises(b.TransferInterrupted) as err:
        stager(tmp_path).stage_inputs("job-1", [{"name": INJECTION, "path": datafile}])
    assert rec.calls == []
    assert "input name" in str(err.value) and repr(INJECTION) in str(err.value)


def test_injection_in_a_dataset_name_is_refused_by_the_pass_before_the_queue_is_read(monkeypatch, tmp_path):
    rec = Recorder()
    monkeypatch.setattr(slurm_backend, "subprocess", rec)
    monkeypatch.setattr(rsync_stager, "subprocess", rec)
    monkeypatch.setattr(input_stream, "subprocess", rec)
    params = {"path": "policy", "tracker_db": str(tmp_path / "t.db"), "job_classes": "/nonexistent.yml",
              "local_queue": {"kind": "slurm", "host": "ctl", "ssh_key": "/k"}, "cloud": {}, "job_template": {},
              "storage": {"host": "st", "ssh_key": "/k", "onprem_root": str(tmp_path)},
              "inputs": {"small-input": [{"name": INJECTION, "path": "/x", "shared": True}]}}
    with pytest.raises(dispatch_run.RunError) as err:
        dispatch_run.run(params)
    assert rec.calls == []
    assert "dataset name" in str(err.value) and repr(INJECTION) in str(err.value)


@pytest.mark.parametrize("job_id", BAD_IDS)
def test_unsafe_job_id_is_refused_everywhere_before_any_command(monkeypatch, tmp_path, datafile, job_id):
    rec = Recorder()
    monkeypatch.setattr(rsync_stager, "subprocess", rec)
    monkeypatch.setattr(input_stream, "subprocess", rec)
    monkeypatch.setattr(slurm_backend, "subprocess", rec)
    st_ = stager(tmp_path)
    with pytest.raises(b.TransferInterrupted, match="job ID"):
        st_.stage_inputs(job_id, [{"name": "data.bin", "path": datafile}])
    with pytest.raises(b.ReturnFailed, match="job ID"):
        st_.fetch_outputs(job_id, types.SimpleNamespace(attempt_id="att-1"))
    with pytest.raises(b.ReturnFailed, match="attempt ID"):
        st_.fetch_outputs("job-1", types.SimpleNamespace(attempt_id=job_id))
    q = slurm_backend.SlurmLocalQueue("ctl", "/keys/id", classes=CLASSES)
    with pytest.raises(slurm_backend.SlurmError, match="job ID"):
        q.enqueue(job_id, "small-input", "sleep 1")
    with pytest.raises(dispatch_run.RunError, match="job ID"):
        dispatch_run.run({"path": "operator", "jobs": [job_id], "job_classes": "/nonexistent.yml",
                          "local_queue": {"kind": "slurm", "host": "ctl", "ssh_key": "/k"}})
    assert rec.calls == []
    assert not (tmp_path / "onprem").exists() or list((tmp_path / "onprem").iterdir()) == []


def test_the_documented_pattern_is_the_one_in_force():
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import remote
    assert remote.NAME_PATTERN == NAME
    assert remote.is_safe("job-1.a_b") and not any(remote.is_safe(x) for x in BAD_IDS)


# -- every value quoted on its own --------------------------------------------------------------------

values = st.one_of(st.text(max_size=40), st.from_regex(NAME, fullmatch=True), st.sampled_from(BAD_IDS + [INJECTION]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=values)
def test_slurm_submission_gets_the_job_id_back_as_one_argument(value):
    rec = Recorder(lambda cmd: "4242\n")
    old = slurm_backend.subprocess
    slurm_backend.subprocess = rec
    try:
        q = slurm_backend.SlurmLocalQueue("ctl", "/keys/id", classes=CLASSES)
        try:
            q.enqueue(value, "small-input", "sleep 1; echo '$HOME'")
        except slurm_backend.SlurmError:
            assert not safe(value) and rec.calls == []
            return
    finally:
        slurm_backend.subprocess = old
    assert safe(value)
    words = tokens(rec.calls[-1][-1])
    assert words[words.index("-J") + 1] == value
    assert words[words.index("--wrap") + 1] == "sleep 1; echo '$HOME'"


class FakeReceiver(object):
    """Stands in for the SSH process of the input receiver: its state line and its result come from
    `state` and `result(plan)`; what the stager writes lands in a real file (the bytes go by sendfile)."""

    def __init__(self, tmp_path, state, result):
        self.sink = open(str(tmp_path / "receiver-stdin"), "w+b")
        self.result = result
        self.lines = [json.dumps(state).encode() + b"\n"]
        self.returncode = 0

    @property
    def stdin(self):
        return self.sink

    @property
    def stdout(self):
        return self

    def readline(self):
        if not self.lines and self.sink.closed:
            with open(self.sink.name, "rb") as fh:
                data = fh.read()
            self.lines.append(json.dumps(self.result(json.loads(data[10:10 + int(data[:10])]))).encode() + b"\n")
        return self.lines.pop(0) if self.lines else b""

    def poll(self):
        return 0

    def kill(self):
        pass

    def wait(self, timeout=None):
        return 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=values)
def test_stager_commands_get_a_dataset_name_back_exactly(tmp_path, datafile, value):
    digest = hashlib.sha256(b"payload").hexdigest()
    dest = "%s/shared/%s" % (ROOT, value.strip("/"))
    plans = []

    def result(plan):
        plans.append(plan)
        return {"done": [{"dest": f["dest"], "sha256": digest, "ok": True} for f in plan["files"]]}

    rec = Recorder()
    rec.Popen = lambda cmd, **kw: (rec.calls.append(cmd), FakeReceiver(tmp_path, {"files": {}, "manifest": ""}, result))[1]
    old = rsync_stager.subprocess, input_stream.subprocess
    rsync_stager.subprocess = input_stream.subprocess = rec
    try:
        try:
            stager(tmp_path).stage_inputs("job-1", [{"name": value, "path": datafile, "shared": True}])
        except b.TransferInterrupted:
            assert not safe(value) and rec.calls == []
            return
    finally:
        rsync_stager.subprocess, input_stream.subprocess = old
    assert safe(value)
    assert len(rec.calls) == 1 and rec.calls[0][0] == "ssh"
    words = tokens(rec.calls[0][-1])                                # as the storage host's shell splits it
    assert words[:5] == ["python3", "-I", "-S", "-c", input_stream.RECEIVER] and len(words) == 6
    request = json.loads(words[5])
    assert dest in request["paths"]                                 # checksums read for the exact path
    assert request["manifest"] == ROOT + "/shared/MANIFEST.sha256"
    assert plans == [{"files": [{"dest": dest, "offset": 0, "size": 7, "shared": value}]}]   # the manifest's name


# -- host keys --------------------------------------------------------------------------------------

def test_ssh_checks_host_keys_against_the_given_known_hosts(monkeypatch, tmp_path):
    rec = Recorder()
    monkeypatch.setattr(slurm_backend, "subprocess", rec)
    monkeypatch.setattr(rsync_stager, "subprocess", rec)
    monkeypatch.setattr(input_stream, "subprocess", rec)
    st_ = dispatch_run.build_stager({"host": "st", "ssh_key": "/k", "onprem_root": str(tmp_path),
                                     "known_hosts": "/etc/ovf/known_hosts"})
    st_.ssh("true")
    q = dispatch_run.build_local({"kind": "slurm", "host": "ctl", "ssh_key": "/k", "known_hosts": "/etc/ovf/known_hosts"},
                                 CLASSES)
    q.run("true")
    for cmd in rec.calls:
        opts = [cmd[i + 1] for i, x in enumerate(cmd) if x == "-o"]
        assert "StrictHostKeyChecking=yes" in opts and "UserKnownHostsFile=/etc/ovf/known_hosts" in opts
        assert "StrictHostKeyChecking=no" not in opts and "UserKnownHostsFile=/dev/null" not in opts
    assert "StrictHostKeyChecking=yes" in " ".join(st_._ssh_base())


# -- the Slurm class comes from the site's mapping -----------------------------------------------------

def squeue(*rows):
    """squeue --json of pending jobs (job ID, name, partition, comment)."""
    return slurm_fake.reply([slurm_fake.job(int(sid), name=name, partition=partition, comment=comment)
                             for sid, name, partition, comment in rows])


def test_slurm_class_comes_from_the_partition_never_from_the_comment(monkeypatch):
    out = squeue(("11", "claims-restricted", "cloud-small", "ovf-class=restricted"),
                 ("12", "claims-movable", "restricted", "ovf-class=small-input"),
                 ("13", "unmapped", "scratch", "ovf-class=small-input"),
                 ("14", "no-comment", "cloud-small", None))
    rec = Recorder(out)
    monkeypatch.setattr(slurm_backend, "subprocess", rec)
    snap = slurm_backend.SlurmLocalQueue("ctl", "/keys/id", classes=CLASSES).snapshot(now=1_800_000_000.0)
    got = dict((j.job_id, j.job_class) for j in snap.jobs)
    # the job ID is Slurm's numeric ID; the name (the user's) decides nothing
    assert got == {"11": "small-input", "12": "restricted", "14": "small-input"}


def test_slurm_class_mapping_rules():
    assert jobclass.slurm_class(CLASSES, "cloud-small", "normal", "research") == "small-input"
    assert jobclass.slurm_class(CLASSES, "scratch") is None
    both = dict(CLASSES, regulated={"slurm": {"account": "regulated"}})
    assert jobclass.slurm_class(both, "cloud-small", None, "regulated") is None      # ambiguous: never moves
    base = {"input_size": "1MB", "output_size": "1MB", "image_size": "1MB", "typical_runtime": "1min",
            "data_may_leave_site": True, "gpu_type": A100, "queue_wait_threshold": "0s", "link_bps": "1Gbps"}
    with pytest.raises(jobclass.JobClassError, match="the same match as class a"):
        jobclass.validate({"classes": {"a": dict(base, slurm={"partition": "p"}), "b": dict(base, slurm={"partition": "p"})}})
    with pytest.raises(jobclass.JobClassError, match="unknown key comment"):
        jobclass.validate({"classes": {"a": dict(base, slurm={"comment": "ovf-class=a"})}})


def test_enqueue_submits_to_the_class_partition_without_a_class_comment(monkeypatch):
    rec = Recorder(lambda cmd: "4242\n")
    monkeypatch.setattr(slurm_backend, "subprocess", rec)
    assert slurm_backend.SlurmLocalQueue("ctl", "/k", classes=CLASSES).enqueue("job-1", "small-input", "sleep 1") == "4242"
    words = tokens(rec.calls[-1][-1])
    assert words[words.index("--partition") + 1] == "cloud-small"
    assert not any("ovf-class" in w for w in words)


# -- overflow_dispatch's argument spec ------------------------------------------------------------------

SECRET = re.compile(r"(api_key|token|password|passphrase|secret)", re.I)


class _Captured(Exception):
    pass


def dispatch_spec(monkeypatch):
    seen = {}

    def fake(argument_spec, **kwargs):
        seen.update(argument_spec)
        raise _Captured()
    monkeypatch.setattr(overflow_dispatch, "AnsibleModule", fake)
    with pytest.raises(_Captured):
        overflow_dispatch.main()
    return seen


def walk(spec, where=""):
    for name, opt in spec.items():
        yield where + name, opt
        yield from walk(opt.get("options") or {}, where + name + ".")


def test_dispatch_declares_its_sub_options_and_hides_secrets(monkeypatch):
    spec = dispatch_spec(monkeypatch)
    for name in ("local_queue", "cloud", "storage", "job_template", "faults"):
        assert spec[name].get("options"), "%s has no declared sub-options" % name
    opts = dict(walk(spec))
    assert opts["local_queue.api_key"].get("no_log") is True and opts["cloud.api_key"].get("no_log") is True
    assert "local_queue.known_hosts" in opts and "storage.known_hosts" in opts
    secrets = [n for n in opts if SECRET.search(n.rsplit(".", 1)[-1])]
    assert secrets and all(opts[n].get("no_log") is True for n in secrets)


def _dispatch_args(tmp_path, **over):
    args = {"path": "policy", "tracker_db": str(tmp_path / "t.db"),
            "job_classes": str(tmp_path / "classes.yml"), "local_queue": {"kind": "pbs"},
            "cloud": {}, "storage": {}, "job_template": {"outputs": ["output"]}}
    args.update(over)
    return args


def test_dispatch_refuses_unknown_keys_and_never_shows_the_api_key(tmp_path):
    from test_overflow_tracker_module import run
    res = run("overflow_dispatch", _dispatch_args(tmp_path, local_queue={"kind": "slurm", "host": "ctl.invalid",
                                                                         "ssh_key": "/k", "apikey": "x"}), check=True)
    assert res.get("failed") and "apikey" in res["msg"]
    res = run("overflow_dispatch", _dispatch_args(tmp_path, cloud={"api_key": "s3cret-token-value"}), check=True)
    assert res.get("failed") and "s3cret-token-value" not in json.dumps(res)
