"""Conformance fixtures.

By default an emulator is started in-process on 127.0.0.1 with a throwaway CA and tokens.
With HGPU_CONFORMANCE_KUBECONFIG set (and optionally HGPU_CONFORMANCE_CONTEXT) the same tests
run against that real cluster; only tests that need emulator-side setup (static token file,
node-credential Secrets) are skipped there, with the reason.
"""
import itertools
import os
import secrets
import sys
import tempfile
import threading
import time
import uuid

import pytest
from kubernetes import client, config

LAB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lab")
if LAB not in sys.path:
    sys.path.insert(0, LAB)

import labpki  # noqa: E402

POOL_LABEL = "conformance.hybridgpu.io/pool"
HOLD_LABEL = "conformance.hybridgpu.io/hold"
HOLD_TERMINATION_LABEL = "conformance.hybridgpu.io/hold-termination"
REAL = os.environ.get("HGPU_CONFORMANCE_KUBECONFIG")


def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class FakeKubelet:
    """Acts as the kubelet for test Nodes: heartbeats their Ready condition, moves pods bound
    to them to Running, then Succeeded (unless the pod carries HOLD_LABEL=true), and confirms
    the deletion of a Terminating pod (deletionTimestamp set) with a grace-0 delete, as the
    kubelet does once the containers stopped (unless the pod carries
    HOLD_TERMINATION_LABEL=true: its containers "do not stop")."""

    def __init__(self, core):
        self.core = core
        self.nodes = set()
        self.paused = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def add(self, name):
        with self._lock:
            self.nodes.add(name)

    def remove(self, name):
        with self._lock:
            self.nodes.discard(name)

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)

    def heartbeat(self, name):
        self.core.patch_node_status(name, {"status": {"conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now_rfc3339()}]}})

    def _run(self):
        while not self._stop.wait(0.4):
            with self._lock:
                nodes = sorted(self.nodes - self.paused)
            for name in nodes:
                try:
                    self.heartbeat(name)
                    self._pods(name)
                except client.ApiException:
                    pass  # node or pod deleted under us

    def _pods(self, name):
        pods = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % name)
        for pod in pods.items:
            phase = pod.status.phase
            labels = pod.metadata.labels or {}
            hold = labels.get(HOLD_LABEL) == "true"
            if pod.metadata.deletion_timestamp:
                if labels.get(HOLD_TERMINATION_LABEL) != "true":
                    self.confirm_deletion(pod)
            elif phase == "Pending":
                self.set_phase(pod, "Running")
            elif phase == "Running" and not hold:
                self.set_phase(pod, "Succeeded")

    def confirm_deletion(self, pod):
        try:
            self.core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, body={
                "gracePeriodSeconds": 0, "preconditions": {"uid": pod.metadata.uid}})
        except client.ApiException as exc:
            if exc.status not in (404, 409):
                raise

    def set_phase(self, pod, phase):
        cname = pod.spec.containers[0].name
        if phase == "Running":
            state = {"running": {"startedAt": now_rfc3339()}}
        else:
            state = {"terminated": {"exitCode": 0 if phase == "Succeeded" else 1,
                                    "reason": "Completed" if phase == "Succeeded" else "Error",
                                    "finishedAt": now_rfc3339()}}
        ready = "True" if phase == "Running" else "False"
        self.core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, {
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}],
                       "containerStatuses": [{"name": cname, "image": pod.spec.containers[0].image,
                                              "imageID": "", "ready": ready == "True",
                                              "restartCount": 0, "state": state}]}})


