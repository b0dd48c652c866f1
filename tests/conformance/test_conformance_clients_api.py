"""What third-party clients (kubectl, kubernetes.core) need beyond the typed calls: OpenAPI,
Table output, content negotiation, server-side apply, continue tokens, self reviews."""
import json
from urllib.parse import urlencode

import pytest
from kubernetes import client

from clients import release_nodes
from conftest import emulator_only


@pytest.fixture(autouse=True)
def _release_nodes(api):
    dummy, h = api
    since = len(h.created_nodes)
    yield
    release_nodes(h, since)


def raw(api_client, method, path, headers=None, body=None, query=None):
    """(status, headers, decoded JSON or bytes) of one request with the client's credentials."""
    conf = api_client.configuration
    hdrs = dict(headers or {})
    for setting in conf.auth_settings().values():
        if setting.get("in") == "header" and setting.get("value"):
            hdrs[setting["key"]] = setting["value"]
    url = conf.host + path + ("?" + urlencode(query) if query else "")
    resp = api_client.rest_client.pool_manager.request(method, url, headers=hdrs, body=body,
                                                       preload_content=True)
    try:
        return resp.status, resp.headers, json.loads(resp.data)
    except (ValueError, TypeError):
        return resp.status, resp.headers, resp.data


def test_openapi_v3_lets_kubectl_use_server_side_validation(api):
    api_client, dummy = api
    code, dummy, index = raw(api_client, "GET", "/openapi/v3", {"Accept": "application/json"})
    assert code == 200
    url = index["paths"]["api/v1"]["serverRelativeURL"]
    path, _sep, query = url.partition("?")
    code, dummy, doc = raw(api_client, "GET", path, {"Accept": "application/json"},
                           query=dict([query.split("=", 1)]) if query else None)
    assert code == 200 and doc["openapi"].startswith("3.")
    node_patch = [item["patch"] for item in doc["paths"].values() if "patch" in item
                  and item["patch"].get("x-kubernetes-group-version-kind") == {"group": "", "version": "v1",
                                                                               "kind": "Node"}]
    assert node_patch, "no PATCH operation for v1 Node"
    assert "fieldValidation" in [p.get("name") for p in node_patch[0]["parameters"]]
    spec = doc["components"]["schemas"]["io.k8s.api.core.v1.NodeSpec"]
    assert "taints" in spec["properties"]
    code, dummy, v2 = raw(api_client, "GET", "/openapi/v2", {"Accept": "application/json"})
    assert code == 200 and v2["swagger"] == "2.0" and "io.k8s.api.core.v1.Node" in v2["definitions"]


TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def test_table_output_for_nodes_pods_jobs_namespaces(api):
    api_client, h = api
    node = h.uniq("tbl")
    h.make_node(node, pool=h.uniq("pool"), labels={"node-role.kubernetes.io/gpu": ""})
    pod = h.uniq("tbl-pod")
    h.core.create_namespaced_pod(h.ns, {"metadata": {"name": pod},
                                        "spec": {"nodeName": node, "restartPolicy": "Never",
                                                 "containers": [{"name": "main", "image": "busybox"}]}})
    pods = "/api/v1/namespaces/%s/pods" % h.ns
    jobs = "/apis/batch/v1/namespaces/%s/jobs" % h.ns
    expect = {"/api/v1/nodes": ["Name", "Status", "Roles", "Age", "Version", "Internal-IP", "External-IP",
                                "OS-Image", "Kernel-Version", "Container-Runtime"],
              pods: ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"],
              jobs: ["Name", "Completions", "Duration", "Age", "Containers", "Images", "Selector"],
              "/api/v1/namespaces": ["Name", "Status", "Age"]}
    for path, columns in expect.items():
        code, dummy, table = raw(api_client, "GET", path, {"Accept": TABLE})
        assert code == 200, (path, table)
        assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
        names = [c["name"] for c in table["columnDefinitions"]]
        # 1.31 added Status to jobs; a newer real server may show more columns than 1.30
        assert [n for n in names if n in columns] == columns, (path, names)
    code, dummy, table = raw(api_client, "GET", "/api/v1/nodes/%s" % node, {"Accept": TABLE})
    row = dict(zip([c["name"] for c in table["columnDefinitions"]], table["rows"][0]["cells"]))
    assert row["Name"] == node and row["Status"] == "Ready" and row["Roles"] == "gpu"
    assert table["rows"][0]["object"]["metadata"]["name"] == node
    code, dummy, table = raw(api_client, "GET", "/api/v1/namespaces/%s/pods/%s" % (h.ns, pod), {"Accept": TABLE})
    row = dict(zip([c["name"] for c in table["columnDefinitions"]], table["rows"][0]["cells"]))
    assert row["Name"] == pod and row["Node"] == node and row["Ready"].endswith("/1")


