"""The node agent: pure helpers, and a full run against a tiny fake API on 127.0.0.1."""
import base64
import json
import os
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lab_packages_support import AGENT_DIR, NVIDIA_SMI, load_module, node  # noqa: F401 (fixture)  pylint: disable=unused-import

agent = load_module("hgpu_node_agent", os.path.join(AGENT_DIR, "agent.py"))

YAML_KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: cloud
  cluster:
    server: https://10.213.77.1:7443
    certificate-authority: /etc/hybridgpu/node-agent/ca.crt
contexts:
- name: cloud
  context:
    cluster: cloud
    user: node-cloud-h200-1
current-context: cloud
users:
- name: node-cloud-h200-1
  user:
    token: "abc.def-123"
"""


def test_parse_yaml_kubeconfig():
    kube = agent.parse_kubeconfig(YAML_KUBECONFIG)
    assert kube["server"] == "https://10.213.77.1:7443"
    assert kube["ca_file"] == "/etc/hybridgpu/node-agent/ca.crt"
    assert kube["token"] == "abc.def-123"
    assert kube["insecure"] is False


def test_parse_json_kubeconfig(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("tok-from-file\n")
    doc = {"clusters": [{"name": "a", "cluster": {"server": "https://127.0.0.1:6443",
                                                  "certificate-authority-data": base64.b64encode(b"x").decode()}}],
           "users": [{"name": "u", "user": {"tokenFile": str(token_file)}}],
           "contexts": [{"name": "c", "context": {"cluster": "a", "user": "u"}}], "current-context": "c"}
    kube = agent.parse_kubeconfig(json.dumps(doc))
    assert kube["server"] == "https://127.0.0.1:6443"
    assert kube["token"] == "tok-from-file"
    with pytest.raises(ValueError):
        agent.parse_kubeconfig("apiVersion: v1\nkind: Config\n")


def test_read_gpus_and_labels_via_standin(node):
    import subprocess
    import sys

    def runner(argv, **kw):
        return subprocess.run([sys.executable, NVIDIA_SMI] + argv[1:], env=node.env(), **kw, check=False)
    gpus, driver = agent.read_gpus("nvidia-smi", runner=runner)
    assert len(gpus) == 8 and gpus[0] == ("NVIDIA A100-SXM4-80GB", 81920)
    assert driver == "535.230.02"
    labels = agent.node_labels("owned-a100-1", gpus, driver)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.memory"] == "81920"
    assert labels["nvidia.com/cuda.driver.major"] == "535"
    assert labels["kubernetes.io/hostname"] == "owned-a100-1"
    assert not any(k.startswith("node-restriction.kubernetes.io/") for k in labels)
    assert agent.read_gpus("/nonexistent/nvidia-smi") == ([], None)


def test_node_status_and_info():
    res = agent.node_resources(8, 16, 1024, 110)
    assert res["nvidia.com/gpu"] == "8" and res["memory"] == "1024Ki" and res["cpu"] == "16"
    status = agent.node_status(res, {"kubeletVersion": "v1"}, [], "2026-01-01T00:00:00Z", now="T")
    cond = status["conditions"][0]
    assert (cond["type"], cond["status"], cond["lastHeartbeatTime"]) == ("Ready", "True", "T")
    assert status["allocatable"] == status["capacity"]
    info = agent.node_info(dict(agent.DEFAULTS))
    assert info["containerRuntimeVersion"] == "podman-lab://1"
    assert info["kubeletVersion"] == "v1.30.4-hybridgpu"
    assert agent.os_image('NAME="Debian"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n') == \
        "Debian GNU/Linux 12 (bookworm)"


def test_container_plan():
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}}
    container = {"name": "c", "command": ["sh", "-c"], "args": ["echo $X"],
                 "env": [{"name": "X", "value": "1"},
                         {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                 "resources": {"limits": {"nvidia.com/gpu": "2"}}}
    assert agent.gpu_request(container) == 2
    argv, env = agent.container_plan(pod, container, "n1", "/w", [0, 1])
    assert argv == ["sh", "-c", "echo $X"]
    assert env["X"] == "1" and env["NODE"] == "n1" and env["CUDA_VISIBLE_DEVICES"] == "0,1"
    dummy, env = agent.container_plan(pod, {"name": "c", "command": ["true"]}, "n1", "/w", None)
    assert "CUDA_VISIBLE_DEVICES" not in env
    with pytest.raises(ValueError):
        agent.container_plan(pod, {"name": "c", "image": "x"}, "n1", "/w", None)


def test_container_status_terminated():
    entry = agent.container_status("c", "id", ("terminated", "a", "b", 3))
    assert entry["state"]["terminated"]["exitCode"] == 3
    assert entry["state"]["terminated"]["reason"] == "Error"
    patch = agent.pod_status_patch("Failed", "a", [entry], "10.0.0.1")
    assert patch["status"]["phase"] == "Failed"
    assert patch["status"]["containerStatuses"][0]["state"] == entry["state"]


# ---------------------------------------------------------------- fake API server

class FakeApi:
    """Just enough core/v1 for the agent, with Kubernetes Status objects for errors."""

    def __init__(self):
        self.nodes, self.pods, self.logs, self.leases = {}, {}, {}, {}
        self.calls = []
        self.deletes = []
        self.rv = 0
        self.lock = threading.Lock()

    def status(self, code, reason, message):
        return code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                      "message": message, "code": code}

    def handle(self, method, path, query, ctype, body):
        with self.lock:
            self.calls.append((method, path, ctype))
            parts = path.strip("/").split("/")
            if path == "/api/v1/nodes" and method == "POST":
                name = body["metadata"]["name"]
                if name in self.nodes:
                    return self.status(409, "AlreadyExists", 'nodes "%s" already exists' % name)
                body["metadata"]["uid"] = "node-uid-" + name
                self.nodes[name] = body
                return 201, body
            if parts[:6] == ["apis", "coordination.k8s.io", "v1", "namespaces", "kube-node-lease", "leases"]:
                return self.lease(method, parts[6] if len(parts) > 6 else None, body)
            if parts[:3] == ["api", "v1", "nodes"] and method == "PATCH":
                node = self.nodes.get(parts[3])
                if node is None:
                    return self.status(404, "NotFound", "nodes not found")
                if len(parts) == 5:
                    node["status"].update(body["status"])
                else:
                    node["metadata"]["labels"].update(body["metadata"]["labels"])
                return 200, node
            if path == "/api/v1/pods" and method == "GET":
                want = query["fieldSelector"][0].split("=", 1)[1]
                items = [p for p in self.pods.values() if p["spec"].get("nodeName") == want]
                return 200, {"kind": "PodList", "apiVersion": "v1", "items": json.loads(json.dumps(items))}
            if parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
                pod = self.pods.get(parts[5])
                if pod is None:
                    return self.status(404, "NotFound", 'pods "%s" not found' % parts[5])
                if len(parts) == 7 and parts[6] == "status" and method == "PATCH":
                    assert ctype == "application/merge-patch+json"
                    pod["status"].update(body["status"])
                    return 200, pod
                if len(parts) == 7 and parts[6] == "log" and method == "PUT":
                    self.logs[parts[5]] = body
                    return 200, "ok"
                if method == "DELETE":
                    self.deletes.append((parts[5], body))
                    if (body or {}).get("gracePeriodSeconds") == 0:
                        del self.pods[parts[5]]
                    else:
                        pod["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:30Z"
                        pod["metadata"]["deletionGracePeriodSeconds"] = 30
                    return 200, pod
            return self.status(405, "MethodNotAllowed", path)

    def lease(self, method, name, body):
        if method == "GET":
            if name not in self.leases:
                return self.status(404, "NotFound", 'leases.coordination.k8s.io "%s" not found' % name)
            return 200, self.leases[name]
        if method == "POST":
            name = body["metadata"]["name"]
        elif name not in self.leases:
            return self.status(404, "NotFound", "lease not found")
        elif body["metadata"].get("resourceVersion") != self.leases[name]["metadata"]["resourceVersion"]:
            return self.status(409, "Conflict", "the object has been modified")
        self.rv += 1
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.leases[name] = body
        return (201 if method == "POST" else 200), body


@pytest.fixture
def fake_api():
    api = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _do(self):
            url = urllib.parse.urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode() if length else ""
            ctype = self.headers.get("Content-Type", "")
            body = json.loads(raw) if raw and "json" in ctype else raw
            assert self.headers["Authorization"] == "Bearer node-token"
            code, out = api.handle(self.command, url.path, urllib.parse.parse_qs(url.query), ctype, body)
            data = (json.dumps(out) if not isinstance(out, str) else out).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _do

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    api.url = "http://127.0.0.1:%d" % server.server_address[1]
    yield api
    server.shutdown()
    server.server_close()


def _pod(name, node, command, gpus=0):
    container = {"name": "main", "image": "ignored", "command": command}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": "uid-" + name},
            "spec": {"nodeName": node, "containers": [container]}, "status": {"phase": "Pending"}}


def _agent(tmp_path, url, **cfg):
    config = dict(agent.DEFAULTS, node_name="cloud-h200-1", state_dir=str(tmp_path / "state"),
                  heartbeat_interval=0.2, pod_poll_interval=0.2, request_timeout=2.0, max_backoff=0.5)
    config.update(cfg)
    api = agent.Api({"server": url, "token": "node-token"}, timeout=2.0)
    return agent.Agent(config, api=api, gpus=[("NVIDIA H200", 143771)] * 8, driver="570.172.08")


def _until(ag, cond, timeout=15.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        time.sleep(min(ag.step(), 0.2))
        if cond():
            return True
    return False


def test_agent_registers_heartbeats_and_runs_pods(fake_api, tmp_path):
    ag = _agent(tmp_path, fake_api.url)
    fake_api.nodes["cloud-h200-1"] = {"metadata": {"name": "cloud-h200-1", "labels": {
        "node-restriction.kubernetes.io/placement": "restricted"}}, "status": {}}
    assert _until(ag, lambda: "conditions" in fake_api.nodes["cloud-h200-1"]["status"])
    node = fake_api.nodes["cloud-h200-1"]
    # 409 on create -> labels patched; the restricted label is left as it was.
    assert node["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
    assert node["metadata"]["labels"]["node-restriction.kubernetes.io/placement"] == "restricted"
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.30.4-hybridgpu"
    beats = [c for c in fake_api.calls if c[1] == "/api/v1/nodes/cloud-h200-1/status"]
    assert beats[0][2] == "application/strategic-merge-patch+json"

    fake_api.pods["ok"] = _pod("ok", "cloud-h200-1", ["sh", "-c", "echo hello $CUDA_VISIBLE_DEVICES; exit 0"], gpus=2)
    fake_api.pods["bad"] = _pod("bad", "cloud-h200-1", ["sh", "-c", "echo oops >&2; exit 3"])
    fake_api.pods["other"] = _pod("other", "other-node", ["true"])
    assert _until(ag, lambda: fake_api.pods["ok"]["status"]["phase"] == "Succeeded"
                  and fake_api.pods["bad"]["status"]["phase"] == "Failed")
    ok = fake_api.pods["ok"]["status"]
    assert ok["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert ok["startTime"]
    assert fake_api.logs["ok"] == "hello 0,1\n"
    bad = fake_api.pods["bad"]["status"]
    assert bad["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    assert fake_api.logs["bad"] == "oops\n"
    assert fake_api.pods["other"]["status"]["phase"] == "Pending"
    beats_before = len([c for c in fake_api.calls if c[1].endswith("/status") and "nodes" in c[1]])
    assert _until(ag, lambda: len([c for c in fake_api.calls if c[1].endswith("/status")
                                   and "nodes" in c[1]]) > beats_before + 1)


def test_agent_kills_deleted_pod(fake_api, tmp_path):
    ag = _agent(tmp_path, fake_api.url)
    fake_api.pods["sleeper"] = _pod("sleeper", "cloud-h200-1", ["sleep", "300"])
    assert _until(ag, lambda: fake_api.pods["sleeper"]["status"]["phase"] == "Running")
    local = ag.pods["uid-sleeper"]
    pid = local.containers[0]["pid"]
    del fake_api.pods["sleeper"]
    assert _until(ag, lambda: local.phase == "Failed")
    assert local.containers[0]["code"] != 0
    with pytest.raises(OSError):
        os.kill(pid, 0)


def test_agent_survives_api_outage_and_reports_later(fake_api, tmp_path):
    ag = _agent(tmp_path, fake_api.url)
    fake_api.pods["job"] = _pod("job", "cloud-h200-1", ["sh", "-c", "sleep 1; echo done"])
    assert _until(ag, lambda: fake_api.pods["job"]["status"]["phase"] == "Running")
    real_url = ag.api.server
    ag.api.server = "http://127.0.0.1:9"  # nothing listens: connection refused
    assert _until(ag, lambda: ag.pods.get("uid-job") is not None and ag.pods["uid-job"].phase == "Succeeded")
    assert ag.online is False
    assert fake_api.pods["job"]["status"]["phase"] == "Running"
    ag.api.server = real_url
    assert _until(ag, lambda: fake_api.pods["job"]["status"]["phase"] == "Succeeded")
    assert fake_api.logs["job"] == "done\n"


def test_agent_renews_its_node_lease(fake_api, tmp_path):
    ag = _agent(tmp_path, fake_api.url, lease_interval=0.2)
    assert _until(ag, lambda: "cloud-h200-1" in fake_api.leases)
    lease = fake_api.leases["cloud-h200-1"]
    assert lease["spec"]["holderIdentity"] == "cloud-h200-1"
    assert lease["spec"]["leaseDurationSeconds"] == 40
    assert lease["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "cloud-h200-1",
                                                     "uid": "node-uid-cloud-h200-1"}]
    first = lease["spec"]["renewTime"]
    assert first.endswith("Z") and "." in first        # a MicroTime
    assert _until(ag, lambda: fake_api.leases["cloud-h200-1"]["spec"]["renewTime"] != first)
    # Someone else changed it: the agent reads it again and keeps renewing.
    fake_api.leases["cloud-h200-1"]["metadata"]["resourceVersion"] = "999"
    renewed = fake_api.leases["cloud-h200-1"]["spec"]["renewTime"]
    assert _until(ag, lambda: fake_api.leases["cloud-h200-1"]["spec"]["renewTime"] != renewed
                  and fake_api.leases["cloud-h200-1"]["metadata"]["resourceVersion"] != "999")


def test_agent_stops_a_terminating_pod_and_confirms_with_grace_zero(fake_api, tmp_path):
    """A deletionTimestamp on a running pod: SIGTERM, SIGKILL after the pod's
    deletionGracePeriodSeconds (here 1 s, far below kill_grace), then a grace-0 delete."""
    ag = _agent(tmp_path, fake_api.url, kill_grace=60.0)
    fake_api.pods["stubborn"] = _pod("stubborn", "cloud-h200-1", ["sh", "-c", "trap '' TERM; sleep 300"])
    assert _until(ag, lambda: fake_api.pods["stubborn"]["status"]["phase"] == "Running")
    local = ag.pods["uid-stubborn"]
    pid = local.containers[0]["pid"]
    with fake_api.lock:
        fake_api.pods["stubborn"]["metadata"].update(deletionTimestamp="2030-01-01T00:00:01Z",
                                                     deletionGracePeriodSeconds=1)
    assert _until(ag, lambda: "stubborn" not in fake_api.pods, timeout=10.0)
    assert fake_api.deletes == [("stubborn", {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                                              "preconditions": {"uid": "uid-stubborn"}})]
    assert local.phase == "Failed"
    with pytest.raises(OSError):
        os.kill(pid, 0)


DIGEST = "sha256:" + "c3" * 32


def test_image_digests_resolve_as_a_runtime_that_holds_them():
    table = {"localhost/overflow-job:1": DIGEST, "localhost/overflow-job:latest": DIGEST}
    assert agent.node_images(table) == [{"names": ["localhost/overflow-job@" + DIGEST, "localhost/overflow-job:1",
                                                   "localhost/overflow-job:latest"], "sizeBytes": 0}]
    assert agent.resolve_image("localhost/overflow-job:1", table) == ("localhost/overflow-job@" + DIGEST, None)
    assert agent.resolve_image("localhost/overflow-job@" + DIGEST, table) == ("localhost/overflow-job@" + DIGEST, None)
    image_id, err = agent.resolve_image("localhost/overflow-job@sha256:" + "0" * 64, table)
    assert image_id is None and "manifest unknown" in err
    assert agent.resolve_image("localhost/other:2", table) == ("", None)      # a tag it does not name
    assert agent.resolve_image("localhost/other@" + DIGEST, None) == ("", None)  # no images.json


def test_agent_reports_image_ids_and_node_images(fake_api, tmp_path):
    images = tmp_path / "images.json"
    images.write_text(json.dumps({"localhost/overflow-job:1": DIGEST}))
    ag = _agent(tmp_path, fake_api.url, image_digests=str(images))
    assert _until(ag, lambda: "conditions" in (fake_api.nodes.get("cloud-h200-1") or {}).get("status", {}))
    assert fake_api.nodes["cloud-h200-1"]["status"]["images"] == [
        {"names": ["localhost/overflow-job@" + DIGEST, "localhost/overflow-job:1"], "sizeBytes": 0}]
    ok = _pod("by-digest", "cloud-h200-1", ["true"])
    ok["spec"]["containers"][0]["image"] = "localhost/overflow-job@" + DIGEST
    bad = _pod("unknown-digest", "cloud-h200-1", ["true"])
    bad["spec"]["containers"][0]["image"] = "localhost/overflow-job@sha256:" + "0" * 64
    fake_api.pods.update({"by-digest": ok, "unknown-digest": bad})
    assert _until(ag, lambda: ok["status"]["phase"] == "Succeeded" and bad["status"].get("containerStatuses"))
    got = ok["status"]["containerStatuses"][0]
    assert got["imageID"] == "localhost/overflow-job@" + DIGEST and got["image"] == "localhost/overflow-job@" + DIGEST
    assert got["state"]["terminated"]["startedAt"] and ok["status"]["startTime"]
    waiting = bad["status"]["containerStatuses"][0]
    assert bad["status"]["phase"] == "Pending" and waiting["imageID"] == ""
    assert waiting["state"]["waiting"]["reason"] == "ErrImagePull" and "manifest unknown" in waiting["state"]["waiting"]["message"]
    # the stuck pod is reported once, and a delete of it is confirmed at once (nothing runs)
    patches = sum(1 for c in fake_api.calls if c[:2] == ("PATCH", "/api/v1/namespaces/default/pods/unknown-digest/status"))
    _until(ag, lambda: False, timeout=1.0)
    assert sum(1 for c in fake_api.calls if c[:2] == ("PATCH", "/api/v1/namespaces/default/pods/unknown-digest/status")) == patches
    bad["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:30Z"
    assert _until(ag, lambda: "unknown-digest" not in fake_api.pods)
    assert _until(ag, lambda: "uid-unknown-digest" not in ag.pods)


def test_one_kept_connection_carries_the_requests_and_a_closed_one_is_reopened():
    """As a kubelet, the agent keeps its connection to an HTTP/1.1 server (one TLS handshake, not
    one per poll); when the server drops the idle connection, the next request opens a new one
    and still gets its answer."""
    accepted = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            data = json.dumps({"kind": "NodeList", "items": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    class Server(ThreadingHTTPServer):
        def get_request(self):
            sock, addr = super().get_request()
            accepted.append(sock)
            return sock, addr

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        api = agent.Api({"server": "http://127.0.0.1:%d" % server.server_address[1]}, timeout=2.0)
        for _poll in range(5):
            assert api.request("GET", "/api/v1/nodes") == (200, {"kind": "NodeList", "items": []})
        assert len(accepted) == 1
        accepted[0].shutdown(socket.SHUT_RDWR)  # the server ends the idle connection
        time.sleep(0.1)
        assert api.request("GET", "/api/v1/nodes")[0] == 200
        assert len(accepted) == 2
    finally:
        server.shutdown()
        server.server_close()
