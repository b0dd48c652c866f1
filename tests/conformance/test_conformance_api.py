"""API semantics through the official client: patches, conflicts, selectors, auth."""
import base64
import time

import pytest
from kubernetes import client

from conftest import POOL_LABEL, emulator_only


def _status(exc_info):
    return exc_info.value.status


def test_node_label_patch_merge_and_strategic(api):
    dummy, h = api
    name = h.uniq("lbl")
    h.make_node(name, pool=h.uniq("pool"), heartbeat=False)
    # dict body: the client sends strategic merge patch
    node = h.core.patch_node(name, {"metadata": {"labels": {"hybridgpu.io/wave": "1"}}})
    assert node.metadata.labels["hybridgpu.io/wave"] == "1"
    node = h.core.patch_node(name, {"metadata": {"labels": {"hybridgpu.io/wave": None,
                                                            "team": "ml"}}},
                             _content_type="application/merge-patch+json")
    assert "hybridgpu.io/wave" not in node.metadata.labels
    assert node.metadata.labels["team"] == "ml"
    node = h.core.patch_node(name, [{"op": "add", "path": "/metadata/labels/zone",
                                     "value": "z1"}])  # list body: JSON patch
    assert node.metadata.labels["zone"] == "z1"


def test_strategic_merge_conditions_by_type(api):
    dummy, h = api
    name = h.uniq("cond")
    h.make_node(name, pool=h.uniq("pool"), heartbeat=False)
    h.core.patch_node_status(name, {"status": {"conditions": [
        {"type": "GPUHealthy", "status": "True", "reason": "Probe"}]}})
    node = h.core.read_node_status(name)
    types = sorted(c.type for c in node.status.conditions)
    assert types == ["GPUHealthy", "Ready"]  # merged by type, Ready kept
    h.core.patch_node_status(name, {"status": {"conditions": [
        {"type": "GPUHealthy", "$patch": "delete"}]}})
    node = h.core.read_node_status(name)
    assert [c.type for c in node.status.conditions] == ["Ready"]
    # taints have no merge strategy: a patch replaces the list
    h.core.patch_node(name, {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}})
    node = h.core.patch_node(name, {"spec": {"taints": [{"key": "b", "effect": "NoSchedule"}]}})
    assert [t.key for t in node.spec.taints] == ["b"]


def test_second_create_is_409_already_exists(api):
    dummy, h = api
    name = h.uniq("dup")
    h.make_node(name, pool=h.uniq("pool"), heartbeat=False)
    with pytest.raises(client.ApiException) as exc:
        h.core.create_node({"metadata": {"name": name}})
    assert _status(exc) == 409
    assert "AlreadyExists" in exc.value.body


def test_stale_resource_version_is_409_conflict(api):
    dummy, h = api
    name = h.uniq("rv")
    h.make_node(name, pool=h.uniq("pool"), heartbeat=False)
    stale = h.core.read_node(name)
    h.core.patch_node(name, {"metadata": {"labels": {"bump": "1"}}})
    stale.metadata.labels["mine"] = "x"
    with pytest.raises(client.ApiException) as exc:
        h.core.replace_node(name, stale)
    assert _status(exc) == 409 and "Conflict" in exc.value.body
    with pytest.raises(client.ApiException) as exc:
        h.core.patch_node(name, {"metadata": {"resourceVersion": stale.metadata.resource_version,
                                              "labels": {"mine": "x"}}})
    assert _status(exc) == 409
    fresh = h.core.read_node(name)
    fresh.metadata.labels["mine"] = "x"
    done = h.core.replace_node(name, fresh)
    assert int(done.metadata.resource_version) > int(fresh.metadata.resource_version)


def test_label_and_field_selectors(api):
    dummy, h = api
    pool = h.uniq("pool")
    a, b = h.uniq("sel-a"), h.uniq("sel-b")
    h.make_node(a, pool, labels={"tier": "gold"}, heartbeat=False)
    h.make_node(b, pool, labels={"tier": "silver"}, heartbeat=False)
    h.core.patch_node(b, {"spec": {"unschedulable": True}})

    def names(**kw):
        return sorted(n.metadata.name for n in h.core.list_node(**kw).items)

    sel = "%s=%s" % (POOL_LABEL, pool)
    assert names(label_selector=sel) == sorted([a, b])
    assert names(label_selector=sel + ",tier==gold") == [a]
    assert names(label_selector=sel + ",tier!=gold") == [b]
    assert names(label_selector=sel + ",tier in (gold,bronze)") == [a]
    assert names(label_selector=sel + ",tier notin (gold)") == [b]
    assert names(label_selector=sel + ",tier") == sorted([a, b])
    assert names(label_selector=sel + ",!tier") == []
    assert names(label_selector=sel, field_selector="metadata.name=%s" % a) == [a]
    assert names(label_selector=sel, field_selector="spec.unschedulable=true") == [b]
    assert names(label_selector=sel, field_selector="spec.unschedulable!=true") == [a]
    pod = h.pod_body(h.uniq("fs"), pool="nowhere-" + pool)
    h.core.create_namespaced_pod(h.ns, pod)
    pods = h.core.list_namespaced_pod(h.ns, field_selector="status.phase=Pending,spec.nodeName=")
    assert pod["metadata"]["name"] in [p.metadata.name for p in pods.items]
    allns = h.core.list_pod_for_all_namespaces(
        field_selector="metadata.namespace=%s,metadata.name=%s" % (h.ns, pod["metadata"]["name"]))
    assert len(allns.items) == 1


