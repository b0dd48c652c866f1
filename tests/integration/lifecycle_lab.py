"""Helpers shared by the lifecycle lab tests (upgrade, removal, boundary revocation):
run a playbook, read its recap, sign change records with per-run approver keys, look at a
node's real state."""
import fcntl
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, ssh, wait_for_lock
from lablib import config

sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "lifecycle"))
import lifecycle_support as ls  # noqa: E402

KUBECONFIG = os.path.join(ROOT, ".lab", "k8s", "kubeconfig")

# Destructive lab tests (removal, upgrade, revocation) hold this lock for their whole module,
# so two of them never change the shared owned nodes at the same time. In CI the tests run
# one after another anyway; the lock protects a shared developer lab.
LOCK_PATH = os.environ.get("HGPU_LAB_TEST_LOCK", "/run/lock/hybridgpu-lab-tests.lock")


@pytest.fixture(scope="module")
def lab_lock(lab):
    """Exclusive lock for a destructive lab test module (waits up to 30 minutes)."""
    fh = open(LOCK_PATH, "a+")
    wait_for_lock(fh, 1800, "another destructive lab test holds %s for over 30 minutes" % LOCK_PATH, poll=2)
    fh.seek(0)
    fh.truncate()
    fh.write("%d %s\n" % (os.getpid(), " ".join(sys.argv[-2:])))
    fh.flush()
    try:
        yield LOCK_PATH
    finally:
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


def site_inventory(tmp_path, site_vars):
    """An inventory beside the lab's that gives every lab node ``site_vars`` as host variables
    (they win over the lab's group variables): the site settings a destructive playbook takes
    only from the inventory, never as extra vars (the boundary path, the records folder)."""
    path = os.path.join(str(tmp_path), "site-%d.json" % len(os.listdir(str(tmp_path))))
    with open(path, "w") as fh:
        json.dump({"all": {"hosts": {n["name"]: dict(site_vars) for n in config.NODES}}}, fh)
    return ["-i", config.INVENTORY, "-i", path]


def playbook(name, *args, extra=None, tmp_path=None, timeout=900, site=None):
    """ansible-playbook NAME on the lab; ``site``: inventory variables for this run (site_inventory)."""
    if site:
        args = tuple(site_inventory(tmp_path, site)) + args
    env = dict(os.environ, PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"],
               ANSIBLE_CONFIG=os.path.join(ROOT, "tests", "lab", "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0")
    cmd = ["ansible-playbook", os.path.join(ROOT, "playbooks", name), *args]
    if extra is not None:
        path = os.path.join(str(tmp_path), "extra-%d.json" % len(os.listdir(str(tmp_path))))
        with open(path, "w") as fh:
            json.dump(extra, fh)
        cmd += ["-e", "@" + path]
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    res.out = res.stdout + res.stderr
    return res


def recap(out):
    hosts = {}
    for m in re.finditer(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", out, re.M):
        hosts[m.group(1)] = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2)))
    return hosts


def kube(context="onprem"):
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import Kube
    return Kube({"kubeconfig": KUBECONFIG, "context": context})


def approvers(directory, members=None):
    """Per-run approver keys and a boundary signed by the lab's pinned boundary signer
    (``members``: {person id: access} the boundary lists as well)."""
    return ls.make_approvers(str(directory), signer=ls.lab_boundary_signer(), members=members)


def signed_record(appr, directory, name, signer="sec-owner", **kw):
    """Write NAME (and NAME.sig signed by `signer`, or none when signer is None)."""
    text = ls.record_text(**kw)
    return ls.write_record(str(directory), name, text, appr["keys"][signer] if signer else None)


def node_state(name):
    """What a refused change must leave untouched on a node and in the API. D-Bus activated
    helpers (timedated when another test reads the clock) come and go and are left out."""
    out = ssh(name, "nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1; "
                    "echo ---; dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' 'nvidia-driver-*' "
                    "'hybridgpu-*' 2>/dev/null | grep ' ii\\| hi'; echo ---; nft list tables; echo ---; "
                    "systemctl list-units --type=service --state=active --no-legend --plain | "
                    "awk '{print $1}' | grep -v '^session-\\|^systemd-\\(timedated\\|hostnamed\\|localed\\)'; "
                    "echo ---; apt-mark showhold").stdout
    node = kube().get_node(name)
    api = None
    if node:
        api = {"unschedulable": bool(node["spec"].get("unschedulable")),
               "labels": node["metadata"].get("labels"), "taints": node["spec"].get("taints")}
    return {"node": out, "api": api}
