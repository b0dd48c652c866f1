"""Unit tests for the emulator's patch and selector code (no server)."""
import os
import sys

import pytest

LAB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lab")
sys.path.insert(0, os.path.abspath(LAB))

from k8s_emulator import patch, selectors  # noqa: E402
from k8s_emulator.controllers import affinity_matches, pdb_numbers, tolerates  # noqa: E402
from k8s_emulator.store import ApiError, Store  # noqa: E402
from k8s_emulator.resources import BY_PLURAL  # noqa: E402


# RFC 7386 appendix A examples (a subset)
@pytest.mark.parametrize("target,p,want", [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
])
def test_merge_patch_rfc7386(target, p, want):
    assert patch.merge_patch(target, p) == want


def test_strategic_merge_conditions_containers_taints():
    node = {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"},
                                      {"type": "DiskPressure", "status": "False"}]}}
    out = patch.strategic_merge_patch(node, {
        "spec": {"taints": [{"key": "b", "effect": "NoExecute"}]},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown"},
                                  {"type": "DiskPressure", "$patch": "delete"},
                                  {"type": "GPU", "status": "True"}]}}, "Node")
    assert out["spec"]["taints"] == [{"key": "b", "effect": "NoExecute"}]
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "Unknown"},
                                           {"type": "GPU", "status": "True"}]
    pod = {"spec": {"containers": [{"name": "a", "image": "x", "env": [{"name": "A", "value": "1"}]},
                                   {"name": "b", "image": "y"}]},
           "metadata": {"finalizers": ["f1"]}}
    out = patch.strategic_merge_patch(pod, {
        "metadata": {"finalizers": ["f2"]},
        "spec": {"containers": [{"name": "a", "env": [{"name": "B", "value": "2"}]}]}}, "Pod")
    assert out["metadata"]["finalizers"] == ["f1", "f2"]
    assert out["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert out["spec"]["containers"][1] == {"name": "b", "image": "y"}
    out = patch.strategic_merge_patch(
        pod, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["f1"]}}, "Pod")
    assert out["metadata"]["finalizers"] == []
    with pytest.raises(patch.PatchError):
        patch.strategic_merge_patch(node, {"status": {"conditions": [{"status": "x"}]}}, "Node")


def test_json_patch_rfc6902():
    doc = {"metadata": {"labels": {"a/b": "1"}}, "l": [1, 2]}
    out = patch.json_patch(doc, [
        {"op": "add", "path": "/metadata/labels/c", "value": "3"},
        {"op": "remove", "path": "/metadata/labels/a~1b"},
        {"op": "add", "path": "/l/-", "value": 3},
        {"op": "replace", "path": "/l/0", "value": 0},
        {"op": "copy", "from": "/l", "path": "/m"},
        {"op": "move", "from": "/m", "path": "/n"},
        {"op": "test", "path": "/n/2", "value": 3}])
    assert out == {"metadata": {"labels": {"c": "3"}}, "l": [0, 2, 3], "n": [0, 2, 3]}
    assert doc["l"] == [1, 2]  # input untouched
    with pytest.raises(patch.PatchError):
        patch.json_patch(doc, [{"op": "test", "path": "/l/0", "value": 9}])
    with pytest.raises(patch.PatchError):
        patch.json_patch(doc, [{"op": "remove", "path": "/nope"}])


@pytest.mark.parametrize("sel,labels,want", [
    ("a=b", {"a": "b"}, True),
    ("a==b,c", {"a": "b"}, False),
    ("a!=b", {}, True),
    ("a in (x, y),b notin (z)", {"a": "y", "b": "z"}, False),
    ("a in (x, y),b notin (z)", {"a": "y"}, True),
    ("!a", {"a": ""}, False),
    ("n>3", {"n": "4"}, True),
    ("", {"a": "b"}, True),
])
def test_label_selectors(sel, labels, want):
    assert selectors.labels_match(selectors.parse_label_selector(sel), labels) is want


@pytest.mark.parametrize("bad", ["a in (b", "a=b,", "=b", "a===b"])
def test_bad_label_selectors(bad):
    with pytest.raises(selectors.SelectorError):
        selectors.parse_label_selector(bad)


def test_field_selectors():
    allowed = {"metadata.name", "spec.nodeName", "spec.unschedulable"}
    reqs = selectors.parse_field_selector("spec.nodeName=,metadata.name!=x", allowed)
    assert selectors.fields_match(reqs, {"metadata": {"name": "y"}, "spec": {}})
    assert not selectors.fields_match(reqs, {"metadata": {"name": "y"}, "spec": {"nodeName": "n"}})
    reqs = selectors.parse_field_selector("spec.unschedulable=false", allowed)
    assert selectors.fields_match(reqs, {"spec": {}})
    with pytest.raises(selectors.SelectorError):
        selectors.parse_field_selector("status.bogus=1", allowed)


