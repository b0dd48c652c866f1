# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The written access boundary: schema, cross-reference checks, signature status, helpers.

A boundary file names people once (``people``) and refers to them by id everywhere else,
so a typo such as an approver "bob" who is not in ``people`` is caught. Onboarding, approval
and removal use the helpers on :class:`Boundary`: allowed_agents(), egress_allowlist(),
approvers_for(), needs_approval(), four_eyes(), access_of() (what a member holds).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import datetime

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import schema as s

try:
    import netaddr
except ImportError:  # pragma: no cover - netaddr is a collection requirement
    netaddr = None
SCHEMA_VERSION = 1

# Actions the change process knows; others are rejected (a misspelt action escapes nothing).
ACTIONS = ("drain", "cordon", "uncordon", "reboot", "driver_upgrade", "remove", "label",
           "join", "firmware_upgrade", "kubernetes_upgrade", "revoke_member", "hold_override", "overflow_drill")

CREDENTIAL_KINDS = ("kubernetes", "ssh_key", "bmc", "service_token")

ID_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
# Kubernetes objects a member may hold (a BootstrapToken is named by its token id).
ACCESS_KINDS = ("ServiceAccount", "RoleBinding", "ClusterRoleBinding", "BootstrapToken")
NAMESPACED_ACCESS = ("ServiceAccount", "RoleBinding")


def _egress_entry(value):
    """'10.0.0.0/24:443' or '[2001:db8::/32]:443' or '10.0.0.1/32:8000-8100'."""
    if not isinstance(value, str):
        return value, "expected 'CIDR:port' string, got %s" % type(value).__name__
    text = value.strip()
    if text.startswith("["):
        end = text.find("]:")
        if end < 0:
            return value, "%r: IPv6 entries are written [CIDR]:port" % value
        cidr, ports = text[1:end], text[end + 2:]
    else:
        cidr, sep, ports = text.rpartition(":")
        if not sep:
            return value, "%r is not CIDR:port" % value
    try:
        net = netaddr.IPNetwork(cidr)
    except (netaddr.AddrFormatError, ValueError, TypeError):
        return value, "%r: %r is not a CIDR" % (value, cidr)
    if net.ip != net.network:
        return value, "%r: host bits set; did you mean %s?" % (value, net.cidr)
    low, dummy, high = ports.partition("-")
    try:
        low_i = int(low)
        high_i = int(high) if high else low_i
    except ValueError:
        return value, "%r: port %r is not a number or range" % (value, ports)
    if not (1 <= low_i <= high_i <= 65535):
        return value, "%r: port range %s is outside 1-65535" % (value, ports)
    return {"cidr": str(net.cidr), "port_min": low_i, "port_max": high_i, "entry": text}, None


SSH_KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
                 "ecdsa-sha2-nistp521", "sk-ssh-ed25519@openssh.com",
                 "sk-ecdsa-sha2-nistp256@openssh.com")


def _ssh_public_key(value):
    """'ssh-ed25519 AAAA... [comment]' -> the same text, stripped."""
    if not isinstance(value, str):
        return value, "expected an SSH public key line, got %s" % type(value).__name__
    parts = value.split()
    if len(parts) < 2 or parts[0] not in SSH_KEY_TYPES:
        return value, "%r is not an SSH public key line (type base64 [comment])" % (value[:40],)
    try:
        base64.b64decode(parts[1], validate=True)
    except (ValueError, TypeError):
        return value, "%r: the key body is not base64" % (value[:40],)
    return " ".join(parts), None


def _person():
    return s.Map({
        "id": s.Field(s.Str(ID_PATTERN, hint="a lower-case id")),
        "name": s.Field(s.Str(), required=False),
        "email": s.Field(s.Str(r"^[^@\s]+@[^@\s]+$", hint="an e-mail address"), required=False),
        "organisation": s.Field(s.Str(), required=False),
        # Public keys ("ssh-ed25519 AAAA... comment") a person signs change records with;
        # the approval gate derives its allowed_signers file from these.
        "ssh_keys": s.Field(s.ListOf(s.Custom(_ssh_public_key), unique=True), required=False,
                            default=list),
        # The person's AWX user name when it is not the person id; an AWX job's executor is
        # the person whose AWX user launched it.
        "awx_user": s.Field(s.Str(), required=False),
        # What the person holds, revoked by revoke_member.yml: login keys (not signing keys) and
        # Kubernetes objects, each in a kubeconfig context.
        "access": s.Field(s.Map({
            "ssh_keys": s.Field(s.ListOf(s.Custom(_ssh_public_key), unique=True), required=False, default=list),
            "kubernetes": s.Field(s.ListOf(s.Map({
                "context": s.Field(s.Str(ID_PATTERN, hint="a kubeconfig context name")),
                "kind": s.Field(s.Enum(ACCESS_KINDS)),
                "namespace": s.Field(s.Str(DNS_LABEL, hint="a namespace name"), required=False),
                "name": s.Field(s.Str(DNS_SUBDOMAIN, hint="an object name")),
            })), required=False, default=list),
        }), required=False, default=dict),
    })


