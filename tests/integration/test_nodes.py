"""Nodes over SSH: systemd state and the GPU stand-ins."""
import csv
import io
import json

import pytest
import yaml

from conftest import config, ssh

pytestmark = pytest.mark.lab

OWNED = [n["name"] for n in config.NODES if n["role"] == "owned"]
ALL = [n["name"] for n in config.NODES]


def test_inventory_lists_every_node_with_its_key(lab):
    with open(config.INVENTORY) as fh:
        inv = yaml.safe_load(fh)
    groups = inv["all"]["children"]
    owned = groups["owned"]["children"]
    assert set(owned) == {"ng_a100_535", "ng_l40s_550"}
    assert set(groups["cloud"]["children"]) == {"ng_cloud_h200"}
    assert set(groups["wave1"]["hosts"]) == set(OWNED)
    host = owned["ng_a100_535"]["hosts"]["owned-a100-1"]
    assert host["ansible_host"] == "10.213.77.11"
    assert host["ansible_ssh_private_key_file"].startswith("/")
    assert host["matrix_row"] == "a100-535"


@pytest.mark.parametrize("name", ALL)
def test_systemd_is_running(lab, name):
    res = ssh(name, "systemctl is-system-running")
    assert res.stdout.strip() == "running", res.stdout + res.stderr


@pytest.mark.parametrize("name", ALL)
def test_password_login_is_refused(lab, name):
    res = ssh(name, "sshd -T | grep -Ei '^(permitrootlogin|passwordauthentication) '")
    opts = dict(line.split() for line in res.stdout.strip().splitlines())
    assert opts == {"permitrootlogin": "without-password", "passwordauthentication": "no"}


@pytest.mark.parametrize("name", ALL)
def test_nvidia_smi_reports_the_spec(lab, name):
    n = next(x for x in config.NODES if x["name"] == name)
    spec = config.ROWS[n["row"]]["spec"]
    driver = config.ROWS[n["row"]]["driver"].rsplit("-", 1)[1]
    res = ssh(name, "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv")
    rows = list(csv.reader(io.StringIO(res.stdout), skipinitialspace=True))
    assert rows[0] == ["name", "memory.total [MiB]", "driver_version"]
    gpus = rows[1:]
    assert len(gpus) == spec["count"]
    for gpu_name, mem, version in gpus:
        assert gpu_name == spec["model"]
        assert mem == "%d MiB" % spec["memory_mib"]
        assert version.split(".")[0] == driver
    info = json.loads(ssh(name, "cat /usr/lib/hybridgpu-lab/driver.json").stdout)
    assert info["branch"] == driver and gpus[0][2] == info["version"]


@pytest.mark.parametrize("name", ALL)
def test_chrony_uses_only_the_bridge(lab, name):
    res = ssh(name, "systemctl is-active chrony; grep -E '^(server|pool|peer)' /etc/chrony/chrony.conf")
    lines = res.stdout.strip().splitlines()
    assert lines[0] == "active"
    assert lines[1:] == ["server 10.213.77.1 iburst"]
