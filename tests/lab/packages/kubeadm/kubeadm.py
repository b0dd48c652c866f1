#!/usr/bin/python3
"""kubeadm (lab stand-in): `kubeadm join --config FILE` and `kubeadm reset -f`, as a worker node
runs them (Python 3 standard library and the openssl command line only).

join, as kubeadm 1.30 does it for a worker:
- reads the JoinConfiguration (kubeadm.k8s.io/v1beta4; v1beta3 is read too);
- token discovery: fetches kube-public/cluster-info anonymously, checks its
  jws-kubeconfig-<token id> detached signature (HS256 keyed with the token secret), pins the CA
  by discovery.bootstrapToken.caCertHashes (sha256 of the CA's SubjectPublicKeyInfo), then reads
  cluster-info again over TLS verified with that CA;
- writes /etc/kubernetes/bootstrap-kubelet.conf and /etc/kubernetes/pki/ca.crt;
- TLS bootstrap (the kubelet's part in a real node): a new key, a CSR for signer
  kubernetes.io/kube-apiserver-client-kubelet (CN system:node:<name>, O system:nodes) sent
  with the bootstrap token, waits until it is approved and issued;
- writes /var/lib/kubelet/pki/kubelet-client-<stamp>.pem (certificate and key),
  kubelet-client-current.pem pointing at it, /etc/kubernetes/kubelet.conf using it and
  /var/lib/kubelet/kubeadm-flags.env (--node-labels, --register-with-taints from the
  configuration), removes the bootstrap kubeconfig and restarts kubelet.service.
reset -f: stops kubelet, removes /etc/kubernetes/{kubelet.conf,bootstrap-kubelet.conf,pki}
and /var/lib/kubelet.
"""
import base64
import hashlib
import hmac
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ETC = os.environ.get("KUBEADM_ETC", "/etc/kubernetes")
VAR = os.environ.get("KUBEADM_VAR", "/var/lib/kubelet")
# the unit restarted after the join and stopped by reset (the lab's vendor connector runs its own)
UNIT = os.environ.get("KUBEADM_KUBELET_UNIT", "kubelet.service")
SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
CLUSTER_INFO = "/api/v1/namespaces/kube-public/configmaps/cluster-info"
VERSION = "v1.30.4"


class JoinError(Exception):
    pass


# ---------------------------------------------------------------- YAML (block subset)

def _scalar(text):
    text = text.strip()
    if not text or text in ("null", "~"):
        return None
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        body = text[1:-1]
        return body.replace("''", "'") if text[0] == "'" else json.loads(text)
    if text in ("true", "false"):
        return text == "true"
    if text == "[]":
        return []
    if text == "{}":
        return {}
    try:
        return int(text)
    except ValueError:
        return text


def _lines(text):
    out = []
    for raw in text.splitlines():
        if not raw.strip() or raw.strip().startswith("#") or raw.strip() == "---":
            continue
        out.append((len(raw) - len(raw.lstrip(" ")), raw.strip()))
    return out


def _block(lines, i, indent):
    """Parse the block starting at lines[i] (indentation `indent`); returns (value, next i)."""
    if lines[i][1].startswith("- ") or lines[i][1] == "-":
        items = []
        while i < len(lines) and lines[i][0] == indent and (lines[i][1].startswith("- ") or lines[i][1] == "-"):
            rest = lines[i][1][2:] if lines[i][1] != "-" else ""
            if not rest:
                value, i = _block(lines, i + 1, lines[i + 1][0])
            elif ":" in rest and not rest.startswith(("'", '"')) and (": " in rest or rest.endswith(":")):
                # a mapping that starts on the dash line: re-read it at the inner indentation
                inner = indent + 2 + (len(lines[i][1][2:]) - len(lines[i][1][2:].lstrip(" ")))
                lines[i] = (inner, rest.strip())
                value, i = _block(lines, i, inner)
            else:
                value, i = _scalar(rest), i + 1
            items.append(value)
        return items, i
    obj = {}
    while i < len(lines) and lines[i][0] == indent and not lines[i][1].startswith("- "):
        key, sep, rest = lines[i][1].partition(":")
        if not sep:
            raise JoinError("cannot read configuration line %r" % lines[i][1])
        key = _scalar(key)
        if rest.strip():
            obj[key], i = _scalar(rest), i + 1
        elif i + 1 < len(lines) and (lines[i + 1][0] > indent or
                                     (lines[i + 1][0] == indent and lines[i + 1][1].startswith("- "))):
            obj[key], i = _block(lines, i + 1, lines[i + 1][0])
        else:
            obj[key], i = None, i + 1
    return obj, i


