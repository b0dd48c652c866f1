"""certificates.k8s.io/v1 CertificateSigningRequests: the registry strategy and validation of
kube-apiserver 1.30 (pkg/registry/certificates, pkg/apis/certificates/validation), and the
kubelet signers of kube-controller-manager's csrsigning controller."""
import base64
import datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from . import validation
from .validation import FieldError

KUBELET_CLIENT = "kubernetes.io/kube-apiserver-client-kubelet"
KUBELET_SERVING = "kubernetes.io/kubelet-serving"
LEGACY_UNKNOWN = "kubernetes.io/legacy-unknown"
APPROVAL_TYPES = ("Approved", "Denied", "Failed")
KNOWN_USAGES = sorted([
    "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
    "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
    "server auth", "client auth", "code signing", "email protection", "s/mime",
    "ipsec end system", "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing",
    "microsoft sgc", "netscape sgc"])
MIN_SECONDS = 600
BACKDATE = datetime.timedelta(minutes=5)
_KEY_USAGES = {"digital signature": "digital_signature", "content commitment": "content_commitment",
               "key encipherment": "key_encipherment", "key agreement": "key_agreement",
               "data encipherment": "data_encipherment", "cert sign": "key_cert_sign",
               "crl sign": "crl_sign", "encipher only": "encipher_only", "decipher only": "decipher_only"}
_EXT_USAGES = {"server auth": ExtendedKeyUsageOID.SERVER_AUTH, "client auth": ExtendedKeyUsageOID.CLIENT_AUTH,
               "code signing": ExtendedKeyUsageOID.CODE_SIGNING,
               "email protection": ExtendedKeyUsageOID.EMAIL_PROTECTION,
               "timestamping": ExtendedKeyUsageOID.TIME_STAMPING, "ocsp signing": ExtendedKeyUsageOID.OCSP_SIGNING}


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


def _stamp(when=None):
    return (when or _now()).strftime("%Y-%m-%dT%H:%M:%SZ")


def _go_bytes(data):
    """A []byte as Go's %#v prints it, the way field.Invalid shows spec.request."""
    return "[]byte{%s}" % ", ".join("0x%x" % b for b in data)


def _decode_request(obj):
    """(raw bytes of spec.request, parsed CSR or None, error text or None), as validateCSR."""
    raw = (obj.get("spec") or {}).get("request") or ""
    try:
        data = base64.b64decode(raw)
    except ValueError:
        data = b""
    text = data.decode("latin-1")
    begin = "-----BEGIN CERTIFICATE REQUEST-----"
    if begin not in text or "-----END CERTIFICATE REQUEST-----" not in text:
        return data, None, "PEM block type must be CERTIFICATE REQUEST"
    try:
        csr = x509.load_pem_x509_csr(data)
    except ValueError as exc:
        return data, None, "x509: %s" % exc
    if not csr.is_signature_valid:
        return data, None, "x509: ECDSA verification failure"
    return data, csr, None


def parse_request(obj):
    return _decode_request(obj)[1]


def _signer_name_errors(name):
    field = "spec.signerName"
    if not name:
        return [validation.required(field)]
    parts = name.split("/")
    if len(parts) < 2 or not parts[0] or not parts[-1]:
        return [validation.invalid(field, name, "must be a fully qualified domain and path of the form "
                                   "'example.com/signer-name'")]
    if name == LEGACY_UNKNOWN:
        return [validation.invalid(field, name, "the legacy signerName is not allowed via this API version")]
    return []


def create_errors(obj):
    spec = obj.get("spec") or {}
    errs = []
    data, dummy, why = _decode_request(obj)
    if why:
        errs.append(FieldError("FieldValueInvalid", "spec.request",
                               "Invalid value: %s: %s" % (_go_bytes(data), why)))
    usages = spec.get("usages") or []
    if not usages:
        errs.append(validation.required("spec.usages", "usages must be provided"))
    seen = set()
    for i, usage in enumerate(usages):
        if usage not in KNOWN_USAGES:
            errs.append(validation.not_supported("spec.usages[%d]" % i, usage, KNOWN_USAGES))
        elif usage in seen:
            errs.append(validation.duplicate("spec.usages[%d]" % i, usage))
        seen.add(usage)
    errs.extend(_signer_name_errors(spec.get("signerName")))
    seconds = spec.get("expirationSeconds")
    if seconds is not None and seconds < MIN_SECONDS:
        errs.append(validation.invalid("spec.expirationSeconds", seconds,
                                       "may not specify a duration less than 600 seconds (10 minutes)"))
    return errs


