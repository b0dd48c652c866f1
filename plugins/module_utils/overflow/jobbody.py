# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""batch/v1 Job bodies for the overflow backends: one made from a command, or one around a whole
pod spec (a carried job, carry.py)."""
from __future__ import annotations

GPU_PRODUCT = "nvidia.com/gpu.product"
GPU = "nvidia.com/gpu"
GPU_TYPE_ANNOTATION = "hybridgpu.io/gpu-type"
REWRITES_ANNOTATION = "hybridgpu.io/overflow-rewrites"


def product_label(gpu_type):
    """GPU type as a label value, the way GPU feature discovery writes it (spaces become dashes)."""
    return gpu_type.replace(" ", "-") if gpu_type else gpu_type


def build_job(name, namespace, command, gpus=0, gpu_type=None, image="localhost/overflow-job:1", env=None,
              labels=None, annotations=None, node_selector=None, tolerations=None, suspend=False,
              backoff_limit=0):
    """A batch/v1 Job body with one container that runs `command`."""
    selector = dict(node_selector or {})
    annotations = dict(annotations or {})
    if gpu_type:
        selector[GPU_PRODUCT] = product_label(gpu_type)
        annotations[GPU_TYPE_ANNOTATION] = gpu_type
    container = {"name": "job", "image": image, "command": list(command),
                 "env": [{"name": k, "value": str(v)} for k, v in sorted((env or {}).items())]}
    if gpus:
        container["resources"] = {"limits": {GPU: str(gpus)}, "requests": {GPU: str(gpus)}}
    pod_spec = {"restartPolicy": "Never", "containers": [container]}
    if selector:
        pod_spec["nodeSelector"] = selector
    if tolerations:
        pod_spec["tolerations"] = list(tolerations)
    return job_body(name, namespace, pod_spec, labels, annotations, suspend, backoff_limit)


def job_body(name, namespace, pod_spec, labels=None, annotations=None, suspend=False, backoff_limit=0):
    """A batch/v1 Job body around a pod spec."""
    meta = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"suspend": bool(suspend), "backoffLimit": backoff_limit,
                     "template": {"metadata": {"labels": dict(labels or {})}, "spec": pod_spec}}}
