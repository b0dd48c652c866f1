"""Attacks on the removal through its public entry points, each asserting that the effect did
not happen:

- the launcher: remove.yml started at a host phase (--start-at-task) with the plan, the change
  and the phases done as extra vars: the file the plan names is still there;
- the records folder: a plain JSON removal state planted in records/removals/<node>/ and
  k8s_node_removal called directly (node_deleted, secret_revoked): the Node and the Secret
  still exist;
- a valid signed record, then the removal state's manifest snapshot edited (a path or a Secret
  added) or the manifest edited before the start: refused, the file and the Secret still there;
- a record whose window has closed, and a node that is not a target of the record: the Node
  still exists.

Playbooks run on localhost with real signatures (lifecycle_support), the pinned signers, the
boundary and the records folder from the inventory; the API is the in-process emulator, reached
over HTTPS with the official client."""
import datetime
import json
import os
import secrets
import subprocess
import sys
import time

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lifecycle_support as ls  # noqa: E402
from test_removal import PRE  # noqa: E402


from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import manifest  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import Kube  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.modules import k8s_node_removal  # noqa: E402


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    return ls.make_approvers(str(tmp_path_factory.mktemp("approvers")))


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    srv, conn = ls.emulator(str(tmp_path_factory.mktemp("emu")), "attacks")
    kube = Kube(dict(conn, request_timeout=5), retries=0, sleep=lambda s: None)
    yield {"kube": kube, "conn": conn}
    srv.stop()


def make_node(kube):
    name = "rm-%s" % secrets.token_hex(3)
    kube.call("create node", kube.core.create_node, {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"unschedulable": True, "taints": []}})
    secret = "node-%s-token" % name
    kube.create_secret("kube-system", {"metadata": {"name": secret, "annotations": {
        "kubernetes.io/service-account.name": "node-%s" % name, "hybridgpu.io/node-name": name}},
        "type": "kubernetes.io/service-account-token"})
    return name, secret


def inventory(people, tmp_path, host="localhost", others=(), **host_vars):
    path = tmp_path / "inventory.yml"
    hosts = dict((h, dict({"ansible_connection": "local", "ansible_python_interpreter": sys.executable}, **host_vars))
                 for h in (host,) + tuple(others))
    site = {"hgpu_boundary_signers": people["signers"], "hgpu_records_dir": str(tmp_path / "records"),
            "hgpu_boundary_path": people["boundary"]}
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts, "vars": site}}))
    return str(path)


