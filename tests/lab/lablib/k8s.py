"""The two Kubernetes API emulators: PKI, tokens, kubeconfigs, processes, and the cloud
nodes' credentials (a kube-system Secret per node, filled in by the emulator)."""
import base64
import hashlib
import json
import os
import secrets
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

from . import config
from .util import LabError, log, run, wait_for, write_if_changed

AGENT_DIR = "/etc/hybridgpu/node-agent"


class _PKI:
    """labpki needs `cryptography` (in the repo venv), so it runs in the venv's python,
    not necessarily the interpreter running this CLI."""

    def __getattr__(self, func):
        def call(*args, **kwargs):
            code = ("import json,sys; sys.path.insert(0, %r); import labpki; "
                    "a = json.loads(sys.argv[1]); getattr(labpki, a[0])(*a[1], **a[2])" % config.LAB_SRC)
            run([python(), "-c", code, json.dumps([func, args, kwargs])], timeout=120)
        return call


def _labpki():
    return _PKI()


def python():
    """The emulator runs with the repo venv when there is one."""
    venv = os.path.join(config.ROOT, ".venv", "bin", "python")
    return venv if os.path.exists(venv) else sys.executable


def ca_path():
    return config.path("pki", "ca.crt")


def cluster_dir(cluster):
    return config.path("k8s", cluster)


# ---- PKI, tokens and kubeconfigs -------------------------------------------------

def ensure_pki():
    pki = _labpki()
    ca_dir = config.path("pki")
    if not os.path.exists(ca_path()):
        log("making lab CA in " + ca_dir)
        pki.make_ca(ca_dir)
    sans = [config.BRIDGE_IP, "127.0.0.1", "localhost"]
    for cluster in config.CLUSTERS:
        d = cluster_dir(cluster)
        os.makedirs(d, exist_ok=True)
        if not _server_cert(cluster):
            pki.make_server_cert(ca_dir, d, sans)
            if not _server_cert(cluster):
                raise LabError("labpki.make_server_cert wrote no cert/key pair in " + d)


def _server_cert(cluster):
    """(cert, key) written by labpki in the cluster dir, or None."""
    d = cluster_dir(cluster)
    for cert, key in (("server.crt", "server.key"), ("tls.crt", "tls.key"),
                      ("apiserver.crt", "apiserver.key")):
        c, k = os.path.join(d, cert), os.path.join(d, key)
        if os.path.exists(c) and os.path.exists(k):
            return c, k
    return None


def _read_tokens(path):
    tokens = {}
    try:
        with open(path) as fh:
            for line in fh:
                parts = line.strip().split(",", 3)
                if len(parts) >= 2:
                    tokens[parts[1]] = parts[0]
    except FileNotFoundError:
        pass
    return tokens


def tokens(cluster):
    """{user: token} from the cluster's tokens.csv."""
    return _read_tokens(os.path.join(cluster_dir(cluster), "tokens.csv"))


def ensure_tokens(cluster):
    path = os.path.join(cluster_dir(cluster), "tokens.csv")
    have = _read_tokens(path)
    if "admin" in have and "test-member" in have:
        return
    admin = have.get("admin") or secrets.token_hex(24)
    member = have.get("test-member") or secrets.token_hex(24)
    text = ('%s,admin,uid-admin,"system:masters"\n'
            '%s,test-member,uid-test-member,"hybridgpu:test-members"\n') % (admin, member)
    write_if_changed(path, text, 0o600)


def ensure_kubeconfigs():
    pki = _labpki()
    both = []
    for cluster in config.CLUSTERS:
        tok = tokens(cluster)
        entry = (cluster, config.api_url(cluster), ca_path(), tok["admin"])
        both.append(entry)
        pki.write_kubeconfig(os.path.join(cluster_dir(cluster), "admin.kubeconfig"), clusters=[entry])
        pki.write_kubeconfig(os.path.join(cluster_dir(cluster), "test-member.kubeconfig"),
                             clusters=[(cluster, config.api_url(cluster), ca_path(), tok["test-member"])])
    pki.write_kubeconfig(config.path("k8s", "kubeconfig"), clusters=both)


