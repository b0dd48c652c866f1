"""Authentication (static token file, node-credential Secrets) and authorization."""
import csv
import io
import os
import threading

import yaml

from .store import ApiError

RESTRICTED_PREFIX = "node-restriction.kubernetes.io/"
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


def authenticate(headers, token_file, store):
    auth = headers.get("Authorization") or ""
    if not auth.lower().startswith("bearer "):
        return None
    token = auth[7:].strip()
    if not token:
        return None
    user = token_file.lookup(token) if token_file else None
    if user:
        user.groups = sorted(set(user.groups) | {"system:authenticated"})
        return user
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


def forbidden(user, verb, res_name, name, namespace, why=""):
    plural, _, sub = res_name.partition("/")
    what = '%s "%s"' % (plural, name) if name else plural
    scope = 'in the namespace "%s"' % namespace if namespace else "at the cluster scope"
    msg = '%s is forbidden: User "%s" cannot %s resource "%s"%s %s' % (
        what, user.name, verb, plural, ' subresource "%s"' % sub if sub else "", scope)
    if why:
        msg += ": " + why
    return ApiError(403, "Forbidden", msg, {"name": name, "kind": plural})


def authorize(user, verb, res, sub, namespace, name, rules):
    """Coarse check before the request is handled; node rules on objects run in admit_node."""
    res_name = res.plural + ("/" + sub if sub else "")
    if "system:masters" in user.groups:
        return
    node = user.node_name
    if node is not None:
        if res.plural == "secrets":
            raise forbidden(user, verb, res_name, name, namespace,
                            "no relationship found between node '%s' and this object" % node)
        if verb in READ_VERBS:
            return
        if res.plural == "nodes" and sub in ("", "status") and verb in (
                "create", "update", "patch", "delete"):
            if name and name != node:
                raise forbidden(user, verb, res_name, name, namespace,
                                'node "%s" is not allowed to modify node "%s"' % (node, name))
            return
        if res.plural == "pods" and sub in ("status", "log") and verb in ("update", "patch"):
            return  # bound-to-this-node check in admit_node
        if res.plural == "pods" and sub == "" and verb == "delete":
            return
        if res.plural == "leases" and namespace == "kube-node-lease" and (not name or name == node):
            return
        raise forbidden(user, verb, res_name, name, namespace)
    if verb in READ_VERBS:
        return
    if rules.allows(user, verb, res_name, namespace):
        return
    raise forbidden(user, verb, res_name, name, namespace)


def admit_node(user, res, sub, old, new):
    """NodeRestriction-like admission on the concrete old/new objects."""
    node = user.node_name
    if node is None or "system:masters" in user.groups:
        return
    obj = new or old
    name = obj["metadata"]["name"]
    if res.plural == "nodes":
        if name != node:
            raise forbidden(user, "update", "nodes", name, None,
                            'node "%s" is not allowed to modify node "%s"' % (node, name))
        before = {k: v for k, v in ((old or {}).get("metadata", {}).get("labels") or {}).items()
                  if k.startswith(RESTRICTED_PREFIX)}
        after = {k: v for k, v in ((new or {}).get("metadata", {}).get("labels") or {}).items()
                 if k.startswith(RESTRICTED_PREFIX)} if new else before
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        if changed:
            verb = "set" if old is None else "modify"
            raise ApiError(403, "Forbidden", 'nodes "%s" is forbidden: is not allowed to %s '
                           "labels: %s" % (name, verb, ", ".join(changed)),
                           {"name": name, "kind": "nodes"})
    elif res.plural == "pods":
        bound = ((old or new).get("spec") or {}).get("nodeName")
        if bound != node:
            raise forbidden(user, "update", "pods/" + sub if sub else "pods", name,
                            obj["metadata"].get("namespace"),
                            'node "%s" can only modify pods bound to it' % node)
