"""Emulator validation rules, without a server: schema decoding, field rules, update rules."""
import os
import sys

import pytest

LAB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lab")
sys.path.insert(0, os.path.abspath(LAB))

from k8s_emulator import validation  # noqa: E402
from k8s_emulator.errors import ApiError  # noqa: E402
from k8s_emulator.resources import BY_PLURAL  # noqa: E402

PODS, JOBS, NODES = BY_PLURAL["pods"], BY_PLURAL["jobs"], BY_PLURAL["nodes"]


def _pod(**spec):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": dict({"containers": [{"name": "main", "image": "busybox"}]}, **spec)}


def test_schema_is_loaded_once_per_kind():
    first = validation._validator("Pod", "v1")
    assert validation._validator("Pod", "v1") is first
    assert validation._validator("Job", "batch/v1") is not first


def test_unknown_fields_are_dropped_with_a_warning_or_refused_when_strict():
    pod = _pod(foo=1)
    pod["spec"]["containers"][0]["bar"] = 2
    warnings = validation.decode_object(PODS, pod, "Warn")
    assert warnings == ['unknown field "spec.containers[0].bar"', 'unknown field "spec.foo"']
    assert "foo" not in pod["spec"] and "bar" not in pod["spec"]["containers"][0]
    with pytest.raises(ApiError) as exc:
        validation.decode_object(PODS, _pod(foo=1), "Strict")
    assert exc.value.code == 400 and 'strict decoding error: unknown field "spec.foo"' in exc.value.message
    assert validation.decode_object(PODS, _pod(foo=1), "Ignore") == []
    with pytest.raises(ApiError) as exc:
        validation.decode_object(PODS, _pod(), "Loose")
    assert exc.value.code == 400


def test_wrong_types_and_bad_quantities_are_400():
    with pytest.raises(ApiError) as exc:
        validation.decode_object(JOBS, {"spec": {"completions": "two"}})
    assert exc.value.code == 400 and "cannot be handled as a Job" in exc.value.message
    for good in ("1", "500m", "1.5Gi", "2e3", 4):
        pod = _pod()
        pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": good}}
        validation.decode_object(PODS, pod)
    for bad in ("abc", "1.5 Gi", "--1", "1Gb"):
        pod = _pod()
        pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": bad}}
        with pytest.raises(ApiError) as exc:
            validation.decode_object(PODS, pod)
        assert exc.value.code == 400 and "quantities must match" in exc.value.message


def test_field_rules_collect_every_error():
    pod = _pod(restartPolicy="Sometimes")
    pod["spec"]["containers"].append({"name": "main"})
    with pytest.raises(ApiError) as exc:
        validation.check_rules(PODS, pod)
    causes = {(c["field"], c["reason"]) for c in exc.value.details["causes"]}
    assert causes == {("spec.containers[1].name", "FieldValueDuplicate"),
                      ("spec.containers[1].image", "FieldValueRequired"),
                      ("spec.restartPolicy", "FieldValueNotSupported")}
    assert exc.value.message.startswith('Pod "p" is invalid: [')


def test_gpu_requests_must_equal_limits():
    pod = _pod()
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"},
                                                 "requests": {"nvidia.com/gpu": "1"}}
    with pytest.raises(ApiError) as exc:
        validation.check_rules(PODS, pod)
    assert exc.value.details["causes"][0]["field"] == "spec.containers[0].resources.requests[nvidia.com/gpu]"


def test_job_without_restart_policy_defaults_to_always_and_is_refused():
    job = {"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "containers": [{"name": "c", "image": "x"}]}}}}
    with pytest.raises(ApiError) as exc:
        validation.check_rules(JOBS, job)
    assert exc.value.details["causes"][0]["message"] == \
        'Unsupported value: "Always": supported values: "OnFailure", "Never"'


def test_suspended_job_that_never_started_may_change_scheduling_directives():
    old = {"metadata": {"name": "j"}, "spec": {"suspend": True, "template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}, "status": {}}
    new = {"metadata": {"name": "j"}, "spec": {"suspend": True, "template": {
        "metadata": {"labels": {"a": "b"}},
        "spec": {"restartPolicy": "Never", "nodeSelector": {"pool": "cloud"},
                 "containers": [{"name": "c", "image": "x"}]}}}}
    validation.update_errors(JOBS, old, new)
    old["status"]["startTime"] = "2024-01-01T00:00:00Z"
    with pytest.raises(ApiError):
        validation.update_errors(JOBS, old, new)


def test_pod_update_may_change_images_and_add_tolerations_only():
    old = _pod(nodeName="a", tolerations=[{"key": "k", "operator": "Exists"}])
    new = _pod(nodeName="a", tolerations=[{"key": "k", "operator": "Exists"},
                                          {"key": "j", "operator": "Exists"}])
    new["spec"]["containers"][0]["image"] = "alpine"
    validation.update_errors(PODS, old, new)
    for change in ({"nodeName": "b"}, {"tolerations": []}):
        bad = _pod(**dict(old["spec"], **change))
        with pytest.raises(ApiError) as exc:
            validation.update_errors(PODS, old, bad)
        assert exc.value.details["causes"][0]["reason"] == "FieldValueForbidden"


def test_taints():
    node = {"metadata": {"name": "n"}, "spec": {"taints": [
        {"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"},
        {"key": "", "effect": "Bogus"}]}}
    with pytest.raises(ApiError) as exc:
        validation.check_rules(NODES, node)
    causes = {(c["field"], c["reason"]) for c in exc.value.details["causes"]}
    assert causes == {("spec.taints[1]", "FieldValueDuplicate"), ("spec.taints[2].key", "FieldValueRequired"),
                      ("spec.taints[2].effect", "FieldValueNotSupported")}
