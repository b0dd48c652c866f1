"""Checks of the code that acts, each driven through its public entry point, that fail when the
check is taken out: a removal whose change window has closed, a Node that is not a target of the
verified change, a driver change on a host that is not one of the run's targets, a boundary
signed by a pinned signer who is not its security owner, and a firewall rollback that would not
bring the previous table back. Each asserts that the effect did not happen (the Node still
exists, nothing ran on the host, no removal state was written, the previous table is in the
rollback file)."""
import datetime
import json
import os
import secrets
import subprocess
import sys
import time

import pytest
import yaml

from hgpu_testenv import ROOT, run_module

sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "lifecycle"))
import lifecycle_support as ls  # noqa: E402


from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import manifest  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import Kube  # noqa: E402

PRE = {"recorded_at": "2025-01-01T00:00:00Z", "active_units": ["chrony.service"], "nft_ruleset": "",
       "packages": {"hybridgpu-node-agent": None}, "paths": {"/etc/hybridgpu": False}, "users": ["root"]}


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    return ls.make_approvers(str(tmp_path_factory.mktemp("approvers")))


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    """An in-process API emulator on 127.0.0.1 and the connection options of the modules."""
    srv, conn = ls.emulator(str(tmp_path_factory.mktemp("emu")), "trust")
    kube = Kube(dict(conn, request_timeout=5), retries=0, sleep=lambda s: None)
    yield {"kube": kube, "conn": conn}
    srv.stop()


def make_node(kube):
    """A cordoned Node (delete_node removes only a cordoned one): nothing but the removal's own
    checks stands between a delete and the Node."""
    name = "tm-%s" % secrets.token_hex(3)
    kube.call("create node", kube.core.create_node, {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"unschedulable": True, "taints": []}})
    return name


def write_manifest(folder, node):
    doc = manifest.merge(None, node, pre_onboarding=PRE)
    doc = manifest.merge(doc, node, "join", [
        {"kind": "api_object", "cluster": "onprem", "api_version": "v1", "resource": "nodes", "namespace": "",
         "name": node},
        {"kind": "package", "name": "hybridgpu-node-agent"}], facts={"cluster": "onprem"})
    path = os.path.join(str(folder), "manifests", node + ".json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(doc, fh)
    return path


def start_removal(people, folder, node, record_targets, end=None, change_id=None, boundary=None, signers=None):
    """node_removal_state action=start for ``node`` (the run's targets: ``record_targets``) under a
    remove record signed by sec-owner; returns the module's result."""
    change_id = change_id or "CHG-TM-%s" % secrets.token_hex(3)
    manifest_path = write_manifest(folder, node)
    record = ls.write_record(str(folder), change_id + ".yml",
                             ls.record_text(change_id=change_id, action="remove", requester="ops-lead",
                                            targets=record_targets, end=end,
                                            manifests={node: manifest_path} if node in record_targets else None),
                             people["keys"]["sec-owner"])
    started = run_module("node_removal_state", {
        "root": os.path.join(str(folder), "removals"), "node": node, "action": "start",
        "manifest_path": manifest_path, "boundary": boundary or people["boundary"],
        "boundary_signers": signers or people["signers"], "record_path": record, "executor": "ops-lead",
        "targets": list(record_targets), "playbook": "remove.yml", "ledger_dir": os.path.join(str(folder), "approvals"),
        "task_host": node})
    return started, record


def delete_node(people, api, folder, name, record, targets):
    """k8s_node_removal node_deleted for Node ``name`` on host ``name`` (the run's ``targets``),
    with what its action plugin adds (the pinned signers, boundary and ledger)."""
    return run_module("k8s_node_removal", dict(
        api["conn"], state="node_deleted", name=name, record_path=record, executor="ops-lead",
        boundary=people["boundary"], boundary_signers=people["signers"],
        ledger_dir=os.path.join(str(folder), "approvals"), targets=list(targets), task_host=name))


# -- lifecycle/removal.py: authorise -----------------------------------------------------------
def test_a_removal_whose_window_has_closed_deletes_no_node(people, api, tmp_path):
    kube = api["kube"]
    node = make_node(kube)
    end = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) + datetime.timedelta(seconds=6)
    started, record = start_removal(people, tmp_path, node, [node], end=end)
    assert not started.get("failed"), started.get("msg")
    assert os.path.exists(started["report"]["path"])
    time.sleep(max(0.0, (end - datetime.datetime.now(datetime.timezone.utc)).total_seconds()) + 1.5)
    res = delete_node(people, api, tmp_path, node, record, [node])
    assert res.get("failed") and "window: expired at %s" % ls.iso(end) in res["msg"], res
    assert kube.get_node(node) is not None, "the Node was deleted after its change window closed"


def test_a_node_that_is_not_a_target_of_the_change_is_not_deleted(people, api, tmp_path):
    """A record for another node: neither the start nor the module that deletes takes the node."""
    kube = api["kube"]
    approved, other = make_node(kube), make_node(kube)
    started, record = start_removal(people, tmp_path, other, [approved])
    assert started.get("failed") and "%s is not a target of change" % other in started["msg"], started
    res = delete_node(people, api, tmp_path, other, record, [approved])
    assert res.get("failed") and "%s is not a target of change" % other in res["msg"], res
    assert kube.get_node(other) is not None, "a Node the change record does not name was deleted"
    assert kube.get_node(approved) is not None