def playbook(inv, book, *args):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ls.REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inv, str(book)] + list(args)
    return subprocess.run(cmd, cwd=ls.REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


def write_manifest(tmp_path, node, files=(), api_objects=()):
    doc = manifest.merge(None, node, pre_onboarding=dict(PRE, active_units=[], nft_ruleset=""))
    arts = [{"kind": "file", "path": str(f)} for f in files]
    arts += [dict({"kind": "api_object", "cluster": "onprem", "api_version": "v1"}, **o) for o in api_objects]
    doc = manifest.merge(doc, node, "agents", arts, facts={"cluster": "onprem"})
    path = tmp_path / "records" / "manifests" / (node + ".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return str(path)


def signed_record(people, tmp_path, node, change_id, manifest_path=None, **kw):
    args = dict(change_id=change_id, action="remove", targets=(node,), requester="ops-lead")
    if manifest_path:
        args["manifests"] = {node: manifest_path}
    args.update(kw)
    return ls.write_record(str(tmp_path), change_id + ".yml", ls.record_text(**args), people["keys"]["sec-owner"])


def start_task(tmp_path, node, record):
    return {"name": "Start", "register": "started", "hybridgpu.fleet.node_removal_state": {
        "root": str(tmp_path / "records" / "removals"), "node": node, "action": "start",
        "manifest_path": str(tmp_path / "records" / "manifests" / (node + ".json")),
        "record_path": record, "executor": "ops-lead", "targets": "{{ ansible_play_hosts_all }}"}}


def edit_snapshot(tmp_path, node, change_id, section_artefacts):
    """What someone with write access to the records folder does: add artefacts to the manifest
    snapshot the removal state holds."""
    path = tmp_path / "records" / "removals" / node / (change_id + ".json")
    doc = json.loads(path.read_text())
    doc["manifest"] = manifest.merge(doc["manifest"], node, "agents", section_artefacts)
    path.write_text(json.dumps(doc))


# -- the launcher -------------------------------------------------------------------------------
def test_remove_yml_started_at_a_host_phase_with_a_plan_as_extra_vars_deletes_nothing(people, tmp_path):
    victim = tmp_path / "victim.conf"
    victim.write_text("an administrator's file\n")
    inv = inventory(people, tmp_path, hgpu_role="owned")
    manifest_path = write_manifest(tmp_path, "localhost")
    record = signed_record(people, tmp_path, "localhost", "CHG-ATK-1", manifest_path)
    plan = {"node": "localhost", "units": [], "files": [str(victim)], "packages": [], "users": [], "groups": [],
            "directories": [], "nft_tables": [], "provider_rules": [], "nodes": [], "secrets": [], "csrs": [],
            "bootstrap_tokens": [], "keys": [], "labels": [], "taints": [], "join": {}, "server": None,
            "restore": {"units": [], "nft_tables": [], "packages": []}}
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps({
        "remove_targets": "localhost", "remove_executor": "ops-lead", "change_record_path": record,
        "node_removal_plan": plan, "node_removal_done": ["approval", "drain", "node_delete", "credentials"],
        "node_removal_change": {"change_id": "CHG-MADE-UP", "approver": "sec-owner", "executor": "ops-lead"},
        "node_removal_journal": False}))
    out = playbook(inv, os.path.join(ls.REPO, "playbooks", "remove.yml"), "-e", "@%s" % extra,
                   "--start-at-task", "Check the node answers")
    assert victim.exists(), "the launcher's plan deleted %s:\n%s" % (victim, out.stdout[-3000:])
    assert out.returncode != 0
    assert "node_removal_plan" in out.stdout and "given as an extra var" in out.stdout, out.stdout[-3000:]


def test_a_run_that_moves_the_node_s_connection_deletes_nothing(people, tmp_path):
    """A valid record and manifest for localhost, and the launcher points the connection
    somewhere else (-e ansible_connection=...): the node-side step refuses before it acts."""
    ours = tmp_path / "agent.conf"
    ours.write_text("written by onboarding\n")
    manifest_path = write_manifest(tmp_path, "localhost", files=[ours])
    record = signed_record(people, tmp_path, "localhost", "CHG-ATK-5", manifest_path)
    out = run_agents(people, tmp_path, record, "-e", "ansible_connection=local")
    assert ours.exists() and out.returncode != 0, out.stdout[-3000:]
    assert "ansible_connection given by the launcher" in out.stdout, out.stdout[-3000:]


# -- the records folder --------------------------------------------------------------------------
def test_a_planted_removal_state_deletes_no_node_and_revokes_no_secret(people, api, tmp_path):
    kube = api["kube"]
    node, secret = make_node(kube)
    inv = inventory(people, tmp_path, host=node)
    doc = manifest.merge(None, node, pre_onboarding=PRE)
    doc = manifest.merge(doc, node, "join", [
        {"kind": "api_object", "cluster": "onprem", "api_version": "v1", "resource": "nodes", "namespace": "", "name": node},
        {"kind": "api_object", "cluster": "onprem", "api_version": "v1", "resource": "secrets",
         "namespace": "kube-system", "name": secret}], facts={"cluster": "onprem"})
    now = datetime.datetime.now(datetime.timezone.utc)
    window = {"start": ls.iso(now - datetime.timedelta(hours=1)), "end": ls.iso(now + datetime.timedelta(hours=1))}
    state = tmp_path / "records" / "removals" / node / "CHG-PLANTED.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({
        "schema_version": 1, "node": node, "change_id": "CHG-PLANTED", "started_at": window["start"],
        "finished_at": None, "steps": {}, "manifest": doc,
        "approval": {"approved": True, "action": "remove", "change_id": "CHG-PLANTED", "targets": [node],
                     "approved_targets": [node], "window": window, "manifests": {node: ls.manifest_digest(doc)},
                     "approver": "sec-owner", "executor": "ops-lead"}}))
    extra = {}
    if "removal_state" in k8s_node_removal.ARGUMENT_SPEC:  # what the module took as its authority
        extra["removal_state"] = str(state)
    tasks = [
        {"name": "Delete the Node", "ignore_errors": True, "hybridgpu.fleet.k8s_node_removal": dict(
            api["conn"], state="node_deleted", name=node, **extra)},
        {"name": "Revoke the Secret", "ignore_errors": True, "hybridgpu.fleet.k8s_node_removal": dict(
            api["conn"], state="secret_revoked", namespace="kube-system", name=secret, node=node,
            token_file=str(tmp_path / "token"), **extra)}]
    book = tmp_path / "book.yml"
    book.write_text(yaml.safe_dump([{"name": "p", "hosts": node, "gather_facts": False, "tasks": tasks}]))
    out = playbook(inv, book)
    assert kube.get_node(node) is not None, "a planted removal state deleted the Node:\n" + out.stdout[-3000:]
    assert kube.get_secret("kube-system", secret) is not None, "a planted removal state revoked the Secret"
    assert "ignored=2" in out.stdout, out.stdout[-3000:]


