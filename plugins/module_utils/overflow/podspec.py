# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What of a queued Kubernetes Job's pod spec may reach the cloud, and whether its placement
selects restricted data.

disallowed_fields: every field of the pod spec outside the allowlist (POD_FIELDS, CONTAINER_FIELDS,
VOLUME_FIELDS), with its path (`spec.template.spec.hostNetwork`). The allowlist passes what a user
needs to run a batch job, and the fields kube-apiserver fills in on every Job (SetDefaults_PodSpec,
SetDefaults_Container) only with their default values.
build: the cloud pod spec from the allowlisted fields of a checked pod spec, and nothing else.
restricted_placement: the nodeSelector, node affinity and toleration fields that select nodes of
restricted data (label and taint keys under node-restriction.kubernetes.io/, and the site's own).
"""
from __future__ import annotations

import copy
import json

# Label and taint keys under this prefix mark restricted-data placement on every site (kubelets
# cannot set them: the NodeRestriction admission plugin); a site adds its own in the job classes.
from .jobclass import RESTRICTED_PREFIX

POD_PATH = "spec.template.spec"

# The allowlist. A rule is ("any",), ("is", allowed values), ("int", lowest, highest),
# ("str",), ("names",) (a mapping of names to strings or numbers), ("map", {field: rule}) or
# ("list", rule). A field not named, or a value outside its rule, is refused with its path.
ANY = ("any",)
STR = ("str",)
NAMES = ("names",)
STRINGS = ("list", STR)
SECCOMP = ("map", {"type": ("is", ("RuntimeDefault",))})
CONTAINER_SECURITY = ("map", {
    "runAsUser": ("int", 0, 2 ** 31 - 1), "runAsGroup": ("int", 0, 2 ** 31 - 1), "runAsNonRoot": ("is", (True, False)),
    "readOnlyRootFilesystem": ("is", (True, False)), "allowPrivilegeEscalation": ("is", (True, False)),
    "privileged": ("is", (False,)), "capabilities": ("map", {"drop": STRINGS}), "procMount": ("is", ("Default",)),
    "seccompProfile": SECCOMP, "appArmorProfile": SECCOMP})
ENV = ("list", ("map", {
    "name": STR, "value": ANY,
    # secretKeyRef and configMapKeyRef pass here and are refused by carry._env_needs, which names the object
    "valueFrom": ("map", {"fieldRef": ("map", {"apiVersion": ("is", ("v1",)), "fieldPath": STR}),
                          "resourceFieldRef": ("map", {"containerName": STR, "resource": STR, "divisor": ANY}),
                          "secretKeyRef": ANY, "configMapKeyRef": ANY})}))
CONTAINER_FIELDS = {
    "name": STR, "image": STR, "command": STRINGS, "args": STRINGS, "workingDir": STR, "env": ENV,
    "envFrom": ANY,            # every source of envFrom is on-prem: carry._env_needs refuses and names it
    "resources": ("map", {"limits": NAMES, "requests": NAMES}),
    "volumeMounts": ("list", ("map", {"name": STR, "mountPath": STR, "readOnly": ("is", (True, False)), "subPath": STR,
                                      "subPathExpr": STR, "mountPropagation": ("is", ("None",))})),
    "ports": ("list", ("map", {"name": STR, "containerPort": ("int", 1, 65535), "protocol": ("is", ("TCP", "UDP", "SCTP"))})),
    "securityContext": CONTAINER_SECURITY,
    # kube-apiserver's defaults (SetDefaults_Container): passed with their default values only
    "imagePullPolicy": ("is", ("Always", "IfNotPresent")),
    "terminationMessagePath": ("is", ("/dev/termination-log",)),
    "terminationMessagePolicy": ("is", ("File", "FallbackToLogsOnError")),
}
VOLUME_FIELDS = {
    "name": STR, "emptyDir": ("map", {"medium": ("is", ("", "Memory")), "sizeLimit": ANY}),
    "downwardAPI": ("map", {"defaultMode": ("int", 0, 0o777), "items": ("list", ("map", {
        "path": STR, "mode": ("int", 0, 0o777), "fieldRef": ("map", {"apiVersion": ("is", ("v1",)), "fieldPath": STR}),
        "resourceFieldRef": ("map", {"containerName": STR, "resource": STR, "divisor": ANY})}))}),
    "persistentVolumeClaim": ("map", {"claimName": STR, "readOnly": ("is", (True, False))}),
}
POD_FIELDS = {
    "containers": ("list", ("map", CONTAINER_FIELDS)),
    "initContainers": ("list", ("map", dict(CONTAINER_FIELDS))),
    "volumes": ANY,            # each volume's kind is judged by carry._volumes, its fields by VOLUME_FIELDS
    "restartPolicy": ("is", ("Never", "OnFailure")),
    "nodeSelector": NAMES, "tolerations": ANY,        # replaced by the cloud pool's (carry._pool)
    "securityContext": ("map", {
        "runAsUser": ("int", 0, 2 ** 31 - 1), "runAsGroup": ("int", 0, 2 ** 31 - 1), "runAsNonRoot": ("is", (True, False)),
        "fsGroup": ("int", 0, 2 ** 31 - 1), "fsGroupChangePolicy": ("is", ("Always", "OnRootMismatch")),
        "supplementalGroups": ("list", ("int", 0, 2 ** 31 - 1)), "seccompProfile": SECCOMP, "appArmorProfile": SECCOMP}),
    "activeDeadlineSeconds": ("int", 1, 2 ** 63 - 1),
    "automountServiceAccountToken": ("is", (False,)),
    "hostNetwork": ("is", (False,)), "hostPID": ("is", (False,)), "hostIPC": ("is", (False,)),
    "shareProcessNamespace": ("is", (False,)),
    # kube-apiserver's defaults (SetDefaults_PodSpec): passed with their default values only
    "dnsPolicy": ("is", ("ClusterFirst",)),
    "schedulerName": ("is", ("default-scheduler",)),
    "terminationGracePeriodSeconds": ("int", 0, 30),
}
# the fields the cloud pod spec is built from; restartPolicy, nodeSelector and tolerations are set by the carry
BUILT_POD = ("containers", "initContainers", "volumes", "securityContext", "activeDeadlineSeconds",
             "terminationGracePeriodSeconds")


def _same(value, allowed):
    return any(value == v and type(value) is type(v) for v in allowed)


def _walk(value, rule, path, bad):
    """Append to `bad` every field under `path` that the allowlist rule does not pass."""
    kind = rule[0]
    if kind == "any":
        return
    if kind == "is":
        if not _same(value, rule[1]):
            bad.append("%s: %s (allowed: %s)" % (path, json.dumps(value), ", ".join(json.dumps(v) for v in rule[1])))
    elif kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or not rule[1] <= value <= rule[2]:
            bad.append("%s: %s (allowed: a whole number from %d to %d)" % (path, json.dumps(value), rule[1], rule[2]))
    elif kind == "str":
        if not isinstance(value, str):
            bad.append("%s: %s (allowed: a string)" % (path, json.dumps(value)))
    elif kind == "names":
        if not isinstance(value, dict) or any(isinstance(v, (dict, list)) for v in value.values()):
            bad.append("%s: %s (allowed: a mapping of names to values)" % (path, json.dumps(value)))
    elif kind == "list":
        if not isinstance(value, list):
            bad.append("%s: %s (allowed: a list)" % (path, json.dumps(value)))
            return
        for i, item in enumerate(value):
            _walk(item, rule[1], "%s[%d]" % (path, i), bad)
    elif kind == "map":
        if not isinstance(value, dict):
            bad.append("%s: %s (allowed: a mapping)" % (path, json.dumps(value)))
            return
        for key in sorted(value):
            if key not in rule[1]:
                bad.append("%s.%s: not carried to the cloud" % (path, key))
            else:
                _walk(value[key], rule[1][key], "%s.%s" % (path, key), bad)


def disallowed_fields(pod):
    """Every field of a pod spec (the queued Job's spec.template.spec) outside the allowlist, with its path."""
    bad = []
    fields = dict(POD_FIELDS)
    # a service account is an on-prem identity: named by the needs of carry.k8s_pod_spec
    fields.update(serviceAccountName=ANY, serviceAccount=ANY)
    _walk(pod, ("map", fields), POD_PATH, bad)
    for i, vol in enumerate(pod.get("volumes") or []):
        kinds = [k for k in vol if k != "name"] if isinstance(vol, dict) else []
        if len(kinds) == 1 and kinds[0] in VOLUME_FIELDS:
            _walk(vol, ("map", VOLUME_FIELDS), "%s.volumes[%d]" % (POD_PATH, i), bad)
    return bad


def _rule_keys(rules, kind):
    return set((rules or {}).get(kind) or [])


def _restricted_key(key, keys):
    return isinstance(key, str) and (key.startswith(RESTRICTED_PREFIX) or key in keys)


def restricted_placement(pod, rules=None):
    """Paths of the placement fields of a pod spec that select restricted-data nodes: a nodeSelector
    or node affinity term on a restricted label, a toleration of a restricted taint or of every taint.
    rules: {"labels": [label keys], "taints": [taint keys]} of the site (jobclass.restricted_placement);
    keys under node-restriction.kubernetes.io/ always count. Empty when the job may leave the site."""
    labels, taints = _rule_keys(rules, "labels"), _rule_keys(rules, "taints")
    found = []
    for key in sorted((pod.get("nodeSelector") or {})):
        if _restricted_key(key, labels):
            found.append("%s.nodeSelector[%s]" % (POD_PATH, key))
    node = (pod.get("affinity") or {}).get("nodeAffinity") or {}
    req = (node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    terms = [("requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[%d]" % i, t) for i, t in enumerate(req)]
    for i, pref in enumerate(node.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        terms.append(("preferredDuringSchedulingIgnoredDuringExecution[%d].preference" % i, (pref or {}).get("preference")))
    for where, term in terms:
        for part in ("matchExpressions", "matchFields"):
            for expr in (term or {}).get(part) or []:
                if _restricted_key((expr or {}).get("key"), labels):
                    found.append("%s.affinity.nodeAffinity.%s.%s[%s]" % (POD_PATH, where, part, expr.get("key")))
    for i, tol in enumerate(pod.get("tolerations") or []):
        key = (tol or {}).get("key")
        if not key and (tol or {}).get("operator") == "Exists":
            found.append("%s.tolerations[%d] (tolerates every taint)" % (POD_PATH, i))
        elif _restricted_key(key, taints):
            found.append("%s.tolerations[%d][%s]" % (POD_PATH, i, key))
    return found


def build(pod):
    """The cloud pod spec from the allowlisted fields of a checked pod spec, and nothing else."""
    out = dict((k, copy.deepcopy(pod[k])) for k in BUILT_POD if k in pod)
    for kind in ("initContainers", "containers"):
        if kind in out:
            out[kind] = [dict((k, v) for k, v in c.items() if k in CONTAINER_FIELDS) for c in out[kind]]
    return out
