"""roles/node_join with node_join_method command, run by ansible-playbook on this machine with
a fake systemctl and a fake vendor installer (no API: registration is not confirmed here):
check mode says what it would run and changes nothing, the first run runs the installer with
the secret only in its environment and records the join, a second run changes nothing, and
bad input stops before the installer or the manifest are touched."""
import json
import os
import subprocess
import sys

import pytest

from hgpu_testenv import ROOT

NODE = "cmdnode"
SECRET = "act-4b1d9e77c2"
SYSTEMCTL = '#!/bin/sh\ntest -e "$STATE/active-$2" && { echo active; exit 0; }\necho inactive; exit 3\n'
INSTALLER = ('#!/bin/sh\necho "$@" >> "$STATE/runs"\nprintf %s "$ACME_TOKEN" > "$STATE/token"\n'
             'touch "$STATE/active-acme-node.service" "$STATE/acme.conf"\n')


@pytest.fixture
def site(tmp_path):
    state, fake = tmp_path / "state", tmp_path / "bin"
    state.mkdir()
    fake.mkdir()
    for name, text in (("systemctl", SYSTEMCTL), ("acme-node", INSTALLER)):
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    (tmp_path / "records" / "manifests").mkdir(parents=True)
    pre = {"recorded_at": "2026-01-01T00:00:00Z", "active_units": [], "packages": {}, "users": [], "nft_ruleset": "",
           "paths": {str(state / "acme.conf"): False, str(state / "site.conf"): True}}  # site.conf: the node's own
    (tmp_path / "records" / "manifests" / (NODE + ".json")).write_text(json.dumps(
        {"schema_version": 1, "node": NODE, "pre_onboarding": pre, "sections": {}}))
    return tmp_path


def play(site, *extra, **overrides):
    state = str(site / "state")
    hostvars = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                "hgpu_records_dir": str(site / "records"), "node_join_server": "https://203.0.113.10:6443",
                "node_join_node_manifest": str(site / "node-copy" / "manifest.json"),
                "node_join_method": "command", "node_join_command_node_name": "",
                "node_join_command_installer": [str(site / "bin" / "acme-node"), "activate"],
                "node_join_command_secret": SECRET, "node_join_command_secret_env": "ACME_TOKEN",
                "node_join_command_units": ["acme-node.service"], "node_join_command_files": [state + "/acme.conf", state + "/site.conf"],
                "node_join_command_uninstall": ["/usr/bin/acme-node", "deactivate"], "node_join_journal": False}
    hostvars.update(overrides)
    (site / "inventory.json").write_text(json.dumps({"owned": {"hosts": {NODE: hostvars}}}))
    (site / "play.yml").write_text(json.dumps([{
        "name": "Join", "hosts": "owned", "gather_facts": False,
        "environment": {"PATH": str(site / "bin") + ":" + os.environ["PATH"], "STATE": state},
        "roles": ["hybridgpu.fleet.node_join"]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                           str(site / "inventory.json"), str(site / "play.yml")] + list(extra),
                          capture_output=True, text=True, env=env, timeout=300, check=False, cwd=ROOT)
    recap = [line for line in proc.stdout.splitlines() if line.startswith(NODE) and "changed=" in line]
    changed = int(recap[-1].split("changed=")[1].split()[0]) if recap else None
    return proc, changed


def manifest(site):
    return json.loads((site / "records" / "manifests" / (NODE + ".json")).read_text())


def test_check_then_join_then_nothing(site):
    before = manifest(site)
    proc, dummy = play(site, "--check")
    assert proc.returncode == 0, proc.stdout[-4000:]
    said = " ".join(proc.stdout.split())  # the callback wraps long messages
    assert "would run %s activate (units not active: acme-node.service)" % (site / "bin" / "acme-node") in said
    assert not (site / "state" / "runs").exists() and manifest(site) == before and not (site / "node-copy").exists()

    proc, changed = play(site)
    assert proc.returncode == 0 and changed > 0, proc.stdout[-4000:]
    assert (site / "state" / "runs").read_text() == "activate\n"
    assert (site / "state" / "token").read_text() == SECRET and SECRET not in proc.stdout
    join = manifest(site)["sections"]["join"]
    assert join["facts"]["method"] == "command" and join["facts"]["uninstall_command"] == ["/usr/bin/acme-node", "deactivate"]
    idents = [(a["kind"], a.get("name") or a.get("path")) for a in join["artefacts"]]
    assert ("unit", "acme-node.service") in idents and ("file", str(site / "state" / "acme.conf")) in idents
    assert ("file", str(site / "state" / "site.conf")) not in idents  # there before onboarding: not the join's
    assert SECRET not in json.dumps(manifest(site))
    assert json.loads((site / "node-copy" / "manifest.json").read_text()) == manifest(site)

    proc, changed = play(site)
    assert proc.returncode == 0 and changed == 0, proc.stdout[-4000:]
    assert "joined already" in proc.stdout and (site / "state" / "runs").read_text() == "activate\n"


@pytest.mark.parametrize("override, named", [
    ({"node_join_command_units": ["acme node"]}, "units[0]"),
    ({"node_join_command_uninstall": []}, "uninstall: a command is required"),
    ({"node_join_command_installer": ["/usr/bin/acme-node", "--token", SECRET]}, "installer: holds the secret"),
    ({"node_join_command_files": ["/etc"]}, "files[0]: /etc is a system folder"),
    ({"node_join_method": "salt"}, "node_join_method must be one of: kubeadm, command, got: salt"),
])
def test_bad_input_stops_before_anything_runs(site, override, named):
    before = manifest(site)
    proc, dummy = play(site, **override)
    assert proc.returncode != 0 and named in " ".join(proc.stdout.split()), proc.stdout[-3000:]
    assert not (site / "state" / "runs").exists() and manifest(site) == before
    assert SECRET not in proc.stdout
