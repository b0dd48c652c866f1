"""Validation through the official client: what kube-apiserver 1.30 refuses, the emulator
refuses with the same code, reason and causes (422 Invalid for field rules, 400 BadRequest for
what does not decode)."""
import json

import pytest
from kubernetes import client


def _refused(call, *args, **kwargs):
    with pytest.raises(client.ApiException) as exc:
        call(*args, **kwargs)
    body = json.loads(exc.value.body)
    assert body["kind"] == "Status" and body["status"] == "Failure"
    assert body["code"] == exc.value.status
    return exc.value.status, body


def _causes(body):
    return {(c["field"], c["reason"]) for c in body["details"]["causes"]}


def _raw(h, method, path, body, query=None):
    """A request the typed client would refuse to send (unknown fields): (status, JSON body)."""
    resp = h.api.call_api(*h.api.param_serialize(
        method, path, body=body, query_params=list((query or {}).items()),
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        auth_settings=["BearerToken"]))
    resp.read()
    return resp.status, json.loads(resp.data)


def _job(name, restart="Never", **spec):
    return {"metadata": {"name": name},
            "spec": dict({"template": {"spec": {"restartPolicy": restart, "containers": [
                {"name": "main", "image": "busybox", "command": ["true"]}]}}}, **spec)}


def test_pod_without_containers_or_image_is_422(api):
    dummy, h = api
    name = h.uniq("val")
    body = h.pod_body(name, "nowhere")
    body["spec"]["containers"] = []
    code, status = _refused(h.core.create_namespaced_pod, h.ns, body)
    assert code == 422 and status["reason"] == "Invalid"
    assert ("spec.containers", "FieldValueRequired") in _causes(status)
    assert status["details"]["name"] == name and status["details"]["kind"] == "Pod"
    body = h.pod_body(name, "nowhere")
    del body["spec"]["containers"][0]["image"]
    code, status = _refused(h.core.create_namespaced_pod, h.ns, body)
    assert code == 422
    assert ("spec.containers[0].image", "FieldValueRequired") in _causes(status)
    assert 'Pod "%s" is invalid: spec.containers[0].image: Required value' % name in status["message"]


def test_job_restart_policy_always_and_negative_completions_are_422(api):
    dummy, h = api
    name = h.uniq("valjob")
    code, status = _refused(h.batch.create_namespaced_job, h.ns, _job(name, restart="Always"))
    assert code == 422
    assert status["message"] == (
        'Job.batch "%s" is invalid: spec.template.spec.restartPolicy: Unsupported value: '
        '"Always": supported values: "OnFailure", "Never"' % name)
    assert status["details"]["group"] == "batch" and status["details"]["kind"] == "Job"
    assert status["details"]["causes"] == [{
        "reason": "FieldValueNotSupported", "field": "spec.template.spec.restartPolicy",
        "message": 'Unsupported value: "Always": supported values: "OnFailure", "Never"'}]
    code, status = _refused(h.batch.create_namespaced_job, h.ns, _job(name, completions=-1))
    assert code == 422
    assert ("spec.completions", "FieldValueInvalid") in _causes(status)


def test_job_template_selector_completions_are_immutable(api):
    dummy, h = api
    name = h.uniq("valimm")
    h.batch.create_namespaced_job(h.ns, _job(name, suspend=True, completions=2, parallelism=1))
    image = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "alpine"}]}}}}
    for patch, field in ((image, "spec.template"),
                         ({"spec": {"completions": 3}}, "spec.completions"),
                         ({"spec": {"selector": {"matchLabels": {"x": "y"}}}}, "spec.selector")):
        code, status = _refused(h.batch.patch_namespaced_job, name, h.ns, patch,
                                _content_type="application/merge-patch+json")
        assert code == 422 and status["reason"] == "Invalid", patch
        assert field in {c["field"] for c in status["details"]["causes"]}, status
    job = h.batch.read_namespaced_job(name, h.ns)
    assert job.spec.completions == 2
    assert job.spec.template.spec.containers[0].image == "busybox"


