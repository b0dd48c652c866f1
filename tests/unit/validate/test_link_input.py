"""The link-interruption step checks the API address and port before they reach the node's ruleset."""
import json
import os
import subprocess
import sys

import pytest

from hgpu_testenv import ROOT

TASKS = os.path.join(ROOT, "roles", "validate", "tasks", "link_input.yml")


def run_check(tmp_path, address, port=6443):
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars": {"validate_link_api_address": address, "validate_link_api_port": port},
             "tasks": [{"ansible.builtin.include_tasks": TASKS},
                       {"ansible.builtin.file": {"path": str(tmp_path / "reached"), "state": "touch"}}]}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable,
                           str(tmp_path / "play.yml")], capture_output=True, text=True, env=env, timeout=120,
                          check=False, cwd=ROOT)
    return proc, (tmp_path / "reached").exists()


@pytest.mark.parametrize("address", ["10.213.77.1", "fd00::1", "2001:db8:0:1::6443"])
def test_addresses_pass(tmp_path, address):
    proc, reached = run_check(tmp_path, address)
    assert proc.returncode == 0 and reached, proc.stdout + proc.stderr


@pytest.mark.parametrize("address, port", [
    ("10.0.0.1 tcp dport 22 accept; #", 6443),
    ("10.0.0.1\n}\ntable inet x {", 6443),
    ("$(touch /tmp/x)", 6443),
    ("api.example.com", 6443),
    ("", 6443),
    ("10.0.0.1", "6443 drop; accept"),
    ("10.0.0.1", 0),
    ("10.0.0.1", 70000),
])
def test_anything_else_stops_before_the_node(tmp_path, address, port):
    proc, reached = run_check(tmp_path, address, port)
    assert proc.returncode != 0 and not reached
    assert "validate_link_api_address / validate_link_api_port on localhost" in proc.stdout


def test_the_step_checks_first_and_puts_no_value_into_a_shell():
    import yaml
    with open(os.path.join(ROOT, "roles", "validate", "tasks", "link_interruption.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    assert tasks[0].get("ansible.builtin.import_tasks") == "link_input.yml"

    def walk(items):
        for task in items:
            yield task
            for key in ("block", "rescue", "always"):
                yield from walk(task.get(key) or [])
    templated = [t["name"] for t in walk(tasks)
                 if "{{" in json.dumps(t.get("ansible.builtin.shell", t.get("shell", "")))]
    assert not templated, "shell tasks with templated values in the link step: %s" % templated
