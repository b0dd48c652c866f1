"""Before/after comparison of workloads on other nodes."""
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle.workloads import compare


def test_compare_names_affected_pods_and_jobs():
    before = {"pods": {"a/keep": {"node": "n1", "uid": "1", "phase": "Running"},
                       "a/gone": {"node": "n1", "uid": "2", "phase": "Running"},
                       "a/new": {"node": "n3", "uid": "3", "phase": "Running"},
                       "a/drained": {"node": "n2", "uid": "4", "phase": "Running"},
                       "a/done": {"node": "n1", "uid": "5", "phase": "Succeeded"}},
              "jobs": {"a/j1": {"active": 1, "succeeded": 0, "failed": 0, "complete": False,
                                "failed_condition": False},
                       "a/j2": {"active": 1, "succeeded": 0, "failed": 0, "complete": False,
                                "failed_condition": False}}}
    after = {"pods": {"a/keep": {"node": "n1", "uid": "1", "phase": "Running"},
                      "a/new": {"node": "n3", "uid": "9", "phase": "Running"}},
             "jobs": {"a/j1": {"active": 0, "succeeded": 1, "failed": 0, "complete": True,
                               "failed_condition": False},
                      "a/j2": {"active": 0, "succeeded": 0, "failed": 1, "complete": False,
                               "failed_condition": True}}}
    res = compare(before, after, exclude_nodes=["n2"])
    assert res["affected"] and res["checked_pods"] == 3
    assert [(p["pod"], p["problem"]) for p in res["pods"]] == [("a/new", "replaced (new uid)")]
    assert res["deleted"] == [{"pod": "a/gone", "node": "n1"}]
    assert [j["job"] for j in res["jobs"]] == ["a/j2"]


def test_nothing_changed_is_not_affected():
    snap = {"pods": {"a/p": {"node": "n1", "uid": "1", "phase": "Running"}}, "jobs": {}}
    assert compare(snap, snap, ["n2"]) == {"affected": False, "pods": [], "jobs": [], "deleted": [],
                                           "checked_pods": 1, "checked_jobs": 0}