# -- plugins/action/driver_package.py ----------------------------------------------------------
def test_the_driver_change_never_runs_on_a_host_that_is_not_a_run_target(people, tmp_path):
    """A valid record and run targets that do not name the host the task runs on: the plugin
    refuses before the module runs there and before the change id is used."""
    record = ls.write_record(str(tmp_path), "chg.yml", ls.record_text(
        change_id="CHG-TM-DRV", action="driver_upgrade", targets=("owned-a100-2",), requester="ops-oncall"),
        people["keys"]["sec-owner"])
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {"hgpu_boundary_signers": people["signers"], "hgpu_records_dir": str(tmp_path / "records"),
                 "hgpu_boundary_path": people["boundary"]}}}))
    book = tmp_path / "book.yml"
    book.write_text(yaml.safe_dump([{"name": "p", "hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Driver", "hybridgpu.fleet.driver_package": {
            "package": "bash", "package_pattern": "bash", "hold": False, "executor": "ops-oncall",
            "targets": ["owned-a100-2"], "record_path": record}}]}]))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory),
                          str(book)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
    res = json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert res.get("failed") and "this node localhost is not one of the run's targets" in res["msg"], res
    assert "before" not in res and "plan" not in res, "the package module ran on a host that is not a target"
    assert not os.path.exists(str(tmp_path / "records" / "approvals" / "CHG-TM-DRV.json"))


# -- common/approval_signing.py: the boundary's signer -----------------------------------------
def test_a_boundary_signed_by_a_pinned_signer_who_is_not_its_security_owner_starts_no_removal(people, tmp_path):
    """Two principals are pinned as boundary signers; the boundary is signed by the one who is not
    the boundary's security owner. The removal is refused and no removal state is written."""
    key = str(tmp_path / "ops-lead-boundary")
    pub = ls.keygen(key, "ops-lead boundary key")
    signers = people["signers"] + 'ops-lead namespaces="hybridgpu.fleet-boundary" %s\n' % pub
    boundary = str(tmp_path / "boundary.yml")
    with open(people["boundary"], "rb") as src, open(boundary, "wb") as dst:
        dst.write(src.read())
    ls.sign_boundary(boundary, key)
    with open(boundary) as fh:
        assert yaml.safe_load(fh)["security_owner"] == "sec-owner"
    res, dummy = start_removal(people, tmp_path, "owned-a100-2", ["owned-a100-2"], boundary=boundary, signers=signers)
    assert res.get("failed") and "is signed by ops-lead, not by its security owner sec-owner" in res["msg"], res
    folder = tmp_path / "removals" / "owned-a100-2"
    assert not folder.exists() or not [p for p in os.listdir(str(folder)) if p.endswith(".json")]


# -- modules/nft_ruleset.py: the rollback file -------------------------------------------------
NFT_DOUBLE = """#!/bin/sh
# nft on a host whose live table is $STATE_DIR/live (absent: no table)
case "$1" in
  list) [ -f "$STATE_DIR/live" ] || exit 1; cat "$STATE_DIR/live" ;;
  -c) cat > /dev/null ;;
  -f) cp "$2" "$STATE_DIR/live" ;;
  delete) rm -f "$STATE_DIR/live" ;;
esac
exit 0
"""
SYSTEMCTL_DOUBLE = """#!/bin/sh
echo "systemctl $*" >> "$STATE_DIR/calls"
[ "$1" = is-active ] && exit 3
exit 0
"""
SYSTEMD_RUN_DOUBLE = """#!/bin/sh
echo "systemd-run $*" >> "$STATE_DIR/calls"
exit 0
"""
PREVIOUS = ("table inet hgputm {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n"
            "\t\ttcp dport 2222 accept comment \"previous\"\n\t}\n}\n")


def test_the_rollback_file_brings_the_previous_table_back(tmp_path):
    """A ruleset applied with a rollback timer over a table already on the host: the file the timer
    loads deletes the new table and loads the previous one."""
    bin_dir, state = tmp_path / "bin", tmp_path / "host"
    bin_dir.mkdir()
    state.mkdir()
    for name, text in (("nft", NFT_DOUBLE), ("systemctl", SYSTEMCTL_DOUBLE), ("systemd-run", SYSTEMD_RUN_DOUBLE)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (state / "live").write_text(PREVIOUS)
    args = {"table": "hgputm", "management_sources": ["10.213.77.1/32"], "confirm_timeout": 90, "boot": False,
            "state_dir": str(tmp_path / "nft"), "unit_dir": str(tmp_path / "units")}
    env = {"STATE_DIR": str(state), "PATH": str(bin_dir) + os.pathsep + os.environ["PATH"]}
    res = run_module("nft_ruleset", args, env=env)
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] and res["pending_confirm"]
    rollback = tmp_path / "nft" / "hgputm.rollback.nft"
    with open(str(state / "calls")) as fh:
        assert "-f %s" % rollback in fh.read()
    assert rollback.read_text() == "table inet hgputm {}\ndelete table inet hgputm\n" + PREVIOUS
