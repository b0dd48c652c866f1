"""k8s_drain logic against an in-process API emulator on 127.0.0.1 (real HTTP, official client)."""
import os
import secrets
import sys
import time

import pytest
from kubernetes import client, config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LAB = os.path.join(REPO, "tests", "lab")
if LAB not in sys.path:
    sys.path.insert(0, LAB)

import labpki  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle.drain import Drainer, classify  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import Kube  # noqa: E402

NS = "drain-test"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from k8s_emulator import serve
    work = str(tmp_path_factory.mktemp("emu"))
    ca, dummy = labpki.make_ca(work)
    crt, key = labpki.make_server_cert(work, work, ["127.0.0.1", "localhost"])
    token = secrets.token_hex(16)
    tokens = os.path.join(work, "tokens.csv")
    with open(tokens, "w") as fh:
        fh.write('%s,admin,admin-uid,"system:masters"\n' % token)
    srv = serve(cluster="drain", binds=["127.0.0.1"], port=0, cert=crt, key=key, token_file=tokens,
                node_grace=3600.0, log_file=os.path.join(work, "requests.log"),
                confirm_pod_deletion=True)  # no kubelet here: the server confirms pod deletions
    kubeconfig = labpki.write_kubeconfig(os.path.join(work, "admin.kubeconfig"),
                                         [("drain", srv.url, ca, token)])
    core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig, context="drain"))
    core.create_namespace({"metadata": {"name": NS}})
    yield {"kubeconfig": kubeconfig, "core": core,
           "policy": client.PolicyV1Api(core.api_client)}
    srv.stop()


@pytest.fixture
def node(cluster):
    core = cluster["core"]
    name = "drain-%s" % secrets.token_hex(3)
    core.create_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                      "status": {"capacity": {"nvidia.com/gpu": "8"},
                                 "allocatable": {"nvidia.com/gpu": "8"}}})
    yield name
    core.delete_node(name)
    # pod GC removes the node's pods in a later controller pass: wait for it, so the next test
    # can create pods of the same names
    deadline = time.monotonic() + 5
    while pods_on(cluster, name) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pdb in cluster["policy"].list_namespaced_pod_disruption_budget(NS).items:
        cluster["policy"].delete_namespaced_pod_disruption_budget(pdb.metadata.name, NS)


def kube(cluster):
    return Kube({"kubeconfig": cluster["kubeconfig"], "context": "drain", "request_timeout": 5},
                backoff=0.01)