def test_revoked_static_token_gets_401(api):
    dummy, h = api
    emulator_only(h, "needs write access to the API server's --token-auth-file")
    token = "tok-" + h.run_id
    with open(h.token_file, "a", encoding="utf-8") as fh:
        fh.write('%s,viewer,viewer-uid,"ops"\n' % token)
    viewer = client.CoreV1Api(h.kubeconfig_for(token, "viewer"))
    assert viewer.list_node().items is not None
    with pytest.raises(client.ApiException) as exc:  # read-only by default
        viewer.create_namespace({"metadata": {"name": h.uniq("nope")}})
    assert _status(exc) == 403
    with open(h.token_file, encoding="utf-8") as fh:
        lines = [line for line in fh if not line.startswith(token + ",")]
    with open(h.token_file, "w", encoding="utf-8") as fh:
        fh.writelines(lines)
    with pytest.raises(client.ApiException) as exc:
        viewer.list_node()
    assert _status(exc) == 401
    anonymous = client.CoreV1Api(h.kubeconfig_for("", "anon"))
    with pytest.raises(client.ApiException) as exc:  # no token: system:anonymous, not allowed
        anonymous.list_node()
    assert _status(exc) == 403


def _node_credential(h, node):
    secret = h.core.create_namespaced_secret("kube-system", {
        "metadata": {"name": "node-cred-" + node, "annotations": {
            "kubernetes.io/service-account.name": "node-" + node,
            "hybridgpu.io/node-name": node}},
        "type": "kubernetes.io/service-account-token"})
    token = base64.b64decode(secret.data["token"]).decode()
    return secret, client.CoreV1Api(h.kubeconfig_for(token, "node-" + node))


def test_node_credential_restrictions_and_revocation(api):
    dummy, h = api
    emulator_only(h, "node credentials are kubelet client certificates on a real cluster")
    pool = h.uniq("pool")
    mine, other = h.uniq("nc-a"), h.uniq("nc-b")
    h.make_node(mine, pool, heartbeat=False)
    h.make_node(other, pool, heartbeat=False)
    secret, node_api = _node_credential(h, mine)

    # its own node: labels and status yes
    node_api.patch_node(mine, {"metadata": {"labels": {"nvidia.com/gpu.count": "8"}}})
    node_api.patch_node_status(mine, {"status": {"conditions": [
        {"type": "Ready", "status": "True", "lastHeartbeatTime":
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]}})
    # restricted labels: no, naming the label; admin: yes
    restricted = "node-restriction.kubernetes.io/pool"
    with pytest.raises(client.ApiException) as exc:
        node_api.patch_node(mine, {"metadata": {"labels": {restricted: "gpu"}}})
    assert _status(exc) == 403 and restricted in exc.value.body
    h.core.patch_node(mine, {"metadata": {"labels": {restricted: "gpu"}}})
    with pytest.raises(client.ApiException) as exc:  # nor remove it
        node_api.patch_node(mine, {"metadata": {"labels": {restricted: None}}})
    assert _status(exc) == 403
    # another node: no
    with pytest.raises(client.ApiException) as exc:
        node_api.patch_node(other, {"metadata": {"labels": {"x": "y"}}})
    assert _status(exc) == 403
    with pytest.raises(client.ApiException) as exc:
        node_api.patch_node_status(other, {"status": {"conditions": [
            {"type": "Ready", "status": "False"}]}})
    assert _status(exc) == 403
    # reads are fine, secrets are not
    assert node_api.read_node(other).metadata.name == other
    with pytest.raises(client.ApiException) as exc:
        node_api.list_namespaced_secret("kube-system")
    assert _status(exc) == 403
    # deleting the Secret revokes the credential
    h.core.delete_namespaced_secret(secret.metadata.name, "kube-system")
    with pytest.raises(client.ApiException) as exc:
        node_api.read_node(mine)
    assert _status(exc) == 401


def test_pod_status_and_log_by_bound_node_only(api):
    dummy, h = api
    emulator_only(h, "uses the emulator's node credentials and PUT pods/log extension")
    pool = h.uniq("pool")
    mine = h.uniq("pl")
    h.make_node(mine, pool, heartbeat=False)
    dummy, node_api = _node_credential(h, mine)
    name = h.uniq("logpod")
    body = h.pod_body(name, pool)
    body["spec"]["nodeName"] = mine
    h.core.create_namespaced_pod(h.ns, body)
    node_api.patch_namespaced_pod_status(name, h.ns, {"status": {"phase": "Running"}})
    node_api.api_client.call_api(*node_api.api_client.param_serialize(
        "PUT", "/api/v1/namespaces/{namespace}/pods/{name}/log",
        path_params={"namespace": h.ns, "name": name}, body="line1\nline2\n",
        header_params={"Content-Type": "text/plain"}, auth_settings=["BearerToken"])).read()
    assert h.core.read_namespaced_pod_log(name, h.ns) == "line1\nline2\n"
    assert h.core.read_namespaced_pod_log(name, h.ns, tail_lines=1) == "line2\n"
    other = h.uniq("other")
    h.core.create_namespaced_pod(h.ns, h.pod_body(other, "nowhere"))
    with pytest.raises(client.ApiException) as exc:
        node_api.patch_namespaced_pod_status(other, h.ns, {"status": {"phase": "Running"}})
    assert _status(exc) == 403


def test_discovery_and_version(api):
    api_client, h = api
    version = client.VersionApi(api_client).get_code()
    assert version.git_version.startswith("v1.")
    groups = {g.name for g in client.ApisApi(api_client).get_api_versions().groups}
    assert {"batch", "policy"} <= groups
    names = {r.name for r in h.core.get_api_resources().resources}
    assert {"nodes", "nodes/status", "pods", "pods/eviction", "pods/log", "secrets"} <= names
