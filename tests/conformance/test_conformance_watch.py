"""Watch and resourceVersion semantics through the official client: list-then-watch,
selectors, bookmarks, timeouts, too-old versions, no-op writes, resourceVersionMatch."""
import threading
import time

import pytest
from kubernetes import client, watch


def _events(func, *args, **kwargs):
    """Every event of one watch (it ends at timeout_seconds) as (type, raw object)."""
    return [(e["type"], e["raw_object"]) for e in watch.Watch().stream(func, *args, **kwargs)]


def test_list_then_watch_streams_changes_after_the_list(api):
    dummy, h = api
    app = h.uniq("w")
    name = h.uniq("wpod")
    listed = h.core.list_namespaced_pod(h.ns, label_selector="app=" + app)
    seen = []

    def watcher():
        seen.extend(_events(h.core.list_namespaced_pod, h.ns, label_selector="app=" + app,
                            resource_version=listed.metadata.resource_version, timeout_seconds=4))

    thread = threading.Thread(target=watcher)
    started = time.monotonic()
    thread.start()
    time.sleep(0.5)
    h.core.create_namespaced_pod(h.ns, h.pod_body(name, "nowhere", labels={"app": app}))
    h.core.patch_namespaced_pod(name, h.ns, {"metadata": {"annotations": {"step": "2"}}})
    h.core.delete_namespaced_pod(name, h.ns)
    thread.join(15)
    assert not thread.is_alive()
    assert time.monotonic() - started < 12  # timeoutSeconds ends the stream
    mine = [(t, o) for t, o in seen if o.get("metadata", {}).get("name") == name]
    types = [t for t, dummy in mine]
    assert types[0] == "ADDED" and types[-1] == "DELETED", types
    assert any(t == "MODIFIED" and (o["metadata"].get("annotations") or {}).get("step") == "2"
               for t, o in mine)
    versions = [int(o["metadata"]["resourceVersion"]) for dummy, o in mine]
    assert versions == sorted(versions)
    assert all(int(v) > int(listed.metadata.resource_version) for v in versions)


def test_watch_from_a_version_replays_and_follows_the_selector(api):
    dummy, h = api
    pool = h.uniq("pool")
    name = h.uniq("wsel")
    start = h.core.list_node(label_selector="conformance.hybridgpu.io/pool=" + pool)
    h.make_node(name, pool, heartbeat=False)
    h.core.patch_node(name, {"metadata": {"labels": {"conformance.hybridgpu.io/pool": "other"}}})
    seen = _events(h.core.list_node, label_selector="conformance.hybridgpu.io/pool=" + pool,
                   resource_version=start.metadata.resource_version, timeout_seconds=2)
    types = [t for t, o in seen if o["metadata"]["name"] == name]
    # it matched when created, and leaving the selector reads as DELETED
    assert types[0] == "ADDED" and types[-1] == "DELETED", types


def test_watch_without_version_starts_with_the_current_objects(api):
    dummy, h = api
    name = h.uniq("wcur")
    h.make_node(name, h.uniq("pool"), heartbeat=False)
    seen = _events(h.core.list_node, field_selector="metadata.name=" + name, timeout_seconds=1)
    assert [(t, o["metadata"]["name"]) for t, o in seen][:1] == [("ADDED", name)]


def test_watch_too_old_resource_version_is_410(api):
    dummy, h = api
    with pytest.raises(client.ApiException) as exc:
        _events(h.core.list_namespaced_pod, h.ns, resource_version="1", timeout_seconds=2)
    assert exc.value.status == 410


def test_watch_bookmarks_when_asked(api):
    dummy, h = api
    listed = h.core.list_namespaced_pod(h.ns)
    seen = _events(h.core.list_namespaced_pod, h.ns, allow_watch_bookmarks=True,
                   resource_version=listed.metadata.resource_version, timeout_seconds=3)
    marks = [o for t, o in seen if t == "BOOKMARK"]
    assert marks, seen  # kube-apiserver sends one 2 s before the timeout
    assert int(marks[-1]["metadata"]["resourceVersion"]) >= int(listed.metadata.resource_version)


def test_noop_write_keeps_the_resource_version_and_emits_nothing(api):
    dummy, h = api
    name = h.uniq("wnoop")
    h.make_node(name, h.uniq("pool"), labels={"same": "v"}, heartbeat=False)
    before = h.core.read_node(name)
    after = h.core.patch_node(name, {"metadata": {"labels": {"same": "v"}}})
    assert after.metadata.resource_version == before.metadata.resource_version
    replaced = h.core.replace_node(name, before)
    assert replaced.metadata.resource_version == before.metadata.resource_version
    seen = _events(h.core.list_node, field_selector="metadata.name=" + name,
                   resource_version=before.metadata.resource_version, timeout_seconds=1)
    assert seen == []


def test_list_resource_version_match(api):
    dummy, h = api
    pool = h.uniq("pool")
    sel = "conformance.hybridgpu.io/pool=" + pool
    with pytest.raises(client.ApiException) as exc:
        h.core.list_node(label_selector=sel, resource_version_match="NotOlderThan")
    assert exc.value.status == 422 and "resourceVersionMatch" in exc.value.body
    first, second = h.uniq("wrv1"), h.uniq("wrv2")
    h.make_node(first, pool, heartbeat=False)
    at = h.core.list_node(label_selector=sel).metadata.resource_version
    h.make_node(second, pool, heartbeat=False)
    exact = h.core.list_node(label_selector=sel, resource_version=at, resource_version_match="Exact")
    assert exact.metadata.resource_version == at
    assert [n.metadata.name for n in exact.items] == [first]
    newer = h.core.list_node(label_selector=sel, resource_version=at,
                             resource_version_match="NotOlderThan")
    assert sorted(n.metadata.name for n in newer.items) == sorted([first, second])
    assert int(newer.metadata.resource_version) >= int(at)
