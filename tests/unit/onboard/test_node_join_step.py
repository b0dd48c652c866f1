"""node_join_step runs the join method's module on the node from one task: kubeadm_node for
kubeadm, node_join_command for command, with that module's own option checks and check mode; the
options of the other method are not looked at, and the command join's secret does not come back.
Run by ansible-playbook on this machine (local connection) against doubles of the node's tools."""
import json
import os
import subprocess
import sys

from hgpu_testenv import ROOT

SECRET = "act-77e0c1d4"
SYSTEMCTL = '#!/bin/sh\ncase "$1" in\n  is-active) test -e "$STATE/active-$2" && { echo active; exit 0; }; echo inactive; exit 3 ;;\n' \
            '  is-enabled) echo disabled; exit 1 ;;\n' \
            "  show) printf 'LoadState=not-found\\nActiveState=inactive\\nSubState=dead\\nResult=success\\n" \
            "ExecMainStatus=0\\nExecMainExitTimestampMonotonic=0\\n' ;;\nesac\n"
DPKG = ('#!/bin/sh\nshift 2\nrc=0\nfor p in "$@"; do\n  if test -e "$STATE/pkg-$p"; then echo "$p ii 1.0-1"; '
        'else echo "dpkg-query: no packages found matching $p" >&2; rc=1; fi\ndone\nexit $rc\n')
INSTALLER = '#!/bin/sh\nprintf %s "$ACME_TOKEN" > "$STATE/token"\ntouch "$STATE/active-acme-node.service"\n'


def run(tmp_path, tasks, check=False):
    state, fake = tmp_path / "state", tmp_path / "bin"
    for folder in (state, fake):
        folder.mkdir(exist_ok=True)
    for name, text in (("systemctl", SYSTEMCTL), ("dpkg-query", DPKG), ("acme-node", INSTALLER)):
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    (state / "pkg-acme-node").touch()
    (tmp_path / "play.yml").write_text(json.dumps([{
        "name": "Join step", "hosts": "localhost", "gather_facts": False,
        "environment": {"PATH": str(fake) + ":" + os.environ["PATH"], "STATE": str(state)},
        "tasks": [dict(t, ignore_errors=True) for t in tasks]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable]
                          + (["--check"] if check else []) + [str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, timeout=120, check=False, cwd=ROOT)
    out = json.loads(proc.stdout)
    return {t["task"]["name"]: t["hosts"]["localhost"] for t in out["plays"][0]["tasks"]}, proc.stdout


def step(name, method, **args):
    return {"name": name, "hybridgpu.fleet.node_join_step": dict({"method": method}, **args)}


def command_args(tmp_path):
    return {"packages": ["acme-node"], "installer": [str(tmp_path / "bin" / "acme-node"), "activate"],
            "secret": SECRET, "secret_env": "ACME_TOKEN", "units": ["acme-node.service"],
            "uninstall": ["/usr/bin/acme-node", "deactivate"], "node_ready": True,
            "manifest_copy": str(tmp_path / "copy.json")}


def test_each_method_runs_its_module_and_ignores_the_others_options(tmp_path):
    kubeadm = {"packages": ["kubeadm"], "kubelet_conf": str(tmp_path / "kubelet.conf"),
               "manifest_copy": str(tmp_path / "copy.json")}
    got, raw = run(tmp_path, [
        step("kubeadm", "kubeadm", kubeadm=kubeadm, command={"colour": "red"}),
        step("command", "command", kubeadm={"colour": "red"}, command=command_args(tmp_path)),
        step("command again", "command", command=command_args(tmp_path)),
        step("bad kubeadm option", "kubeadm", kubeadm={"colour": "red"}),
        step("bad command input", "command", command=dict(command_args(tmp_path), units=["bad unit"])),
        step("unknown method", "salt"),
    ])
    k = got["kubeadm"]
    assert not k.get("failed") and k["module"] == "hybridgpu.fleet.kubeadm_node", k
    assert k["joined"] is False and k["packages"] == {"kubeadm": None} and k["manifest_copy_state"] is None, k
    c = got["command"]
    assert not c.get("failed") and c["module"] == "hybridgpu.fleet.node_join_command", c
    assert c["ran"] is True and c["changed"] is True and c["why"] == ["units not active: acme-node.service"], c
    assert (tmp_path / "state" / "token").read_text() == SECRET
    assert got["command again"]["changed"] is False and got["command again"]["ran"] is False
    assert got["bad kubeadm option"]["failed"] and "colour" in got["bad kubeadm option"]["msg"]
    assert got["bad command input"]["failed"] and "units" in got["bad command input"]["msg"]
    assert got["unknown method"]["failed"] and "salt" in got["unknown method"]["msg"]
    assert SECRET not in raw


def test_check_mode_reaches_the_module(tmp_path):
    got, raw = run(tmp_path, [step("command", "command", command=command_args(tmp_path))], check=True)
    c = got["command"]
    assert c["changed"] is True and c["ran"] is True and c["would_run"].endswith("acme-node activate"), c
    assert not (tmp_path / "state" / "token").exists() and SECRET not in raw
