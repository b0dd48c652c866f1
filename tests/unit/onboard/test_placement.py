"""Placement planning and the read-plan-write loop (409 -> re-read) without a cluster."""
import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import placement

PREFIXES = placement.DEFAULT_PREFIXES


def node(labels=None, taints=None, rv="7"):
    return {"metadata": {"name": "n1", "resourceVersion": rv, "labels": labels or {}},
            "spec": {"taints": taints or []}}


def test_label_outside_prefixes_is_refused_naming_it():
    with pytest.raises(placement.PlacementError) as err:
        placement.normalize({"hybridgpu.io/side": "owned", "example.com/team": "a"}, [])
    assert "labels[example.com/team]" in str(err.value) and "outside the allowed prefixes" in str(err.value)


@pytest.mark.parametrize("labels, taints, needle", [
    ({"hybridgpu.io/side": "not ok!"}, [], "value"),
    ({"hybridgpu.io/" + "x" * 64: "a"}, [], "name part"),
    ({}, [{"key": "hybridgpu.io/x", "effect": "Sometimes"}], "effect"),
    ({}, [{"key": "other.io/x", "effect": "NoSchedule"}], "outside the allowed prefixes"),
    ({}, [{"key": "hybridgpu.io/x", "effect": "NoSchedule"}] * 2, "declared twice"),
    ({}, [{"key": "hybridgpu.io/x", "effect": "NoSchedule", "colour": 1}], "unknown field"),
])
def test_bad_declarations(labels, taints, needle):
    with pytest.raises(placement.PlacementError) as err:
        placement.normalize(labels, taints)
    assert needle in str(err.value)


def test_values_are_converted_to_strings():
    labels, dummy = placement.normalize({"hybridgpu.io/gpus": 8, "hybridgpu.io/ok": True}, [])
    assert labels == {"hybridgpu.io/gpus": "8", "hybridgpu.io/ok": "true"}


def test_plan_sets_removes_and_leaves_foreign_keys_alone():
    current = node(labels={"kubernetes.io/hostname": "n1", "hybridgpu.io/side": "cloud",
                           "hybridgpu.io/old": "x", "nvidia.com/gpu.count": "8"},
                   taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                           {"key": "hybridgpu.io/gone", "effect": "NoExecute", "timeAdded": "t"}])
    labels, taints = placement.normalize({"hybridgpu.io/side": "owned",
                                          "node-restriction.kubernetes.io/data-class": "restricted"},
                                         [{"key": "hybridgpu.io/owned", "value": "true", "effect": "PreferNoSchedule"}])
    res = placement.plan(current, labels, taints, PREFIXES)
    assert res["changed"]
    assert res["patch"]["metadata"] == {
        "resourceVersion": "7",
        "labels": {"hybridgpu.io/side": "owned", "node-restriction.kubernetes.io/data-class": "restricted",
                   "hybridgpu.io/old": None}}
    assert res["patch"]["spec"]["taints"] == [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
        {"key": "hybridgpu.io/owned", "value": "true", "effect": "PreferNoSchedule"}]
    assert res["removed_labels"] == ["hybridgpu.io/old"]
    assert res["removed_taints"] == [{"key": "hybridgpu.io/gone", "effect": "NoExecute"}]
    assert res["before"]["labels"] == {"hybridgpu.io/side": "cloud", "hybridgpu.io/old": "x"}
    d = placement.diff_text(res)
    assert "label hybridgpu.io/old=x" in d["before"] and "hybridgpu.io/old" not in d["after"]
    assert "taint hybridgpu.io/owned=true:PreferNoSchedule" in d["after"]


def test_plan_is_a_no_op_when_converged():
    labels, taints = placement.normalize({"hybridgpu.io/side": "owned"},
                                         [{"key": "hybridgpu.io/owned", "value": "true", "effect": "PreferNoSchedule"}])
    current = node(labels={"hybridgpu.io/side": "owned", "kubernetes.io/hostname": "n1"},
                   taints=[{"key": "hybridgpu.io/owned", "value": "true", "effect": "PreferNoSchedule",
                            "timeAdded": "2026-01-01T00:00:00Z"}])
    res = placement.plan(current, labels, taints, PREFIXES)
    assert not res["changed"] and res["patch"] is None


def test_labels_only_change_does_not_touch_taints():
    labels, taints = placement.normalize({"hybridgpu.io/side": "owned"}, [])
    res = placement.plan(node(), labels, taints, PREFIXES)
    assert "spec" not in res["patch"]


class Conflict(Exception):
    conflict = True


class FakeKube:
    """Serves a Node; the first patch meets a concurrent writer (409)."""

    def __init__(self, conflicts=1, exists=True):
        self.node = node(labels={"hybridgpu.io/old": "x"}) if exists else None
        self.conflicts = conflicts
        self.patches = []
        self.gets = 0

    def get_node(self, name):
        self.gets += 1
        return self.node

    def patch_node(self, name, patch, patch_type):
        assert patch_type == "merge"
        self.patches.append(patch)
        if self.conflicts:
            self.conflicts -= 1
            # someone else wrote meanwhile
            self.node["metadata"]["resourceVersion"] = str(int(self.node["metadata"]["resourceVersion"]) + 1)
            raise Conflict("409")
        labels = self.node["metadata"]["labels"]
        for k, v in patch["metadata"].get("labels", {}).items():
            if v is None:
                labels.pop(k, None)
            else:
                labels[k] = v
        return self.node


def test_conflict_rereads_and_retries_with_the_new_resource_version():
    kube = FakeKube(conflicts=1)
    res = placement.ensure(kube, "n1", {"hybridgpu.io/side": "owned"}, [])
    assert res["attempts"] == 2 and kube.gets == 2
    assert [p["metadata"]["resourceVersion"] for p in kube.patches] == ["7", "8"]
    assert kube.node["metadata"]["labels"] == {"hybridgpu.io/side": "owned"}
    again = placement.ensure(kube, "n1", {"hybridgpu.io/side": "owned"}, [])
    assert not again["changed"] and len(kube.patches) == 2


def test_check_mode_writes_nothing():
    kube = FakeKube(conflicts=0)
    res = placement.ensure(kube, "n1", {"hybridgpu.io/side": "owned"}, [], check_mode=True)
    assert res["changed"] and kube.patches == []


def test_missing_node_and_bad_input_fail_before_any_write():
    with pytest.raises(placement.PlacementError, match="join the node first"):
        placement.ensure(FakeKube(exists=False), "n1", {"hybridgpu.io/side": "owned"}, [])
    kube = FakeKube()
    with pytest.raises(placement.PlacementError):
        placement.ensure(kube, "n1", {"team.example.com/x": "y"}, [])
    assert kube.gets == 0 and kube.patches == []