# ---- HTTP ------------------------------------------------------------------------

def _ctx():
    return ssl.create_default_context(cafile=ca_path())


def api(cluster, method, path, token=None, body=None, timeout=5, host=None):
    """One request to an emulator; returns (status, parsed JSON or text)."""
    url = "https://%s:%d%s" % (host or config.BRIDGE_IP, config.CLUSTERS[cluster]["port"], path)
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", "Bearer " + (token or tokens(cluster)["admin"]))
    req.add_header("Accept", "application/json")
    if data is not None:
        # A PATCH body is a JSON merge patch; kube-apiserver answers 415 to plain JSON there.
        req.add_header("Content-Type", "application/merge-patch+json" if method == "PATCH" else "application/json")
    try:
        with urllib.request.urlopen(req, context=_ctx(), timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


# ---- processes -------------------------------------------------------------------

def pidfile(cluster):
    return os.path.join(cluster_dir(cluster), "emulator.pid")


def running_pid(cluster):
    """The emulator's pid when its pidfile names a live k8s_emulator process."""
    try:
        with open(pidfile(cluster)) as fh:
            pid = int(fh.read().strip())
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            cmd = fh.read().split(b"\0")
    except (OSError, ValueError):
        return None
    if b"k8s_emulator" in cmd and cluster.encode() in cmd:
        return pid
    return None


def reachable(cluster, host=None):
    try:
        status, body = api(cluster, "GET", "/version", timeout=3, host=host)
        return status == 200 and isinstance(body, dict)
    except (OSError, ssl.SSLError):
        return False


def start_emulator(cluster):
    if running_pid(cluster):
        return False
    d = cluster_dir(cluster)
    cert, key = _server_cert(cluster)
    cmd = [python(), "-m", "k8s_emulator", "--cluster", cluster,
           "--bind", config.BRIDGE_IP, "--bind", "127.0.0.1",
           "--port", str(config.CLUSTERS[cluster]["port"]),
           "--cert", cert, "--key", key,
           "--token-file", os.path.join(d, "tokens.csv"),
           # node identity as kubeadm clusters have it: client certificates signed by the
           # cluster CA, the CSR signer with that CA, cluster-info for kubeadm discovery
           "--client-ca-file", ca_path(),
           "--cluster-signing-cert-file", ca_path(),
           "--cluster-signing-key-file", config.path("pki", "ca.key"),
           "--node-grace", os.environ.get("HGPU_LAB_NODE_GRACE", "20"),
           "--version", config.CLUSTERS[cluster]["version"],
           "--log-file", os.path.join(d, "emulator.log")]
    if cluster == CONNECTOR_CLUSTER:
        # the vendor connector's CSRs are approved by the "managed service", not by the collection
        cmd += ["--csr-auto-approve-group", CONNECTOR_GROUP]
    env = dict(os.environ, PYTHONPATH=config.LAB_SRC)
    log("starting %s emulator on %s" % (cluster, config.api_url(cluster)))
    out = open(os.path.join(d, "emulator.out"), "ab")
    proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, cwd=config.LAB_SRC)
    out.close()
    with open(pidfile(cluster), "w") as fh:
        fh.write("%d\n" % proc.pid)

    def up():
        if proc.poll() is not None:
            raise LabError("%s emulator exited with %s; see %s" % (
                cluster, proc.returncode, os.path.join(d, "emulator.out")))
        return reachable(cluster)
    try:
        wait_for("%s emulator at %s" % (cluster, config.api_url(cluster)), up, 30)
    except LabError:
        stop_emulator(cluster)
        raise
    return True


