"""kubernetes.core (the collection the `ansible` package ships) as a client: k8s create/patch/absent
with wait, check mode, k8s_info with selectors, k8s_taint, k8s_drain. The playbook asserts each
outcome by reading it back; this test then checks the cluster state once more."""
import os
import subprocess
import sys

import pytest

from clients import release_nodes
from conftest import POOL_LABEL, REAL


@pytest.fixture(autouse=True)
def _release_nodes(api):
    dummy, h = api
    since = len(h.created_nodes)
    yield
    release_nodes(h, since)


PLAYBOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clients", "kubernetes_core.yml")


def test_kubernetes_core_playbook(api):
    dummy, h = api
    pool = h.uniq("pool")
    node, other = h.uniq("ans"), h.uniq("ans")
    h.make_node(node, pool)
    h.make_node(other, pool + "-drain")
    body = h.pod_body(h.uniq("ans-pod"), pool + "-drain", hold=True)
    h.core.create_namespaced_pod(h.ns, body)
    h.wait(lambda: h.core.read_namespaced_pod(body["metadata"]["name"], h.ns).status.phase == "Running",
           what="the pod on the node to drain")
    kubeconfig = REAL or os.path.join(h.workdir, "admin.kubeconfig")
    env = dict(os.environ, ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False")
    env.pop("ANSIBLE_CONFIG", None)
    extra = ["-e", "kubeconfig=%s" % kubeconfig, "-e", "context=%s" % os.environ.get("HGPU_CONFORMANCE_CONTEXT", ""),
             "-e", "ns=%s" % h.ns, "-e", "node=%s" % node, "-e", "other_node=%s" % other,
             "-e", "pool_label=%s" % POOL_LABEL, "-e", "pool=%s" % pool, "-e", "mark=%s" % h.uniq("m")]
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    proc = subprocess.run([playbook, "-i", "localhost,", PLAYBOOK] + extra, capture_output=True, text=True,
                          env=env, timeout=300, cwd=h.workdir, check=False)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert [t.key for t in h.core.read_node(node).spec.taints or []].count("hybridgpu.io/maintenance") == 1
    assert h.core.read_node(other).spec.unschedulable is True
    assert not h.core.list_namespaced_pod(h.ns, field_selector="spec.nodeName=%s" % other).items