def test_an_edited_state_snapshot_revokes_no_secret_the_signed_manifest_did_not_name(people, api, tmp_path):
    """A valid record for the node and its manifest (the Node only); the snapshot in the removal
    state then gains the node's token Secret: the Secret stays, the Node goes (it is approved)."""
    kube = api["kube"]
    node, secret = make_node(kube)
    inv = inventory(people, tmp_path, host=node)
    manifest_path = write_manifest(tmp_path, node, api_objects=[{"resource": "nodes", "namespace": "", "name": node}])
    record = signed_record(people, tmp_path, node, "CHG-ATK-API", manifest_path)
    book = tmp_path / "start.yml"
    book.write_text(yaml.safe_dump([{"name": "p", "hosts": node, "gather_facts": False,
                                     "tasks": [start_task(tmp_path, node, record)]}]))
    out = playbook(inv, book)
    assert out.returncode == 0, out.stdout[-3000:]
    edit_snapshot(tmp_path, node, "CHG-ATK-API", [{"kind": "api_object", "cluster": "onprem", "api_version": "v1",
                                                   "resource": "secrets", "namespace": "kube-system", "name": secret}])
    rec = {"record_path": record, "executor": "ops-lead"}
    book = tmp_path / "act.yml"
    book.write_text(yaml.safe_dump([{"name": "p", "hosts": node, "gather_facts": False, "tasks": [
        {"name": "Revoke the Secret", "ignore_errors": True, "hybridgpu.fleet.k8s_node_removal": dict(
            api["conn"], state="secret_revoked", namespace="kube-system", name=secret, node=node,
            token_file=str(tmp_path / "token"), **rec)},
        {"name": "Delete the Node", "ignore_errors": True, "hybridgpu.fleet.k8s_node_removal": dict(
            api["conn"], state="node_deleted", name=node, **rec)}]}]))
    out = playbook(inv, book)
    assert kube.get_secret("kube-system", secret) is not None, "an edited snapshot revoked the Secret:\n" + out.stdout[-3000:]
    assert "is not the one change CHG-ATK-API approved" in out.stdout, out.stdout[-3000:]
    # the manifest itself is what was approved: restored, the Node it names goes
    path = tmp_path / "records" / "removals" / node / "CHG-ATK-API.json"
    doc = json.loads(path.read_text())
    doc["manifest"] = manifest.load(manifest_path)
    path.write_text(json.dumps(doc))
    out = playbook(inv, book)
    assert kube.get_node(node) is None, out.stdout[-3000:]
    assert kube.get_secret("kube-system", secret) is not None


def run_agents(people, tmp_path, record, *args, host_vars=None):
    """Start (or resume) the removal of localhost, then its agents phase, as the role runs them."""
    inv = inventory(people, tmp_path, **(host_vars or {}))
    book = tmp_path / "book.yml"
    book.write_text(yaml.safe_dump([{"name": "p", "hosts": "localhost", "gather_facts": False, "tasks": [
        start_task(tmp_path, "localhost", record),
        {"name": "Agents phase",
         "ansible.builtin.include_role": {"name": "hybridgpu.fleet.node_removal", "tasks_from": "agents"},
         "vars": {"node_removal_node": "localhost", "node_removal_journal": False,
                  "node_removal_state_root": str(tmp_path / "records" / "removals"),
                  "node_removal_change": "{{ started.approval }}", "node_removal_plan": "{{ started.plan }}",
                  "node_removal_done": "{{ started.report.done }}",
                  "node_removal_record_path": record, "node_removal_executor": "ops-lead",
                  "node_removal_audit_log": str(tmp_path / "records" / "audit" / "audit.jsonl")}}]}]))
    return playbook(inv, book, *args)


