#!/usr/bin/python3
"""hybridgpu-node-agent: the lab's kubelet stand-in (Python 3 standard library only).

It registers this machine as a Kubernetes Node, heartbeats its Ready condition, renews the
Node's Lease in kube-node-lease (coordination.k8s.io/v1, as the kubelet does), runs the Pods
bound to it as plain processes and reports their phase, exit codes and logs. A pod that gets a
deletionTimestamp is stopped (SIGTERM, SIGKILL after its deletionGracePeriodSeconds) and its
deletion confirmed with a grace-0 delete, as the kubelet does. It speaks plain Kubernetes REST
over HTTPS with a bearer token or a client certificate.

Installed as /usr/bin/kubelet (package kubelet) it takes the kubelet's flags: --kubeconfig (the
file kubeadm join writes, with client-certificate/client-key), --node-labels k=v,...,
--register-with-taints k=v:Effect,..., --hostname-override; other flags are ignored. The
Node is registered with those labels and taints (later changes belong to the admin), pod
state then lives under /var/lib/kubelet/lab-pods.

Files:
  /etc/hybridgpu/node-agent/config.json  optional settings (see DEFAULTS); env HGPU_AGENT_CONFIG
  /etc/hybridgpu/node-agent/kubeconfig   server, CA and token. JSON, or the simple YAML layout
                                         of a one-cluster kubeconfig (see parse_kubeconfig)
  /var/lib/hybridgpu-node-agent/pods/<uid>/  working directory, logs and exit codes of a pod
  /etc/hybridgpu-lab/images.json         optional: the images this node's "registry" holds,
                                         {"<repo>:<tag>": "sha256:<hex>"} (config image_digests)
Images: the lab has no registry and runs commands, not images. With images.json the agent
answers as a kubelet whose runtime holds those images: the Node's status.images lists each one
(`<repo>@sha256:<hex>` beside `<repo>:<tag>`), a container's imageID is `<repo>@sha256:<hex>`,
and a reference by a digest the file does not hold leaves the pod Pending with the container
waiting in ErrImagePull (manifest unknown). A tag the file does not name runs with no imageID,
as without the file.
Logs go to stdout (journald under systemd).
"""
import base64
import http.client
import json
import os
import platform
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse

CONFIG_PATH = "/etc/hybridgpu/node-agent/config.json"
DEFAULTS = {
    "node_name": None,                 # default: the hostname
    "kubeconfig": "/etc/hybridgpu/node-agent/kubeconfig",
    "heartbeat_interval": 2.0,         # seconds between Ready heartbeats
    # seconds between Lease renewals: a quarter of the lab emulator's 20 s node grace, the ratio the
    # kubelet keeps to the 40 s default (renewing every 10 s), so one slow renewal under load
    # never leaves the Lease stale for a whole grace period
    "lease_interval": 5.0,
    "lease_duration": 40,              # leaseDurationSeconds, as the kubelet
    "pod_poll_interval": 0.5,          # seconds between pod list polls (a kubelet watches: it sees a pod at once)
    "log_push_interval": 2.0,          # seconds between log uploads of a running pod
    "kubelet_version": "v1.30.4-hybridgpu",
    "state_dir": "/var/lib/hybridgpu-node-agent",
    "nvidia_smi": "nvidia-smi",
    "request_timeout": 5.0,
    "max_backoff": 8.0,                # cap of the retry backoff while the API is unreachable
    "kill_grace": 5.0,                 # SIGTERM -> SIGKILL delay for pods gone from the API without a grace
    "max_pods": 110,
    "image_digests": "/etc/hybridgpu-lab/images.json",
}
LOG_TAIL = 64 * 1024
RESTRICTED_PREFIX = "node-restriction.kubernetes.io/"
RUNTIME = "podman-lab://1"


def log(msg, *args):
    sys.stdout.write((msg % args if args else msg) + "\n")
    sys.stdout.flush()


