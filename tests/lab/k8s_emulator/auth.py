"""Authentication (static token file, node-credential Secrets) and authorization."""
import csv
import io
import os
import threading

import yaml

from . import identity
from .store import ApiError

READ_VERBS = ("get", "list", "watch")


class User:
    def __init__(self, name, uid="", groups=()):
        self.name = name
        self.uid = uid
        self.groups = list(groups)

    @property
    def node_name(self):
        if "system:nodes" in self.groups and self.name.startswith("system:node:"):
            return self.name[len("system:node:"):]
        return None


class TokenFile:
    """kube-apiserver --token-auth-file: token,user,uid,"group1,group2". Re-read on change."""

    def __init__(self, path):
        self.path = path
        self._stamp = None
        self._tokens = {}
        self._lock = threading.Lock()

    def _reload(self):
        try:
            st = os.stat(self.path)
        except OSError:
            self._stamp, self._tokens = None, {}
            return
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp:
            return
        with open(self.path, encoding="utf-8") as fh:
            text = fh.read()
        tokens = {}
        for row in csv.reader(io.StringIO(text)):
            if not row or not row[0].strip() or row[0].lstrip().startswith("#"):
                continue
            if len(row) < 3:
                continue
            groups = [g.strip() for g in row[3].split(",") if g.strip()] if len(row) > 3 else []
            tokens[row[0].strip()] = User(row[1].strip(), row[2].strip(), groups)
        self._stamp, self._tokens = stamp, tokens

    def lookup(self, token):
        if not self.path:
            return None
        with self._lock:
            self._reload()
            return self._tokens.get(token)


def authenticate(headers, token_file, store, peer_cert=None):
    """The user of a request, as kube-apiserver's authenticator chain: a verified client
    certificate, then a bearer token (static file, bootstrap token, node-credential Secret).
    A presented token that fails is None (401); no credentials at all is system:anonymous."""
    found = identity.cert_user(peer_cert)
    if found:
        return User(found[0], "", sorted(set(found[1]) | {"system:authenticated"}))
    auth = headers.get("Authorization") or ""
    token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
    if not token:
        return User(identity.ANONYMOUS, "", [identity.UNAUTHENTICATED])
    user = token_file.lookup(token) if token_file else None
    if user:
        user.groups = sorted(set(user.groups) | {"system:authenticated"})
        return user
    found = identity.bootstrap_user(store, token)
    if found:
        return User(found[0], "", found[1] + ["system:authenticated"])
    node = store.node_tokens.get(token)
    if node:
        return User("system:node:%s" % node, "", ["system:nodes", "system:authenticated"])
    return None


class Rules:
    """Optional RBAC-lite file (YAML list). Each rule:
    {subjects: ["user:alice", "group:ops"], verbs: [get, patch], resources: [nodes, pods/eviction],
     namespaces: [team-a]}   ("*" works in verbs/resources/namespaces; namespaces omitted = all)."""

    def __init__(self, path):
        self.path = path
        self._stamp = None
        self._rules = []
        self._lock = threading.Lock()

    def rules(self):
        if not self.path:
            return []
        with self._lock:
            try:
                st = os.stat(self.path)
            except OSError:
                return []
            if st.st_mtime_ns != self._stamp:
                with open(self.path, encoding="utf-8") as fh:
                    self._rules = yaml.safe_load(fh) or []
                self._stamp = st.st_mtime_ns
            return self._rules

    def allows(self, user, verb, resource, namespace):
        names = {"user:" + user.name} | {"group:" + g for g in user.groups}
        for rule in self.rules():
            if not names & set(rule.get("subjects") or []):
                continue
            if not _has(rule.get("verbs"), verb) or not _has(rule.get("resources"), resource):
                continue
            nss = rule.get("namespaces")
            if nss is None or _has(nss, namespace or ""):
                return True
        return False


def _has(items, value):
    items = items or []
    return "*" in items or value in items


def forbidden(user, verb, res_name, name, namespace, why="", group=""):
    plural, _, sub = res_name.partition("/")
    what = '%s "%s"' % (plural, name) if name else plural
    if group:
        what = '%s.%s "%s"' % (plural, group, name) if name else "%s.%s" % (plural, group)
    scope = 'in the namespace "%s"' % namespace if namespace else "at the cluster scope"
    msg = '%s is forbidden: User "%s" cannot %s resource "%s"%s in API group "%s" %s' % (
        what, user.name, verb, plural, ' subresource "%s"' % sub if sub else "", group, scope)
    if why:
        msg += ": " + why
    return ApiError(403, "Forbidden", msg, {"name": name or "", "group": group, "kind": plural})