def test_unsupported_body_type_is_415_and_accept_falls_back_to_json(api):
    api_client, h = api
    path = "/api/v1/namespaces/%s/configmaps" % h.ns
    code, dummy, status = raw(api_client, "POST", path, {"Content-Type": "text/plain"}, body="x")
    assert code == 415 and status["reason"] == "UnsupportedMediaType"
    code, dummy, status = raw(api_client, "PATCH", path + "/none", {"Content-Type": "text/plain"}, body="x")
    assert code == 415
    code, hdrs, body = raw(api_client, "GET", path, {"Accept": "application/vnd.kubernetes.protobuf,application/json"})
    assert code == 200
    if h.emulator:  # a real server may answer protobuf here; the emulator falls back to JSON
        assert hdrs["Content-Type"].startswith("application/json") and body["kind"] == "ConfigMapList"


def test_protobuf_body_is_415_and_protobuf_only_accept_is_406(api):
    api_client, h = api
    emulator_only(h, "a real server reads and writes protobuf for built-in types")
    path = "/api/v1/namespaces/%s/configmaps" % h.ns
    code, dummy, status = raw(api_client, "POST", path, {"Content-Type": "application/vnd.kubernetes.protobuf"},
                              body="k8s\x00")
    assert code == 415 and "application/json" in status["message"]
    code, dummy, status = raw(api_client, "GET", path, {"Accept": "application/vnd.kubernetes.protobuf"})
    assert code == 406 and status["reason"] == "NotAcceptable"


def _apply(api_client, path, body, manager, force=False, dry=False):
    query = {"fieldManager": manager}
    if force:
        query["force"] = "true"
    if dry:
        query["dryRun"] = "All"
    return raw(api_client, "PATCH", path, {"Content-Type": "application/apply-patch+yaml"},
               body=json.dumps(body), query=query)


def test_server_side_apply_creates_merges_and_names_the_conflicting_manager(api):
    api_client, h = api
    name = h.uniq("ssa")
    path = "/api/v1/namespaces/%s/configmaps/%s" % (h.ns, name)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"a": "1"}},
            "data": {"x": "1"}}
    code, dummy, obj = _apply(api_client, path, body, "alpha")
    assert code == 201, obj
    read = h.core.read_namespaced_config_map(name, h.ns)
    assert read.data == {"x": "1"} and read.metadata.labels == {"a": "1"}
    assert [(m.manager, m.operation) for m in read.metadata.managed_fields] == [("alpha", "Apply")]
    # a second manager adds a field: merged, both own their fields
    code, dummy, obj = _apply(api_client, path, {"apiVersion": "v1", "kind": "ConfigMap",
                                                 "metadata": {"name": name}, "data": {"y": "2"}}, "beta")
    assert code == 200 and obj["data"] == {"x": "1", "y": "2"}
    # the second manager sets the first one's field: 409 naming "alpha", unless forced
    clash = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"x": "9", "y": "2"}}
    code, dummy, status = _apply(api_client, path, clash, "beta")
    assert code == 409 and status["reason"] == "Conflict"
    assert status["message"] == 'Apply failed with 1 conflict: conflict with "alpha": .data.x', status
    assert h.core.read_namespaced_config_map(name, h.ns).data["x"] == "1"
    code, dummy, obj = _apply(api_client, path, clash, "beta", force=True)
    assert code == 200 and obj["data"]["x"] == "9"
    # alpha drops x (now beta's) and its label: the label goes, x stays with beta
    code, dummy, obj = _apply(api_client, path, {"apiVersion": "v1", "kind": "ConfigMap",
                                                 "metadata": {"name": name}}, "alpha")
    assert code == 200
    read = h.core.read_namespaced_config_map(name, h.ns)
    assert read.data == {"x": "9", "y": "2"} and not (read.metadata.labels or {}).get("a")
    code, dummy, status = _apply(api_client, path, body, "")
    assert code == 422 and status["reason"] == "Invalid"