def stop_emulator(cluster):
    pid = running_pid(cluster)
    if pid:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and os.path.exists("/proc/%d" % pid):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.1)
        if os.path.exists("/proc/%d" % pid):
            os.killpg(pid, signal.SIGKILL)
    try:
        os.unlink(pidfile(cluster))
    except FileNotFoundError:
        pass
    return pid


def ensure_emulators():
    ensure_pki()
    for cluster in config.CLUSTERS:
        ensure_tokens(cluster)
    ensure_kubeconfigs()
    started = []
    for cluster in config.CLUSTERS:
        if start_emulator(cluster):
            started.append(cluster)
        ensure_device_plugin(cluster)
        ensure_controller_manager_pod(cluster)
    ensure_connector_token()
    return started


# ---- the vendor connector's activation token -----------------------------------------
# The lab's stand-in for a managed service that takes bring-your-own nodes: its activation
# token is a bootstrap token of the onprem emulator in CONNECTOR_GROUP, whose kubelet client
# CSRs the emulator approves itself (inventories/lab reads the token from the file).
CONNECTOR_CLUSTER = "onprem"
CONNECTOR_GROUP = "system:bootstrappers:vendor-connect"


def connector_token_path():
    return os.path.join(cluster_dir(CONNECTOR_CLUSTER), "connector-token")


def ca_cert_hash():
    """sha256:<hex> of the lab CA's SubjectPublicKeyInfo (kubeadm's discovery hash)."""
    pub = subprocess.run(["openssl", "x509", "-noout", "-pubkey", "-in", ca_path()],
                         capture_output=True, check=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "DER"], input=pub,
                         capture_output=True, check=True).stdout
    return "sha256:" + hashlib.sha256(der).hexdigest()


def ensure_connector_token():
    """Create the token file once and its bootstrap token Secret whenever it is missing (the
    emulator keeps its objects in memory), and write the CA hash the connector pins next to
    it. Returns True when the Secret was created."""
    write_if_changed(os.path.join(cluster_dir(CONNECTOR_CLUSTER), "connector-ca-hash"), ca_cert_hash() + "\n", 0o644)
    path = connector_token_path()
    try:
        with open(path) as fh:
            token = fh.read().strip()
    except FileNotFoundError:
        alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
        token = "%s.%s" % ("".join(secrets.choice(alphabet) for dummy in range(6)),
                           "".join(secrets.choice(alphabet) for dummy in range(16)))
        write_if_changed(path, token + "\n", 0o600)
    token_id, dummy, secret = token.partition(".")
    name = "bootstrap-token-" + token_id
    base = "/api/v1/namespaces/kube-system/secrets"
    status, body = api(CONNECTOR_CLUSTER, "GET", base + "/" + name)
    if status == 200:
        return False
    status, body = api(CONNECTOR_CLUSTER, "POST", base, body={
        "apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": name, "namespace": "kube-system"},
        "stringData": {"token-id": token_id, "token-secret": secret, "usage-bootstrap-authentication": "true",
                       "usage-bootstrap-signing": "true", "auth-extra-groups": CONNECTOR_GROUP,
                       "description": "lab vendor connector activation token"}})
    if status not in (200, 201, 409):
        raise LabError("creating the connector's bootstrap token on %s: HTTP %s %s" % (CONNECTOR_CLUSTER, status, body))
    return True