def _ids():
    return s.ListOf(s.Str(ID_PATTERN, hint="a person id"), unique=True)


SPEC = s.Map({
    "schema_version": s.Field(s.Enum([SCHEMA_VERSION])),
    "site": s.Field(s.Str()),
    "security_owner": s.Field(s.Str(ID_PATTERN, hint="a person id")),
    # Nodes and groups the boundary covers; an unsigned boundary holds exactly these.
    "applies_to": s.Field(s.Map({
        "nodes": s.Field(s.ListOf(s.Str(), unique=True), required=False, default=list),
        "groups": s.Field(s.ListOf(s.Str(), unique=True), required=False, default=list),
    })),
    "people": s.Field(s.ListOf(_person(), min_items=1)),
    "root_holders": s.Field(_ids()),
    "bmc_holders": s.Field(_ids()),
    "provider_access": s.Field(s.Map({
        "root": s.Field(s.Bool()),
        "bmc": s.Field(s.Bool()),
        "reason": s.Field(s.Str(), required=False),
    })),
    "change_rights": s.Field(s.MapOf(s.Map({
        "performers": s.Field(_ids()),
        "approvers": s.Field(_ids(), required=False, default=list),
        "needs_approval": s.Field(s.Bool()),
        "four_eyes": s.Field(s.Bool(), required=False, default=False),
    }), keys=ACTIONS)),
    "agents": s.Field(s.ListOf(s.Map({
        "name": s.Field(s.Str(ID_PATTERN, hint="a lower-case name")),
        "package": s.Field(s.Str(), required=False),
        "binary": s.Field(s.Str(r"^/", hint="an absolute path"), required=False),
        "systemd_unit": s.Field(s.Str(r"^[\w@.-]+\.(service|timer|socket)$", hint="a unit name"),
                                required=False),
        "user": s.Field(s.Str()),
        "privileges": s.Field(s.ListOf(s.Str(), unique=True), required=False, default=list),
        "outbound": s.Field(s.ListOf(s.Custom(_egress_entry)), required=False, default=list),
        "purpose": s.Field(s.Str(), required=False),
    }))),
    "console_members": s.Field(s.ListOf(s.Map({
        "person": s.Field(s.Str(ID_PATTERN, hint="a person id")),
        "role": s.Field(s.Enum(["owner", "admin", "member"])),
    }))),
    "credentials": s.Field(s.ListOf(s.Map({
        "kind": s.Field(s.Enum(CREDENTIAL_KINDS)),
        "name": s.Field(s.Str()),
        "holders": s.Field(_ids()),
        "revocation": s.Field(s.Str()),
    }))),
    "data_placement": s.Field(s.Map({
        "restricted_datasets": s.Field(s.ListOf(s.Map({
            "name": s.Field(s.Str()),
            "may_leave_site": s.Field(s.Bool()),
            "placement_label": s.Field(s.Str(), required=False),
        })), required=False, default=list),
        "storage_destinations": s.Field(s.ListOf(s.Str()), required=False, default=list),
        "checkpoint_destinations": s.Field(s.ListOf(s.Str()), required=False, default=list),
        "log_destinations": s.Field(s.ListOf(s.Str()), required=False, default=list),
        "egress_allowlist": s.Field(s.ListOf(s.Custom(_egress_entry))),
    })),
    "secrets": s.Field(s.ListOf(s.Map({
        "name": s.Field(s.Str()),
        "location": s.Field(s.Str()),
        "rotation_days": s.Field(s.Int(minimum=1)),
        "rotated_by": s.Field(s.Str(ID_PATTERN, hint="a person id")),
    }))),
    "audit": s.Field(s.Map({
        "location": s.Field(s.Str()),
        "readers": s.Field(_ids()),
        "retention_days": s.Field(s.Int(minimum=1), required=False),
    })),
    "signature": s.Field(s.Map({
        "signed": s.Field(s.Bool()),
        "signer": s.Field(s.Str(ID_PATTERN, hint="a person id"), required=False),
        "signed_at": s.Field(s.Timestamp(), required=False),
        "expires": s.Field(s.Timestamp(), required=False),
        # Where the detached `ssh-keygen -Y sign` signature lies; informational. The approval
        # gate always reads <boundary>.sig and verifies it against the pinned boundary signers
        # (approval.verify_boundary); this block is never trusted on its own.
        "ssh_signature": s.Field(s.Map({
            "file": s.Field(s.Str()),
            "namespace": s.Field(s.Str()),
            "principal": s.Field(s.Str()),
            "allowed_signers": s.Field(s.Str(), required=False),
        }), required=False),
    })),
})


