# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node identity for a kubeadm join, as kubeadm clusters issue it.

- Bootstrap tokens: ``<id>.<secret>`` held in a kube-system Secret
  ``bootstrap-token-<id>`` of type ``bootstrap.kubernetes.io/token`` (its fields as the
  bootstrap token authenticator and kubeadm read them).
- The discovery CA hash: ``sha256:`` and the hex SHA-256 of the CA certificate's
  SubjectPublicKeyInfo (kubeadm's ``--discovery-token-ca-cert-hash``).
- Which CertificateSigningRequests a join may have made: signer
  ``kubernetes.io/kube-apiserver-client-kubelet``, requested by ``system:bootstrap:<token id>``
  with the token's groups, usages of a kubelet client, subject ``CN=system:node:<name>,
  O=system:nodes`` and nothing else. ``csr_problems`` names every difference; only a CSR with
  none is approved.
- What a client certificate still allows after removal: its serial and notAfter.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import re
import secrets

try:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.x509.oid import NameOID
    HAS_CRYPTOGRAPHY = True
except ImportError:  # reported by the modules that need it
    HAS_CRYPTOGRAPHY = False

BOOTSTRAP_TYPE = "bootstrap.kubernetes.io/token"
SECRET_PREFIX = "bootstrap-token-"
KUBELET_CLIENT = "kubernetes.io/kube-apiserver-client-kubelet"
BOOTSTRAPPERS = "system:bootstrappers"
# usages a kubelet client CSR may ask for (key encipherment only for RSA keys)
CLIENT_USAGES = {"digital signature", "client auth", "key encipherment"}
TOKEN_RE = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
GROUP_RE = re.compile(r"\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\Z")
KUBELET_LABELS = {
    "kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch", "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region"}
KUBELET_DOMAINS = ("kubelet.kubernetes.io", "node.kubernetes.io")
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


class JoinError(ValueError):
    """Bad join input or an unexpected CSR; the message names the field or object."""


def new_token():
    """A fresh ``<6>.<16>`` bootstrap token from the system's secure random source."""
    pick = secrets.choice
    return "%s.%s" % ("".join(pick(_ALPHABET) for dummy in range(6)),
                      "".join(pick(_ALPHABET) for dummy in range(16)))


def split_token(token):
    found = TOKEN_RE.match(token or "")
    if not found:
        raise JoinError("token: a bootstrap token is <6 of [a-z0-9]>.<16 of [a-z0-9]>")
    return found.group(1), found.group(2)


def secret_name(token_id):
    return SECRET_PREFIX + token_id


def token_secret(token, ttl_seconds, groups, description, now=None):
    """The Secret that makes ``token`` a bootstrap token for ``ttl_seconds``: it
    authenticates (usage-bootstrap-authentication) and signs cluster-info for discovery
    (usage-bootstrap-signing); ``groups`` are its extra system:bootstrappers:* groups."""
    token_id, token_key = split_token(token)
    bad = [g for g in groups if not GROUP_RE.match(g)]
    if bad:
        raise JoinError("groups: %s must match system:bootstrappers:[a-z0-9:-]*[a-z0-9]" % ", ".join(bad))
    if ttl_seconds <= 0:
        raise JoinError("ttl: a join token must expire (ttl > 0)")
    now = now or datetime.datetime.now(datetime.timezone.utc)
    expires = (now + datetime.timedelta(seconds=ttl_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    data = {"token-id": token_id, "token-secret": token_key, "expiration": expires,
            "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
            "auth-extra-groups": ",".join(groups), "description": description}
    return {"apiVersion": "v1", "kind": "Secret", "type": BOOTSTRAP_TYPE,
            "metadata": {"name": secret_name(token_id), "namespace": "kube-system"},
            "data": dict((k, base64.b64encode(v.encode()).decode()) for k, v in data.items())}


def _need_crypto():
    if not HAS_CRYPTOGRAPHY:
        raise JoinError("the Python package cryptography is needed on the control host "
                        "(ansible-core depends on it)")


def ca_cert_hash(pem):
    """``sha256:<hex>`` of the first certificate's SubjectPublicKeyInfo in ``pem``."""
    _need_crypto()
    try:
        cert = x509.load_pem_x509_certificate(pem if isinstance(pem, bytes) else pem.encode())
    except ValueError as err:
        raise JoinError("ca_file: not a PEM certificate (%s)" % err)
    spki = cert.public_key().public_bytes(serialization.Encoding.DER,
                                          serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def _subject(name_obj):
    cns = [a.value for a in name_obj.get_attributes_for_oid(NameOID.COMMON_NAME)]
    orgs = [a.value for a in name_obj.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    others = [a.oid.dotted_string for a in name_obj
              if a.oid not in (NameOID.COMMON_NAME, NameOID.ORGANIZATION_NAME)]
    return cns, orgs, others


def csr_subject(csr_obj):
    """(CNs, Os, other attribute OIDs, SANs present) of a CSR object's spec.request."""
    _need_crypto()
    raw = base64.b64decode(((csr_obj.get("spec") or {}).get("request")) or "")
    try:
        req = x509.load_pem_x509_csr(raw)
    except ValueError as err:
        raise JoinError("CSR %s: spec.request is not a PEM certificate request (%s)"
                        % (csr_obj["metadata"]["name"], err))
    try:
        req.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        sans = True
    except x509.ExtensionNotFound:
        sans = False
    cns, orgs, others = _subject(req.subject)
    return cns, orgs, others, sans


def conditions(csr_obj):
    return [c.get("type") for c in (csr_obj.get("status") or {}).get("conditions") or []]


def requested_by(csr_obj, token_id):
    return (csr_obj.get("spec") or {}).get("username") == "system:bootstrap:" + token_id


def csr_problems(csr_obj, node, token_id, groups, max_seconds=None):
    """Every way ``csr_obj`` differs from the CSR the join of ``node`` with bootstrap token
    ``token_id`` (extra ``groups``) makes; empty when it is exactly that one."""
    spec = csr_obj.get("spec") or {}
    out = []
    if spec.get("signerName") != KUBELET_CLIENT:
        out.append("signer %s is not %s" % (spec.get("signerName"), KUBELET_CLIENT))
    if not requested_by(csr_obj, token_id):
        out.append("requested by %s, not system:bootstrap:%s" % (spec.get("username"), token_id))
    have = set(spec.get("groups") or [])
    missing = sorted((set(groups) | {BOOTSTRAPPERS}) - have)
    if missing:
        out.append("requester lacks the token's groups %s" % ", ".join(missing))
    usages = set(spec.get("usages") or [])
    if "client auth" not in usages or usages - CLIENT_USAGES:
        out.append("usages %s are not those of a kubelet client (%s)"
                   % (", ".join(sorted(usages)) or "none", ", ".join(sorted(CLIENT_USAGES))))
    if max_seconds and (spec.get("expirationSeconds") or 0) > max_seconds:
        out.append("expirationSeconds %s is above %s" % (spec.get("expirationSeconds"), max_seconds))
    cns, orgs, others, sans = csr_subject(csr_obj)
    if cns != ["system:node:%s" % node]:
        out.append("subject CN %s is not system:node:%s" % (cns, node))
    if orgs != ["system:nodes"]:
        out.append("subject O %s is not [system:nodes]" % orgs)
    if others or sans:
        out.append("subject or extensions carry more than CN and O (%s%s)"
                   % (", ".join(others), " subjectAltName" if sans else ""))
    return out


def cert_facts(pem):
    """Serial (hex), notAfter (RFC 3339) and subject of the first certificate in ``pem``."""
    _need_crypto()
    data = pem if isinstance(pem, bytes) else pem.encode()
    start = data.find(b"-----BEGIN CERTIFICATE-----")
    if start < 0:
        raise JoinError("no certificate in the kubelet client file")
    cert = x509.load_pem_x509_certificate(data[start:])
    try:
        not_after = cert.not_valid_after_utc
    except AttributeError:  # cryptography < 42
        not_after = cert.not_valid_after.replace(tzinfo=datetime.timezone.utc)
    cns, orgs, dummy = _subject(cert.subject)
    return {"serial": "%x" % cert.serial_number, "not_after": not_after.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "subject": {"cn": cns[0] if cns else "", "o": orgs}}


def _label_domain(key):
    prefix, sep, dummy = key.partition("/")
    return prefix if sep else ""


def _under(domain, parent):
    return domain == parent or domain.endswith("." + parent)


def self_set_refused(keys):
    """Label keys a node's own credential may not set (NodeRestriction): anything under
    node-restriction.kubernetes.io/, and kubernetes.io / k8s.io keys outside the kubelet's."""
    out = []
    for key in keys:
        domain = _label_domain(key)
        if _under(domain, "node-restriction.kubernetes.io"):
            out.append(key)
        elif (_under(domain, "kubernetes.io") or _under(domain, "k8s.io")) and not (
                key in KUBELET_LABELS or any(_under(domain, d) for d in KUBELET_DOMAINS)):
            out.append(key)
    return sorted(out)


def join_configuration(node, endpoint, token, ca_hash, labels=None, taints=None, extra_args=None,
                       tls_timeout="5m0s"):
    """A kubeadm.k8s.io/v1beta4 JoinConfiguration for a worker. ``labels`` go to the kubelet's
    --node-labels, so only labels a node may set itself are accepted."""
    refused = self_set_refused(labels or {})
    if refused:
        raise JoinError("labels: %s cannot be set by the node itself (NodeRestriction); set them "
                        "with the admin credential (node_placement)" % ", ".join(refused))
    args = [{"name": "node-labels", "value": ",".join("%s=%s" % kv for kv in sorted((labels or {}).items()))}] \
        if labels else []
    args += [{"name": k, "value": str(v)} for k, v in sorted((extra_args or {}).items())]
    reg = {"name": node, "taints": list(taints or [])}
    if args:
        reg["kubeletExtraArgs"] = args
    return {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration",
            "discovery": {"bootstrapToken": {"apiServerEndpoint": endpoint, "token": token,
                                             "caCertHashes": [ca_hash]},
                          "tlsBootstrapToken": token},
            "nodeRegistration": reg,
            "timeouts": {"tlsBootstrap": tls_timeout}}


def sort_csrs(items, node, token_id, groups, max_seconds=None):
    """The CSRs requested with ``token_id``, sorted: (pending and expected, approved already,
    [(csr, problems)] unexpected). CSRs of other requesters are not looked at."""
    pending, approved, unexpected = [], [], []
    for csr in items:
        if not requested_by(csr, token_id):
            continue
        state = conditions(csr)
        if "Denied" in state or "Failed" in state:
            continue
        problems = csr_problems(csr, node, token_id, groups, max_seconds)
        if problems:
            unexpected.append((csr, problems))
        elif "Approved" in state:
            approved.append(csr)
        else:
            pending.append(csr)
    return pending, approved, unexpected


def describe_csr(csr):
    """What the audit trail records of an approved CSR."""
    spec = csr.get("spec") or {}
    cns, orgs, dummy, dummy2 = csr_subject(csr)
    return {"name": csr["metadata"]["name"], "uid": csr["metadata"].get("uid", ""),
            "username": spec.get("username"), "groups": sorted(spec.get("groups") or []),
            "signer": spec.get("signerName"), "usages": sorted(spec.get("usages") or []),
            "expiration_seconds": spec.get("expirationSeconds"),
            "subject": {"cn": cns[0] if cns else "", "o": orgs}}