# The NVIDIA device plugin's DaemonSet, named as the GPU Operator and the static manifest name
# it. In the lab the node agent itself advertises nvidia.com/gpu, so the DaemonSet only stands
# for the plugin's presence: its nodeSelector matches no Node and it runs no pod.
DEVICE_PLUGIN = {
    "apiVersion": "apps/v1", "kind": "DaemonSet",
    "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system",
                 "labels": {"app.kubernetes.io/name": "nvidia-device-plugin"}},
    "spec": {"selector": {"matchLabels": {"name": "nvidia-device-plugin-ds"}},
             "template": {"metadata": {"labels": {"name": "nvidia-device-plugin-ds"}},
                          "spec": {"nodeSelector": {"hybridgpu.io/lab-device-plugin-pods": "none"},
                                   "containers": [{"name": "nvidia-device-plugin-ctr",
                                                   "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}]}}},
}
DEVICE_PLUGIN_PATH = "/apis/apps/v1/namespaces/kube-system/daemonsets"


def ensure_device_plugin(cluster):
    """Create the device plugin DaemonSet unless present (tests delete it to break the cluster)."""
    status, body = api(cluster, "GET", DEVICE_PLUGIN_PATH + "/" + DEVICE_PLUGIN["metadata"]["name"])
    if status == 200:
        return False
    status, body = api(cluster, "POST", DEVICE_PLUGIN_PATH, body=DEVICE_PLUGIN)
    if status not in (200, 201, 409):
        raise LabError("creating the device plugin DaemonSet on %s: HTTP %s %s" % (cluster, status, body))
    return True


# The mirror pod a kubeadm control plane shows for its kube-controller-manager static pod,
# carrying the emulator's node grace period on its command line (where validation reads it).
# Its nodeSelector matches no Node: it stays Pending and runs nothing.
def controller_manager_pod(cluster):
    grace = os.environ.get("HGPU_LAB_NODE_GRACE", "20")
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "kube-controller-manager-lab-control-plane", "namespace": "kube-system",
                         "labels": {"component": "kube-controller-manager", "tier": "control-plane"},
                         "annotations": {"kubernetes.io/config.source": "file"}},
            "spec": {"nodeSelector": {"hybridgpu.io/lab-control-plane": "none"},
                     "containers": [{"name": "kube-controller-manager",
                                     "image": "registry.k8s.io/kube-controller-manager:v1.30.4",
                                     "command": ["kube-controller-manager", "--cluster-name=%s" % cluster,
                                                 "--node-monitor-grace-period=%ss" % grace,
                                                 "--use-service-account-credentials=true"]}]}}


def ensure_controller_manager_pod(cluster):
    pod = controller_manager_pod(cluster)
    path = "/api/v1/namespaces/kube-system/pods"
    status, body = api(cluster, "GET", path + "/" + pod["metadata"]["name"])
    if status == 200:
        return False
    status, body = api(cluster, "POST", path, body=pod)
    if status not in (200, 201, 409):
        raise LabError("creating the controller manager's mirror pod on %s: HTTP %s %s" % (cluster, status, body))
    return True


# ---- cloud node credentials ------------------------------------------------------

def node_ready(cluster, name):
    status, body = api(cluster, "GET", "/api/v1/nodes/" + name)
    if status != 200:
        return False
    for cond in body.get("status", {}).get("conditions", []):
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _list(cluster, path):
    status, body = api(cluster, "GET", path)
    if status != 200:
        raise LabError("listing %s on %s: HTTP %s %s" % (path, cluster, status, body))
    return body.get("items", [])


def list_nodes(cluster):
    out = []
    for item in _list(cluster, "/api/v1/nodes"):
        ready = "Unknown"
        for cond in item.get("status", {}).get("conditions", []):
            if cond.get("type") == "Ready":
                ready = cond.get("status")
        out.append((item["metadata"]["name"], ready))
    return out


def delete_light_nodes(keep, cluster="onprem"):
    """Delete the Node objects of light owned nodes past the first `keep` (their containers are
    gone). Returns the names deleted."""
    from .nodes import is_light
    wanted = {n["name"] for n in config.light_nodes(keep)}
    gone = [name for name, _ready in list_nodes(cluster) if is_light(name) and name not in wanted]
    delete_nodes(gone, cluster)
    return gone


SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def _job_finished(job):
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def working_namespaces():
    """The namespaces the lab does not declare (the collection's and the tests' working
    namespaces, made on demand and reused) with what is left running in them:
    [(cluster, namespace, pods not finished, jobs not finished)]."""
    out = []
    for cluster in config.CLUSTERS:
        for item in _list(cluster, "/api/v1/namespaces"):
            name = item["metadata"]["name"]
            if name in SYSTEM_NAMESPACES:
                continue
            pods, jobs = (_list(cluster, path % name) for path in
                          ("/api/v1/namespaces/%s/pods", "/apis/batch/v1/namespaces/%s/jobs"))
            out.append((cluster, name,
                        sum(1 for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")),
                        sum(1 for j in jobs if not _job_finished(j))))
    return out


def delete_nodes(names, cluster="onprem"):
    """Delete the Node objects of the named nodes (404 counts as gone)."""
    for name in names:
        status, body = api(cluster, "DELETE", "/api/v1/nodes/" + name)
        if status not in (200, 202, 404):
            raise LabError("deleting Node %s on %s: HTTP %s %s" % (name, cluster, status, body))


def node_token(cluster, name):
    """Create (if absent) the node's credential Secret and return its token."""
    secret = "node-%s-token" % name
    path = "/api/v1/namespaces/kube-system/secrets"
    status, body = api(cluster, "GET", path + "/" + secret)
    if status == 404:
        manifest = {
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
            "metadata": {"name": secret, "namespace": "kube-system", "annotations": {
                "kubernetes.io/service-account.name": "node-" + name,
                "hybridgpu.io/node-name": name}}}
        status, body = api(cluster, "POST", path, body=manifest)
        if status not in (200, 201, 409):
            raise LabError("creating Secret kube-system/%s on %s: HTTP %s %s" % (secret, cluster, status, body))

    def filled():
        st, b = api(cluster, "GET", path + "/" + secret)
        tok = (b.get("data") or {}).get("token") if st == 200 else None
        return base64.b64decode(tok).decode() if tok else None
    return wait_for("the emulator to fill kube-system/%s" % secret, filled, 20)


def agent_kubeconfig(cluster, name, token):
    with open(ca_path(), "rb") as fh:
        ca_b64 = base64.b64encode(fh.read()).decode()
    user = "system:node:" + name
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": cluster,
        "clusters": [{"name": cluster, "cluster": {
            "server": config.api_url(cluster), "certificate-authority-data": ca_b64}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
    }
    # JSON is YAML: any kubeconfig reader accepts it.
    return json.dumps(doc, indent=2) + "\n"


def join_node(node, cluster="cloud"):
    """Give a node its credential and start its agent. Returns True when something changed.

    An owned node joining onprem outside onboarding is let through the API guard first (when
    onboarding made one), as a site operator would with `nft add element`."""
    name = node["name"]
    if cluster == "onprem":
        from . import nodes
        nodes.guard_member(node["ip"])
    current = run(["podman", "exec", name, "cat", AGENT_DIR + "/kubeconfig"], check=False).stdout
    active = run(["podman", "exec", name, "systemctl", "is-active", "hybridgpu-node-agent"],
                 check=False).stdout.strip() == "active"
    if current and active:
        try:
            tok = json.loads(current)["users"][0]["user"]["token"]
            st, _ = api(cluster, "GET", "/api/v1/nodes/" + name, token=tok)
            if st in (200, 404):  # token accepted
                return False
        except (ValueError, KeyError, IndexError):
            pass
    token = node_token(cluster, name)
    text = agent_kubeconfig(cluster, name, token)
    tmp = config.path("nodes", name, "agent.kubeconfig.tmp")
    write_if_changed(tmp, text, 0o600)
    run(["podman", "exec", name, "mkdir", "-p", AGENT_DIR])
    run(["podman", "cp", tmp, "%s:%s/kubeconfig" % (name, AGENT_DIR)])
    os.unlink(tmp)
    run(["podman", "exec", name, "chmod", "600", AGENT_DIR + "/kubeconfig"])
    run(["podman", "exec", name, "systemctl", "enable", "hybridgpu-node-agent.service"])
    run(["podman", "exec", name, "systemctl", "restart", "hybridgpu-node-agent.service"])
    log("%s joined the %s cluster" % (name, cluster))
    return True
