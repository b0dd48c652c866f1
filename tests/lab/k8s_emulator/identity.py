"""Node identity as real clusters issue it.

- Bootstrap tokens: Secrets of type bootstrap.kubernetes.io/token named bootstrap-token-<id> in
  kube-system; `<id>.<secret>` authenticates as system:bootstrap:<id> (kube-apiserver's bootstrap
  token authenticator).
- The cluster-info ConfigMap in kube-public (what kubeadm init writes) and its
  jws-kubeconfig-<id> detached signatures (kube-controller-manager's bootstrapsigner), and the
  deletion of expired tokens (its tokencleaner).
- x509 client certificates: CN is the user, O entries the groups.
"""
import base64
import datetime
import hashlib
import hmac
import json
import logging
import re
import threading

import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .resources import BY_PLURAL

log = logging.getLogger("k8s_emulator")

BOOTSTRAP_TYPE = "bootstrap.kubernetes.io/token"
BOOTSTRAP_PREFIX = "bootstrap-token-"
BOOTSTRAPPERS = "system:bootstrappers"
ANONYMOUS = "system:anonymous"
UNAUTHENTICATED = "system:unauthenticated"
CLUSTER_INFO_NS, CLUSTER_INFO = "kube-public", "cluster-info"
JWS_PREFIX = "jws-kubeconfig-"
TOKEN = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
EXTRA_GROUP = re.compile(r"\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\Z")


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


def secret_data(secret):
    """The Secret's data decoded to text (undecodable values are left out)."""
    out = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            out[key] = base64.b64decode(value).decode()
        except (ValueError, UnicodeDecodeError):
            continue
    return out


def expired(data, now=None):
    """bootstrapsecretutil.HasExpired: no expiration never expires; an unparsable one has."""
    text = data.get("expiration", "")
    if not text:
        return False
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return True
    if when.tzinfo is None:
        return True  # RFC 3339 needs an offset
    return (now or _now()) > when


def _token_secrets(store):
    """(token id, decoded data) of every well-formed bootstrap token Secret."""
    for secret in store.items("secrets", "kube-system"):
        name = secret["metadata"]["name"]
        if secret.get("type") != BOOTSTRAP_TYPE or not name.startswith(BOOTSTRAP_PREFIX):
            continue
        data = secret_data(secret)
        token_id = name[len(BOOTSTRAP_PREFIX):]
        if data.get("token-id") != token_id or not data.get("token-secret"):
            continue
        yield token_id, data, secret


def bootstrap_user(store, token):
    """(name, groups) for a valid bootstrap token, else None (a 401)."""
    found = TOKEN.match(token)
    if not found:
        return None
    token_id, token_secret = found.groups()
    with store.lock:
        secret = store.find(BY_PLURAL["secrets"], "kube-system", BOOTSTRAP_PREFIX + token_id)
    if not secret or secret.get("type") != BOOTSTRAP_TYPE:
        return None
    data = secret_data(secret)
    if not hmac.compare_digest(data.get("token-secret", "").encode(), token_secret.encode()):
        return None
    if data.get("token-id") != token_id or expired(data):
        return None
    if data.get("usage-bootstrap-authentication") != "true":
        return None
    groups = {BOOTSTRAPPERS}
    for group in (data.get("auth-extra-groups") or "").split(","):
        group = group.strip()
        if not group:
            continue
        if not EXTRA_GROUP.match(group):
            return None  # the real authenticator refuses the token
        groups.add(group)
    return "system:bootstrap:" + token_id, sorted(groups)


def cert_user(der):
    """(name, groups) from a verified client certificate (DER), or None without a CN or client
    auth usage. The TLS layer has already checked the chain against the client CA."""
    if not der:
        return None
    cert = x509.load_der_x509_certificate(der)
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        if ExtendedKeyUsageOID.CLIENT_AUTH not in eku and ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE not in eku:
            return None
    except x509.ExtensionNotFound:
        pass
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not cns or not cns[0].value:
        return None
    groups = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    return cns[0].value, groups


def cluster_info_kubeconfig(server, ca_pem):
    """The kubeconfig kubeadm init puts in cluster-info: the CA and the server, no users."""
    doc = {"apiVersion": "v1",
           "clusters": [{"cluster": {"certificate-authority-data": base64.b64encode(ca_pem).decode(),
                                     "server": server}, "name": ""}],
           "contexts": None, "current-context": "", "kind": "Config", "preferences": {},
           "users": None}
    return yaml.safe_dump(doc, sort_keys=False)


