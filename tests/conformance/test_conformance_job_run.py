"""The collection's Job runner (k8s_job_run, run as Ansible runs it) against the API: several
Jobs side by side in one module run, each read back, and a Job left from an earlier run of the
same name replaced. The test process acts as the kubelet (conftest.FakeKubelet)."""
from kubernetes import client

from conftest import HOLD_LABEL, POOL_LABEL
from hgpu_testenv import run_module


def job_args(h, **kw):
    return dict(kubeconfig=h.kubeconfig, context=h.context, namespace=h.ns, image="busybox",
                command=["true"], **kw)


def jobs_left(h, *names):
    return [j.metadata.name for j in h.batch.list_namespaced_job(h.ns).items if j.metadata.name in names]


def pool_with_node(h):
    pool, node = h.uniq("pool"), h.uniq("node")
    h.make_node(node, pool)
    return pool, node


def test_jobs_run_side_by_side_and_each_is_read_back(api):
    dummy, h = api
    pool, node = pool_with_node(h)
    done, unplaced = h.uniq("jr-done"), h.uniq("jr-unplaced")
    res = run_module("k8s_job_run", job_args(h, cleanup=True, jobs=[
        {"name": done, "node_selector": {POOL_LABEL: pool}},
        {"name": unplaced, "node_selector": {POOL_LABEL: h.uniq("nowhere")}, "wait": "scheduled",
         "wait_timeout": 2}]))
    assert not res.get("failed") and res["changed"], res
    first, second = res["results"]
    assert (first["job"], first["node"], first["phase"], first["succeeded"]) == (done, node, "Succeeded", True)
    assert (second["job"], second["node"], second["timed_out"]) == (unplaced, None, True)
    assert jobs_left(h, done, unplaced) == []   # cleanup=true deleted both


def test_a_job_that_does_not_finish_fails_the_run_after_all_are_read_back(api):
    dummy, h = api
    pool, dummy_node = pool_with_node(h)
    held, done = h.uniq("jr-held"), h.uniq("jr-ok")
    res = run_module("k8s_job_run", job_args(h, cleanup=True, jobs=[
        {"name": held, "node_selector": {POOL_LABEL: pool}, "labels": {HOLD_LABEL: "true"}, "wait_timeout": 2},
        {"name": done, "node_selector": {POOL_LABEL: pool}}]))
    assert res.get("failed"), res
    assert "Job %s/%s" % (h.ns, held) in res["msg"] and "did not finish within 2" in res["msg"], res["msg"]
    assert done not in res["msg"] and res["results"][1]["succeeded"], res


def test_replace_deletes_the_leftover_and_reads_only_the_new_jobs_pod(api):
    dummy, h = api
    old_pool, old_node = pool_with_node(h)
    new_pool, new_node = pool_with_node(h)
    name = h.uniq("jr-again")
    first = run_module("k8s_job_run", job_args(h, name=name, node_selector={POOL_LABEL: old_pool}))
    assert first["node"] == old_node and first["succeeded"], first
    again = run_module("k8s_job_run", job_args(h, name=name, node_selector={POOL_LABEL: new_pool},
                                               wait="scheduled", replace=True))
    assert not again.get("failed") and again["replaced"] is True, again
    assert again["node"] == new_node, again
    job = h.batch.read_namespaced_job(name, h.ns)
    assert job.spec.template.spec.node_selector == {POOL_LABEL: new_pool}
    h.batch.delete_namespaced_job(name, h.ns, body=client.V1DeleteOptions(propagation_policy="Background"))
