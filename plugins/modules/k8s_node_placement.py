#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: k8s_node_placement
short_description: Own the placement labels and taints of a Node under managed prefixes
version_added: "0.1.0"
description:
  - Sets the declared labels and taints on a Node through the Kubernetes API and removes
    labels and taints under the managed prefixes that are no longer declared. Labels and
    taints outside the managed prefixes (for example C(kubernetes.io/hostname) or the ones
    the node agent sets) are never touched.
  - Restricted placement uses labels under C(node-restriction.kubernetes.io/), which the
    node's own credential cannot change (NodeRestriction), so run this with an admin
    credential.
  - A declared label or taint outside O(managed_prefixes) stops the module with an error
    before any change.
  - Writes one JSON merge patch carrying the Node's resourceVersion; on a conflict (HTTP
    409) the Node is read again and the change is planned again.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.k8s_auth
options:
  name:
    description: Name of the Node.
    type: str
    required: true
  labels:
    description:
      - Labels the Node must carry, all under O(managed_prefixes). Values are strings
        (numbers and booleans are converted).
    type: dict
    default: {}
  taints:
    description:
      - Taints the Node must carry, each with C(key), optional C(value) and C(effect)
        (C(NoSchedule), C(PreferNoSchedule) or C(NoExecute)); keys under O(managed_prefixes).
    type: list
    elements: dict
    default: []
  managed_prefixes:
    description:
      - Label and taint key prefixes the collection owns. Everything under them that is
        not declared is removed.
    type: list
    elements: str
    default: [hybridgpu.io/, node-restriction.kubernetes.io/]
attributes:
  check_mode:
    support: full
    details: Reads the Node and reports what would change without writing.
  diff_mode:
    support: full
    details: Before and after list the managed labels and taints, one per line.
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Owned A100 node, restricted data allowed, soft-avoided by unmarked jobs
  hybridgpu.fleet.k8s_node_placement:
    kubeconfig: /etc/hybridgpu/kubeconfig
    context: onprem
    name: dh1-a100-01
    labels:
      hybridgpu.io/side: owned
      hybridgpu.io/node-group: ng_a100_535
      hybridgpu.io/matrix-row: a100-535
      node-restriction.kubernetes.io/data-class: restricted
    taints:
      - key: hybridgpu.io/owned
        value: "true"
        effect: PreferNoSchedule
  delegate_to: localhost
"""

RETURN = r"""
labels:
  description: Managed labels after the run (what would be, in check mode).
  returned: always
  type: dict
taints:
  description: Managed taints after the run.
  returned: always
  type: list
  elements: dict
set_labels:
  description: Labels added or changed.
  returned: always
  type: dict
removed_labels:
  description: Managed labels that were removed because they are no longer declared.
  returned: always
  type: list
  elements: str
added_taints:
  description: Managed taints added or changed.
  returned: always
  type: list
  elements: dict
removed_taints:
  description: Managed taints removed.
  returned: always
  type: list
  elements: dict
attempts:
  description: Read-plan-write rounds used (more than 1 after a 409 conflict).
  returned: always
  type: int
"""

from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import placement
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8sModule


ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    labels=dict(type="dict", default={}),
    taints=dict(type="list", elements="dict", default=[]),
    managed_prefixes=dict(type="list", elements="str", default=list(placement.DEFAULT_PREFIXES)),
)


def run(module):
    """Set the Node's placement (module: K8sModule, or K8sTask in the action plugin)."""
    p = module.params
    name = p["name"]
    # Validate before talking to the API: bad input never causes a partial change.
    try:
        placement.normalize(p["labels"], p["taints"], p["managed_prefixes"])
    except placement.PlacementError as err:
        module.fail_json(msg="Refusing placement for Node %s: %s" % (name, err))
    try:
        kube = module.client()
        res = placement.ensure(kube, name, p["labels"], p["taints"], p["managed_prefixes"],
                               check_mode=module.check_mode)
    except placement.PlacementError as err:
        module.fail_json(msg="Placement for Node %s: %s" % (name, err))
    except K8sError as err:
        module.fail_api(err, "Placement for", "Node", name)
    result = dict(changed=res["changed"], labels=res["after"]["labels"], taints=res["after"]["taints"],
                  set_labels=res["set_labels"], removed_labels=res["removed_labels"],
                  added_taints=res["added_taints"], removed_taints=res["removed_taints"],
                  attempts=res["attempts"])
    if res["changed"] and module._diff:
        d = placement.diff_text(res)
        result["diff"] = dict(before=d["before"], after=d["after"], before_header="Node %s" % name,
                              after_header="Node %s" % name)
    module.exit_json(**result)


def main():
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
