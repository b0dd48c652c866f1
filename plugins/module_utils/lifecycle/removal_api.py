# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes calls of a removal, each run by k8s_node_removal after removal.authorise: delete
the Node (only when cordoned), revoke the node token Secret (kept for the refusal check), prove a
revoked token gets 401, strip the managed labels and taints, delete the join's CSRs and bootstrap
tokens. Each returns whether it changed (or would change) something."""

from __future__ import annotations

import base64
import json

from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import removal_page
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle.removal import RemovalError


def delete_node(kube, name, check_mode=False):
    """Delete the Node, refusing one that is not cordoned (a drain that did not happen or
    failed leaves it schedulable). Returns changed."""
    node = kube.get_node(name)
    if node is None:
        return False
    if not (node.get("spec") or {}).get("unschedulable"):
        raise RemovalError("Node %s is not cordoned: the drain did not complete, so it is not "
                           "deleted (kubespray #7137)" % name)
    if check_mode:
        return True
    return kube.delete_node(name)


def revoke_secret(kube, namespace, name, token_file, check_mode=False):
    """Keep the token for the refusal check (0600 on the control host), then delete the
    Secret. Returns changed."""
    secret = kube.get_secret(namespace, name)
    if secret is None:
        return False
    if check_mode:
        return True
    token = ((secret.get("data") or {}).get("token")) or ""
    if token:
        kept = {"namespace": namespace, "name": name, "token": base64.b64decode(token).decode("utf-8")}
        removal_page.write(token_file, kept, mode=0o600)
    return kube.delete_secret(namespace, name)


def token_refused(kube_factory, token_file, node):
    """Try the revoked token again. Returns (refused, detail)."""
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
    try:
        with open(token_file, encoding="utf-8") as fh:
            token = json.load(fh)["token"]
    except (OSError, ValueError, KeyError) as err:
        return False, "no revoked token to try at %s (%s)" % (token_file, err)
    kube = kube_factory(token)
    try:
        kube.get_node(node)
    except K8sError as err:
        if err.status == 401:
            return True, "401 Unauthorized"
        if err.status is None:
            return False, "API not reachable: %s" % err
        return False, "API answered %s (the token still authenticates)" % err.status
    return False, "API accepted the revoked token"


def strip_placement(kube, name, labels, taints, check_mode=False):
    """Remove the managed labels and taints when the Node still exists. Returns changed."""
    node = kube.get_node(name)
    if node is None:
        return False
    have = (node.get("metadata") or {}).get("labels") or {}
    drop = [k for k in labels if k in have]
    cur = (node.get("spec") or {}).get("taints") or []
    gone = set((t["key"], t["effect"]) for t in taints)
    keep = [t for t in cur if (t.get("key"), t.get("effect")) not in gone]
    if not drop and len(keep) == len(cur):
        return False
    if not check_mode:
        patch = {"metadata": {"labels": dict((k, None) for k in drop)}}
        if len(keep) != len(cur):
            patch["spec"] = {"taints": keep or None}
        kube.patch_node(name, patch, patch_type="merge")
    return True


def delete_csr(kube, name, check_mode=False):
    """Delete a CertificateSigningRequest of the join. Returns changed."""
    if kube.get_csr(name) is None:
        return False
    return True if check_mode else kube.delete_csr(name)


def delete_bootstrap_token(kube, name, check_mode=False):
    """Delete a bootstrap token Secret (kube-system), which revokes the token. Returns changed."""
    if kube.get_secret("kube-system", name) is None:
        return False
    return True if check_mode else kube.delete_secret("kube-system", name)