def _b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def detached_jws(content, token_id, token_secret):
    """jws.ComputeDetachedSignature: compact HS256 JWS with the payload left out."""
    header = _b64url(json.dumps({"alg": "HS256", "kid": token_id}, separators=(",", ":")).encode())
    signing_input = "%s.%s" % (header, _b64url(content.encode()))
    sig = hmac.new(token_secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return "%s..%s" % (header, _b64url(sig))


class IdentityControllers:
    """kube-controller-manager's bootstrapsigner, tokencleaner and csrsigning, in one thread.
    `signer` (certificates.Signer or None) signs approved CSRs."""

    def __init__(self, store, signer=None, tick=0.2, auto_approve_groups=()):
        self.store = store
        self.signer = signer
        self.auto_approve_groups = set(auto_approve_groups or ())
        self.tick = tick
        self._stop = threading.Event()
        self._thread = None

    def publish_cluster_info(self, server, ca_pem):
        """Write cluster-info as kubeadm init does (only when it is not there)."""
        cms = BY_PLURAL["configmaps"]
        with self.store.lock:
            if self.store.find(cms, CLUSTER_INFO_NS, CLUSTER_INFO) is None:
                self.store.put_internal(cms, {
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": CLUSTER_INFO, "namespace": CLUSTER_INFO_NS,
                                 "uid": "cluster-info", "creationTimestamp": _now().strftime("%Y-%m-%dT%H:%M:%SZ")},
                    "data": {"kubeconfig": cluster_info_kubeconfig(server, ca_pem)}})

    def start(self):
        self._thread = threading.Thread(target=self._run, name="k8s-emulator-identity", daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        with self.store.lock:
            self.store.changed.notify_all()
        if self._thread:
            self._thread.join(timeout=5)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # keep the loop alive; the failure is logged
                log.exception("identity controller pass failed")
            with self.store.lock:
                self.store.changed.wait(self.tick)

    def run_once(self):
        with self.store.lock:
            self.clean_tokens()
            self.sign_cluster_info()
            self.auto_approve()
            if self.signer:
                self.signer.sign_approved(self.store)

    def auto_approve(self):
        """csrapproving for the configured groups: a pending kubelet client CSR that a bootstrap
        token of one of them made is approved (the signer still checks its subject and usages)."""
        if not self.auto_approve_groups:
            return
        res = BY_PLURAL["certificatesigningrequests"]
        for csr in list(self.store.items(res.plural)):
            spec, status = csr.get("spec") or {}, csr.get("status") or {}
            if spec.get("signerName") != "kubernetes.io/kube-apiserver-client-kubelet" or status.get("conditions"):
                continue
            if not (spec.get("username") or "").startswith("system:bootstrap:") \
                    or not self.auto_approve_groups.intersection(spec.get("groups") or []):
                continue
            now = _now().strftime("%Y-%m-%dT%H:%M:%SZ")
            self.store.put_internal(res, dict(csr, status=dict(status, conditions=[{
                "type": "Approved", "status": "True", "reason": "AutoApproved",
                "message": "Auto approving kubelet client certificate after SubjectAccessReview.",
                "lastUpdateTime": now, "lastTransitionTime": now}])))

    def clean_tokens(self):
        secrets = BY_PLURAL["secrets"]
        for secret in list(self.store.items("secrets", "kube-system")):
            if secret.get("type") == BOOTSTRAP_TYPE and expired(secret_data(secret)):
                self.store.delete_internal(secrets, secret)

    def sign_cluster_info(self):
        cms = BY_PLURAL["configmaps"]
        cm = self.store.objects["configmaps"].get((CLUSTER_INFO_NS, CLUSTER_INFO))
        if cm is None:
            return
        data = dict(cm.get("data") or {})
        content = data.get("kubeconfig")
        if content is None:
            return
        wanted = {}
        for token_id, token, dummy in _token_secrets(self.store):
            if token.get("usage-bootstrap-signing") == "true" and not expired(token):
                wanted[JWS_PREFIX + token_id] = detached_jws(content, token_id, token["token-secret"])
        new = {k: v for k, v in data.items() if not k.startswith(JWS_PREFIX)}
        new.update(wanted)
        if new != data:
            updated = dict(cm, data=new)
            self.store.put_internal(cms, updated)