def admission_forbidden(res, name, why):
    """admission.NewForbidden: '<resource> "<name>" is forbidden: <why>'."""
    what = "%s.%s" % (res.plural, res.group) if res.group else res.plural
    return ApiError(403, "Forbidden", '%s "%s" is forbidden: %s' % (what, name, why),
                    {"name": name, "group": res.group, "kind": res.plural})


def authorize_path(user, path):
    """Non-resource URLs (discovery): system:discovery is bound to authenticated users only."""
    if user.name == identity.ANONYMOUS:
        raise ApiError(403, "Forbidden", 'forbidden: User "%s" cannot get path "%s"' % (user.name, path))


def _field(query, key):
    """The value a fieldSelector pins `key` to (key=v or key==v), else None."""
    for term in ((query or {}).get("fieldSelector") or "").split(","):
        for op in ("==", "="):
            k, sep, v = term.partition(op)
            if sep and k.strip() == key and not k.endswith("!"):
                return v.strip()
    return None


def _is_cluster_info(res, verb, namespace, name):
    return (res.plural == "configmaps" and verb == "get" and namespace == identity.CLUSTER_INFO_NS
            and name == identity.CLUSTER_INFO)


def authorize(user, verb, res, sub, namespace, name, rules, query=None, store=None):
    """Coarse check before the request is handled; node rules on objects run in admit_node."""
    res_name = res.plural + ("/" + sub if sub else "")
    if "system:masters" in user.groups:
        return
    if user.name == identity.ANONYMOUS:
        # kubeadm's Role for cluster-info, system:public-info-viewer covers /version and /healthz
        if _is_cluster_info(res, verb, namespace, name):
            return
        raise forbidden(user, verb, res_name, name, namespace, group=res.group)
    if identity.BOOTSTRAPPERS in user.groups:
        # system:node-bootstrapper (CSRs) and the cluster-info Role
        if _is_cluster_info(res, verb, namespace, name):
            return
        if res.plural == "certificatesigningrequests" and not sub and verb in ("create", "get", "list", "watch"):
            return
        raise forbidden(user, verb, res_name, name, namespace, group=res.group)
    node = user.node_name
    if node is not None:
        node_authorize(user, node, verb, res, sub, namespace, name, query, store)
        return
    if verb in READ_VERBS:
        return
    if rules.allows(user, verb, res_name, namespace):
        return
    raise forbidden(user, verb, res_name, name, namespace, group=res.group)


def _pod_refs(pod):
    """(secrets, configmaps) a pod references: volumes, projected sources, env, envFrom,
    imagePullSecrets (the node authorizer's graph edges)."""
    spec = pod.get("spec") or {}
    secrets = {s.get("name") for s in spec.get("imagePullSecrets") or []}
    cms = set()
    for vol in spec.get("volumes") or []:
        if vol.get("secret"):
            secrets.add(vol["secret"].get("secretName"))
        if vol.get("configMap"):
            cms.add(vol["configMap"].get("name"))
        for src in (vol.get("projected") or {}).get("sources") or []:
            if src.get("secret"):
                secrets.add(src["secret"].get("name"))
            if src.get("configMap"):
                cms.add(src["configMap"].get("name"))
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        for env in c.get("env") or []:
            ref = env.get("valueFrom") or {}
            if ref.get("secretKeyRef"):
                secrets.add(ref["secretKeyRef"].get("name"))
            if ref.get("configMapKeyRef"):
                cms.add(ref["configMapKeyRef"].get("name"))
        for env in c.get("envFrom") or []:
            if env.get("secretRef"):
                secrets.add(env["secretRef"].get("name"))
            if env.get("configMapRef"):
                cms.add(env["configMapRef"].get("name"))
    return secrets, cms


def _bound_pods(store, node, namespace=None):
    return [p for p in store.items("pods", namespace) if (p.get("spec") or {}).get("nodeName") == node]


