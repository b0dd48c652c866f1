#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: k8s_daemonset_info
short_description: List the DaemonSets of a cluster with their rollout counts
version_added: "0.1.0"
description:
  - Reads DaemonSets through the Kubernetes API with one list call (all namespaces, or one)
    and returns, per DaemonSet, its name, namespace, labels, container images and the desired,
    ready and available pod counts.
  - Validation uses it to find the NVIDIA device plugin (or the GPU Operator's) in the managed cluster.
  - Read-only; runs the same in check mode.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.attributes.read_only
  - hybridgpu.fleet.k8s_auth
options:
  namespace:
    description:
      - Only DaemonSets of this namespace. Unset, every namespace.
    type: str
  label_selector:
    description:
      - Label selector, for example C(app.kubernetes.io/name=nvidia-device-plugin).
    type: str
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: DaemonSets of the on-prem cluster
  hybridgpu.fleet.k8s_daemonset_info:
    context: onprem
  register: onprem_daemonsets

- name: The GPU Operator's DaemonSets only
  hybridgpu.fleet.k8s_daemonset_info:
    context: onprem
    namespace: gpu-operator
"""

RETURN = r"""
daemonsets:
  description: One entry per DaemonSet, sorted by namespace and name.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: DaemonSet name.
      type: str
    namespace:
      description: Its namespace.
      type: str
    labels:
      description: Its labels.
      type: dict
    images:
      description: Images of its pod template's containers.
      type: list
      elements: str
    desired:
      description: status.desiredNumberScheduled.
      type: int
    ready:
      description: status.numberReady.
      type: int
    available:
      description: status.numberAvailable.
      type: int
"""

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8sModule


def summary(ds):
    """The few facts about a DaemonSet the checks read."""
    meta = ds.get("metadata") or {}
    status = ds.get("status") or {}
    containers = ((((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")) or []
    return {"name": meta.get("name"), "namespace": meta.get("namespace"), "labels": meta.get("labels") or {},
            "images": [c.get("image") for c in containers if c.get("image")],
            "desired": int(status.get("desiredNumberScheduled") or 0),
            "ready": int(status.get("numberReady") or 0),
            "available": int(status.get("numberAvailable") or 0)}


ARGUMENT_SPEC = dict(namespace=dict(type="str"), label_selector=dict(type="str"))


def run(module):
    """The module's work (module: K8sModule, or K8sTask in the action plugin)."""
    try:
        items = module.client().list_daemonsets(namespace=module.params["namespace"],
                                                label_selector=module.params["label_selector"])
    except K8sError as err:
        module.fail_api(err, "Cannot list", "DaemonSets")
    result = sorted((summary(d) for d in items), key=lambda d: (d["namespace"] or "", d["name"] or ""))
    module.exit_json(changed=False, daemonsets=result)


def main():
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