def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def now_micro():
    """A metav1.MicroTime, what Lease renewTime holds."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".%06dZ" % int((now % 1) * 1e6)


LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


# ---------------------------------------------------------------- configuration

def load_config(path=None, env=None):
    env = os.environ if env is None else env
    path = path or env.get("HGPU_AGENT_CONFIG", CONFIG_PATH)
    cfg = dict(DEFAULTS)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            cfg.update(json.load(handle))
    if not cfg.get("node_name"):
        cfg["node_name"] = socket.gethostname()
    return cfg


def _scalar(text):
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def parse_kubeconfig(text):
    """Return {'server', 'ca_file', 'ca_data', 'token', 'insecure'} from a kubeconfig.

    JSON is parsed fully (it is valid YAML too). Otherwise the simple YAML layout the lab
    writes is read line by line: the first `server:`, `certificate-authority:`,
    `certificate-authority-data:`, `insecure-skip-tls-verify:`, `token:` and `tokenFile:`
    values win. This is enough for a one-cluster, one-user node kubeconfig.
    """
    out = {"server": None, "ca_file": None, "ca_data": None, "token": None, "insecure": False,
           "client_cert": None, "client_key": None}
    stripped = text.lstrip()
    if stripped.startswith("{"):
        doc = json.loads(text)
        contexts = {c["name"]: c.get("context", {}) for c in doc.get("contexts", [])}
        ctx = contexts.get(doc.get("current-context")) or (next(iter(contexts.values()), {}))
        clusters = {c["name"]: c.get("cluster", {}) for c in doc.get("clusters", [])}
        users = {u["name"]: u.get("user", {}) for u in doc.get("users", [])}
        cluster = clusters.get(ctx.get("cluster")) or next(iter(clusters.values()), {})
        user = users.get(ctx.get("user")) or next(iter(users.values()), {})
        out["server"] = cluster.get("server")
        out["ca_file"] = cluster.get("certificate-authority")
        out["ca_data"] = cluster.get("certificate-authority-data")
        out["insecure"] = bool(cluster.get("insecure-skip-tls-verify", False))
        out["token"] = user.get("token")
        out["client_cert"] = user.get("client-certificate")
        out["client_key"] = user.get("client-key")
        token_file = user.get("tokenFile")
    else:
        keys = {"server": "server", "certificate-authority": "ca_file",
                "certificate-authority-data": "ca_data", "token": "token",
                "insecure-skip-tls-verify": "insecure", "client-certificate": "client_cert",
                "client-key": "client_key"}
        token_file = None
        for line in text.splitlines():
            body = line.split(" #", 1)[0].strip()
            if body.startswith("- "):
                body = body[2:].strip()
            key, sep, value = body.partition(":")
            if not sep:
                continue
            key = key.strip()
            if key == "tokenFile" and token_file is None:
                token_file = _scalar(value)
            elif key in keys and out[keys[key]] in (None, False):
                val = _scalar(value)
                out[keys[key]] = (val.lower() == "true") if key == "insecure-skip-tls-verify" else val
    if not out["token"] and token_file:
        with open(token_file, encoding="utf-8") as handle:
            out["token"] = handle.read().strip()
    if not out["server"]:
        raise ValueError("kubeconfig has no cluster server")
    return out


# ---------------------------------------------------------------- API client

class ApiUnreachable(Exception):
    """The API server could not be reached (network, TLS, timeout)."""


class Api:
    """Minimal Kubernetes REST client: JSON in, (status, body) out."""

    def __init__(self, kube, timeout=5.0, base_dir=None):
        self.server = kube["server"].rstrip("/")
        self.token = kube.get("token")
        self.timeout = timeout
        if self.server.startswith("https"):
            if kube.get("insecure"):
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            elif kube.get("ca_data"):
                ctx = ssl.create_default_context(cadata=base64.b64decode(kube["ca_data"]).decode())
            elif kube.get("ca_file"):
                ca_file = kube["ca_file"]
                if base_dir and not os.path.isabs(ca_file):
                    ca_file = os.path.join(base_dir, ca_file)
                ctx = ssl.create_default_context(cafile=ca_file)
            else:
                ctx = ssl.create_default_context()
            if kube.get("client_cert"):
                ctx.load_cert_chain(kube["client_cert"], kube.get("client_key") or kube["client_cert"])
            self.ssl = ctx
        else:
            self.ssl = None
        self.conn, self.conn_server, self.conn_used = None, None, False

    def _connection(self):
        """The kept connection to the server, opened on first use (as a kubelet, one
        connection carries every request instead of a TLS handshake per request)."""
        if self.conn is not None and self.conn_server != self.server:
            self.close()
        if self.conn is None:
            url = urllib.parse.urlsplit(self.server)
            if url.scheme == "https":
                self.conn = http.client.HTTPSConnection(url.hostname, url.port or 443,
                                                        timeout=self.timeout, context=self.ssl)
            else:
                self.conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=self.timeout)
            self.conn_server, self.conn_used = self.server, False
        return self.conn

    def close(self):
        if self.conn is not None:
            self.conn.close()
        self.conn = None

    def request(self, method, path, body=None, content_type="application/json", query=None):
        target = urllib.parse.urlsplit(self.server).path.rstrip("/") + path
        if query:
            target += "?" + urllib.parse.urlencode(query)
        data = None
        headers = {"Accept": "application/json", "User-Agent": "hybridgpu-node-agent/0.1.0"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        if body is not None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            conn = self._connection()
            reused = self.conn_used
            try:
                conn.request(method, target, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (http.client.HTTPException, OSError, ssl.SSLError) as err:
                self.close()
                # a kept connection the server closed while idle fails before any answer; it
                # goes once more on a new connection (every request the agent sends may be
                # repeated: status patches, a lease PUT under its resourceVersion, a create
                # answered 409 when it exists)
                stale = isinstance(err, (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError))
                if attempt == 1 and reused and stale:
                    continue
                raise ApiUnreachable(str(err) or type(err).__name__)
            self.conn_used = True
            if resp.will_close:
                self.close()
            return resp.status, _decode(raw)
        raise ApiUnreachable("no answer")


def _decode(raw):
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


# ---------------------------------------------------------------- node facts

def read_gpus(nvidia_smi="nvidia-smi", runner=subprocess.run):
    """[(name, memory MiB)] and driver version through nvidia-smi; ([], None) without it."""
    try:
        res = runner([nvidia_smi, "--query-gpu=name,memory.total,driver_version",
                      "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return [], None
    if res.returncode != 0:
        return [], None
    gpus, driver = [], None
    for line in res.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        try:
            gpus.append((parts[0], int(float(parts[1]))))
        except ValueError:
            continue
        driver = parts[2]
    return gpus, driver


def node_labels(node, gpus, driver):
    labels = {"kubernetes.io/hostname": node, "kubernetes.io/os": "linux",
              "kubernetes.io/arch": _arch()}
    if gpus:
        labels["nvidia.com/gpu.present"] = "true"
        labels["nvidia.com/gpu.product"] = gpus[0][0].replace(" ", "-")
        labels["nvidia.com/gpu.count"] = str(len(gpus))
        labels["nvidia.com/gpu.memory"] = str(gpus[0][1])
    if driver:
        parts = driver.split(".")
        labels["nvidia.com/cuda.driver.major"] = parts[0]
        if len(parts) > 1:
            labels["nvidia.com/cuda.driver.minor"] = parts[1]
        if len(parts) > 2:
            labels["nvidia.com/cuda.driver.rev"] = parts[2]
    return {k: v for k, v in labels.items() if not k.startswith(RESTRICTED_PREFIX)}


def _arch():
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def _read(path, default=""):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return default


def os_image(os_release_text):
    for line in os_release_text.splitlines():
        if line.startswith("PRETTY_NAME="):
            return _scalar(line.split("=", 1)[1])
    return "Linux"


def memory_kib(meminfo_text):
    for line in meminfo_text.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    return 0


def node_info(cfg):
    return {
        "kubeletVersion": cfg["kubelet_version"],
        "kubeProxyVersion": cfg["kubelet_version"],
        "osImage": os_image(_read("/etc/os-release")),
        "kernelVersion": platform.release(),
        "operatingSystem": "linux",
        "architecture": _arch(),
        "containerRuntimeVersion": RUNTIME,
        "machineID": _read("/etc/machine-id").strip(),
        "systemUUID": _read("/etc/machine-id").strip(),
        "bootID": _read("/proc/sys/kernel/random/boot_id").strip(),
    }


def node_resources(gpu_count, cpus, mem_kib, max_pods=110):
    res = {"cpu": str(cpus), "memory": "%dKi" % mem_kib, "pods": str(max_pods)}
    res["nvidia.com/gpu"] = str(gpu_count)
    return res


def ready_condition(since, now=None):
    now = now or now_rfc3339()
    return {"type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "kubelet is posting ready status", "lastHeartbeatTime": now,
            "lastTransitionTime": since}


def node_status(resources, info, addresses, since, now=None):
    return {"capacity": dict(resources), "allocatable": dict(resources), "nodeInfo": info,
            "addresses": addresses, "conditions": [ready_condition(since, now)]}


def node_object(name, labels, status, taints=None):
    spec = {"taints": taints} if taints else {}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels}, "spec": spec, "status": status}


def parse_labels(text):
    """--node-labels: k=v,k2=v2."""
    out = {}
    for item in (text or "").split(","):
        key, sep, value = item.strip().partition("=")
        if key and sep:
            out[key] = value
    return out


def parse_taints(text):
    """--register-with-taints: key[=value]:Effect,..."""
    out = []
    for item in (text or "").split(","):
        body, sep, effect = item.strip().rpartition(":")
        if not sep or not body:
            continue
        key, eq, value = body.partition("=")
        taint = {"key": key, "effect": effect}
        if eq:
            taint["value"] = value
        out.append(taint)
    return out


def parse_flags(argv):
    """The kubelet flags this stand-in honours, as config overrides."""
    out = {}
    names = {"--kubeconfig": "kubeconfig", "--node-labels": "node_labels",
             "--register-with-taints": "register_taints", "--hostname-override": "node_name"}
    i = 0
    while i < len(argv):
        arg = argv[i]
        key, sep, value = arg.partition("=")
        if key in names:
            if not sep and i + 1 < len(argv):
                i += 1
                value = argv[i]
            out[names[key]] = value
        i += 1
    if out.get("kubeconfig"):
        out.setdefault("state_dir", "/var/lib/kubelet/lab-pods")
    return out


def local_address(server):
    """The local IP used to reach the API server (UDP connect sends no packet)."""
    host = urllib.parse.urlparse(server).hostname or "127.0.0.1"
    port = urllib.parse.urlparse(server).port or 443
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((host, port))
            return sock.getsockname()[0]
    except OSError:
        return "127.0.0.1"


# ---------------------------------------------------------------- images

def split_ref(image):
    """(repository, tag or None, digest or None) of an image reference."""
    rest, sep, digest = image.partition("@")
    slash, colon = rest.rfind("/"), rest.rfind(":")
    if colon > slash:
        return rest[:colon], rest[colon + 1:], digest if sep else None
    return rest, None, digest if sep else None


def load_image_digests(path):
    """{"<repo>:<tag>": "sha256:<hex>"} from images.json; None when the file is absent or unreadable."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else None


