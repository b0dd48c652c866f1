# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Placement labels and taints on a Node: validate, plan, apply (read, compare, write).

The collection owns every label and taint whose key sits under one of the managed
prefixes (by default ``hybridgpu.io/`` and ``node-restriction.kubernetes.io/``). What is
declared is set; what is under a managed prefix and no longer declared is removed; nothing
else on the Node is touched. Writes are JSON merge patches carrying the resourceVersion the
plan was made from, so a concurrent writer causes a 409 and a fresh plan instead of a lost
update.
"""

from __future__ import annotations

import copy
import re

DEFAULT_PREFIXES = ("hybridgpu.io/", "node-restriction.kubernetes.io/")
RESTRICTED_PREFIX = "node-restriction.kubernetes.io/"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class PlacementError(ValueError):
    """Bad declared placement; the message names the label or taint."""


def _check_key(key, what):
    if not isinstance(key, str) or not key:
        raise PlacementError("%s: %r is not a label key" % (what, key))
    prefix, sep, name = key.rpartition("/")
    if sep and (len(prefix) > 253 or not _DNS.match(prefix)):
        raise PlacementError("%s: prefix %r of %r is not a DNS subdomain" % (what, prefix, key))
    if not _NAME.match(name):
        raise PlacementError("%s: name part %r of %r must be 1-63 characters [A-Za-z0-9-_.] "
                             "starting and ending alphanumeric" % (what, name, key))


def _check_value(value, what):
    if value == "":
        return
    if not isinstance(value, str) or not _NAME.match(value):
        raise PlacementError("%s: value %r must be empty or 1-63 characters [A-Za-z0-9-_.] "
                             "starting and ending alphanumeric" % (what, value))


def managed(key, prefixes):
    return any(key.startswith(p) for p in prefixes)


def normalize(labels, taints, prefixes=DEFAULT_PREFIXES):
    """Validate the declaration; returns (labels dict, sorted taint list). Raises PlacementError."""
    prefixes = tuple(prefixes or ())
    if not prefixes:
        raise PlacementError("managed_prefixes: at least one prefix is required")
    for p in prefixes:
        if not p.endswith("/"):
            raise PlacementError("managed_prefixes: %r must end with '/'" % p)
    out_labels = {}
    for key, value in sorted((labels or {}).items()):
        what = "labels[%s]" % key
        _check_key(key, what)
        if not managed(key, prefixes):
            raise PlacementError("%s: %r is outside the allowed prefixes (%s); the collection only "
                                 "manages labels under them" % (what, key, ", ".join(prefixes)))
        value = "" if value is None else str(value) if isinstance(value, (int, float)) and \
            not isinstance(value, bool) else value
        if isinstance(value, bool):
            value = "true" if value else "false"
        _check_value(value, what)
        out_labels[key] = value
    out_taints = []
    seen = set()
    for i, taint in enumerate(taints or []):
        what = "taints[%d]" % i
        if not isinstance(taint, dict):
            raise PlacementError("%s: expected a dict with key, value, effect" % what)
        extra = sorted(set(taint) - {"key", "value", "effect"})
        if extra:
            raise PlacementError("%s: unknown field(s) %s" % (what, ", ".join(extra)))
        key = taint.get("key")
        _check_key(key, what)
        if not managed(key, prefixes):
            raise PlacementError("%s: key %r is outside the allowed prefixes (%s)"
                                 % (what, key, ", ".join(prefixes)))
        effect = taint.get("effect")
        if effect not in EFFECTS:
            raise PlacementError("%s: effect %r is not one of %s" % (what, effect, ", ".join(EFFECTS)))
        value = taint.get("value")
        item = {"key": key, "effect": effect}
        if value not in (None, ""):
            _check_value(str(value), what)
            item["value"] = str(value)
        if (key, effect) in seen:
            raise PlacementError("%s: %s:%s is declared twice" % (what, key, effect))
        seen.add((key, effect))
        out_taints.append(item)
    return out_labels, sorted(out_taints, key=_taint_id)


def _taint_id(taint):
    return (taint.get("key") or "", taint.get("effect") or "")


def _bare(taint):
    """A taint without timeAdded, for comparison."""
    out = {"key": taint.get("key"), "effect": taint.get("effect")}
    if taint.get("value") not in (None, ""):
        out["value"] = taint["value"]
    return out


def plan(node, labels, taints, prefixes=DEFAULT_PREFIXES):
    """Compare the Node with the (normalized) declaration.

    Returns a dict: changed, patch (or None), before/after {labels, taints} restricted to
    the managed keys, set_labels, removed_labels, added_taints, removed_taints.
    """
    prefixes = tuple(prefixes)
    meta = node.get("metadata") or {}
    current = meta.get("labels") or {}
    cur_taints = (node.get("spec") or {}).get("taints") or []
    cur_managed = dict((k, v) for k, v in current.items() if managed(k, prefixes))
    set_labels = dict((k, v) for k, v in labels.items() if current.get(k) != v)
    removed = sorted(k for k in cur_managed if k not in labels)
    keep = [t for t in cur_taints if not managed(t.get("key") or "", prefixes)]
    cur_managed_taints = sorted((_bare(t) for t in cur_taints if managed(t.get("key") or "", prefixes)),
                                key=_taint_id)
    taints_changed = cur_managed_taints != taints
    patch = None
    if set_labels or removed or taints_changed:
        patch = {"metadata": {"resourceVersion": meta.get("resourceVersion")}}
        if set_labels or removed:
            label_patch = dict(set_labels)
            label_patch.update((k, None) for k in removed)
            patch["metadata"]["labels"] = label_patch
        if taints_changed:
            # A merge patch replaces the list whole: keep everyone else's taints as they are.
            patch["spec"] = {"taints": copy.deepcopy(keep) + [dict(t) for t in taints]}
        if not patch["metadata"]["resourceVersion"]:
            del patch["metadata"]["resourceVersion"]
    new_ids = set(_taint_id(t) for t in taints)
    return {
        "changed": patch is not None,
        "patch": patch,
        "before": {"labels": cur_managed, "taints": cur_managed_taints},
        "after": {"labels": dict(labels), "taints": list(taints)},
        "set_labels": set_labels,
        "removed_labels": removed,
        "added_taints": [t for t in taints if t not in cur_managed_taints],
        "removed_taints": [t for t in cur_managed_taints if _taint_id(t) not in new_ids],
    }


def ensure(kube, name, labels, taints, prefixes=DEFAULT_PREFIXES, check_mode=False, attempts=5):
    """Bring Node `name` to the declaration. Returns the last plan plus `attempts` used.

    Raises PlacementError when the Node does not exist, K8sError on API failures.
    """
    labels, taints = normalize(labels, taints, prefixes)
    for attempt in range(1, attempts + 1):
        node = kube.get_node(name)
        if node is None:
            raise PlacementError("Node %s does not exist on the API server; join the node first" % name)
        result = plan(node, labels, taints, prefixes)
        result["attempts"] = attempt
        if not result["changed"] or check_mode:
            return result
        try:
            kube.patch_node(name, result["patch"], patch_type="merge")
            return result
        except Exception as err:  # K8sError; imported lazily to keep this file client-free
            if getattr(err, "conflict", False) and attempt < attempts:
                continue
            raise
    raise PlacementError("Node %s: gave up after %d conflicting updates" % (name, attempts))


def diff_text(result):
    """Before/after as sorted 'label k=v' and 'taint k=v:Effect' lines, for Ansible's diff."""
    def lines(side):
        out = ["label %s=%s" % (k, v) for k, v in sorted(side["labels"].items())]
        out += ["taint %s=%s:%s" % (t["key"], t.get("value", ""), t["effect"]) for t in side["taints"]]
        return "\n".join(out) + ("\n" if out else "")
    return {"before": lines(result["before"]), "after": lines(result["after"])}
