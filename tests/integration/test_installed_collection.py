"""Run the collection the way a user installs it: build the tarball, install it into an
empty collections path, and run the lab playbooks from the installed copy: smoke, then a
whole wave (preflight, NCCL baseline, onboarding, the six validation steps, wave record).

Nothing here reads the checkout at run time except the lab inventory (the user's data):
ansible-playbook runs in an empty working directory with an ansible.cfg that has the
repository's SSH settings but no collections_path and no inventory, and
ANSIBLE_COLLECTIONS_PATH names only the install directory.
"""
import configparser
import glob
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import config
from lifecycle_lab import lab_lock  # noqa: F401  pylint: disable=unused-import

pytestmark = pytest.mark.lab

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
PLAYBOOKS = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(ROOT, "playbooks", "*.yml"))
                   if not p.endswith(".meta.yml"))
# Playbooks that only read the estate: safe to run for real against the shared lab.
READ_ONLY_RUNS = ["smoke"]


def _run(cmd, cwd, env=None, timeout=600):
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory, lab):
    """(collections path, env, workdir) for the collection installed from its tarball."""
    base = tmp_path_factory.mktemp("installed-collection")
    build = base / "build"
    res = _run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(build), ROOT],
               cwd=str(base))
    assert res.returncode == 0, res.stdout + res.stderr
    tarball = glob.glob(str(build / "hybridgpu-fleet-*.tar.gz"))
    assert len(tarball) == 1, tarball
    dest = base / "collections"
    assert not dest.exists()
    work = base / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ANSIBLE_") and k not in ("PYTHONPATH", "KUBECONFIG")}
    # An isolated ANSIBLE_HOME: a copy left in ~/.ansible/collections must not count as installed.
    env.update(ANSIBLE_CONFIG=str(work / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(dest),
               ANSIBLE_INVENTORY=config.INVENTORY, ANSIBLE_LOCAL_TEMP=str(work / "tmp"),
               ANSIBLE_HOME=str(work / "home"), PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    res = _run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--offline", "--no-deps", "--force",
                "-p", str(dest), tarball[0]], cwd=str(work), env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (dest / "ansible_collections" / "hybridgpu" / "fleet" / "MANIFEST.json").exists(), res.stdout

    # The repository's connection settings, without the two lines that point into the checkout.
    repo_cfg = configparser.ConfigParser(interpolation=None)
    repo_cfg.read(os.path.join(ROOT, "ansible.cfg"))
    repo_cfg.remove_option("defaults", "collections_path")
    repo_cfg.remove_option("defaults", "inventory")
    with open(work / "ansible.cfg", "w") as fh:
        repo_cfg.write(fh)
    return dest, env, work


def test_install_path_holds_only_the_installed_copy(installed):
    dest, env, work = installed
    res = _run([os.path.join(BIN, "ansible-galaxy"), "collection", "list", "hybridgpu.fleet", "--format", "json"],
               cwd=str(work), env=env)
    assert res.returncode == 0, res.stderr
    # Every place ansible finds hybridgpu.fleet is inside the install directory.
    found = re.findall(r'"(/[^"]+/ansible_collections)"', res.stdout)
    assert found and all(p.startswith(str(dest)) for p in found), res.stdout
    installed_dir = dest / "ansible_collections" / "hybridgpu" / "fleet"
    assert not os.path.islink(installed_dir)
    assert sorted(os.listdir(installed_dir / "playbooks")) >= ["%s.yml" % p for p in PLAYBOOKS]


def test_installed_playbooks_do_not_reach_into_the_checkout(installed):
    """A playbook that names the repository's layout would break on a user's machine."""
    dest, dummy, dummy = installed
    offenders = []
    fixed = re.compile(r"inventories/lab|tests/lab|\.lab/|" + re.escape(ROOT))
    # playbook_dir ~ '/../<dir>' is fine only when <dir> ships inside the collection.
    upward = re.compile(r"playbook_dir\W{1,12}/\.\./([A-Za-z0-9_.-]+)")
    pb_dir = dest / "ansible_collections" / "hybridgpu" / "fleet"
    for sub in ("playbooks", "roles"):
        for path in glob.glob(str(pb_dir / sub / "**" / "*.yml"), recursive=True):
            with open(path) as fh:
                for n, line in enumerate(fh, 1):
                    if line.lstrip().startswith("#"):
                        continue
                    outside = [d for d in upward.findall(line) if not (pb_dir / d).exists()]
                    if fixed.search(line) or outside:
                        offenders.append("%s:%d: %s" % (os.path.relpath(path, pb_dir), n, line.strip()))
    assert not offenders, "playbooks/roles depend on the repository layout:\n" + "\n".join(offenders)


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_syntax_check_from_installed_copy(installed, playbook):
    dummy, env, work = installed
    res = _run([os.path.join(BIN, "ansible-playbook"), "--syntax-check", "hybridgpu.fleet.%s" % playbook],
               cwd=str(work), env=env)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("playbook", READ_ONLY_RUNS)
def test_run_from_installed_copy(installed, playbook):
    dest, env, work = installed
    res = _run([os.path.join(BIN, "ansible-playbook", ), "-vv", "hybridgpu.fleet.%s" % playbook],
               cwd=str(work), env=env, timeout=900)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    # The playbook file ansible ran is the installed one.
    installed_pb = str(dest / "ansible_collections" / "hybridgpu" / "fleet" / "playbooks" / ("%s.yml" % playbook))
    assert installed_pb in out, out[-3000:]
    assert ROOT + "/playbooks" not in out
    recap = out[out.rfind("PLAY RECAP"):]
    assert re.search(r"failed=[1-9]|unreachable=[1-9]", recap) is None, recap
    for node in config.NODES:
        assert node["name"] in recap, recap


# The wave as the main job runs it (tests/lab/demo.py): step 5 reads the lab's Prometheus and
# sees an Xid induced on one node, step 6 cuts one node's management link.
WAVE_VARS = {"wave": "wave1", "wave_link_nodes": ["owned-a100-2"], "validate_fault_node": "owned-a100-2",
             "validate_prometheus_url": "http://127.0.0.1:9090"}


def test_wave_from_installed_copy(installed, lab_lock):
    """The lab wave, every playbook and role coming from the installed tarball."""
    dest, env, work = installed
    records = work / "records"
    extra = work / "wave-vars.json"
    extra.write_text(json.dumps(WAVE_VARS))
    # The records folder is pinned in the inventory (a launcher may not choose it): a second
    # inventory source sets this run's own, as a site's group_vars would.
    overlay = work / "records-inventory.yml"
    overlay.write_text(json.dumps({"all": {"vars": {"hgpu_records_dir": str(records)}}}))
    env = dict(env, ANSIBLE_INVENTORY="%s,%s" % (env["ANSIBLE_INVENTORY"], overlay))
    res = _run([os.path.join(BIN, "ansible-playbook"), "-vv", "hybridgpu.fleet.wave", "-e", "@%s" % extra],
               cwd=str(work), env=env, timeout=1500)
    out = res.stdout + res.stderr
    recap = out[out.rfind("PLAY RECAP"):]
    assert res.returncode == 0, out[-8000:]
    assert re.search(r"failed=[1-9]|unreachable=[1-9]", recap) is None, recap
    installed_root = str(dest / "ansible_collections" / "hybridgpu" / "fleet")
    assert os.path.join(installed_root, "playbooks", "wave.yml") in out, out[:3000]
    assert ROOT + "/playbooks" not in out and ROOT + "/roles" not in out
    # Every task that ran came from the installed copy (-vv prints each task's file).
    task_files = set(re.findall(r"^task path: (\S+):\d+$", out, re.M))
    assert task_files and all(p.startswith(installed_root + "/") for p in task_files), \
        sorted(p for p in task_files if not p.startswith(installed_root + "/"))
    assert any("/roles/onboard/" in p for p in task_files) and any("/roles/validate/" in p for p in task_files)
    assert "reset_connection task does not support when" not in out
    wave_nodes = [n["name"] for n in config.NODES if n["role"] == "owned"]
    for node in wave_nodes:
        assert node in recap, recap

    # The records a person reads, written where the run said (not in the checkout, not in
    # the installed collection).
    with open(records / "wave1" / "preflight.json") as fh:
        preflight = json.load(fh)
    assert preflight["verdicts"], preflight.keys()
    with open(records / "validation" / "wave1" / "wave.json") as fh:
        wave = json.load(fh)
    assert wave["passed"], json.dumps(wave, indent=1)[:4000]
    assert sorted(n["node"] for n in wave["nodes"]) == sorted(wave_nodes)
    assert all(n["passed"] for n in wave["nodes"]), wave["nodes"]
    ran = set()
    for node in wave_nodes:
        with open(records / "validation" / "wave1" / ("validate-%s.json" % node)) as fh:
            rec = json.load(fh)
        assert rec["passed"] and all(st["passed"] for st in rec["steps"]), rec
        ran.update(st["step"] for st in rec["steps"])
        assert (records / "manifests" / ("%s.json" % node)).exists()
    # All six steps ran somewhere in the wave (step 6 only on the link node).
    assert ran == {"inventory", "reference_job", "collectives", "placement", "telemetry", "link_interruption"}, ran
    assert not os.path.exists(os.path.join(installed_root, "records"))

    # Real state: the Nodes carry the placement labels and taint in the onprem API.
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import Kube
    kube = Kube({"kubeconfig": os.path.join(config.LAB_DIR, "k8s", "kubeconfig"), "context": "onprem"})
    for node in wave_nodes:
        obj = kube.get_node(node)
        labels = obj["metadata"]["labels"]
        assert labels.get("node-restriction.kubernetes.io/data-class") == "restricted", labels
        taints = obj["spec"].get("taints") or []
        assert {"key": "hybridgpu.io/owned", "value": "true", "effect": "PreferNoSchedule"} in \
            [{k: t.get(k) for k in ("key", "value", "effect")} for t in taints], taints