def node_images(table):
    """Node.status.images: one entry per (repo, digest) with every tag that names it."""
    by = {}
    for ref, digest in sorted((table or {}).items()):
        repo, tag, dummy = split_ref(ref)
        by.setdefault((repo, digest), []).append("%s:%s" % (repo, tag or "latest"))
    return [{"names": ["%s@%s" % key] + tags, "sizeBytes": 0} for key, tags in sorted(by.items())]


def resolve_image(image, table):
    """(imageID, error) for a container image: ("", None) when nothing is known (no images.json,
    or a tag it does not name), (None, message) for a digest it does not hold."""
    if table is None:
        return "", None
    repo, tag, digest = split_ref(image)
    if digest:
        if any(split_ref(ref)[0] == repo and d == digest for ref, d in table.items()):
            return "%s@%s" % (repo, digest), None
        return None, 'failed to resolve reference "%s": %s: not found (manifest unknown)' % (image, image)
    got = table.get("%s:%s" % (repo, tag or "latest"))
    return ("%s@%s" % (repo, got), None) if got else ("", None)


# ---------------------------------------------------------------- pods

def _field_value(pod, path, node):
    return {"metadata.name": pod["metadata"].get("name"),
            "metadata.namespace": pod["metadata"].get("namespace"),
            "metadata.uid": pod["metadata"].get("uid"),
            "spec.nodeName": node, "spec.serviceAccountName": pod.get("spec", {}).get("serviceAccountName"),
            }.get(path)


