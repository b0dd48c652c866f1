"""The upload step around a moved job: inputs in, the job's command unchanged, outputs out with a
sha256 manifest, and the OVF_OUTPUT line the protocol verifies against what comes back."""
import hashlib
import json
import os
import stat
import subprocess
import sys

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import carry, upload_step
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.rsync_stager import tree_digest

# Stand-ins for ssh and rsync on the cloud node: "host:path" is a local path.
FAKE_RSYNC = r'''#!%s
import os, shutil, sys
with open(os.environ["FAKE_LOG"], "a") as fh:
    fh.write(" ".join(sys.argv) + "\n")
src, dest = [a.split(":", 1)[1] if ":" in a and not a.startswith("/") else a for a in sys.argv[-2:]]
if src.endswith("/"):
    shutil.copytree(src, dest, dirs_exist_ok=True)
else:
    os.makedirs(dest, exist_ok=True)
    shutil.copy2(src, dest)
'''
FAKE_SSH = r'''#!/bin/sh
echo "ssh $*" >> "$FAKE_LOG"
for last; do :; done
sh -c "$last"
'''

# The user's program: reads its inputs, writes a result, changes nothing for the cloud.
USER_JOB = ("import hashlib,os,sys; os.makedirs('output', exist_ok=True); "
            "d=b''.join(open(os.path.join('inputs',f),'rb').read() for f in sorted(os.listdir('inputs'))); "
            "open('output/result.txt','w').write(hashlib.sha256(d).hexdigest()+'\\n'); "
            "open('output/args.txt','w').write(' '.join(sys.argv[1:])); sys.exit(int(os.environ.get('FAIL','0')))")


@pytest.fixture
def node(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("rsync", FAKE_RSYNC % sys.executable), ("ssh", FAKE_SSH)):
        p = bindir / name
        p.write_text(text)
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    storage = tmp_path / "storage"
    (storage / "jobs" / "j1" / "inputs").mkdir(parents=True)
    (storage / "jobs" / "j1" / "inputs" / "a.bin").write_bytes(b"alpha")
    (storage / "shared").mkdir()
    (storage / "shared" / "vocab.bin").write_bytes(b"shared")
    work = tmp_path / "work"
    env = dict(os.environ, PATH="%s:%s" % (bindir, os.environ["PATH"]), FAKE_LOG=str(tmp_path / "log"),
               OVF_JOB_ID="j1", OVF_ATTEMPT_ID="a1")
    cfg = {"storage": {"host": "st", "ssh_key": "/k", "root": str(storage), "host_keys": "st ssh-ed25519 AAAA"}, "workdir": str(work),
           "inputs": carry.inputs_of("j1", [{"name": "a.bin"}, {"name": "vocab.bin", "shared": True}], "inputs"),
           "outputs": ["output"]}
    return {"env": env, "cfg": cfg, "storage": storage, "work": work, "log": tmp_path / "log"}


def run_wrapped(node, cfg=None, extra_env=None):
    container = {"name": "job", "command": [sys.executable, "-c", USER_JOB], "args": ["--seed", "7"]}
    carry.wrap(container, cfg or node["cfg"])
    cmd = [sys.executable] + container["command"][1:]       # the node's python3
    return subprocess.run(cmd, env=dict(node["env"], **(extra_env or {})), capture_output=True, text=True,
                          timeout=60, check=False)


def test_outputs_are_uploaded_with_a_manifest_and_the_mark_matches_what_returns(node):
    res = run_wrapped(node)
    assert res.returncode == 0, res.stderr
    dest = node["storage"] / "jobs" / "j1" / "a1" / "output"
    expected = hashlib.sha256(b"alphashared").hexdigest() + "\n"
    assert (dest / "output" / "result.txt").read_text() == expected          # inputs were staged in
    assert (dest / "output" / "args.txt").read_text() == "--seed 7"            # the job's args unchanged
    manifest = (dest / "MANIFEST.sha256").read_text().splitlines()
    assert sorted(manifest) == sorted([
        "%s  output/result.txt" % hashlib.sha256(expected.encode()).hexdigest(),
        "%s  output/args.txt" % hashlib.sha256(b"--seed 7").hexdigest()])
    mark = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("OVF_OUTPUT ")]
    assert mark == [["OVF_OUTPUT", tree_digest(str(dest)), str(dest)]]          # what fetch_outputs verifies


