#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: k8s_drain
short_description: Cordon, drain (eviction API, parallel, PDB-aware, one overall deadline) or uncordon a Node
version_added: "0.1.0"
description:
  - V(drained) cordons the Node, then evicts its pods through the eviction API in parallel
    threads. A refusal by a PodDisruptionBudget (HTTP 429) is retried every O(retry_interval)
    seconds until O(timeout), which is enforced inside the module (the call returns by then plus
    at most one request timeout), so a drain cannot outlive the task.
  - Mirror pods (static pods) and DaemonSet pods are skipped and listed in C(skipped); pods with
    no controller block the drain unless O(allow_unmanaged). Succeeded and Failed pods are evicted
    (deleted) without a budget check, as on the API server.
  - A pod still refused by its budget O(force_after) seconds before the deadline is deleted
    directly only when O(force_delete) is set; each such delete is listed in C(force_deleted)
    so it can be recorded.
  - On failure the Node is uncordoned again, unless it was already cordoned when the run began.
    The module never deletes a Node.
  - V(cordoned) and V(uncordoned) only set C(spec.unschedulable).
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.k8s_auth
  - hybridgpu.fleet.change_record
  - hybridgpu.fleet.change_record.targets
options:
  name:
    description: Node name; it must be one of the record's targets.
    type: str
    required: true
  change_action:
    description:
      - The change the drain is part of, whose signed record the action plugin verifies for this
        node before the Node is touched (cordon, evictions and uncordon all change it).
    type: str
    required: true
    choices: [remove, driver_upgrade]
  state:
    description: What the Node should be.
    type: str
    choices: [drained, cordoned, uncordoned]
    default: drained
  timeout:
    description: Overall seconds for the drain (cordon, evictions, retries, waiting for pods to go).
    type: float
    default: 300
  retry_interval:
    description: Seconds between eviction attempts of a pod its budget refuses.
    type: float
    default: 2
  parallel:
    description: Evictions in flight at once.
    type: int
    default: 8
  allow_unmanaged:
    description: Evict pods that no controller owns (they are not recreated anywhere).
    type: bool
    default: false
  force_delete:
    description: Delete pods still refused by their budget when O(force_after) seconds are left.
    type: bool
    default: false
  force_after:
    description: Seconds before the deadline at which O(force_delete) deletes refused pods.
    type: float
    default: 30
attributes:
  check_mode:
    support: full
    details: Lists what would be evicted, skipped and what blocks; changes nothing.
  diff_mode:
    support: none
notes:
  - A drain's cordon is part of the drain; to keep the Node out of service after a failed
    drain, cordon it first with V(cordoned) (the failed drain then leaves it cordoned).
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Drain the node, at most 5 minutes
  hybridgpu.fleet.k8s_drain:
    kubeconfig: "{{ hgpu_kubeconfig }}"
    context: onprem
    name: "{{ inventory_hostname }}"
    timeout: 300
    change_action: driver_upgrade
    record_path: CHG-42.yml
    executor: ops-oncall
  delegate_to: localhost
  register: drain

- name: Return it to service
  hybridgpu.fleet.k8s_drain:
    context: onprem
    name: "{{ inventory_hostname }}"
    state: uncordoned
    change_action: driver_upgrade
    record_path: CHG-42.yml
    executor: ops-oncall
  delegate_to: localhost
"""

RETURN = r"""
node:
  description: Node name.
  returned: always
  type: str
was_cordoned:
  description: Whether the Node was cordoned before this run.
  returned: always
  type: bool
evicted:
  description: Pods evicted (namespace, name, uid, owner, attempts, seconds).
  returned: state=drained
  type: list
  elements: dict
would_evict:
  description: Pods the drain evicts (what check mode would do).
  returned: state=drained
  type: list
  elements: dict
skipped:
  description: Mirror and DaemonSet pods left in place, with the reason.
  returned: state=drained
  type: list
  elements: dict
blockers:
  description: Pods that stopped the drain, with the reason (budget, no controller, deadline).
  returned: state=drained
  type: list
  elements: dict
force_deleted:
  description: Pods deleted past their budget because O(force_delete) was set.
  returned: state=drained
  type: list
  elements: dict
uncordoned_on_failure:
  description: Whether a failed drain uncordoned the Node again.
  returned: state=drained
  type: bool
timed_out:
  description: Whether the overall deadline was reached.
  returned: state=drained
  type: bool
duration_s:
  description: Seconds the drain took.
  returned: state=drained
  type: float
"""

from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle.drain import Drainer
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8sModule
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.record_options import record_options


ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    state=dict(type="str", choices=["drained", "cordoned", "uncordoned"], default="drained"),
    timeout=dict(type="float", default=300.0),
    retry_interval=dict(type="float", default=2.0),
    parallel=dict(type="int", default=8),
    allow_unmanaged=dict(type="bool", default=False),
    force_delete=dict(type="bool", default=False),
    force_after=dict(type="float", default=30.0),
    change_action=dict(type="str", required=True, choices=["remove", "driver_upgrade"]),
)
ARGUMENT_SPEC.update(record_options())


def run(module):
    """The module's work (module: K8sModule, or K8sTask in the action plugin)."""
    p = module.params
    params = dict(p)
    # No single request may run past the drain's own deadline.
    params["request_timeout"] = max(1.0, min(p["request_timeout"], p["timeout"]))
    try:
        kube = module.client(params)
        drainer = Drainer(kube, p["name"], timeout=p["timeout"], retry_interval=p["retry_interval"],
                          parallel=p["parallel"], allow_unmanaged=p["allow_unmanaged"],
                          force_delete=p["force_delete"], force_after=p["force_after"])
        if p["state"] == "drained":
            result = drainer.drain(check_mode=module.check_mode)
        elif p["state"] == "cordoned":
            result = dict(drainer.cordon(check_mode=module.check_mode), failed=False)
        else:
            result = dict(drainer.uncordon(check_mode=module.check_mode), failed=False)
    except K8sError as err:
        module.fail_api(err, "", "Node", p["name"])
    if result.pop("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


def main():
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