def gpu_request(container):
    res = container.get("resources") or {}
    value = (res.get("limits") or {}).get("nvidia.com/gpu") or (res.get("requests") or {}).get("nvidia.com/gpu")
    try:
        return int(value or 0)
    except ValueError:
        return 0


def container_plan(pod, container, node, workdir, gpu_ids):
    """(argv, env) for one container, or raise ValueError when it cannot run."""
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    if not argv:
        raise ValueError("container %s has no command (images are not run in the lab)"
                         % container.get("name"))
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "HOME": workdir, "HOSTNAME": pod["metadata"]["name"], "LANG": "C.UTF-8"}
    if gpu_ids is not None:
        visible = ",".join(str(i) for i in gpu_ids) if gpu_ids else "void"
        env["NVIDIA_VISIBLE_DEVICES"] = visible
        env["CUDA_VISIBLE_DEVICES"] = visible if gpu_ids else ""
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif (item.get("valueFrom") or {}).get("fieldRef"):
            value = _field_value(pod, item["valueFrom"]["fieldRef"].get("fieldPath"), node)
            if value is not None:
                env[item["name"]] = str(value)
        else:
            env.setdefault(item["name"], "")
    return argv, env


def container_status(name, cid, state, image="", image_id=""):
    """A containerStatuses entry; state is ('running', started) or ('terminated', started, finished, code)."""
    entry = {"name": name, "image": image, "imageID": image_id, "containerID": cid, "restartCount": 0}
    if state[0] == "running":
        entry.update(ready=True, started=True, state={"running": {"startedAt": state[1]}})
    elif state[0] == "waiting":
        entry.update(ready=False, started=False, state={"waiting": {"reason": state[1], "message": state[2]}})
    else:
        _, started, finished, code = state
        entry.update(ready=False, started=False, state={"terminated": {
            "exitCode": code, "reason": "Completed" if code == 0 else "Error",
            "startedAt": started, "finishedAt": finished, "containerID": cid}})
    return entry


