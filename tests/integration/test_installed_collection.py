"""Run the collection the way a user installs it: build the tarball, install it into an
empty collections path, syntax-check every playbook of the installed copy and run smoke from it.
A whole wave from an installed copy runs in test_awx_runner.py: the AWX wave workflow in the
execution environment, whose collection ansible-builder installed from the same tarball.

Nothing here reads the checkout at run time except the lab inventory (the user's data):
ansible-playbook runs in an empty working directory with an ansible.cfg that has the
repository's SSH settings but no collections_path and no inventory, and
ANSIBLE_COLLECTIONS_PATH names only the install directory.
"""
import configparser
import glob
import os
import re
import subprocess
import sys

import pytest

from conftest import config

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
