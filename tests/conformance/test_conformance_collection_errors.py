"""The collection's own error paths against what an API server refuses."""
from kubernetes import client

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import Kube
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends, k8s_backend
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.protocol import cloud_job_name


def test_overflow_submission_the_server_refuses_is_a_rejection(api):
    """A fractional GPU count is refused with 422 (extended resources must be whole numbers):
    the cloud backend reports REJECTED with the status, so the protocol releases the job to the
    local queue, and no Job exists under its name."""
    api_client, h = api
    cloud = k8s_backend.K8sCloudCluster(Kube(api_client=api_client, backoff=0.01), namespace=h.ns)
    name = cloud_job_name("job-422")
    result = cloud.submit(name, "job-422", "att-1", {"command": ["true"], "gpus": 0.5})
    assert result.outcome == backends.REJECTED, result
    assert "HTTP 422" in result.reason and "must be an integer" in result.reason, result.reason
    try:
        h.batch.read_namespaced_job(name, h.ns)
        raise AssertionError("the refused Job %s exists" % name)
    except client.ApiException as exc:
        assert exc.status == 404
    assert cloud.find_by_job_id("job-422") is None