def test_affinity_and_tolerations():
    node = {"metadata": {"name": "n1", "labels": {"gpu": "a100", "count": "8"}}}

    def pod(*exprs, fields=()):
        return {"spec": {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": list(exprs), "matchFields": list(fields)}]}}}}}

    assert affinity_matches(pod({"key": "gpu", "operator": "In", "values": ["a100"]}), node)
    assert not affinity_matches(pod({"key": "gpu", "operator": "NotIn", "values": ["a100"]}), node)
    assert affinity_matches(pod({"key": "count", "operator": "Gt", "values": ["4"]}), node)
    assert not affinity_matches(pod({"key": "count", "operator": "Lt", "values": ["4"]}), node)
    assert affinity_matches(pod({"key": "x", "operator": "DoesNotExist"}), node)
    assert affinity_matches(pod(fields=[{"key": "metadata.name", "operator": "In",
                                         "values": ["n1"]}]), node)
    assert not affinity_matches({"spec": {"nodeSelector": {"gpu": "h200"}}}, node)
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert tolerates([{"key": "k", "operator": "Equal", "value": "v"}], taint)
    assert not tolerates([{"key": "k", "value": "w"}], taint)
    assert tolerates([{"operator": "Exists"}], taint)
    assert not tolerates([{"key": "k", "operator": "Exists", "effect": "NoExecute"}], taint)


def test_pdb_numbers_percentages():
    store = Store()
    pods = BY_PLURAL["pods"]
    for i in range(4):
        store.create(pods, "default", {"metadata": {"name": "p%d" % i, "labels": {"app": "x"}},
                                       "spec": {"containers": [{"name": "c"}]}})
        obj = store.objects["pods"][("default", "p%d" % i)]
        obj["status"]["phase"] = "Running" if i < 3 else "Pending"
        if i < 3:  # healthy means Ready=True, as the disruption controller counts
            obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    pdb = {"metadata": {"namespace": "default", "name": "b"},
           "spec": {"selector": {"matchLabels": {"app": "x"}}, "minAvailable": "50%"}}
    assert pdb_numbers(store, pdb) == (4, 3, 2, 1)
    pdb["spec"] = {"selector": {"matchLabels": {"app": "x"}}, "maxUnavailable": "30%"}
    assert pdb_numbers(store, pdb) == (4, 3, 2, 1)


def test_store_conflicts_and_validation():
    store = Store()
    nodes = BY_PLURAL["nodes"]
    n = store.create(nodes, None, {"metadata": {"name": "n1"}})
    store.patch(nodes, None, "n1", "application/merge-patch+json",
                {"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(ApiError) as exc:
        store.update(nodes, None, "n1", n)
    assert exc.value.code == 409 and exc.value.reason == "Conflict"
    with pytest.raises(ApiError) as exc:
        store.patch(nodes, None, "n1", "application/merge-patch+json",
                    {"metadata": {"labels": {"bad value": "x"}}})
    assert exc.value.code == 422
    with pytest.raises(ApiError) as exc:
        store.create(BY_PLURAL["pods"], "missing", {"metadata": {"name": "p"}})
    assert exc.value.code == 404


def test_job_backoff_limit_fails_job():
    from k8s_emulator.controllers import Controllers
    from k8s_emulator.store import now_rfc3339
    store = Store()
    ctl = Controllers(store, node_grace=60)
    store.create(BY_PLURAL["nodes"], None, {
        "metadata": {"name": "n1"}, "status": {"conditions": [
            {"type": "Ready", "status": "True",
             "lastHeartbeatTime": now_rfc3339()}]}})
    store.create(BY_PLURAL["jobs"], "default", {"metadata": {"name": "j"}, "spec": {
        "backoffLimit": 1, "template": {"spec": {"restartPolicy": "Never",
                                                 "containers": [{"name": "c"}]}}}})
    for dummy in range(2):
        ctl.run_once()
        pods = [p for p in store.items("pods", "default") if p["status"]["phase"] != "Failed"]
        assert len(pods) == 1 and pods[0]["spec"]["nodeName"] == "n1"
        pods[0]["status"]["phase"] = "Failed"
        ctl.run_once()
    job = store.objects["jobs"][("default", "j")]
    conds = {c["type"]: c["status"] for c in job["status"]["conditions"]}
    assert conds["Failed"] == "True" and conds["FailureTarget"] == "True"
    assert job["status"]["failed"] == 2 and "completionTime" not in job["status"]