def test_an_edited_state_snapshot_deletes_no_file_the_signed_manifest_did_not_name(people, tmp_path):
    ours, victim = tmp_path / "agent.conf", tmp_path / "victim.conf"
    ours.write_text("written by onboarding\n")
    victim.write_text("an administrator's file\n")
    manifest_path = write_manifest(tmp_path, "localhost", files=[ours])
    record = signed_record(people, tmp_path, "localhost", "CHG-ATK-2", manifest_path)
    inv = inventory(people, tmp_path)
    book = tmp_path / "start.yml"
    book.write_text(yaml.safe_dump([{"name": "p", "hosts": "localhost", "gather_facts": False,
                                     "tasks": [start_task(tmp_path, "localhost", record)]}]))
    assert playbook(inv, book).returncode == 0
    edit_snapshot(tmp_path, "localhost", "CHG-ATK-2", [{"kind": "file", "path": str(victim)}])
    out = run_agents(people, tmp_path, record)
    assert victim.exists(), "an edited removal state deleted %s:\n%s" % (victim, out.stdout[-3000:])
    assert ours.exists() and out.returncode != 0
    assert "is not the one change CHG-ATK-2 approved for localhost" in out.stdout, out.stdout[-3000:]


def test_a_manifest_edited_after_approval_deletes_nothing_and_the_approved_one_is_removed(people, tmp_path):
    ours, victim = tmp_path / "agent.conf", tmp_path / "victim.conf"
    ours.write_text("written by onboarding\n")
    victim.write_text("an administrator's file\n")
    manifest_path = write_manifest(tmp_path, "localhost", files=[ours])
    record = signed_record(people, tmp_path, "localhost", "CHG-ATK-3", manifest_path)
    approved = open(manifest_path).read()
    write_manifest(tmp_path, "localhost", files=[ours, victim])
    out = run_agents(people, tmp_path, record)
    assert victim.exists() and ours.exists(), out.stdout[-3000:]
    assert "is not the one change CHG-ATK-3 approved for localhost" in out.stdout, out.stdout[-3000:]
    assert not (tmp_path / "records" / "removals" / "localhost" / "CHG-ATK-3.json").exists()
    # the manifest the approver signed: its file goes, the other stays; a rerun changes nothing
    with open(manifest_path, "w") as fh:
        fh.write(approved)
    out = run_agents(people, tmp_path, record)
    assert out.returncode == 0, out.stdout[-3000:]
    assert not ours.exists() and victim.exists()
    again = run_agents(people, tmp_path, record)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout[-3000:]


def test_a_record_without_the_manifest_digest_starts_no_removal(people, tmp_path):
    ours = tmp_path / "agent.conf"
    ours.write_text("written by onboarding\n")
    write_manifest(tmp_path, "localhost", files=[ours])
    record = signed_record(people, tmp_path, "localhost", "CHG-ATK-4")
    out = run_agents(people, tmp_path, record)
    assert ours.exists() and out.returncode != 0
    assert "change CHG-ATK-4 names no manifest digest for localhost" in out.stdout, out.stdout[-3000:]


# -- the checks of the code that acts ------------------------------------------------------------
def delete_node_book(api, tmp_path, node, record, hosts=None, on=None):
    """A play deleting Node ``node`` under ``record``; run on ``hosts`` (default the node), acting
    only from host ``on`` when given."""
    task = {"name": "Delete the Node", "hybridgpu.fleet.k8s_node_removal": dict(
        api["conn"], state="node_deleted", name=node, record_path=record, executor="ops-lead")}
    if on:
        task["when"] = "inventory_hostname == %r" % on
    book = tmp_path / "delete.yml"
    book.write_text(yaml.safe_dump([{"name": "p", "hosts": hosts or node, "gather_facts": False, "tasks": [task]}]))
    return book


def test_a_removal_whose_window_has_closed_deletes_no_node(people, api, tmp_path):
    kube = api["kube"]
    node, dummy = make_node(kube)
    inv = inventory(people, tmp_path, host=node)
    manifest_path = write_manifest(tmp_path, node, api_objects=[{"resource": "nodes", "namespace": "", "name": node}])
    end = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) + datetime.timedelta(seconds=20)
    record = signed_record(people, tmp_path, node, "CHG-ATK-WIN", manifest_path, end=end)
    book = tmp_path / "start.yml"
    book.write_text(yaml.safe_dump([{"name": "p", "hosts": node, "gather_facts": False,
                                     "tasks": [start_task(tmp_path, node, record)]}]))
    out = playbook(inv, book)
    assert out.returncode == 0, out.stdout[-3000:]
    time.sleep(max(0.0, (end - datetime.datetime.now(datetime.timezone.utc)).total_seconds()) + 1.5)
    out = playbook(inv, delete_node_book(api, tmp_path, node, record))
    assert kube.get_node(node) is not None, "the Node was deleted after its change window closed"
    assert "window: expired at %s" % ls.iso(end) in out.stdout, out.stdout[-3000:]


