"""Two in-process API emulators (onprem, cloud) on loopback, the cloud one behind a LinkProxy."""
import os
import sys

LAB = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lab"))
for p in (LAB, os.path.join(LAB, "overflow")):
    if p not in sys.path:
        sys.path.insert(0, p)

import labpki  # noqa: E402
from k8s_emulator import serve  # noqa: E402
from linkproxy import LinkProxy  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import k8s  # noqa: E402

TOKEN = "ovf-admin-token"


class K8sWorld(object):
    def __init__(self, tmp):
        tmp = str(tmp)
        ca, dummy = labpki.make_ca(os.path.join(tmp, "pki"))
        crt, key = labpki.make_server_cert(os.path.join(tmp, "pki"), os.path.join(tmp, "pki"),
                                           ["127.0.0.1", "localhost"])
        tokens = os.path.join(tmp, "tokens.csv")
        with open(tokens, "w") as fh:
            fh.write('%s,admin,admin,"system:masters"\n' % TOKEN)
        self.onprem = serve("onprem", ["127.0.0.1"], 0, crt, key, tokens, node_grace=2.0, tick=0.05)
        self.cloud = serve("cloud", ["127.0.0.1"], 0, crt, key, tokens, node_grace=2.0, tick=0.05)
        self.proxy = LinkProxy(("127.0.0.1", self.cloud.port)).start()
        self.kubeconfig = labpki.write_kubeconfig(os.path.join(tmp, "kubeconfig"), [
            ("onprem", self.onprem.url, ca, TOKEN),
            ("cloud", "https://127.0.0.1:%d" % self.proxy.port, ca, TOKEN),
            ("cloud-direct", self.cloud.url, ca, TOKEN)])

    def kube(self, context, **kw):
        params = {"kubeconfig": self.kubeconfig, "context": context, "request_timeout": 5}
        return k8s.Kube(params, sleep=lambda s: None, **kw)

    def stop(self):
        self.proxy.stop()
        self.onprem.stop()
        self.cloud.stop()


def register_node(kube, name, labels, gpus=8, taints=None):
    """Register a Ready Node (as a kubelet would) so the scheduler can bind pods to it."""
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints or []},
            "status": {"capacity": {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"},
                       "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}
    return kube.call("create node %s" % name, kube.core.create_node, body)
