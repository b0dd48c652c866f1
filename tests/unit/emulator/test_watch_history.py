"""The emulator store's write history: watch events, Exact reads, compaction, no-op writes."""
import os
import sys
import threading

import pytest

LAB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lab")
sys.path.insert(0, os.path.abspath(LAB))

from k8s_emulator import store as storemod  # noqa: E402
from k8s_emulator.errors import ApiError  # noqa: E402
from k8s_emulator.resources import BY_PLURAL  # noqa: E402

NODES, NS, CMS = BY_PLURAL["nodes"], BY_PLURAL["namespaces"], BY_PLURAL["configmaps"]
MERGE = "application/merge-patch+json"


def _drain(events):
    return [(e["type"], e["object"]["metadata"].get("name")) for e in events]


def test_watch_replays_from_a_version_and_ends_at_the_timeout():
    st = storemod.Store()
    rv = st.rv
    st.create(NODES, None, {"metadata": {"name": "a", "labels": {"p": "x"}}})
    st.patch(NODES, None, "a", MERGE, {"metadata": {"labels": {"p": "y"}}})
    st.patch(NODES, None, "a", MERGE, {"metadata": {"labels": {"p": "x"}}})
    st.delete(NODES, None, "a")
    got = _drain(st.watch(NODES, label_selector="p=x", resource_version=str(rv), timeout=0.2))
    assert got == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "a"), ("DELETED", "a")]


def test_watch_wakes_on_writes_and_stops_when_told():
    st = storemod.Store()
    stopped = threading.Event()
    events = st.watch(NODES, resource_version=str(st.rv), timeout=5, stopped=stopped)
    threading.Timer(0.1, lambda: st.create(NODES, None, {"metadata": {"name": "b"}})).start()
    assert next(events)["type"] == "ADDED"
    stopped.set()
    assert list(events) == []


def test_too_old_and_exact_reads(monkeypatch):
    monkeypatch.setattr(storemod, "HISTORY", 3)
    st = storemod.Store()
    with pytest.raises(ApiError) as exc:
        st.list(NODES, resource_version="1", match="Exact")
    assert exc.value.code == 410
    first = st.create(NODES, None, {"metadata": {"name": "a"}})["metadata"]["resourceVersion"]
    st.create(NODES, None, {"metadata": {"name": "b"}})
    st.delete(NODES, None, "a")
    exact = st.list(NODES, resource_version=first, match="Exact")
    assert [o["metadata"]["name"] for o in exact["items"]] == ["a"]
    for name in ("c", "d", "e"):
        st.create(NODES, None, {"metadata": {"name": name}})
    assert st.compacted_rv > int(first)
    assert next(st.watch(NODES, resource_version=first, timeout=1))["type"] == "ERROR"
    with pytest.raises(ApiError) as exc:
        st.list(NODES, resource_version=str(st.rv + 10), match="NotOlderThan")
    assert exc.value.code == 504


def test_noop_write_has_no_new_version_and_namespace_delete_emits_deletes():
    st = storemod.Store()
    st.create(NS, None, {"metadata": {"name": "t"}})
    cm = st.create(CMS, "t", {"metadata": {"name": "c"}, "data": {"k": "v"}})
    same = st.patch(CMS, "t", "c", MERGE, {"data": {"k": "v"}})
    assert same["metadata"]["resourceVersion"] == cm["metadata"]["resourceVersion"]
    rv = st.rv
    st.delete(NS, None, "t")
    got = _drain(st.watch(CMS, resource_version=str(rv), timeout=0.1))
    assert got == [("DELETED", "c")]