def test_continue_token_survives_deletions_between_pages(api):
    dummy, h = api
    sel = "page=%s" % h.run_id
    names = sorted(h.uniq("page") for _index in range(5))
    for name in names:
        h.core.create_namespaced_config_map(h.ns, {"metadata": {"name": name, "labels": {"page": h.run_id}}})
    first = h.core.list_namespaced_config_map(h.ns, label_selector=sel, limit=2)
    assert [c.metadata.name for c in first.items] == names[:2]
    h.core.delete_namespaced_config_map(names[0], h.ns)  # before the cursor
    h.core.delete_namespaced_config_map(names[2], h.ns)  # after it
    rest = h.core.list_namespaced_config_map(h.ns, label_selector=sel, limit=2, _continue=first.metadata._continue)
    more = [c.metadata.name for c in rest.items]
    if rest.metadata._continue:
        more += [c.metadata.name for c in h.core.list_namespaced_config_map(
            h.ns, label_selector=sel, limit=2, _continue=rest.metadata._continue).items]
    # the list is a snapshot at the first page's resourceVersion: nothing is skipped
    assert more == names[2:]
    assert rest.metadata.resource_version == first.metadata.resource_version


def test_continue_token_older_than_the_history_is_410(api):
    dummy, h = api
    emulator_only(h, "needs the emulator's write history to be compacted on demand")
    from k8s_emulator import store as storelib
    sel = "expire=%s" % h.run_id
    for _attempt in range(3):
        h.core.create_namespaced_config_map(h.ns, {"metadata": {"name": h.uniq("exp"),
                                                                "labels": {"expire": h.run_id}}})
    first = h.core.list_namespaced_config_map(h.ns, label_selector=sel, limit=1)
    store = h.server.store
    res = storelib.BY_PLURAL["configmaps"]
    filler = store.create(res, h.ns, {"metadata": {"name": h.uniq("filler")}})
    for i in range(storelib.HISTORY + 1):
        filler["data"] = {"i": str(i)}
        store.put_internal(res, filler)
    with pytest.raises(client.ApiException) as exc:
        h.core.list_namespaced_config_map(h.ns, label_selector=sel, limit=1, _continue=first.metadata._continue)
    assert exc.value.status == 410 and json.loads(exc.value.body)["reason"] == "Expired"
    with pytest.raises(client.ApiException) as exc:
        h.core.list_namespaced_config_map(h.ns, limit=1, _continue="not-a-token")
    assert exc.value.status == 400


def test_self_subject_access_review_and_self_subject_review(api):
    api_client, h = api
    authz = client.AuthorizationV1Api(api_client)
    review = authz.create_self_subject_access_review({"spec": {"resourceAttributes": {
        "verb": "create", "resource": "nodes"}}})
    assert review.status.allowed is True
    who = client.AuthenticationV1Api(api_client).create_self_subject_review({})
    assert who.status.user_info.username
    if not h.emulator:
        return
    token = "ro-" + h.run_id
    with open(h.token_file, "a", encoding="utf-8") as fh:
        fh.write('%s,reader-%s,reader-uid,"team"\n' % (token, h.run_id))
    reader = h.kubeconfig_for(token, "reader")
    review = client.AuthorizationV1Api(reader).create_self_subject_access_review({"spec": {"resourceAttributes": {
        "verb": "delete", "resource": "nodes"}}})
    assert review.status.allowed is False
    review = client.AuthorizationV1Api(reader).create_self_subject_access_review({"spec": {"resourceAttributes": {
        "verb": "list", "resource": "pods", "namespace": h.ns}}})
    assert review.status.allowed is True
    who = client.AuthenticationV1Api(reader).create_self_subject_review({})
    assert who.status.user_info.username == "reader-" + h.run_id and "team" in who.status.user_info.groups