def load_yaml(text):
    """JSON, or the block-style YAML subset configuration files use."""
    if text.lstrip().startswith("{"):
        return json.loads(text)
    lines = _lines(text)
    if not lines:
        return {}
    return _block(lines, 0, lines[0][0])[0]


# ---------------------------------------------------------------- configuration

def read_config(path):
    with open(path, encoding="utf-8") as fh:
        cfg = load_yaml(fh.read())
    if not isinstance(cfg, dict) or cfg.get("kind") != "JoinConfiguration":
        raise JoinError("%s is not a JoinConfiguration" % path)
    if cfg.get("apiVersion") not in ("kubeadm.k8s.io/v1beta4", "kubeadm.k8s.io/v1beta3"):
        raise JoinError("%s: apiVersion %r is not supported" % (path, cfg.get("apiVersion")))
    boot = (cfg.get("discovery") or {}).get("bootstrapToken") or {}
    if not boot.get("apiServerEndpoint") or not boot.get("token"):
        raise JoinError("discovery.bootstrapToken.apiServerEndpoint and .token are required "
                        "(file discovery is not supported here)")
    if not boot.get("caCertHashes") and not boot.get("unsafeSkipCAVerification"):
        raise JoinError("discovery.bootstrapToken.caCertHashes is empty and unsafeSkipCAVerification "
                        "is not set: the cluster CA cannot be verified")
    return cfg


def extra_args(cfg):
    """nodeRegistration.kubeletExtraArgs: a list of {name, value} (v1beta4) or a map (v1beta3)."""
    args = (cfg.get("nodeRegistration") or {}).get("kubeletExtraArgs") or []
    if isinstance(args, dict):
        return list(args.items())
    return [(a["name"], a.get("value", "")) for a in args]


def taint_arg(taints):
    return ",".join("%s%s:%s" % (t["key"], "=" + str(t["value"]) if t.get("value") not in (None, "") else "",
                                 t["effect"]) for t in taints or [])


def duration(text, default):
    """A Go duration such as 5m0s in seconds."""
    if not text:
        return default
    total, num = 0.0, ""
    for ch in str(text):
        if ch.isdigit() or ch == ".":
            num += ch
        else:
            total += float(num or 0) * {"h": 3600, "m": 60, "s": 1}.get(ch, 0)
            num = ""
    return total or default


# ---------------------------------------------------------------- HTTP

def request(url, ctx, method="GET", token=None, body=None, timeout=10):
    headers = {"Accept": "application/json", "User-Agent": "kubeadm/" + VERSION}
    data = None
    if token:
        headers["Authorization"] = "Bearer " + token
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            return err.code, json.loads(raw)
        except ValueError:
            return err.code, raw.decode(errors="replace")


def insecure():
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jws_ok(content, jws, token_id, token_secret):
    """A detached compact JWS (header..signature), HS256 keyed with the token secret."""
    parts = (jws or "").split(".")
    if len(parts) != 3 or parts[1]:
        return False
    pad = "=" * (-len(parts[0]) % 4)
    try:
        header = json.loads(base64.urlsafe_b64decode(parts[0] + pad))
    except ValueError:
        return False
    if header.get("alg") != "HS256" or header.get("kid", token_id) != token_id:
        return False
    sig = hmac.new(token_secret.encode(), ("%s.%s" % (parts[0], b64url(content.encode()))).encode(),
                   hashlib.sha256).digest()
    return hmac.compare_digest(b64url(sig), parts[2])


def kubeconfig_field(text, key):
    for line in text.splitlines():
        name, sep, value = line.strip().lstrip("- ").partition(":")
        if sep and name.strip() == key:
            return _scalar(value)
    return None


def openssl(*args, data=None):
    res = subprocess.run(["openssl"] + list(args), input=data, capture_output=True, check=False)
    if res.returncode != 0:
        raise JoinError("openssl %s failed: %s" % (args[0], res.stderr.decode(errors="replace").strip()))
    return res.stdout


def ca_hash(ca_pem):
    """sha256:<hex> of the CA's SubjectPublicKeyInfo (kubeadm's pubkeypin)."""
    pub = openssl("x509", "-noout", "-pubkey", data=ca_pem)
    der = openssl("pkey", "-pubin", "-outform", "DER", data=pub)
    return "sha256:" + hashlib.sha256(der).hexdigest()


