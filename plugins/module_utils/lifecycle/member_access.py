# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Revoke, through the API, the Kubernetes objects the access boundary lists for a member
(``people[].access.kubernetes``):

- ServiceAccount: its legacy token Secrets (type kubernetes.io/service-account-token,
  annotated with the account's name) and the account itself; deleting the account also
  invalidates the bound tokens issued for it;
- RoleBinding and ClusterRoleBinding: the binding;
- BootstrapToken: the Secret kube-system/bootstrap-token-<id>.

Each object is read first; what is gone already is reported as absent, so a rerun changes
nothing. After the deletes every object is read again and must be gone.

audit_revocation writes the audit entry of a revocation, for the action plugins that verified
the change record (k8s_member_access, member_ssh_keys)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import audit, audit_anchor, ledger

SA_TOKEN_TYPE = "kubernetes.io/service-account-token"
SA_NAME_ANNOTATION = "kubernetes.io/service-account.name"
BOOTSTRAP_PREFIX = "bootstrap-token-"


class AccessError(Exception):
    """An object that is still there after its revocation."""


def _secret(kube, namespace, name):
    ref = "Secret %s/%s" % (namespace, name)
    return (ref, lambda: kube.call_or_none("get " + ref, kube.core.read_namespaced_secret, name, namespace),
            lambda: kube.call_or_none("delete " + ref, kube.core.delete_namespaced_secret, name, namespace))


def objects(kube, item):
    """[(reference, read(), delete())] for one boundary item, token Secrets before their account."""
    kind, ns, name = item["kind"], item.get("namespace"), item["name"]
    if kind == "BootstrapToken":
        return [_secret(kube, "kube-system", BOOTSTRAP_PREFIX + name)]
    if kind == "RoleBinding":
        ref = "RoleBinding %s/%s" % (ns, name)
        return [(ref, lambda: kube.call_or_none("get " + ref, kube.rbac.read_namespaced_role_binding, name, ns),
                 lambda: kube.call_or_none("delete " + ref, kube.rbac.delete_namespaced_role_binding, name, ns))]
    if kind == "ClusterRoleBinding":
        ref = "ClusterRoleBinding %s" % name
        return [(ref, lambda: kube.call_or_none("get " + ref, kube.rbac.read_cluster_role_binding, name),
                 lambda: kube.call_or_none("delete " + ref, kube.rbac.delete_cluster_role_binding, name))]
    if kind == "ServiceAccount":
        secrets = kube.call("list token Secrets in %s" % ns, kube.core.list_namespaced_secret, ns,
                            field_selector="type=" + SA_TOKEN_TYPE).get("items", [])
        out = [_secret(kube, ns, sec["metadata"]["name"]) for sec in secrets
               if (sec["metadata"].get("annotations") or {}).get(SA_NAME_ANNOTATION) == name]
        ref = "ServiceAccount %s/%s" % (ns, name)
        out.append((ref, lambda: kube.call_or_none("get " + ref, kube.core.read_namespaced_service_account, name, ns),
                    lambda: kube.call_or_none("delete " + ref, kube.core.delete_namespaced_service_account, name, ns)))
        return out
    raise AccessError("kind: %r is not a kind a member's access can list" % (kind,))


def revoke(kube, items, check_mode=False):
    """Delete every object of ``items``; {"revoked": [...], "absent": [...]} (references)."""
    revoked, absent, found = [], [], []
    for item in items:
        for ref, read, delete in objects(kube, item):
            if read() is None:
                absent.append(ref)
                continue
            revoked.append(ref)
            found.append((ref, read))
            if not check_mode:
                delete()
    if not check_mode:
        left = [ref for ref, read in found if read() is not None]
        if left:
            raise AccessError("still present after the delete: %s" % ", ".join(left))
    return {"revoked": revoked, "absent": absent}


def audit_revocation(ledger_dir, verified, target, details, checkpoint_key=None):
    """Append a ``revoke_credential`` entry for ``target`` under the verified change id to the
    audit log of the records folder (``<records>/audit/audit.jsonl``, beside the ledger folder
    ``ledger_dir``). ``verified``: the approval approval.gate returned; only code that ran the
    gate calls this, so no entry names a change id that was not verified. ``checkpoint_key``:
    signs a checkpoint of the new head (audit_anchor.configured_key when None). Returns
    audit.write's result ({entry, head, warnings, ...}); audit.AuditError or OSError when it
    cannot be written."""
    log = ledger.ledger_audit_log(ledger_dir)
    key = audit_anchor.configured_key(checkpoint_key)
    event = audit.make_event(verified["change_id"], verified.get("approver") or "unknown",
                             verified.get("executor") or "unknown", target, "revoke_credential", "changed", details)
    socket = audit_anchor.SYSLOG_SOCKET if os.path.exists(audit_anchor.SYSLOG_SOCKET) else None
    return audit.write(log, event, checkpoint_key=key, checkpoint_every=1 if key else audit_anchor.CHECKPOINT_EVERY,
                       checkpoint_required=bool(key), syslog_socket=socket)