def test_a_failing_job_uploads_nothing_and_keeps_its_exit_code(node):
    res = run_wrapped(node, extra_env={"FAIL": "5"})
    assert res.returncode == 5
    assert "OVF_OUTPUT" not in res.stdout
    assert not (node["storage"] / "jobs" / "j1" / "a1").exists()


def test_missing_declared_outputs_fail_the_step(node):
    res = run_wrapped(node, cfg=dict(node["cfg"], outputs=["output", "nowhere"]))
    assert res.returncode == 3 and "nowhere" in res.stderr and "OVF_OUTPUT" not in res.stdout


def test_the_script_of_a_slurm_job_is_written_and_run_in_its_workdir(node):
    cfg = dict(node["cfg"], script={"path": str(node["work"] / ".ovf-batch-9"),
                                    "text": "#!/bin/sh\nmkdir -p output && pwd > output/where\n"})
    res = subprocess.run([sys.executable, "-c", carry._source(), json.dumps(cfg), "--", "/bin/sh",
                          str(node["work"] / ".ovf-batch-9")], env=node["env"], capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert (node["storage"] / "jobs/j1/a1/output/output/where").read_text().strip() == str(node["work"])


def test_manifest_lists_every_file_but_itself(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_bytes(b"x")
    (tmp_path / upload_step.MANIFEST).write_text("old")
    assert upload_step.manifest_text(str(tmp_path)) == "%s  d/x\n" % hashlib.sha256(b"x").hexdigest()


def test_the_storage_host_key_is_always_checked():
    words = upload_step._ssh({"ssh_key": "/k", "known_hosts": "/etc/kh"})
    assert "StrictHostKeyChecking=yes" in words and "UserKnownHostsFile=/etc/kh" in words
    # host_keys carried in the Job: written to the run's own file, still checked strictly
    words = upload_step._ssh({"ssh_key": "/k", "run_known_hosts": "/tmp/run-kh", "host_keys": "h ssh-ed25519 AAAA"})
    assert "StrictHostKeyChecking=yes" in words and "UserKnownHostsFile=/tmp/run-kh" in words
    assert not any("accept-new" in w or "StrictHostKeyChecking=no" in w for w in words)


def test_the_labs_slurm_user_job_carried_gives_the_reference_output(node, tmp_path):
    """The lab's user batch script, carried and run in the upload step, uploads exactly the tree
    that the lab's local reference run of the same job builds (what the drill compares)."""
    __import__("k8s_world")                  # puts tests/lab/overflow on sys.path
    import userjobs
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import slurm_job
    inputs_dir = tmp_path / "ref-inputs"
    inputs_dir.mkdir()
    (inputs_dir / "a.bin").write_bytes(b"alpha")
    (inputs_dir / "vocab.bin").write_bytes(b"shared")
    tpl = dict(userjobs.job_template("st", str(node["storage"]), host_keys=""), upload=node["cfg"]["storage"])
    req = {"job_id": "j1", "gpus": 1, "cpus": 1, "time_limit_s": 600, "workdir": str(node["work"])}
    pod, dummy = carry.slurm_pod_spec("j1", req, slurm_job.parse_batch_script(userjobs.slurm_script(steps=20)), tpl,
                                      inputs=[{"name": "a.bin"}, {"name": "vocab.bin", "shared": True}])
    cmd = pod["containers"][0]["command"]
    res = subprocess.run([sys.executable] + cmd[1:], env=node["env"], capture_output=True, text=True, timeout=120,
                         check=False)
    assert res.returncode == 0, res.stderr
    mark = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("OVF_OUTPUT ")][0]
    digest, dummy = userjobs.reference(str(inputs_dir), steps=20)
    assert mark[1] == digest
    digest_other, dummy = userjobs.reference(str(inputs_dir), steps=21)
    assert digest_other != digest
