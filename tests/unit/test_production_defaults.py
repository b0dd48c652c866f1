"""Role and playbook defaults are what a production site wants, and the lab's inventory sets the
lab's own values: the lab keeps working because inventories/lab (with the hosts.yml that
tests/lab/lablib/inventory.py generates) supplies them, not because the product defaults to them."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from hgpu_testenv import ROOT

BIN = os.path.dirname(sys.executable)
# kube-controller-manager --node-monitor-grace-period default (seconds).
NODE_MONITOR_GRACE = 40
# Destructive playbooks whose default target other work still has to make a name that matches
# no host; empty this list as they are cleared.
TARGET_STILL_TO_CLEAR = ()


def defaults(role):
    with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml")) as fh:
        return yaml.safe_load(fh)


def test_role_defaults_are_production_values():
    pre, val, drv, drain = defaults("preflight"), defaults("validate"), defaults("driver_upgrade"), defaults("drain")
    assert pre["preflight_fail_on_findings"] is True
    assert val["validate_link_window"] > NODE_MONITOR_GRACE
    assert val["validate_link_api_address"] == ""
    assert val["validate_gpu_spec_path"] == ""
    assert val["validate_multinode_groups"] == []
    assert drv["driver_upgrade_reboot"] is True and drv["driver_upgrade_restart_units"] == []
    for value in (pre["preflight_kubeconfig"], val["validate_kubeconfig"], drain["drain_kubeconfig"]):
        assert value == "{{ hgpu_kubeconfig | default(omit) }}"


def _inventory(args):
    res = subprocess.run([os.path.join(BIN, "ansible-inventory")] + args, capture_output=True, text=True,
                         timeout=120, check=False, cwd=ROOT,
                         env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg")))
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def lab_inventory(tmp_path_factory):
    """A copy of inventories/lab with the hosts.yml `lab up` would write for this checkout."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
    try:
        from lablib import inventory  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.remove(os.path.join(ROOT, "tests", "lab"))
    folder = tmp_path_factory.mktemp("inv") / "lab"
    shutil.copytree(os.path.join(ROOT, "inventories", "lab"), str(folder))
    (folder / "hosts.yml").write_text(inventory.render())
    return str(folder / "hosts.yml")


def _resolved(inventory_file, host, names):
    """The variables as a play on ``host`` sees them (templated), read without connecting."""
    msg = "{{ %s | to_json }}" % ("{" + ", ".join("'%s': %s" % (n, n) for n in names) + "}")
    res = subprocess.run([os.path.join(BIN, "ansible"), "-i", inventory_file, host, "-c", "local", "-m", "debug",
                          "-a", "msg=%s" % msg], capture_output=True, text=True, timeout=120, check=False,
                         cwd=ROOT, env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
                                            ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1"))
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    return json.loads(out["plays"][0]["tasks"][0]["hosts"][host]["msg"])


def test_the_lab_inventory_sets_the_lab_values(lab_inventory):
    got = _resolved(lab_inventory, "owned-a100-2",
                    ["hgpu_kubeconfig", "validate_link_api_address", "validate_link_window", "validate_gpu_spec_path",
                     "validate_multinode_groups", "driver_upgrade_restart_units",
                     "driver_upgrade_boot_time_command"])
    assert got["hgpu_kubeconfig"].endswith("/k8s/kubeconfig") and os.path.isabs(got["hgpu_kubeconfig"])
    assert got["validate_link_api_address"] == "10.213.77.1"
    assert got["validate_link_window"] == 30
    assert got["validate_gpu_spec_path"] == "/etc/hybridgpu-lab/gpu-spec.json"
    assert got["validate_multinode_groups"] == ["ng_a100_535"]
    # the lab reboots its nodes as a site does (the role's default): only how a reboot shows differs
    assert got["driver_upgrade_boot_time_command"] == "cut -d' ' -f22 /proc/1/stat"
    assert got["driver_upgrade_restart_units"] == ["kubelet.service", "hybridgpu-node-agent.service", "hybridgpu-gpu-exporter.service"]
    with open(os.path.join(ROOT, "inventories", "lab", "preflight", "settings.yml")) as fh:
        assert yaml.safe_load(fh)["preflight_fail_on_findings"] is False


def test_the_lab_joins_one_node_group_with_the_command_method(lab_inventory):
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import command_join  # pylint: disable=import-outside-toplevel
    names = ["node_join_method", "node_join_command_packages", "node_join_command_units", "node_join_command_files",
             "node_join_command_uninstall", "node_join_command_secret_env"]
    got = _resolved(lab_inventory, "owned-l40s-1", names)
    assert got["node_join_method"] == "command"
    spec = dict(packages=got["node_join_command_packages"], units=got["node_join_command_units"],
                files=got["node_join_command_files"], uninstall=got["node_join_command_uninstall"],
                secret_env=got["node_join_command_secret_env"], installer=["/usr/bin/vendor-node-connect"])
    assert command_join.check(spec) == []
    assert _resolved(lab_inventory, "owned-a100-1", ["node_join_method"])["node_join_method"] == "kubeadm"


def _destructive_playbooks():
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "playbooks", "*.yml"))):
        with open(path) as fh:
            text = fh.read()
        if "hybridgpu.fleet.change_approval" in text:
            found.append(os.path.relpath(path, ROOT))
    return found