def _cross_check(doc, filename):
    """Checks that need the whole document: every person reference resolves, etc."""
    errors = []
    known = {p["id"] for p in doc["people"]}
    seen = set()
    for i, person in enumerate(doc["people"]):
        if person["id"] in seen:
            errors.append("%s: people[%d].id: duplicate person %r" % (filename, i, person["id"]))
        seen.add(person["id"])

    def ref(path, person_id):
        if person_id not in known:
            errors.append('%s: %s: unknown member "%s" (not in people)' % (filename, path, person_id))

    for i, person in enumerate(doc["people"]):
        for j, item in enumerate((person.get("access") or {}).get("kubernetes") or []):
            if (item["kind"] in NAMESPACED_ACCESS) != bool(item.get("namespace")):
                errors.append("%s: people[%d].access.kubernetes[%d].namespace: %s for kind %s" % (
                    filename, i, j, "is required" if item["kind"] in NAMESPACED_ACCESS else "is not used", item["kind"]))
    ref("security_owner", doc["security_owner"])
    for key in ("root_holders", "bmc_holders"):
        for i, pid in enumerate(doc[key]):
            ref("%s[%d]" % (key, i), pid)
    for action in sorted(doc["change_rights"]):
        rule = doc["change_rights"][action]
        for key in ("performers", "approvers"):
            for i, pid in enumerate(rule[key]):
                ref("change_rights.%s.%s[%d]" % (action, key, i), pid)
        base = "%s: change_rights.%s" % (filename, action)
        if rule["needs_approval"] and not rule["approvers"]:
            errors.append("%s.approvers: needs_approval is true but nobody may approve" % base)
        if rule["four_eyes"] and not rule["needs_approval"]:
            errors.append("%s.four_eyes: four_eyes needs needs_approval: true" % base)
        if rule["four_eyes"] and not (set(rule["approvers"]) - set(rule["performers"])) \
                and len(rule["approvers"]) < 2:
            errors.append("%s.four_eyes: needs an approver other than the performer" % base)
    names = set()
    for i, agent in enumerate(doc["agents"]):
        if not agent.get("package") and not agent.get("binary"):
            errors.append("%s: agents[%d]: give package or binary" % (filename, i))
        if agent["name"] in names:
            errors.append("%s: agents[%d].name: duplicate agent %r" % (filename, i, agent["name"]))
        names.add(agent["name"])
    for i, member in enumerate(doc["console_members"]):
        ref("console_members[%d].person" % i, member["person"])
    kinds = set()
    for i, cred in enumerate(doc["credentials"]):
        kinds.add(cred["kind"])
        for j, pid in enumerate(cred["holders"]):
            ref("credentials[%d].holders[%d]" % (i, j), pid)
    for kind in CREDENTIAL_KINDS:
        if kind not in kinds:
            errors.append("%s: credentials: no entry of kind %r (each kind needs its own "
                          "revocation step)" % (filename, kind))
    for i, secret in enumerate(doc["secrets"]):
        ref("secrets[%d].rotated_by" % i, secret["rotated_by"])
    for i, pid in enumerate(doc["audit"]["readers"]):
        ref("audit.readers[%d]" % i, pid)
    sig = doc["signature"]
    if sig["signed"]:
        for key in ("signer", "signed_at", "expires"):
            if sig.get(key) is None:
                errors.append("%s: signature.%s: is required when signed is true" % (filename, key))
        if sig.get("signer"):
            ref("signature.signer", sig["signer"])
    if sig.get("signed_at") and sig.get("expires") and sig["expires"] <= sig["signed_at"]:
        errors.append("%s: signature.expires: is not after signed_at" % filename)
    return errors