def condition_errors(old, new):
    errs = []
    conds = (new.get("status") or {}).get("conditions") or []
    seen = set()
    for i, cond in enumerate(conds):
        field = "status.conditions[%d]" % i
        ctype = cond.get("type") or ""
        if not ctype:
            errs.append(validation.required(field + ".type"))
        if ctype in APPROVAL_TYPES:
            if ctype in seen:
                errs.append(validation.duplicate(field + ".type", ctype))
            if cond.get("status") != "True":
                errs.append(validation.not_supported(field + ".status", cond.get("status", ""), ["True"]))
        elif cond.get("status") not in ("True", "False", "Unknown"):
            errs.append(validation.not_supported(field + ".status", cond.get("status", ""),
                                                 ["False", "True", "Unknown"]))
        seen.add(ctype)
    if "Approved" in seen and "Denied" in seen:
        errs.append(validation.invalid("status.conditions", "Approved",
                                       "Approved and Denied conditions are mutually exclusive"))
    before = {c.get("type") for c in ((old or {}).get("status") or {}).get("conditions") or []}
    for ctype in APPROVAL_TYPES:
        if ctype in before and ctype not in seen:
            errs.append(validation.forbidden("status.conditions",
                                             'updates may not remove a condition of type "%s"' % ctype))
    return errs


def certificate_errors(old, new):
    cert = (new.get("status") or {}).get("certificate")
    before = ((old or {}).get("status") or {}).get("certificate")
    if before and cert != before:
        return [validation.forbidden("status.certificate", "updates may not modify existing certificate content")]
    if not cert:
        return []
    try:
        data = base64.b64decode(cert)
        if not x509.load_pem_x509_certificates(data):
            raise ValueError("no certificate")
    except ValueError:
        return [FieldError("FieldValueInvalid", "status.certificate",
                           "Invalid value: \"<certificate data>\": must contain at least one CERTIFICATE PEM block")]
    return []


def _stamp_conditions(old, new):
    """populateConditionTimestamps: new or changed conditions get the current time."""
    before = {c.get("type"): c for c in ((old or {}).get("status") or {}).get("conditions") or []}
    for cond in (new.get("status") or {}).get("conditions") or []:
        prev = before.get(cond.get("type"))
        cond.setdefault("lastUpdateTime", _stamp())
        if "lastTransitionTime" not in cond:
            same = prev and prev.get("status") == cond.get("status")
            cond["lastTransitionTime"] = prev.get("lastTransitionTime", _stamp()) if same else _stamp()


def admit(user, res, sub, old, new):
    """The registry strategy (PrepareForCreate/Update) and validation, on the concrete objects."""
    if res.plural != "certificatesigningrequests" or new is None:
        return
    name = new["metadata"]["name"]
    if old is None:
        spec = new.setdefault("spec", {})
        spec["username"] = user.name
        spec["uid"] = user.uid or ""
        spec["groups"] = list(user.groups)
        spec.pop("extra", None)
        new["status"] = {}
        errs = create_errors(new)
    elif sub == "approval":
        new["spec"] = old["spec"]
        status = new.setdefault("status", {})
        if (old.get("status") or {}).get("certificate"):
            status["certificate"] = old["status"]["certificate"]
        else:
            status.pop("certificate", None)
        _stamp_conditions(old, new)
        errs = condition_errors(old, new)
    elif sub == "status":
        new["spec"] = old["spec"]
        # the status subresource may not change the approval conditions
        keep = [c for c in (old.get("status") or {}).get("conditions") or [] if c.get("type") in ("Approved", "Denied")]
        status = new.setdefault("status", {})
        status["conditions"] = keep + [c for c in status.get("conditions") or []
                                       if c.get("type") not in ("Approved", "Denied")]
        _stamp_conditions(old, new)
        errs = condition_errors(old, new) + certificate_errors(old, new)
    else:  # the main resource: spec and status stay; metadata may change
        new["spec"] = old["spec"]
        new["metadata"]["generation"] = old["metadata"].get("generation", 1)
        errs = []
    if errs:
        raise validation.invalid_error(res, name, errs)


# ---- the signers (csrsigning) ----
def _has(csr, ctype):
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in (csr.get("status") or {}).get("conditions") or [])


