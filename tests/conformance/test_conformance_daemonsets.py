"""Kube.list_daemonsets and k8s_daemonset_info's summary against the API: the device plugin
check of validation step 1 finds an NVIDIA device plugin DaemonSet and misses it once deleted."""
from kubernetes import client

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import Kube
from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate import stack_check
from ansible_collections.hybridgpu.fleet.plugins.modules.k8s_daemonset_info import summary


def _ds(name, ns):
    labels = {"name": name}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"nodeSelector": {"conformance.hybridgpu.io/none": "x"},
                                           "containers": [{"name": "c", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}]}}}}


def test_device_plugin_daemonset_found_then_missing(api):
    api_client, h = api
    apps = client.AppsV1Api(api_client)
    name = h.uniq("nvidia-device-plugin-daemonset")
    apps.create_namespaced_daemon_set(h.ns, _ds(name, h.ns))
    kube = Kube(api_client=api_client, backoff=0.01)
    try:
        mine = [summary(d) for d in kube.list_daemonsets(namespace=h.ns)]
        assert [d["name"] for d in mine] == [name]
        assert mine[0]["images"] == ["nvcr.io/nvidia/k8s-device-plugin:v0.17.0"] and mine[0]["desired"] == 0
        every = [summary(d) for d in kube.list_daemonsets()]
        assert any(d["name"] == name and d["namespace"] == h.ns for d in every)
        assert stack_check.device_plugin_check("c", mine)["ok"] is True
    finally:
        apps.delete_namespaced_daemon_set(name, h.ns)
    h.wait(lambda: not [d for d in kube.list_daemonsets(namespace=h.ns) if d["metadata"]["name"] == name],
           what="the DaemonSet to go")
    assert stack_check.device_plugin_check("c", [summary(d) for d in kube.list_daemonsets(namespace=h.ns)])["ok"] is False
