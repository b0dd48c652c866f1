"""The Kubernetes access layer against a scripted HTTP server on loopback.

The server answers from a queue of (status, body) pairs, so retry, backoff and error
mapping are exercised through the official client's real transport.
"""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import k8s


class Scripted(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.replies = []
        self.seen = []


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _reply(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append((self.command, self.path, self.headers.get("Content-Type"),
                                 self.headers.get("Authorization"), body))
        status, payload = self.server.replies.pop(0) if self.server.replies else (500, {})
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _reply


@pytest.fixture
def server():
    srv = Scripted()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def make_kube(server, retries=3):
    params = {"host": "http://127.0.0.1:%d" % server.server_address[1], "api_key": "t0ken",
              "request_timeout": 5, "api_retries": retries}
    return k8s.Kube(params, sleep=lambda s: None)


def status(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message}


NODE = {"kind": "Node", "metadata": {"name": "n1", "labels": {"a": "b"}},
        "spec": {"unschedulable": True},
        "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "7"},
                   "conditions": [{"type": "Ready", "status": "True"}],
                   "nodeInfo": {"kubeletVersion": "v1.30.4"},
                   "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}, {"type": "Hostname", "address": "n1"}]}}


def test_retries_503_then_succeeds(server):
    server.replies = [(503, status(503, "ServiceUnavailable", "busy")), (200, NODE)]
    kube = make_kube(server)
    assert kube.get_node("n1")["metadata"]["name"] == "n1"
    assert kube.calls == 2
    assert [s[0] for s in server.seen] == ["GET", "GET"]
    assert server.seen[0][3] == "Bearer t0ken"


def test_gives_up_after_retries_with_clear_error(server):
    server.replies = [(500, status(500, "InternalError", "etcd down"))] * 3
    kube = make_kube(server, retries=2)
    with pytest.raises(k8s.K8sError) as err:
        kube.list_nodes()
    assert err.value.status == 500
    assert "list nodes failed" in str(err.value) and "etcd down" in str(err.value)
    assert kube.calls == 3


def test_not_found_is_none_and_conflict_is_not_retried(server):
    server.replies = [(404, status(404, "NotFound", 'nodes "x" not found')),
                      (409, status(409, "AlreadyExists", "exists"))]
    kube = make_kube(server)
    assert kube.get_node("x") is None
    with pytest.raises(k8s.K8sError) as err:
        kube.create_secret("kube-system", {"metadata": {"name": "s"}})
    assert err.value.conflict and kube.calls == 2


def test_eviction_429_is_a_pdb_answer_not_retried(server):
    msg = "Cannot evict pod as it would violate the pod's disruption budget."
    server.replies = [(429, status(429, "TooManyRequests", msg)), (201, {}), (404, {})]
    kube = make_kube(server)
    assert kube.evict_pod("ns", "p") == ("blocked", msg)
    assert kube.evict_pod("ns", "p") == ("evicted", None)
    assert kube.evict_pod("ns", "p") == ("gone", None)
    assert kube.calls == 3
    assert server.seen[0][1] == "/api/v1/namespaces/ns/pods/p/eviction"


def test_other_429_is_retried(server):
    server.replies = [(429, status(429, "TooManyRequests", "slow down")), (200, {"items": [NODE]})]
    kube = make_kube(server)
    assert len(kube.list_nodes(label_selector="a=b")) == 1
    assert "labelSelector=a%3Db" in server.seen[1][1]


@pytest.mark.parametrize("kind, content_type", sorted(k8s.PATCH_TYPES.items()))
def test_patch_content_types(server, kind, content_type):
    server.replies = [(200, NODE)]
    patch = [{"op": "add", "path": "/metadata/labels/x", "value": "y"}] if kind == "json" \
        else {"metadata": {"labels": {"x": "y"}}}
    make_kube(server).patch_node("n1", patch, patch_type=kind)
    method, path, ctype, dummy, body = server.seen[0]
    assert (method, path, ctype) == ("PATCH", "/api/v1/nodes/n1", content_type)
    assert json.loads(body) == patch


def test_unreachable_server_names_the_address():
    kube = k8s.Kube({"host": "http://127.0.0.1:9", "request_timeout": 1}, retries=1, sleep=lambda s: None)
    with pytest.raises(k8s.K8sError) as err:
        kube.list_nodes()
    assert "cannot reach the API server at http://127.0.0.1:9" in str(err.value)


def test_missing_kubeconfig_is_named(tmp_path):
    missing = tmp_path / "nope.kubeconfig"
    with pytest.raises(k8s.K8sError) as err:
        k8s.Kube({"kubeconfig": str(missing)})
    assert str(missing) in str(err.value)


def test_node_summary():
    s = k8s.node_summary(NODE)
    gpu = s.pop("gpu")  # no GPU feature discovery labels on this Node
    assert gpu["product"] is None and gpu["count"] is None and gpu["mig_profiles"] == {}
    assert s == {"name": "n1", "ready": "True", "unschedulable": True, "labels": {"a": "b"},
                 "taints": [], "gpu_capacity": 8, "gpu_allocatable": 7, "kubelet_version": "v1.30.4",
                 "os_image": None, "kernel_version": None, "internal_ips": ["10.0.0.5"]}
    assert k8s.node_ready({"status": {}}) == "Unknown"


def test_transport_error_tells_whether_the_request_went_out():
    # Nothing listens on port 9: the request never left, so it cannot have had an effect.
    kube = k8s.Kube({"host": "http://127.0.0.1:9", "request_timeout": 1}, retries=0, sleep=lambda s: None)
    with pytest.raises(k8s.K8sError) as err:
        kube.create_job("ns", {"metadata": {"name": "j"}})
    assert err.value.status is None and err.value.request_sent is False

    # A server that reads the whole request and closes without answering: the effect is unknown.
    import socket
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    seen = []

    def swallow():
        conn, dummy = lsock.accept()
        seen.append(conn.recv(65536))
        conn.close()
    t = threading.Thread(target=swallow, daemon=True)
    t.start()
    kube = k8s.Kube({"host": "http://127.0.0.1:%d" % lsock.getsockname()[1], "request_timeout": 3},
                    retries=0, sleep=lambda s: None)
    with pytest.raises(k8s.K8sError) as err:
        kube.create_job("ns", {"metadata": {"name": "j"}})
    t.join(5)
    lsock.close()
    assert seen and seen[0].startswith(b"POST /apis/batch/v1/namespaces/ns/jobs")
    assert err.value.status is None and err.value.request_sent is True
    # An HTTP answer always counts as sent.
    assert k8s.K8sError("x", 403, "Forbidden").request_sent is True