def pod_status_patch(phase, start_time, statuses, host_ip, reason=None, message=None):
    ready = "True" if phase == "Running" else "False"
    status = {"phase": phase, "hostIP": host_ip, "podIP": host_ip, "startTime": start_time,
              "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": now_rfc3339()},
                             {"type": "ContainersReady", "status": ready,
                              "lastTransitionTime": now_rfc3339()},
                             {"type": "PodScheduled", "status": "True"}],
              "containerStatuses": statuses}
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    return {"status": status}


SHELL_WRAPPER = 'code=0; "$@" || code=$?; echo "$code" > "$HGPU_EXIT_FILE.tmp"; mv "$HGPU_EXIT_FILE.tmp" "$HGPU_EXIT_FILE"; exit "$code"'


class LocalPod:
    """A pod this agent runs: its processes and what was last reported."""

    def __init__(self, pod, pod_dir):
        meta = pod["metadata"]
        self.uid = meta["uid"]
        self.name = meta["name"]
        self.namespace = meta.get("namespace", "default")
        self.dir = pod_dir
        self.containers = []   # dicts: name, pid, log, exit_file, started, finished, code
        self.start_time = None
        self.phase = "Pending"
        self.reported = None
        self.reason = None
        self.message = None
        self.gpus = []
        self.killed_at = None
        self.deleted = False
        self.names = [c.get("name", "main") for c in (pod.get("spec") or {}).get("containers") or []]
        self.last_log_push = 0.0
        self.image_error = None   # {"images": {container: image}, "message"} while an image cannot be pulled

    def save(self):
        data = {k: getattr(self, k) for k in ("uid", "name", "namespace", "containers", "start_time",
                                              "phase", "reported", "reason", "message", "gpus",
                                              "deleted", "names", "image_error")}
        tmp = os.path.join(self.dir, "state.json.tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        os.replace(tmp, os.path.join(self.dir, "state.json"))

    @classmethod
    def load(cls, pod_dir):
        with open(os.path.join(pod_dir, "state.json"), encoding="utf-8") as handle:
            data = json.load(handle)
        pod = cls({"metadata": {"uid": data["uid"], "name": data["name"],
                                "namespace": data["namespace"]}}, pod_dir)
        for key, value in data.items():
            setattr(pod, key, value)
        return pod

    def poll(self):
        """Update container and pod state from the processes; True if anything changed."""
        changed = False
        for c in self.containers:
            if c.get("code") is not None:
                continue
            code = _exit_code(c)
            if code is not None:
                c["code"] = code
                c["finished"] = now_rfc3339()
                changed = True
        if self.containers and all(c.get("code") is not None for c in self.containers):
            phase = "Succeeded" if all(c["code"] == 0 for c in self.containers) else "Failed"
            if phase != self.phase:
                self.phase = phase
                changed = True
        return changed

    def statuses(self):
        out = []
        for c in self.containers:
            cid = "podman-lab://%s-%s" % (self.uid, c["name"])
            image = (c.get("image") or "", c.get("image_id") or "")
            if c.get("code") is None:
                out.append(container_status(c["name"], cid, ("running", c["started"]), *image))
            else:
                out.append(container_status(c["name"], cid, ("terminated", c["started"],
                                                             c["finished"], c["code"]), *image))
        return out

    def terminate(self, force=False):
        for c in self.containers:
            if c.get("code") is None and c.get("pid"):
                try:
                    os.killpg(c["pid"], signal.SIGKILL if force else signal.SIGTERM)
                except OSError:
                    pass


def _exit_code(c):
    """Exit code of a container process, or None while it runs. Works after agent restarts."""
    proc = CHILDREN.get(c.get("pid"))
    if proc is not None:
        if proc.poll() is None:
            return None
        CHILDREN.pop(c["pid"], None)
    elif c.get("pid") and _alive(c["pid"]):
        return None
    text = _read(c["exit_file"]).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    if proc is not None and proc.returncode is not None:
        code = proc.returncode
        return 128 - code if code < 0 else code
    return 137  # killed without writing its exit code


def _alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    # A zombie of ours would have been found in CHILDREN; a non-child zombie counts as gone.
    return "State:\tZ" not in _read("/proc/%d/status" % pid)


CHILDREN = {}


def tail(path, limit=LOG_TAIL):
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


# ---------------------------------------------------------------- the agent

class Agent:
    def __init__(self, cfg, api=None, gpus=None, driver=None):
        self.cfg = cfg
        self.node = cfg["node_name"]
        kube_path = cfg["kubeconfig"]
        if api is None:
            with open(kube_path, encoding="utf-8") as handle:
                kube = parse_kubeconfig(handle.read())
            api = Api(kube, timeout=float(cfg["request_timeout"]),
                      base_dir=os.path.dirname(os.path.abspath(kube_path)))
        self.api = api
        if gpus is None:
            gpus, driver = read_gpus(cfg["nvidia_smi"])
        self.gpus, self.driver = gpus, driver
        self.pods_dir = os.path.join(cfg["state_dir"], "pods")
        os.makedirs(self.pods_dir, exist_ok=True)
        self.pods = {}
        self.registered = False
        self.since = now_rfc3339()
        self.host_ip = local_address(api.server)
        self.next_heartbeat = 0.0
        self.next_lease = 0.0
        self.lease = None       # the Lease as last read or written
        self.node_uid = None
        self.next_poll = 0.0
        self.backoff = 0.0
        self.online = None
        self._recover()

    # -- node
    def _status(self):
        resources = node_resources(len(self.gpus), os.cpu_count() or 1,
                                   memory_kib(_read("/proc/meminfo")), int(self.cfg["max_pods"]))
        addresses = [{"type": "InternalIP", "address": self.host_ip},
                     {"type": "Hostname", "address": self.node}]
        status = node_status(resources, node_info(self.cfg), addresses, self.since)
        table = load_image_digests(self.cfg.get("image_digests") or "")
        if table is not None:
            status["images"] = node_images(table)
        return status

    def register(self):
        labels = node_labels(self.node, self.gpus, self.driver)
        own = dict(labels)
        labels.update(parse_labels(self.cfg.get("node_labels")))
        code, body = self.api.request("POST", "/api/v1/nodes",
                                      node_object(self.node, labels, self._status(),
                                                  parse_taints(self.cfg.get("register_taints"))))
        labels = own  # an existing Node keeps the labels and taints the admin set
        if code == 409:
            code, body = self.api.request(
                "PATCH", "/api/v1/nodes/" + self.node, {"metadata": {"labels": labels}},
                content_type="application/strategic-merge-patch+json")
        if code in (200, 201):
            self.registered = True
            self.node_uid = ((body or {}).get("metadata") or {}).get("uid") if isinstance(body, dict) else None
            log("node %s registered (%d GPUs)", self.node, len(self.gpus))
            return self.heartbeat()
        log("node registration failed: HTTP %s %s", code, _reason(body))
        return False

    def heartbeat(self):
        code, body = self.api.request("PATCH", "/api/v1/nodes/%s/status" % self.node,
                                      {"status": self._status()},
                                      content_type="application/strategic-merge-patch+json")
        if code == 404:
            self.registered = False
            log("node %s not found on the API, registering again", self.node)
            return False
        if code != 200:
            log("heartbeat failed: HTTP %s %s", code, _reason(body))
            return False
        return True

    def lease_body(self):
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": self.node, "namespace": "kube-node-lease"},
                 "spec": {"holderIdentity": self.node,
                          "leaseDurationSeconds": int(self.cfg["lease_duration"]),
                          "renewTime": now_micro()}}
        if self.node_uid:
            lease["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node",
                                                     "name": self.node, "uid": self.node_uid}]
        return lease

    def renew_lease(self):
        """Create or renew the Node's Lease, as the kubelet's node lease controller does: update
        the copy last seen, read it again after a conflict, create it when it is missing."""
        if self.lease is None:
            code, body = self.api.request("GET", "%s/%s" % (LEASE_PATH, self.node))
            if code == 404:
                code, body = self.api.request("POST", LEASE_PATH, self.lease_body())
                if code in (200, 201):
                    self.lease = body
                    return True
            if code != 200:
                log("lease read/create failed: HTTP %s %s", code, _reason(body))
                return False
            self.lease = body
        lease = dict(self.lease)
        lease["spec"] = dict(lease.get("spec") or {}, holderIdentity=self.node, renewTime=now_micro(),
                             leaseDurationSeconds=int(self.cfg["lease_duration"]))
        code, body = self.api.request("PUT", "%s/%s" % (LEASE_PATH, self.node), lease)
        if code == 200:
            self.lease = body
            return True
        self.lease = None   # conflict or gone: read it again next time
        log("lease renewal failed: HTTP %s %s", code, _reason(body))
        return False

    # -- pods
    def _recover(self):
        for uid in sorted(os.listdir(self.pods_dir)):
            path = os.path.join(self.pods_dir, uid)
            if os.path.exists(os.path.join(path, "state.json")):
                try:
                    pod = LocalPod.load(path)
                except (OSError, ValueError, KeyError):
                    continue
                if pod.reported in ("Succeeded", "Failed") and pod.reported == pod.phase:
                    continue
                self.pods[pod.uid] = pod
                log("recovered pod %s/%s (%s)", pod.namespace, pod.name, pod.phase)

    def _free_gpus(self):
        used = set()
        for pod in self.pods.values():
            if pod.phase in ("Pending", "Running"):
                used.update(pod.gpus)
        return [i for i in range(len(self.gpus)) if i not in used]

    def start_pod(self, pod):
        local = LocalPod(pod, os.path.join(self.pods_dir, pod["metadata"]["uid"]))
        os.makedirs(local.dir, exist_ok=True)
        self.pods[local.uid] = local
        containers = (pod.get("spec") or {}).get("containers") or []
        wanted = sum(gpu_request(c) for c in containers)
        free = self._free_gpus()
        if wanted > len(free):
            local.phase, local.reason = "Failed", "UnexpectedAdmissionError"
            local.message = "Allocate failed due to requested number of devices unavailable " \
                            "for nvidia.com/gpu. Requested: %d, Available: %d" % (wanted, len(free))
            local.save()
            return local
        local.start_time = now_rfc3339()
        table = load_image_digests(self.cfg.get("image_digests") or "")
        image_ids = {}
        for c in containers:
            image_ids[c["name"]], err = resolve_image(c.get("image") or "", table)
            if err:
                # as a kubelet whose pull fails: the pod stays Pending, the container waits
                local.image_error = {"images": {x["name"]: x.get("image") or "" for x in containers}, "message": err}
                log("pod %s/%s: ErrImagePull: %s", local.namespace, local.name, err)
                local.save()
                return local
        try:
            for c in containers:
                n = gpu_request(c)
                ids = free[:n] if n else None
                free = free[n:]
                if ids:
                    local.gpus.extend(ids)
                argv, env = container_plan(pod, c, self.node, local.dir, ids if n else None)
                log_path = os.path.join(local.dir, "%s.log" % c["name"])
                exit_file = os.path.join(local.dir, "%s.exit" % c["name"])
                env["HGPU_EXIT_FILE"] = exit_file
                with open(log_path, "ab") as out:
                    proc = subprocess.Popen(["/bin/sh", "-c", SHELL_WRAPPER, "hgpu-pod"] + argv,
                                            cwd=local.dir, env=env, stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
                CHILDREN[proc.pid] = proc
                local.containers.append({"name": c["name"], "image": c.get("image") or "",
                                         "image_id": image_ids[c["name"]], "pid": proc.pid, "log": log_path,
                                         "exit_file": exit_file, "started": now_rfc3339(),
                                         "finished": None, "code": None})
            local.phase = "Running"
        except (ValueError, OSError) as err:
            local.terminate(force=True)
            local.phase, local.reason, local.message = "Failed", "ContainerCannotRun", str(err)
        log("pod %s/%s started: %s", local.namespace, local.name, local.phase)
        local.save()
        return local

    def report(self, local):
        """Push phase, container states and logs; True once the API accepted them."""
        base = "/api/v1/namespaces/%s/pods/%s" % (local.namespace, local.name)
        now = time.monotonic()
        push_logs = local.reported != local.phase or \
            now - local.last_log_push >= float(self.cfg["log_push_interval"])
        for c in local.containers if push_logs else []:
            code, _ = self.api.request("PUT", base + "/log", tail(c["log"]), content_type="text/plain",
                                       query={"container": c["name"]} if len(local.containers) > 1 else None)
            if code == 404:
                return True  # pod gone: nothing to report to
            local.last_log_push = now
        if local.reported == local.phase and local.phase == "Running":
            return True
        statuses = local.statuses()
        if not statuses and local.image_error:
            statuses = [container_status(n, "", ("waiting", "ErrImagePull", local.image_error["message"]), image)
                        for n, image in sorted(local.image_error["images"].items())]
        elif not statuses and local.phase == "Failed":
            statuses = [container_status(n, "", ("waiting", local.reason or "Error", local.message or ""))
                        for n in local.names or ["main"]]
        patch = pod_status_patch(local.phase, local.start_time or now_rfc3339(), statuses,
                                 self.host_ip, local.reason, local.message)
        code, body = self.api.request("PATCH", base + "/status", patch,
                                      content_type="application/merge-patch+json")
        if code in (200, 201) or code == 404:
            local.reported = local.phase
            local.save()
            if code == 200:
                log("pod %s/%s reported %s", local.namespace, local.name, local.phase)
            return True
        log("pod status update for %s/%s failed: HTTP %s %s", local.namespace, local.name, code, _reason(body))
        return False

    def sync_pods(self):
        code, body = self.api.request("GET", "/api/v1/pods",
                                      query={"fieldSelector": "spec.nodeName=" + self.node})
        if code != 200:
            log("pod list failed: HTTP %s %s", code, _reason(body))
            return False
        seen = set()
        for pod in body.get("items", []):
            meta = pod.get("metadata", {})
            uid = meta.get("uid")
            seen.add(uid)
            local = self.pods.get(uid)
            phase = (pod.get("status") or {}).get("phase") or "Pending"
            if meta.get("deletionTimestamp"):
                # Terminating: stop the containers within the pod's grace, then confirm.
                if local:
                    self._kill(local, meta.get("deletionGracePeriodSeconds"))
                if not local or local.phase not in ("Pending", "Running") or local.image_error:
                    self.confirm_deletion(meta)
                continue
            if local is None and phase == "Pending":
                self.start_pod(pod)
        for uid, local in list(self.pods.items()):
            if uid not in seen:
                self._kill(local)
                local.deleted = True
                if local.phase not in ("Pending", "Running") or local.image_error:
                    local.save()
                    del self.pods[uid]
        return True

    def confirm_deletion(self, meta):
        """The kubelet's last word on a Terminating pod: delete it with grace 0 (this uid only)."""
        code, body = self.api.request("DELETE", "/api/v1/namespaces/%s/pods/%s" % (
            meta.get("namespace", "default"), meta.get("name")),
            {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
             "preconditions": {"uid": meta.get("uid")}})
        if code in (200, 404, 409):
            log("pod %s/%s terminated", meta.get("namespace"), meta.get("name"))
            return True
        log("pod deletion confirm for %s/%s failed: HTTP %s %s", meta.get("namespace"), meta.get("name"),
            code, _reason(body))
        return False

    def _kill(self, local, grace=None):
        """SIGTERM now, SIGKILL once `grace` seconds (the pod's deletionGracePeriodSeconds, else
        kill_grace) have passed."""
        if local.phase != "Running":
            return
        grace = float(self.cfg["kill_grace"]) if grace is None else float(grace)
        if local.killed_at is None:
            log("pod %s/%s deleted on the API: stopping it", local.namespace, local.name)
            local.killed_at = time.monotonic()
            local.terminate(force=grace <= 0)
        elif time.monotonic() - local.killed_at >= grace:
            local.terminate(force=True)

    def step(self):
        """One loop iteration; returns seconds to sleep."""
        for local in list(self.pods.values()):
            if local.poll():
                local.save()
                log("pod %s/%s is %s", local.namespace, local.name, local.phase)
        now = time.monotonic()
        try:
            if not self.registered:
                self.register()
                self.next_heartbeat = now + float(self.cfg["heartbeat_interval"])
            elif now >= self.next_heartbeat:
                self.heartbeat()
                self.next_heartbeat = now + float(self.cfg["heartbeat_interval"])
            if self.registered and now >= self.next_lease:
                self.renew_lease()
                self.next_lease = now + float(self.cfg["lease_interval"])
            if self.registered and now >= self.next_poll:
                self.sync_pods()
                self.next_poll = now + float(self.cfg["pod_poll_interval"])
            for local in list(self.pods.values()):
                if local.reported != local.phase or local.phase == "Running":
                    self.report(local)
                if local.reported in ("Succeeded", "Failed") and local.reported == local.phase:
                    self.pods.pop(local.uid, None)
            if self.online is not True:
                log("API server %s reachable", self.api.server)
            self.online, self.backoff = True, 0.0
            return 0.5
        except ApiUnreachable as err:
            if self.online is not False:
                log("API server unreachable (%s); pods keep running, retrying", err)
            self.online = False
            self.backoff = min(max(self.backoff * 2, 0.5), float(self.cfg["max_backoff"]))
            return self.backoff

    def run(self, stop=lambda: False):
        while not stop():
            time.sleep(self.step())


def _reason(body):
    if isinstance(body, dict):
        return "%s: %s" % (body.get("reason"), body.get("message"))
    return str(body)[:200]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--version" in argv:
        # as the real kubelet: print the version and exit
        print("Kubernetes %s" % load_config()["kubelet_version"])
        return 0
    cfg = load_config()
    cfg.update(parse_flags(argv))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    log("hybridgpu-node-agent starting for node %s", cfg["node_name"])
    try:
        agent = Agent(cfg)
    except (OSError, ValueError) as err:
        log("cannot start: %s", err)
        return 1
    agent.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