class Boundary:
    """A validated boundary document plus the helpers onboarding, approval and removal use."""

    def __init__(self, doc, filename):
        self.doc = doc
        self.filename = filename

    # --- signature -------------------------------------------------------------------
    def status(self, now=None):
        """{'status': 'signed'|'unsigned', 'reasons': [...], ...}; ``now`` keeps it testable."""
        now = now or datetime.datetime.now(datetime.timezone.utc)
        if now.tzinfo is None:
            now = now.replace(tzinfo=datetime.timezone.utc)
        sig = self.doc["signature"]
        reasons = []
        if not sig["signed"]:
            reasons.append("not signed")
        else:
            if sig.get("signer") != self.doc["security_owner"]:
                reasons.append("signed by %r, not by the security owner %r"
                               % (sig.get("signer"), self.doc["security_owner"]))
            if sig["signed_at"] > now:
                reasons.append("signed_at %s is in the future" % _iso(sig["signed_at"]))
            if sig.get("expires") and sig["expires"] <= now:
                reasons.append("expired on %s" % _iso(sig["expires"]))
        return {
            "status": "unsigned" if reasons else "signed",
            "reasons": reasons,
            "security_owner": self.doc["security_owner"],
            "signer": sig.get("signer"),
            "signed_at": _iso(sig.get("signed_at")),
            "expires": _iso(sig.get("expires")),
            # The declared status only; approval.verify_boundary checks <boundary>.sig against
            # the pinned boundary signers before any approver key in the boundary is trusted.
            "verification": "ssh_signature_pending" if sig.get("ssh_signature") else "declared",
            "applies_to": {"nodes": sorted(self.doc["applies_to"]["nodes"]),
                           "groups": sorted(self.doc["applies_to"]["groups"])},
        }

    def covers(self, node, group=None):
        scope = self.doc["applies_to"]
        return node in scope["nodes"] or (group is not None and group in scope["groups"])

    # --- helpers for onboarding, approval and removal --------------------------------
    def allowed_agents(self):
        return [dict(a) for a in sorted(self.doc["agents"], key=lambda a: a["name"])]

    def egress_allowlist(self):
        return [dict(e) for e in self.doc["data_placement"]["egress_allowlist"]]

    def egress_allowed(self, address, port):
        """True when ``address``:``port`` falls inside an allowlist entry."""
        ip = netaddr.IPAddress(address)
        for entry in self.doc["data_placement"]["egress_allowlist"]:
            if ip in netaddr.IPNetwork(entry["cidr"]) and entry["port_min"] <= port <= entry["port_max"]:
                return True
        return False

    def _rule(self, action):
        if action not in ACTIONS:
            raise KeyError("unknown action %r (known: %s)" % (action, ", ".join(ACTIONS)))
        return self.doc["change_rights"].get(action)

    def performers_for(self, action):
        rule = self._rule(action)
        return list(rule["performers"]) if rule else []

    def approvers_for(self, action):
        """People who may approve ``action``; an action not listed has none."""
        rule = self._rule(action)
        return list(rule["approvers"]) if rule else []

    def needs_approval(self, action):
        """An action the boundary does not list is not granted, so it always needs approval."""
        rule = self._rule(action)
        return True if rule is None else bool(rule["needs_approval"])

    def four_eyes(self, action):
        rule = self._rule(action)
        return bool(rule and rule["four_eyes"])

    def person(self, person_id):
        return next((dict(p) for p in self.doc["people"] if p["id"] == person_id), None)

    def signing_keys(self, action=None):
        """{person id: [public key lines]} of the approvers of ``action`` (of every action
        when None) that have keys in ``people``."""
        ids = set()
        for name, rule in self.doc["change_rights"].items():
            if action is None or name == action:
                ids.update(rule["approvers"])
        return {p["id"]: list(p.get("ssh_keys") or []) for p in self.doc["people"]
                if p["id"] in ids and p.get("ssh_keys")}

    def access_of(self, person_id):
        """What ``person_id`` holds ({ssh_keys, kubernetes}), or None."""
        access = (self.person(person_id) or {"access": None}).get("access")
        return None if access is None else {"ssh_keys": list(access.get("ssh_keys") or []),
                                            "kubernetes": [{k: v for k, v in i.items() if v is not None}
                                                           for i in access.get("kubernetes") or []]}

    def revocation_steps(self):
        return {kind: [c["revocation"] for c in self.doc["credentials"] if c["kind"] == kind]
                for kind in CREDENTIAL_KINDS}


def _iso(value):
    if value is None:
        return None
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


BOUNDARY = s.Document(SPEC, _cross_check, Boundary)


def parse_boundary(data, filename):
    """Validate parsed YAML; raise schema.SchemaError listing every problem."""
    return BOUNDARY.parse(data, filename)


def load_boundary(path):
    """Read, parse and validate a boundary file; errors name the file by its base name."""
    return BOUNDARY.load(path)


def load_boundary_text(text, filename="boundary.yml"):
    return BOUNDARY.load_text(text, filename)