def test_bound_pod_node_name_cannot_change(api):
    dummy, h = api
    pool = h.uniq("pool")
    first, second = h.uniq("valn1"), h.uniq("valn2")
    h.make_node(first, pool, heartbeat=False)
    h.make_node(second, pool, heartbeat=False)
    name = h.uniq("valpod")
    body = h.pod_body(name, pool)
    body["spec"]["nodeName"] = first
    h.core.create_namespaced_pod(h.ns, body)
    code, status = _refused(h.core.patch_namespaced_pod, name, h.ns,
                            {"spec": {"nodeName": second}})
    assert code == 422 and status["reason"] == "Invalid"
    assert ("spec", "FieldValueForbidden") in _causes(status)
    assert "pod updates may not change fields" in status["message"]
    assert h.core.read_namespaced_pod(name, h.ns).spec.node_name == first


def test_taint_effect_and_gpu_quantity(api):
    dummy, h = api
    name = h.uniq("valtaint")
    code, status = _refused(h.core.create_node, {"metadata": {"name": name}, "spec": {
        "taints": [{"key": "hybridgpu.io/x", "effect": "Bogus"}]}})
    assert code == 422
    assert ("spec.taints[0].effect", "FieldValueNotSupported") in _causes(status)
    assert '"NoSchedule", "PreferNoSchedule", "NoExecute"' in status["message"]
    body = h.pod_body(h.uniq("valqty"), "nowhere")
    body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "abc"}}
    # a quantity that does not parse fails decoding: 400 BadRequest
    code, status = _refused(h.core.create_namespaced_pod, h.ns, body)
    assert code == 400 and status["reason"] == "BadRequest"
    assert "quantities must match the regular expression" in status["message"]


def test_strict_field_validation_and_unknown_fields(api):
    dummy, h = api
    name = h.uniq("valstrict")
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {"foo": "bar"}}
    code, status = _raw(h, "POST", "/api/v1/nodes", body, {"fieldValidation": "Strict"})
    assert code == 400 and status["reason"] == "BadRequest"
    assert 'strict decoding error: unknown field "spec.foo"' in status["message"]
    code, dummy = _raw(h, "POST", "/api/v1/nodes", body)  # the default (Warn) drops the field
    assert code == 201
    h.created_nodes.append(name)
    raw = json.loads(h.core.read_node(name, _preload_content=False).data)
    assert "foo" not in (raw.get("spec") or {})


def test_body_kind_or_api_version_not_matching_the_url_is_400(api):
    dummy, h = api
    name = h.uniq("valkind")
    code, status = _refused(h.core.create_namespaced_pod, h.ns, {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    assert code == 400 and status["reason"] == "BadRequest"
    job = dict(_job(name), apiVersion="v1", kind="Job")
    code, status = _refused(h.batch.create_namespaced_job, h.ns, job)
    assert code == 400 and status["reason"] == "BadRequest"


def test_pdb_lease_and_token_secret_rules(api):
    dummy, h = api
    code, status = _refused(h.policy.create_namespaced_pod_disruption_budget, h.ns, {
        "metadata": {"name": h.uniq("valpdb")},
        "spec": {"minAvailable": 1, "maxUnavailable": 1, "selector": {"matchLabels": {"a": "b"}}}})
    assert code == 422 and status["details"]["group"] == "policy"
    coordination = client.CoordinationV1Api(h.api)
    code, status = _refused(coordination.create_namespaced_lease, h.ns, {
        "metadata": {"name": h.uniq("vallease")},
        "spec": {"holderIdentity": "x", "leaseDurationSeconds": 0}})
    assert code == 422
    assert ("spec.leaseDurationSeconds", "FieldValueInvalid") in _causes(status)
    code, status = _refused(h.core.create_namespaced_secret, h.ns, {
        "metadata": {"name": h.uniq("valsec")}, "type": "kubernetes.io/service-account-token"})
    assert code == 422
    assert ("metadata.annotations[kubernetes.io/service-account.name]",
            "FieldValueRequired") in _causes(status)