# ---------------------------------------------------------------- join

class Retry(JoinError):
    """A discovery failure kubeadm tries again until its discovery timeout: the API not answering,
    an HTTP error, or no JWS signature for the token yet (the bootstrap signer adds it shortly
    after the token is made)."""


DISCOVERY_RETRY_S = 5


def discover(boot, timeout=300):
    """cluster-info read and checked as kubeadm's token discovery does, tried again every 5 s
    until `timeout`; a CA that does not match the pin fails at once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return discover_once(boot)
        except (Retry, OSError) as err:  # urllib's URLError is an OSError
            if time.monotonic() + DISCOVERY_RETRY_S > deadline:
                raise JoinError("[discovery] gave up after %gs: %s" % (timeout, err))
            print("[discovery] %s; will try again in %ds" % (err, DISCOVERY_RETRY_S), flush=True)
            time.sleep(DISCOVERY_RETRY_S)


def discover_once(boot):
    endpoint = boot["apiServerEndpoint"]
    token_id, dummy, token_secret = boot["token"].partition(".")
    url = "https://%s%s" % (endpoint, CLUSTER_INFO)
    status, cm = request(url, insecure())
    if status != 200:
        raise Retry("cannot read kube-public/cluster-info from %s: HTTP %s" % (endpoint, status))
    data = cm.get("data") or {}
    content = data.get("kubeconfig") or ""
    if not jws_ok(content, data.get("jws-kubeconfig-" + token_id), token_id, token_secret):
        raise Retry("there is no valid JWS signature for token %s in cluster-info: the token is "
                    "wrong, expired, or not for this cluster" % token_id)
    ca_pem = base64.b64decode(kubeconfig_field(content, "certificate-authority-data") or "")
    if not ca_pem:
        raise JoinError("cluster-info holds no certificate-authority-data")
    wanted = [h.lower() for h in boot.get("caCertHashes") or []]
    got = ca_hash(ca_pem)
    if wanted and got not in wanted:
        raise JoinError("cluster CA found in cluster-info configmap is not trusted: public key %s does "
                        "not match any of caCertHashes" % got)
    server = kubeconfig_field(content, "server") or "https://" + endpoint
    status, again = request(url, ssl.create_default_context(cadata=ca_pem.decode()))
    if status != 200 or (again.get("data") or {}).get("kubeconfig") != content:
        raise Retry("cluster-info changed between the insecure and the verified read")
    return server, ca_pem


def kubeconfig(server, user, auth):
    lines = ["apiVersion: v1", "kind: Config", "clusters:", "- cluster:",
             "    certificate-authority: %s/pki/ca.crt" % ETC, "    server: %s" % server,
             "  name: kubernetes", "contexts:", "- context:", "    cluster: kubernetes",
             "    user: %s" % user, "  name: %s@kubernetes" % user,
             "current-context: %s@kubernetes" % user, "preferences: {}", "users:", "- name: %s" % user,
             "  user:"]
    lines += ["    %s: %s" % (k, v) for k, v in auth]
    return "\n".join(lines) + "\n"


def write(path, text, mode=0o600):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def tls_bootstrap(server, ca_pem, token, name, wait):
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    workdir = tempfile.mkdtemp()
    try:
        key_path = os.path.join(workdir, "key.pem")
        csr_pem = openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                          "-nodes", "-keyout", key_path, "-subj", "/O=system:nodes/CN=system:node:%s" % name)
        with open(key_path) as fh:
            key_pem = fh.read()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    csr_name = "node-csr-" + hashlib.sha256(csr_pem).hexdigest()[:40]
    body = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": csr_name},
            "spec": {"request": base64.b64encode(csr_pem).decode(), "signerName": SIGNER,
                     "usages": ["digital signature", "client auth"]}}
    base = server + "/apis/certificates.k8s.io/v1/certificatesigningrequests"
    status, obj = request(base, ctx, "POST", token, body)
    if status not in (200, 201):
        raise JoinError("creating CSR %s: HTTP %s %s" % (csr_name, status, obj))
    print("[kubelet-start] Waiting for the CSR %s to be approved and signed" % csr_name, flush=True)
    deadline = time.time() + wait
    while time.time() < deadline:
        status, obj = request(base + "/" + csr_name, ctx, token=token)
        if status == 200:
            conds = [c.get("type") for c in (obj.get("status") or {}).get("conditions") or []]
            if "Denied" in conds or "Failed" in conds:
                raise JoinError("CSR %s was %s" % (csr_name, "denied" if "Denied" in conds else "not signed"))
            cert = (obj.get("status") or {}).get("certificate")
            if cert:
                return csr_name, base64.b64decode(cert).decode(), key_pem
        time.sleep(1)
    raise JoinError("timed out after %ds waiting for CSR %s to be approved and issued" % (wait, csr_name))


def join(path):
    cfg = read_config(path)
    boot = cfg["discovery"]["bootstrapToken"]
    reg = cfg.get("nodeRegistration") or {}
    name = reg.get("name") or os.uname().nodename
    if os.path.exists(os.path.join(ETC, "kubelet.conf")):
        raise JoinError("[preflight] FileAvailable--etc-kubernetes-kubelet.conf: %s/kubelet.conf already "
                        "exists (run kubeadm reset first)" % ETC)
    timeouts = cfg.get("timeouts") or {}
    server, ca_pem = discover(boot, duration(timeouts.get("discovery"), 300))
    print("[discovery] Cluster info signature and contents are valid and the CA is pinned", flush=True)
    token = cfg["discovery"].get("tlsBootstrapToken") or boot["token"]
    write(os.path.join(ETC, "pki", "ca.crt"), ca_pem.decode(), 0o644)
    boot_conf = os.path.join(ETC, "bootstrap-kubelet.conf")
    write(boot_conf, kubeconfig(server, "tls-bootstrap-token-user", [("token", token)]))
    flags = ["--node-labels=" + v for k, v in extra_args(cfg) if k == "node-labels"]
    flags += ["--%s=%s" % (k, v) for k, v in extra_args(cfg) if k != "node-labels"]
    if reg.get("taints"):
        flags.append("--register-with-taints=" + taint_arg(reg["taints"]))
    flags.append("--hostname-override=" + name)
    write(os.path.join(VAR, "kubeadm-flags.env"), 'KUBELET_KUBEADM_ARGS="%s"\n' % " ".join(flags), 0o644)
    csr_name, cert_pem, key_pem = tls_bootstrap(server, ca_pem, token, name,
                                                duration(timeouts.get("tlsBootstrap"), 300))
    stamp = time.strftime("%Y-%m-%d-%H-%M-%S", time.gmtime())
    pem = os.path.join(VAR, "pki", "kubelet-client-%s.pem" % stamp)
    write(pem, cert_pem + key_pem, 0o600)
    current = os.path.join(VAR, "pki", "kubelet-client-current.pem")
    if os.path.lexists(current):
        os.unlink(current)
    os.symlink(pem, current)
    write(os.path.join(ETC, "kubelet.conf"),
          kubeconfig(server, "system:node:" + name, [("client-certificate", current), ("client-key", current)]))
    os.unlink(boot_conf)
    subprocess.run(["systemctl", "restart", UNIT], check=True)
    print("This node has joined the cluster (CSR %s):\n* Certificate signing request was sent to "
          "apiserver and a response was received." % csr_name, flush=True)


def reset():
    subprocess.run(["systemctl", "stop", UNIT], check=False)
    for path in ("kubelet.conf", "bootstrap-kubelet.conf", "pki"):
        full = os.path.join(ETC, path)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        elif os.path.lexists(full):
            os.unlink(full)
    if os.path.isdir(VAR):
        shutil.rmtree(VAR)
    print("[reset] Deleted files: kubelet.conf, bootstrap-kubelet.conf, pki in %s; %s" % (ETC, VAR))


def main(argv):
    if argv[:1] == ["version"]:
        print('kubeadm version: &version.Info{GitVersion:"%s"}' % VERSION)
        return 0
    try:
        if argv[:1] == ["join"]:
            if "--config" not in argv or argv.index("--config") + 1 >= len(argv):
                raise JoinError("this kubeadm joins with --config <JoinConfiguration file> only")
            join(argv[argv.index("--config") + 1])
            return 0
        if argv[:1] == ["reset"]:
            if "-f" not in argv and "--force" not in argv:
                raise JoinError("reset asks for confirmation: pass -f")
            reset()
            return 0
    except (JoinError, OSError, subprocess.CalledProcessError) as err:
        print("error execution phase: %s" % err, file=sys.stderr)
        return 1
    print("usage: kubeadm join --config FILE | kubeadm reset -f | kubeadm version", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