def _subject_common(req, usages, server):
    orgs = [a.value for a in req.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    if orgs != ["system:nodes"]:
        return "subject organization is not system:nodes"
    try:
        san = req.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        san = x509.SubjectAlternativeName([])
    dns, ips = san.get_values_for_type(x509.DNSName), san.get_values_for_type(x509.IPAddress)
    if san.get_values_for_type(x509.RFC822Name):
        return "Email subjectAltNames are not allowed"
    if san.get_values_for_type(x509.UniformResourceIdentifier):
        return "URI subjectAltNames are not allowed"
    if not server:
        if dns:
            return "DNS subjectAltNames are not allowed"
        if ips:
            return "IP subjectAltNames are not allowed"
    elif not dns and not ips:
        return "DNS or IP subjectAltName is required"
    cns = req.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not cns or not cns[0].value.startswith("system:node:"):
        return "subject common name does not begin with system:node:"
    what = "server auth" if server else "client auth"
    allowed = ({"digital signature", "key encipherment", what}, {"digital signature", what})
    if set(usages) not in allowed:
        return "usages did not match %s" % "[%s]" % " ".join(sorted(allowed[0]))
    return None


def validate_for_signer(signer_name, req, usages):
    """ValidateKubeletClientCSR / ValidateKubeletServingCSR: None when the request fits."""
    return _subject_common(req, usages, signer_name == KUBELET_SERVING)


class Signer:
    """Signs approved kubelet CSRs with the cluster CA, like kube-controller-manager
    --cluster-signing-cert-file/--cluster-signing-key-file/--cluster-signing-duration."""

    SIGNERS = (KUBELET_CLIENT, KUBELET_SERVING)

    def __init__(self, cert_path, key_path, max_seconds=365 * 24 * 3600):
        with open(cert_path, "rb") as fh:
            self.ca_cert = x509.load_pem_x509_certificate(fh.read())
        with open(key_path, "rb") as fh:
            self.ca_key = serialization.load_pem_private_key(fh.read(), password=None)
        self.max_seconds = int(max_seconds)

    def duration(self, requested):
        if requested is None:
            return self.max_seconds
        return min(self.max_seconds, max(MIN_SECONDS, int(requested)))

    def sign_approved(self, store):
        from .resources import BY_PLURAL
        res = BY_PLURAL["certificatesigningrequests"]
        for csr in list(store.items(res.plural)):
            spec, status = csr.get("spec") or {}, csr.get("status") or {}
            if status.get("certificate") or spec.get("signerName") not in self.SIGNERS:
                continue
            if not _has(csr, "Approved") or _has(csr, "Denied") or _has(csr, "Failed"):
                continue
            updated = dict(csr, status=dict(status))
            req = parse_request(csr)
            why = "unable to parse csr" if req is None else validate_for_signer(
                spec["signerName"], req, spec.get("usages") or [])
            if why:
                now = _stamp()
                updated["status"]["conditions"] = list(status.get("conditions") or []) + [{
                    "type": "Failed", "status": "True", "reason": "SignerValidationFailure",
                    "message": why, "lastUpdateTime": now, "lastTransitionTime": now}]
            else:
                pem = self.sign(req, spec.get("usages") or [], self.duration(spec.get("expirationSeconds")))
                updated["status"]["certificate"] = base64.b64encode(pem).decode()
            store.put_internal(res, updated)

    def sign(self, req, usages, seconds):
        now = _now()
        not_after = min(now + datetime.timedelta(seconds=seconds), self.ca_cert.not_valid_after_utc)
        builder = (x509.CertificateBuilder().subject_name(req.subject).issuer_name(self.ca_cert.subject)
                   .public_key(req.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - BACKDATE).not_valid_after(not_after)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()),
                                  critical=False))
        flags = {v: False for v in _KEY_USAGES.values()}
        for usage in usages:
            if usage in _KEY_USAGES:
                flags[_KEY_USAGES[usage]] = True
        if any(flags.values()):
            builder = builder.add_extension(x509.KeyUsage(**flags), critical=True)
        ext = [_EXT_USAGES[u] for u in usages if u in _EXT_USAGES]
        if ext:
            builder = builder.add_extension(x509.ExtendedKeyUsage(ext), critical=False)
        try:
            san = req.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            builder = builder.add_extension(san, critical=False)
        except x509.ExtensionNotFound:
            pass
        cert = builder.sign(self.ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM)

