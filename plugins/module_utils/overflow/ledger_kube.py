# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API objects the Kubernetes ledger uses (ConfigMaps and a Lease in one namespace), through
common/k8s.py, and the Lease's MicroTime format. Creates and replaces are never retried blindly:
their 409 is the answer the ledger needs."""
from __future__ import annotations

import time

from ..common import schema


def micro_time(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + ".%06dZ" % int((epoch % 1) * 1e6)


def parse_micro_time(text):
    """A Lease MicroTime ("Z" or an offset) as epoch seconds, None when absent or unreadable."""
    dt = schema.parse_timestamp(text) if text else None
    return dt.timestamp() if dt is not None else None


class KubeObjects(object):
    """ConfigMaps and the Lease in one namespace through common/k8s.py. Returns dicts; raises K8sError."""

    def __init__(self, kube, namespace):
        self.kube = kube
        self.ns = namespace

    def _api(self, kind, verb):
        if kind == "lease":
            return getattr(self.kube.coordination, "%s_namespaced_lease" % verb)
        return getattr(self.kube.core, "%s_namespaced_config_map" % verb)

    def get(self, kind, name):
        return self.kube.call_or_none("read %s %s/%s" % (kind, self.ns, name), self._api(kind, "read"), name, self.ns)

    def create(self, kind, body):
        return self.kube.call("create %s %s/%s" % (kind, self.ns, body["metadata"]["name"]),
                              self._api(kind, "create"), self.ns, body, retry_statuses=())

    def replace(self, kind, body):
        name = body["metadata"]["name"]
        return self.kube.call("replace %s %s/%s" % (kind, self.ns, name), self._api(kind, "replace"),
                              name, self.ns, body, retry_statuses=())

    def list(self, kind, label_selector):
        return self.kube.call("list %s in %s" % (kind, self.ns), self._api(kind, "list"), self.ns,
                              label_selector=label_selector).get("items", [])
