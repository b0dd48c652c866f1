"""The cloud cluster through the official client: Nodes Ready, and a Job with required node
affinity runs to Succeeded on the real lab agent of the matching node only."""
import time
import uuid

import pytest
from kubernetes import client, config as kconfig

from conftest import config

pytestmark = pytest.mark.lab

CLOUD = [n["name"] for n in config.NODES if n["role"] == "cloud"]


@pytest.fixture(scope="module")
def api(lab):
    return kconfig.new_client_from_config(config_file=config.path("k8s", "kubeconfig"), context="cloud")


def ready(node):
    for cond in node.status.conditions or []:
        if cond.type == "Ready":
            return cond.status
    return None


def test_cloud_nodes_are_ready(api):
    nodes = {n.metadata.name: n for n in client.CoreV1Api(api).list_node().items}
    assert set(CLOUD) <= set(nodes)
    for name in CLOUD:
        assert ready(nodes[name]) == "True", name
        labels = nodes[name].metadata.labels
        assert labels["kubernetes.io/hostname"] == name
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200"
        assert labels["nvidia.com/cuda.driver.major"] == "570"
        assert nodes[name].status.capacity["nvidia.com/gpu"] == "8"


def test_onprem_cluster_answers(lab):
    api = kconfig.new_client_from_config(config_file=config.path("k8s", "kubeconfig"), context="onprem")
    assert client.VersionApi(api).get_code().git_version.startswith("v1.30.")
    client.CoreV1Api(api).list_node()


def test_job_with_node_affinity_runs_on_the_matching_agent(api):
    target = "cloud-h200-2"
    name = "affinity-" + uuid.uuid4().hex[:8]
    ns = "default"
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    affinity = client.V1Affinity(node_affinity=client.V1NodeAffinity(
        required_during_scheduling_ignored_during_execution=client.V1NodeSelector(
            node_selector_terms=[client.V1NodeSelectorTerm(match_expressions=[
                client.V1NodeSelectorRequirement(key="kubernetes.io/hostname", operator="In",
                                                 values=[target])])])))
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(backoff_limit=0, template=client.V1PodTemplateSpec(
            spec=client.V1PodSpec(restart_policy="Never", affinity=affinity, containers=[
                client.V1Container(name="main", image="busybox",
                                   command=["sh", "-c", "echo ran-on-$(hostname) gpus=$CUDA_VISIBLE_DEVICES"],
                                   resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}))]))))
    batch.create_namespaced_job(ns, job)
    try:
        deadline = time.monotonic() + 60
        while True:
            st = batch.read_namespaced_job_status(name, ns).status
            if st.succeeded:
                break
            assert not st.failed, "job failed: %s" % st
            assert time.monotonic() < deadline, "job %s did not succeed in 60s: %s" % (name, st)
            time.sleep(1)
        pods = core.list_namespaced_pod(ns, label_selector="job-name=" + name).items
        assert len(pods) == 1
        pod = pods[0]
        assert pod.spec.node_name == target
        assert pod.status.phase == "Succeeded"
        assert pod.status.container_statuses[0].state.terminated.exit_code == 0
        logs = core.read_namespaced_pod_log(pod.metadata.name, ns)
        assert "ran-on-%s" % target in logs
    finally:
        batch.delete_namespaced_job(name, ns, propagation_policy="Background")