def node_authorize(user, node, verb, res, sub, namespace, name, query, store):
    """The Node authorizer and the node rules of kube-apiserver 1.30 for system:node:<name>."""
    res_name = res.plural + ("/" + sub if sub else "")

    def deny(why=""):
        return forbidden(user, verb, res_name, name, namespace, why, group=res.group)

    plural = res.plural
    if plural == "nodes":
        if not sub and verb in ("get", "list", "watch", "create"):
            return
        if sub in ("", "status") and verb in ("update", "patch"):
            if name != node:
                raise admission_forbidden(res, name, 'node "%s" is not allowed to modify node "%s"' % (node, name))
            return
        raise deny()
    if plural == "pods":
        if not sub and verb in ("list", "watch"):
            if _field(query, "spec.nodeName") == node:
                return
            raise deny("can only list/watch pods with spec.nodeName field selector")
        if not sub and verb == "get":
            pod = store.find(res, namespace, name) if store else None
            if pod and (pod.get("spec") or {}).get("nodeName") == node:
                return
            raise deny("no relationship found between node '%s' and this object" % node)
        if not sub and verb in ("create", "delete"):
            return  # NodeRestriction: mirror pods / pods bound to this node (admit_node)
        if sub in ("status", "log") and verb in ("update", "patch"):
            return  # bound-to-this-node check in admit_node
        raise deny()
    if plural in ("secrets", "configmaps"):
        target = name if verb == "get" else _field(query, "metadata.name")
        if verb in READ_VERBS and not sub and namespace and target and store:
            for pod in _bound_pods(store, node, namespace):
                secrets, cms = _pod_refs(pod)
                if target in (secrets if plural == "secrets" else cms):
                    return
        raise deny("no relationship found between node '%s' and this object" % node)
    if plural == "leases":
        if verb in ("get", "create", "update", "patch", "delete"):
            if namespace != "kube-node-lease":
                raise admission_forbidden(res, name or "", "can only access leases in the kube-node-lease namespace")
            if name and name != node:
                raise admission_forbidden(res, name, "can only access node lease with the same name as the requesting node")
            return
        raise deny()
    if plural == "certificatesigningrequests" and not sub and verb in ("create", "get", "list", "watch"):
        return
    raise deny()


# NodeRestriction's label policy (kubeletapis.IsKubeletLabel and getForbiddenLabels).
KUBELET_LABELS = {
    "kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch", "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region"}
KUBELET_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


def _label_namespace(key):
    prefix, sep, dummy = key.partition("/")
    return prefix if sep else ""


def _under(namespace, domain):
    return namespace == domain or namespace.endswith("." + domain)


def forbidden_labels(keys):
    """The labels a node may not set or change itself: node-restriction.kubernetes.io/ and any
    kubernetes.io / k8s.io label that is not a kubelet label (so node-role.kubernetes.io/*)."""
    out = set()
    for key in keys:
        ns = _label_namespace(key)
        if _under(ns, "node-restriction.kubernetes.io"):
            out.add(key)
        if (_under(ns, "kubernetes.io") or _under(ns, "k8s.io")) and not (
                key in KUBELET_LABELS or any(_under(ns, k) for k in KUBELET_NAMESPACES)):
            out.add(key)
    return sorted(out)


def admit_node(user, res, sub, old, new):
    """NodeRestriction on the concrete old/new objects."""
    node = user.node_name
    if node is None or "system:masters" in user.groups:
        return
    obj = new or old
    name = obj["metadata"]["name"]
    if res.plural == "nodes":
        if name != node:
            raise admission_forbidden(res, name, 'node "%s" is not allowed to modify node "%s"' % (node, name))
        if new is None:
            return
        before = (old or {}).get("metadata", {}).get("labels") or {}
        after = new.get("metadata", {}).get("labels") or {}
        if old is None:
            bad = forbidden_labels(after)
            if bad:
                raise admission_forbidden(res, name, 'node "%s" is not allowed to set the following labels: %s'
                                          % (node, ", ".join(bad)))
            return
        if (old.get("spec") or {}).get("taints") != (new.get("spec") or {}).get("taints"):
            raise admission_forbidden(res, name, 'node "%s" is not allowed to modify taints' % node)
        changed = [k for k in set(before) | set(after) if before.get(k) != after.get(k)]
        bad = forbidden_labels(changed)
        if bad:
            raise admission_forbidden(res, name, "is not allowed to modify labels: %s" % ", ".join(bad))
    elif res.plural == "pods":
        bound = ((old or new).get("spec") or {}).get("nodeName")
        if old is None and sub == "":
            mirror = (new["metadata"].get("annotations") or {}).get("kubernetes.io/config.mirror")
            if mirror is None:
                raise admission_forbidden(res, name, 'pod does not have "kubernetes.io/config.mirror" annotation, '
                                          'node "%s" can only create mirror pods' % node)
            if bound != node:
                raise admission_forbidden(res, name, 'node "%s" can only create pods with spec.nodeName set to itself'
                                          % node)
            return
        if bound != node:
            raise forbidden(user, "update", "pods/" + sub if sub else "pods", name,
                            obj["metadata"].get("namespace"),
                            'node "%s" can only modify pods bound to it' % node)
    elif res.plural == "leases":
        if obj["metadata"].get("namespace") != "kube-node-lease":
            raise admission_forbidden(res, name, "can only access leases in the kube-node-lease namespace")
        if name != node:
            raise admission_forbidden(res, name, "can only access node lease with the same name as the requesting node")