def pod(cluster, node, name, owner="ReplicaSet", labels=None, running=True, annotations=None):
    meta = {"name": name, "labels": labels or {}, "annotations": annotations or {}}
    if owner:
        # The emulator collects dependents whose owner uid is missing, and serves no
        # ReplicaSets or DaemonSets: a ConfigMap stands in as the owner object.
        cm = cluster["core"].create_namespaced_config_map(NS, {"metadata": {
            "name": "own-%s-%s" % (name, secrets.token_hex(2))}})
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": cm.metadata.name,
                                    "uid": cm.metadata.uid, "controller": True}]
    cluster["core"].create_namespaced_pod(NS, {"metadata": meta, "spec": {
        "nodeName": node, "containers": [{"name": "c", "image": "x", "command": ["sleep", "1"]}]}})
    if running:
        cluster["core"].patch_namespaced_pod_status(name, NS, {"status": {
            "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})


def pdb(cluster, name, labels, min_available):
    cluster["policy"].create_namespaced_pod_disruption_budget(NS, {
        "metadata": {"name": name},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": labels}}})
    time.sleep(0.5)  # the emulator's controller computes status every 0.2 s


def pods_on(cluster, node):
    return sorted(p.metadata.name for p in cluster["core"].list_namespaced_pod(
        NS, field_selector="spec.nodeName=%s" % node).items)


def unschedulable(cluster, node):
    return bool(cluster["core"].read_node(node).spec.unschedulable)


def test_classify_skips_mirror_and_daemonset_and_blocks_unmanaged():
    def p(name, owner=None, ann=None, phase="Running"):
        meta = {"name": name, "namespace": "n", "annotations": ann or {}}
        if owner:
            meta["ownerReferences"] = [{"kind": owner, "name": "o", "controller": True}]
        return {"metadata": meta, "status": {"phase": phase}}
    evict, skipped, blockers = classify([
        p("rs", "ReplicaSet"), p("ds", "DaemonSet"), p("static", "Node", {"kubernetes.io/config.mirror": "x"}),
        p("bare"), p("done", phase="Succeeded")])
    assert [i["name"] for i in evict] == ["rs", "done"]
    assert sorted(i["name"] for i in skipped) == ["ds", "static"]
    assert [i["name"] for i in blockers] == ["bare"]
    evict, dummy, blockers = classify([p("bare")], allow_unmanaged=True)
    assert [i["name"] for i in evict] == ["bare"] and not blockers


def test_check_mode_lists_and_changes_nothing(cluster, node):
    pod(cluster, node, "a-1")
    pod(cluster, node, "ds-1", owner="DaemonSet")
    res = Drainer(kube(cluster), node).drain(check_mode=True)
    assert res["changed"] and not res["failed"]
    assert [i["name"] for i in res["would_evict"]] == ["a-1"]
    assert [i["name"] for i in res["skipped"]] == ["ds-1"]
    assert not unschedulable(cluster, node) and pods_on(cluster, node) == ["a-1", "ds-1"]


def test_drain_evicts_in_parallel_and_second_run_is_unchanged(cluster, node):
    for i in range(6):
        pod(cluster, node, "w-%d" % i, labels={"app": "w"})
    pod(cluster, node, "ds-1", owner="DaemonSet")
    res = Drainer(kube(cluster), node, timeout=20, parallel=4).drain()
    assert not res["failed"] and res["changed"] and not res["was_cordoned"]
    assert sorted(i["name"] for i in res["evicted"]) == ["w-%d" % i for i in range(6)]
    assert pods_on(cluster, node) == ["ds-1"] and unschedulable(cluster, node)
    assert res["duration_s"] < 20
    again = Drainer(kube(cluster), node, timeout=20).drain()
    assert not again["changed"] and not again["failed"] and again["was_cordoned"]


def test_pdb_refusal_is_retried_until_it_allows(cluster, node):
    for i in range(2):
        pod(cluster, node, "db-%d" % i, labels={"app": "db"})
    pdb(cluster, "db", {"app": "db"}, 2)
    core = cluster["core"]

    # After ~1.5 s two replacements start elsewhere (what a ReplicaSet would do): the budget
    # then allows the disruptions it refused so far.
    other = node + "-x"
    core.create_node({"metadata": {"name": other}})

    def relax():
        time.sleep(1.5)
        for i in range(2):
            core.create_namespaced_pod(NS, {"metadata": {"name": "db-new-%d" % i, "labels": {"app": "db"}},
                                            "spec": {"nodeName": other, "containers": [
                                                {"name": "c", "image": "x"}]}})
            core.patch_namespaced_pod_status("db-new-%d" % i, NS, {"status": {
                "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
    import threading
    try:
        threading.Thread(target=relax, daemon=True).start()
        res = Drainer(kube(cluster), node, timeout=10, retry_interval=0.3).drain()
        assert not res["failed"], res.get("msg")
        assert sorted(i["name"] for i in res["evicted"]) == ["db-0", "db-1"]
        assert max(i["attempts"] for i in res["evicted"]) > 1  # refused first, then allowed
        assert res["duration_s"] > 1.4
    finally:
        core.delete_node(other)  # its pods go with it (pod GC)


def test_blocked_drain_times_out_inside_and_uncordons(cluster, node):
    pod(cluster, node, "pinned", labels={"app": "pinned"})
    pdb(cluster, "pinned", {"app": "pinned"}, 1)
    t0 = time.monotonic()
    res = Drainer(kube(cluster), node, timeout=2.0, retry_interval=0.2).drain()
    took = time.monotonic() - t0
    # ends at its own timeout (a drain that ignored it would wait for the budget for ever); the
    # margin is for a busy machine, where each API round trip is slower
    assert res["failed"] and res["timed_out"] and took < 10.0, (res.get("msg"), took)
    assert [b["name"] for b in res["blockers"]] == ["pinned"]
    assert "disruption budget" in res["blockers"][0]["reason"]
    assert res["uncordoned_on_failure"] and not unschedulable(cluster, node)
    assert "The Node was not deleted" in res["msg"]
    assert cluster["core"].read_node(node).metadata.name == node
    assert pods_on(cluster, node) == ["pinned"]


def test_failed_drain_keeps_a_node_cordoned_before_the_run(cluster, node):
    pod(cluster, node, "pinned", labels={"app": "pinned"})
    pdb(cluster, "pinned", {"app": "pinned"}, 1)
    cluster["core"].patch_node(node, {"spec": {"unschedulable": True}})
    res = Drainer(kube(cluster), node, timeout=1.0, retry_interval=0.2).drain()
    assert res["failed"] and res["was_cordoned"] and not res["uncordoned_on_failure"]
    assert unschedulable(cluster, node) and "stays cordoned" in res["msg"]


def test_force_delete_only_with_the_flag_and_recorded(cluster, node):
    pod(cluster, node, "pinned", labels={"app": "pinned"})
    pdb(cluster, "pinned", {"app": "pinned"}, 1)
    res = Drainer(kube(cluster), node, timeout=2.0, retry_interval=0.2, force_delete=True,
                  force_after=1.2).drain()
    assert not res["failed"], res.get("msg")
    assert [i["name"] for i in res["force_deleted"]] == ["pinned"] and not res["evicted"]
    assert "disruption budget" in res["force_deleted"][0]["reason"]
    assert pods_on(cluster, node) == []


def test_unmanaged_pod_blocks_unless_allowed(cluster, node):
    pod(cluster, node, "bare", owner=None)
    res = Drainer(kube(cluster), node, timeout=5).drain()
    assert res["failed"] and "no controller" in res["msg"] and not unschedulable(cluster, node)
    res = Drainer(kube(cluster), node, timeout=5, allow_unmanaged=True).drain()
    assert not res["failed"] and [i["name"] for i in res["evicted"]] == ["bare"]


def test_missing_node_is_an_error_not_a_silent_success(cluster):
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
    with pytest.raises(K8sError, match="does not exist"):
        Drainer(kube(cluster), "no-such-node").drain()


def test_cordon_and_uncordon_read_the_node_only(cluster, node):
    pod(cluster, node, "bystander")
    k = kube(cluster)

    def no_pods(*args, **kwargs):
        raise AssertionError("cordon/uncordon listed pods")
    k.list_pods = k.pods_on_node = no_pods
    d = Drainer(k, node)
    assert d.cordon(check_mode=True) == {"node": node, "was_cordoned": False, "changed": True}
    assert not cluster["core"].read_node(node).spec.unschedulable
    assert d.cordon() == {"node": node, "was_cordoned": False, "changed": True}
    assert cluster["core"].read_node(node).spec.unschedulable
    assert d.cordon() == {"node": node, "was_cordoned": True, "changed": False}
    assert d.uncordon(check_mode=True)["changed"] is True
    assert d.uncordon() == {"node": node, "was_cordoned": True, "changed": True}
    assert not cluster["core"].read_node(node).spec.unschedulable
    assert d.uncordon()["changed"] is False


# --- the drain verifies the change record itself -------------------------------------------------
def drain_task(cluster, tmp_path, node, people, record, extra_vars=None, **args):
    """One hybridgpu.fleet.k8s_drain task on localhost as the drain role runs it (the pinned
    boundary, signers and records folder from the inventory); returns the task's result."""
    import json
    import subprocess
    import yaml
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {"hgpu_boundary_signers": people["signers"], "hgpu_boundary_path": people["boundary"],
                 "hgpu_records_dir": str(tmp_path / "records")}}}))
    task = dict({"kubeconfig": cluster["kubeconfig"], "context": "drain", "name": node, "state": "cordoned",
                 "change_action": "driver_upgrade", "record_path": record, "executor": "ops-oncall"}, **args)
    task = {k: v for k, v in task.items() if v is not None}
    (tmp_path / "play.yml").write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"hybridgpu.fleet.k8s_drain": task, "register": "out", "ignore_errors": True},
        {"ansible.builtin.copy": {"content": "{{ out | to_json }}", "dest": str(tmp_path / "out.json")}}]}]))
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(tmp_path / "inventory.yml"),
           str(tmp_path / "play.yml")]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    subprocess.run(cmd, env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg")),
                   capture_output=True, text=True, cwd=REPO, check=False, timeout=120)
    return json.loads((tmp_path / "out.json").read_text())


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import lifecycle_support as ls  # pylint: disable=import-outside-toplevel
    return dict(ls.make_approvers(str(tmp_path_factory.mktemp("approvers"))), ls=ls)