class Helpers:
    def __init__(self, api, emulator, workdir, server=None, ca=None, token_file=None):
        self.api = api
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.policy = client.PolicyV1Api(api)
        self.emulator = emulator
        self.server = server
        self.workdir = workdir
        self.ca = ca
        self.token_file = token_file
        self.run_id = uuid.uuid4().hex[:6]
        self.ns = "hgpu-conf-" + self.run_id
        self.node_grace = float(os.environ.get("HGPU_CONFORMANCE_NODE_GRACE",
                                               "2" if emulator else "50"))
        self.created_nodes = []
        self.kubelet = FakeKubelet(self.core)
        self._serial = itertools.count(1)

    def uniq(self, prefix):
        # The serial keeps names within one run distinct; the random part keeps
        # names from runs that share a run_id apart on a real cluster.
        return "%s-%s-%d%s" % (prefix, self.run_id, next(self._serial), secrets.token_hex(1))

    def make_node(self, name, pool, labels=None, gpus=0, taints=None, heartbeat=True):
        labels = dict(labels or {}, **{POOL_LABEL: pool, "kubernetes.io/hostname": name})
        body = {"metadata": {"name": name, "labels": labels}, "spec": {},
                "status": {"capacity": {"nvidia.com/gpu": str(gpus), "cpu": "8",
                                        "memory": "32Gi", "pods": "110"},
                           "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "8",
                                           "memory": "32Gi", "pods": "110"},
                           "conditions": [{"type": "Ready", "status": "True",
                                           "reason": "KubeletReady",
                                           "lastHeartbeatTime": now_rfc3339()}]}}
        if taints:
            body["spec"]["taints"] = taints
        node = self.core.create_node(body)
        self.created_nodes.append(name)
        # A real API server drops status on create for some versions: post it again.
        self.core.patch_node_status(name, {"status": body["status"]})
        if heartbeat:
            self.kubelet.add(name)
        return node

    def pod_body(self, name, pool, gpus=0, labels=None, hold=False, **spec):
        labels = dict(labels or {})
        if hold:
            labels[HOLD_LABEL] = "true"
        container = {"name": "main", "image": "busybox", "command": ["true"]}
        if gpus:
            container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        body = {"metadata": {"name": name, "labels": labels},
                "spec": dict({"containers": [container], "restartPolicy": "Never",
                              "nodeSelector": {POOL_LABEL: pool}}, **spec)}
        return body

    def kubeconfig_for(self, token, name):
        """Write a kubeconfig for another bearer token; return an ApiClient for it."""
        path = os.path.join(self.workdir, "%s.kubeconfig" % name)
        labpki.write_kubeconfig(path, [(name, self.server.url, self.ca, token)])
        return config.new_client_from_config(config_file=path, context=name)

    @staticmethod
    def wait(fn, timeout=10.0, interval=0.1, what="condition"):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = fn()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError("timed out after %.0fs waiting for %s (last: %r)"
                             % (timeout, what, last))

    def cleanup(self):
        self.kubelet.stop()
        for name in self.created_nodes:
            try:
                self.core.delete_node(name)
            except client.ApiException:
                pass
        try:
            self.core.delete_namespace(self.ns)
        except client.ApiException:
            pass


@pytest.fixture(scope="session")
def api():
    """(ApiClient, Helpers) for the emulator, or for a real cluster in real mode."""
    workdir = tempfile.mkdtemp(prefix="hgpu-conformance-")
    server = None
    if REAL:
        api_client = config.new_client_from_config(
            config_file=REAL, context=os.environ.get("HGPU_CONFORMANCE_CONTEXT"))
        helpers = Helpers(api_client, False, workdir)
        helpers.kubeconfig, helpers.context = REAL, os.environ.get("HGPU_CONFORMANCE_CONTEXT")
    else:
        from k8s_emulator import serve
        pki = os.path.join(workdir, "pki")
        ca, ca_key = labpki.make_ca(pki)
        crt, key = labpki.make_server_cert(pki, pki, ["127.0.0.1", "localhost"])
        token = secrets.token_hex(16)
        token_file = os.path.join(workdir, "tokens.csv")
        with open(token_file, "w", encoding="utf-8") as fh:
            fh.write('%s,admin,admin-uid,"system:masters"\n' % token)
        server = serve(cluster="conformance", binds=["127.0.0.1"], port=0, cert=crt, key=key,
                       token_file=token_file, node_grace=2.0,
                       log_file=os.path.join(workdir, "requests.log"),
                       client_ca=ca, signing_cert=ca, signing_key=ca_key)
        kubeconfig = labpki.write_kubeconfig(os.path.join(workdir, "admin.kubeconfig"),
                                             [("conformance", server.url, ca, token)])
        api_client = config.new_client_from_config(config_file=kubeconfig, context="conformance")
        helpers = Helpers(api_client, True, workdir, server, ca, token_file)
        helpers.kubeconfig, helpers.context = kubeconfig, "conformance"
    helpers.core.create_namespace({"metadata": {"name": helpers.ns}})
    try:
        yield api_client, helpers
    finally:
        helpers.cleanup()
        if server is not None:
            server.stop()


def emulator_only(helpers, why):
    if not helpers.emulator:
        pytest.skip("real-cluster mode: %s" % why)
