"""Explicit connection options win over the kubeconfig, checked on what the client sends.

A plain HTTP server on loopback records the Authorization header of every request; the
kubeconfig points at it with its own token, as an admin kubeconfig would.
"""
import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import k8s


class Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.auth = []

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server_address[1]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.auth.append(self.headers.get("Authorization"))
        data = json.dumps({"major": "1", "minor": "30", "gitVersion": "v1.30.4"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _serve():
    srv = Recorder()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture
def server():
    srv = _serve()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def other():
    srv = _serve()
    yield srv
    srv.shutdown()
    srv.server_close()


def kubeconfig(tmp_path, server_url, token="admin-token", client_cert=False):
    user = {"token": token}
    if client_cert:
        pem = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").decode()
        user = {"client-certificate-data": pem, "client-key-data": pem}
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "admin",
        "clusters": [{"name": "c", "cluster": {"server": server_url}}],
        "users": [{"name": "admin", "user": user}],
        "contexts": [{"name": "admin", "context": {"cluster": "c", "user": "admin"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(doc))
    return str(path)


def sent(server, params):
    kube = k8s.Kube(dict(params, request_timeout=5, api_retries=0), sleep=lambda s: None)
    kube.server_version()
    kube.server_version()  # the second request runs the loader's token refresh hook too
    return server.auth


def test_kubeconfig_token_is_sent_without_api_key(server, tmp_path):
    assert sent(server, {"kubeconfig": kubeconfig(tmp_path, server.url)}) == ["Bearer admin-token"] * 2


def test_api_key_wins_over_kubeconfig_token(server, tmp_path):
    auth = sent(server, {"kubeconfig": kubeconfig(tmp_path, server.url), "api_key": "operator-token"})
    assert auth == ["Bearer operator-token"] * 2


def test_api_key_alone_is_sent(server):
    assert sent(server, {"host": server.url, "api_key": "operator-token"}) == ["Bearer operator-token"] * 2


def test_host_wins_over_kubeconfig_server(server, other, tmp_path):
    sent(other, {"kubeconfig": kubeconfig(tmp_path, server.url), "host": other.url, "api_key": "t"})
    assert server.auth == []
    assert other.auth == ["Bearer t"] * 2


def test_api_key_drops_the_kubeconfig_client_certificate(tmp_path):
    # the loader reads client certificates for https servers only; nothing is sent here
    params = {"kubeconfig": kubeconfig(tmp_path, "https://127.0.0.1:1", client_cert=True), "api_key": "operator-token"}
    cfg = k8s.build_api_client(params).configuration
    assert cfg.cert_file is None and cfg.key_file is None
    without = k8s.build_api_client({"kubeconfig": params["kubeconfig"]}).configuration
    assert without.cert_file and without.key_file


def test_ca_cert_and_validate_certs_win_over_kubeconfig(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("not used for http\n")
    path = kubeconfig(tmp_path, "https://127.0.0.1:1")
    cfg = k8s.build_api_client({"kubeconfig": path, "ca_cert": str(ca), "validate_certs": False}).configuration
    assert cfg.ssl_ca_cert == str(ca)
    assert cfg.verify_ssl is False
