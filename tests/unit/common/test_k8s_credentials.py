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


@pytest.fixture
def tls_server(tmp_path):
    """An HTTPS server on loopback with a self-signed certificate no CA bundle trusts."""
    import ssl
    import subprocess
    crt, key = tmp_path / "srv.crt", tmp_path / "srv.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(crt)],
                   check=True, capture_output=True)
    srv = Recorder()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(crt), str(key))
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def insecure_kubeconfig(tmp_path, url):
    path = kubeconfig(tmp_path, url)
    doc = json.loads(open(path).read())
    doc["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    with open(path, "w") as fh:
        fh.write(json.dumps(doc))
    return path


def test_validate_certs_true_wins_over_kubeconfig_insecure_skip(tls_server, tmp_path):
    url = "https://127.0.0.1:%d" % tls_server.server_address[1]
    path = insecure_kubeconfig(tmp_path, url)
    # the kubeconfig alone skips verification: the request reaches the server
    assert sent(tls_server, {"kubeconfig": path}) == ["Bearer admin-token"] * 2
    # validate_certs: true given explicitly: the client checks the certificate and refuses it
    with pytest.raises(k8s.K8sError) as err:
        sent(tls_server, {"kubeconfig": path, "validate_certs": True})
    assert "CERTIFICATE_VERIFY_FAILED" in "%s %s" % (err.value.message, err.value.cause), vars(err.value)
    assert tls_server.auth == ["Bearer admin-token"] * 2


def test_module_leaves_validate_certs_unset_unless_given():
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import k8s_module
    assert "default" not in k8s_module.K8S_AUTH_ARG_SPEC["validate_certs"]