def _default_targets(relpath):
    with open(os.path.join(ROOT, relpath)) as fh:
        plays = yaml.safe_load(fh)
    out = []
    for play in plays:
        hosts = play.get("hosts")
        if hosts is None:
            continue
        match = re.fullmatch(r"\{\{\s*\w+\s*\|\s*default\(\s*'([^']*)'\s*\)\s*\}\}", str(hosts).strip())
        out.append(match.group(1) if match else str(hosts))
    return out


def test_destructive_playbooks_target_nothing_unless_told(lab_inventory):
    playbooks = _destructive_playbooks()
    assert {"playbooks/remove.yml", "playbooks/upgrade_rehearsal.yml"} <= set(playbooks)
    names = set()
    for inv in (lab_inventory, os.path.join(ROOT, "inventories", "example", "hosts.yml")):
        listing = _inventory(["-i", inv, "--list"])
        names |= set(listing) | set(listing["_meta"]["hostvars"])
    bad, cleared = [], []
    for relpath in playbooks:
        targets = _default_targets(relpath)
        wrong = [t for t in targets if not re.fullmatch(r"hgpu_no_target_given", t) or t in names]
        if relpath in TARGET_STILL_TO_CLEAR:
            if not wrong:
                cleared.append(relpath)
            continue
        bad += ["%s: default target %r" % (relpath, t) for t in wrong]
    assert "hgpu_no_target_given" not in names
    assert not bad, "destructive playbooks that target hosts without being told:\n" + "\n".join(bad)
    assert not cleared, "remove from TARGET_STILL_TO_CLEAR: %s" % ", ".join(cleared)


def _ssh_command(folder, config_file, inventory="127.0.0.1,", host="all"):
    """The SSH command ansible runs for ``host`` under ``config_file`` (from -vvv), sent to a local
    port where nothing listens."""
    res = subprocess.run([os.path.join(BIN, "ansible"), "-i", inventory, host, "-m", "ping", "-vvv",
                          "-e", "ansible_host=127.0.0.1", "-e", "ansible_port=9", "-e", "ansible_user=nobody"],
                         capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
                         env=dict(os.environ, ANSIBLE_CONFIG=config_file, ANSIBLE_SSH_RETRIES="0",
                                  ANSIBLE_SSH_CONTROL_PATH_DIR=str(folder)))
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if "SSH: EXEC ssh " in ln]
    assert lines, res.stdout + res.stderr
    return lines[0]


def test_the_repository_configuration_checks_host_keys_and_names_no_inventory(tmp_path):
    """The root ansible.cfg is what an estate's runs and AWX (the repository is its project) use:
    an SSH host whose key is unknown or different is refused, and no inventory is implied."""
    import configparser  # pylint: disable=import-outside-toplevel
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(os.path.join(ROOT, "ansible.cfg"))
    assert cfg.getboolean("defaults", "host_key_checking") is True
    assert not cfg.has_option("defaults", "inventory")
    with open(os.path.join(ROOT, "ansible.cfg")) as fh:
        text = fh.read()
    assert "inventories/lab" not in text and "hosts.yml" not in text
    command = _ssh_command(tmp_path, os.path.join(ROOT, "ansible.cfg"))
    assert "StrictHostKeyChecking=yes" in command, command
    assert "StrictHostKeyChecking=no" not in command and "/dev/null" not in command, command
    assert "UserKnownHostsFile" not in command, command
    dump = subprocess.run([os.path.join(BIN, "ansible-config"), "dump", "--only-changed"], capture_output=True,
                          text=True, timeout=120, check=False, cwd=ROOT,
                          env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg")))
    assert dump.returncode == 0, dump.stderr
    assert re.search(r"^HOST_KEY_CHECKING\(.*\) = True$", dump.stdout, re.M), dump.stdout
    assert not re.search(r"^DEFAULT_HOST_LIST\(", dump.stdout, re.M), dump.stdout


def test_the_lab_configuration_is_the_labs_and_checks_host_keys(lab_inventory, tmp_path):
    """The lab's settings live with the lab (tests/lab/ansible.cfg, selected by the Makefile): its
    inventory, and host keys checked against the known_hosts file `lab up` writes."""
    import configparser  # pylint: disable=import-outside-toplevel
    lab_cfg = os.path.join(ROOT, "tests", "lab", "ansible.cfg")
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(lab_cfg)
    assert os.path.normpath(os.path.join(os.path.dirname(lab_cfg), cfg.get("defaults", "inventory"))) == \
        os.path.join(ROOT, "inventories", "lab", "hosts.yml")
    assert cfg.getboolean("defaults", "host_key_checking") is True
    with open(os.path.join(ROOT, "Makefile")) as fh:
        assert re.search(r"^export ANSIBLE_CONFIG := \$\(CURDIR\)/tests/lab/ansible\.cfg$", fh.read(), re.M)
    sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
    try:
        from lablib import nodes  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.remove(os.path.join(ROOT, "tests", "lab"))
    command = _ssh_command(tmp_path, lab_cfg, lab_inventory, "owned-a100-1")
    assert "UserKnownHostsFile=%s" % nodes.known_hosts_path() in command, command
    assert "StrictHostKeyChecking=yes" in command and "StrictHostKeyChecking=no" not in command, command
    assert "/dev/null" not in command, command
