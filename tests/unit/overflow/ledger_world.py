"""Stores for the Kubernetes ledger in tests: the API emulator on loopback, and an in-memory
double with the API's semantics for what the ledger uses (create answers 409 AlreadyExists,
replace with a stale metadata.resourceVersion answers 409 Conflict, an immutable ConfigMap
cannot be replaced, resourceVersion grows on every write)."""
import copy
import itertools
import os
import sys
import threading

LAB = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lab"))
if LAB not in sys.path:
    sys.path.insert(0, LAB)

import labpki  # noqa: E402
from k8s_emulator import serve  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import k8s  # noqa: E402

TOKEN = "ledger-admin-token"


class Emulator(object):
    """One in-process API emulator (HTTPS, official client) and a kubeconfig for it."""

    def __init__(self, tmp):
        tmp = str(tmp)
        ca, dummy = labpki.make_ca(os.path.join(tmp, "pki"))
        crt, key = labpki.make_server_cert(os.path.join(tmp, "pki"), os.path.join(tmp, "pki"),
                                           ["127.0.0.1", "localhost"])
        tokens = os.path.join(tmp, "tokens.csv")
        with open(tokens, "w") as fh:
            fh.write('%s,admin,admin,"system:masters"\n' % TOKEN)
        self.server = serve("ledger", ["127.0.0.1"], 0, crt, key, tokens, node_grace=2.0, tick=0.05)
        self.kubeconfig = labpki.write_kubeconfig(os.path.join(tmp, "kubeconfig"),
                                                  [("ledger", self.server.url, ca, TOKEN)])

    def kube(self):
        return k8s.Kube({"kubeconfig": self.kubeconfig, "context": "ledger", "request_timeout": 5},
                        sleep=lambda s: None)

    def stop(self):
        self.server.stop()


def _error(action, status, reason, message):
    return k8s.K8sError(action, status, reason, message, {"reason": reason, "message": message})


class FakeObjects(object):
    """In-memory stand-in for ledger_kube.KubeObjects (one namespace), shared by several ledgers."""

    def __init__(self, namespace="ledger"):
        self.ns = namespace
        self.items = {}
        self.rv = itertools.count(1)
        self.lock = threading.Lock()
        self.writes = 0

    def get(self, kind, name):
        with self.lock:
            obj = self.items.get((kind, name))
            return copy.deepcopy(obj) if obj else None

    def _check_ns(self, body):
        if body["metadata"].get("namespace") not in (None, self.ns):
            raise _error("write", 400, "BadRequest",
                         "the namespace of the provided object does not match the namespace sent on the request")

    def create(self, kind, body):
        name = body["metadata"]["name"]
        self._check_ns(body)
        with self.lock:
            if (kind, name) in self.items:
                raise _error("create %s %s" % (kind, name), 409, "AlreadyExists",
                             '%s "%s" already exists' % (kind, name))
            obj = copy.deepcopy(body)
            obj["metadata"]["resourceVersion"] = str(next(self.rv))
            self.items[(kind, name)] = obj
            self.writes += 1
            return copy.deepcopy(obj)

    def replace(self, kind, body):
        name = body["metadata"]["name"]
        self._check_ns(body)
        with self.lock:
            cur = self.items.get((kind, name))
            if cur is None:
                raise _error("replace %s %s" % (kind, name), 404, "NotFound", '%s "%s" not found' % (kind, name))
            if cur.get("immutable"):
                raise _error("replace %s %s" % (kind, name), 422, "Invalid", "field is immutable when `immutable` is set")
            want = body["metadata"].get("resourceVersion")
            if want and want != cur["metadata"]["resourceVersion"]:
                raise _error("replace %s %s" % (kind, name), 409, "Conflict",
                             "Operation cannot be fulfilled on %s \"%s\": the object has been modified; please apply "
                             "your changes to the latest version and try again" % (kind, name))
            obj = copy.deepcopy(body)
            obj["metadata"]["resourceVersion"] = str(next(self.rv))
            self.items[(kind, name)] = obj
            self.writes += 1
            return copy.deepcopy(obj)

    def list(self, kind, label_selector):
        key, dummy, value = label_selector.partition("=")
        with self.lock:
            return [copy.deepcopy(o) for (k, dummy2), o in sorted(self.items.items())
                    if k == kind and (o["metadata"].get("labels") or {}).get(key) == value]
