"""The link-interruption step checks the API address and port before they reach the node's ruleset."""
import json
import os
import subprocess
import sys

import pytest

from hgpu_testenv import ROOT

TASKS = os.path.join(ROOT, "roles", "validate", "tasks", "link_input.yml")


PASS = ["10.213.77.1", "fd00::1", "2001:db8:0:1::6443"]
STOP = [
    ("10.0.0.1 tcp dport 22 accept; #", 6443),
    ("10.0.0.1\n}\ntable inet x {", 6443),
    ("$(touch /tmp/x)", 6443),
    ("api.example.com", 6443),
    ("", 6443),
    ("10.0.0.1", "6443 drop; accept"),
    ("10.0.0.1", 0),
    ("10.0.0.1", 70000),
]
CASES = [(address, 6443) for address in PASS] + STOP


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """Every case as its own host (its address and port as host variables) of one ansible-playbook
    run: a host whose input the step refuses stops there, the others go on and touch their file.
    Returns {case index: (the host's line of the play recap, whether it got past the step)}, and
    the run's output."""
    tmp = tmp_path_factory.mktemp("link-input")
    hosts = {"case%d" % n: {"validate_link_api_address": address, "validate_link_api_port": port}
             for n, (address, port) in enumerate(CASES)}
    (tmp / "hosts.json").write_text(json.dumps({"all": {"hosts": hosts, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}))
    play = [{"hosts": "all", "gather_facts": False,
             "tasks": [{"ansible.builtin.include_tasks": TASKS},
                       {"ansible.builtin.file": {"path": str(tmp) + "/reached-{{ inventory_hostname }}", "state": "touch"}}]}]
    (tmp / "play.yml").write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(tmp / "hosts.json"),
                           str(tmp / "play.yml")], capture_output=True, text=True, env=env, timeout=120,
                          check=False, cwd=ROOT)
    recap = {}
    for line in proc.stdout.split("PLAY RECAP")[-1].splitlines():
        if line.startswith("case"):
            recap[line.split()[0]] = line
    assert sorted(recap) == sorted(hosts), proc.stdout + proc.stderr
    return {n: (recap["case%d" % n], (tmp / ("reached-case%d" % n)).exists()) for n in range(len(CASES))}, proc.stdout


@pytest.mark.parametrize("address", PASS)
def test_addresses_pass(checked, address):
    results, out = checked
    recap, reached = results[CASES.index((address, 6443))]
    assert "failed=0" in recap and reached, out


@pytest.mark.parametrize("address, port", STOP)
def test_anything_else_stops_before_the_node(checked, address, port):
    results, out = checked
    n = CASES.index((address, port))
    recap, reached = results[n]
    assert "failed=1" in recap and not reached
    assert "validate_link_api_address / validate_link_api_port on case%d:" % n in out


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