def test_a_node_that_is_not_a_target_of_the_change_is_not_deleted(people, api, tmp_path):
    kube = api["kube"]
    approved, dummy = make_node(kube)
    other, dummy = make_node(kube)
    # a record for both nodes and a started removal of each; the task on one host names the other
    inv = inventory(people, tmp_path, host=approved, others=(other,))
    paths = dict((n, write_manifest(tmp_path, n, api_objects=[{"resource": "nodes", "namespace": "", "name": n}]))
                 for n in (approved, other))
    record = signed_record(people, tmp_path, approved, "CHG-ATK-TGT", manifests=paths, targets=(approved, other))
    book = tmp_path / "start.yml"
    book.write_text(yaml.safe_dump([{"name": "p", "hosts": "all", "gather_facts": False,
                                     "tasks": [start_task(tmp_path, "{{ inventory_hostname }}", record)]}]))
    out = playbook(inv, book)
    assert out.returncode == 0, out.stdout[-3000:]
    out = playbook(inv, delete_node_book(api, tmp_path, approved, record, hosts="all", on=other))
    assert kube.get_node(approved) is not None, "a Node that is not the task's host was deleted:\n" + out.stdout[-3000:]
    assert "the node %s is not the host this task runs for (%s)" % (approved, other) in out.stdout, out.stdout[-3000:]
    # a record that does not name the node the task runs on
    record = signed_record(people, tmp_path, approved, "CHG-ATK-TGT2", manifests={approved: paths[approved]})
    out = playbook(inv, delete_node_book(api, tmp_path, other, record))
    assert kube.get_node(other) is not None, "a Node the change record does not name was deleted"
    assert "targets: %s not in the approved targets" % other in out.stdout, out.stdout[-3000:]


def test_only_the_bootstrap_tokens_the_signed_manifest_recorded_are_deleted(people, api, tmp_path):
    """A valid record and a started removal: a task asking to delete another bootstrap token
    Secret is refused and the Secret stays; the recorded one goes."""
    kube = api["kube"]
    node, dummy = make_node(kube)
    ours, other = "bootstrap-token-%s" % secrets.token_hex(3), "bootstrap-token-%s" % secrets.token_hex(3)
    for name in (ours, other):
        kube.create_secret("kube-system", {"metadata": {"name": name}, "type": "bootstrap.kubernetes.io/token",
                                           "stringData": {"token-id": name[-6:], "token-secret": secrets.token_hex(8)}})
    inv = inventory(people, tmp_path, host=node)
    manifest_path = write_manifest(tmp_path, node, api_objects=[
        {"resource": "nodes", "namespace": "", "name": node},
        {"resource": "secrets", "namespace": "kube-system", "name": ours}])
    record = signed_record(people, tmp_path, node, "CHG-ATK-BT", manifest_path)
    tasks = [start_task(tmp_path, node, record)] + [
        {"name": "Delete %s" % name, "ignore_errors": True, "hybridgpu.fleet.k8s_node_removal": dict(
            api["conn"], state="bootstrap_token_deleted", name=name, node=node, record_path=record, executor="ops-lead")}
        for name in (other, ours)]
    book = tmp_path / "book.yml"
    book.write_text(yaml.safe_dump([{"name": "p", "hosts": node, "gather_facts": False, "tasks": tasks}]))
    out = playbook(inv, book)
    assert kube.get_secret("kube-system", other) is not None, "a bootstrap token the manifest did not record was deleted"
    assert "bootstrap token Secret kube-system/%s is not one the onboarding manifest of %s recorded" % (other, node) \
        in out.stdout, out.stdout[-3000:]
    assert kube.get_secret("kube-system", ours) is None, out.stdout[-3000:]


def test_a_removal_under_the_pinned_checkpoint_key_signs_its_claim(people, tmp_path):
    """With hgpu_audit_checkpoint_key set, the removal's steps take the pinned key: the claim's
    head is signed and the approved file goes."""
    ours = tmp_path / "agent.conf"
    ours.write_text("written by onboarding\n")
    key = ls.keygen(str(tmp_path / "checkpoint-key"), "audit checkpoints")
    assert key
    record = signed_record(people, tmp_path, "localhost", "CHG-ATK-KEY", write_manifest(tmp_path, "localhost", files=[ours]))
    out = run_agents(people, tmp_path, record, host_vars={"hgpu_audit_checkpoint_key": str(tmp_path / "checkpoint-key")})
    assert out.returncode == 0, out.stdout[-3000:]
    assert not ours.exists()
    anchors = (tmp_path / "records" / "audit" / "audit.jsonl.anchors").read_text()
    assert '"type": "checkpoint"' in anchors or '"type":"checkpoint"' in anchors