def test_a_drain_without_a_verified_record_leaves_the_node_schedulable(cluster, node, people, tmp_path):
    ls = people["ls"]
    unsigned = ls.write_record(str(tmp_path), "unsigned.yml", ls.record_text(change_id="CHG-DR-1", targets=("localhost", node)))
    other = ls.write_record(str(tmp_path), "other.yml", ls.record_text(change_id="CHG-DR-2", targets=("localhost", "some-node")),
                            people["keys"]["sec-owner"])
    cases = ((unsigned, {}, "unsigned: no signature file"),
             (other, {}, "Node %s is not one of the approved targets" % node),
             (other, {"change_action": "remove"}, "the record approves 'driver_upgrade', this run does 'remove'"))
    for record, args, says in cases:
        out = drain_task(cluster, tmp_path, node, people, record, **args)
        assert out["failed"] and says in out["msg"], out
        assert not unschedulable(cluster, node)
    # the same, started past the play's approval with a verified change given as an extra var
    out = drain_task(cluster, tmp_path, node, people, None, extra_vars={"drain_change": {"change_id": "CHG-FAKE"}})
    assert out["failed"] and "drain_change given as an extra var" in out["msg"], out
    assert not unschedulable(cluster, node)


def test_a_drain_under_its_verified_record_cordons(cluster, node, people, tmp_path):
    ls = people["ls"]
    record = ls.write_record(str(tmp_path), "chg.yml", ls.record_text(change_id="CHG-DR-3", targets=("localhost", node)),
                             people["keys"]["sec-owner"])
    out = drain_task(cluster, tmp_path, node, people, record)
    assert not out.get("failed") and out["changed"] and out["change_id"] == "CHG-DR-3", out
    assert unschedulable(cluster, node)
