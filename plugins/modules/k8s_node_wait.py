#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: k8s_node_wait
short_description: Wait until a Node's Ready condition has one of the given statuses
version_added: "0.1.0"
description:
  - Polls one Node and returns the moment (epoch seconds) its Ready condition was first seen
    with one of I(ready), and the condition's own C(lastTransitionTime).
  - A timeout is reported (C(reached=false)), not an error, unless I(fail_on_timeout) is set,
    so a caller can record "never rejoined" as a finding.
  - Read-only.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.attributes.read_only
  - hybridgpu.fleet.k8s_auth
options:
  name:
    description: Node name.
    type: str
    required: true
  ready:
    description: Ready statuses to wait for.
    type: list
    elements: str
    default: ["True"]
  timeout:
    description: Seconds to wait.
    type: float
    default: 60
  poll:
    description: Seconds between polls.
    type: float
    default: 0.5
  fail_on_timeout:
    description: Fail when the status was not reached.
    type: bool
    default: false
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Wait until the node is reported Unknown after its management link was cut
  hybridgpu.fleet.k8s_node_wait:
    context: onprem
    name: dh1-a100-02
    ready: [Unknown, "False"]
    timeout: 45
  register: lost
"""

RETURN = r"""
reached:
  description: Whether the status was seen before the timeout.
  returned: always
  type: bool
status:
  description: Last Ready status seen (C(Absent) when the Node does not exist).
  returned: always
  type: str
observed_at:
  description: Epoch seconds when the status was first seen, null on timeout.
  returned: always
  type: float
started_at:
  description: Epoch seconds when the wait began.
  returned: always
  type: float
last_transition_time:
  description: The Ready condition's lastTransitionTime as the API reports it.
  returned: always
  type: str
"""

import time

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError, node_ready
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8sModule


def _transition(node):
    for cond in ((node or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("lastTransitionTime")
    return None


ARGUMENT_SPEC = dict(name=dict(type="str", required=True),
                     ready=dict(type="list", elements="str", default=["True"]),
                     timeout=dict(type="float", default=60.0), poll=dict(type="float", default=0.5),
                     fail_on_timeout=dict(type="bool", default=False))


def run(module):
    """Wait for the Node's Ready status (module: K8sModule, or K8sTask in the action plugin)."""
    p = module.params
    start = time.time()
    status, node = None, None
    try:
        kube = module.client(retries=1)
        while True:
            node = kube.get_node(p["name"])
            status = node_ready(node) if node else "Absent"
            if status in p["ready"]:
                break
            if time.time() - start >= p["timeout"]:
                break
            time.sleep(p["poll"])
    except K8sError as err:
        module.fail_api(err, "Cannot read", "Node", p["name"])
    reached = status in p["ready"]
    result = dict(changed=False, reached=reached, status=status, started_at=start,
                  observed_at=time.time() if reached else None,
                  last_transition_time=_transition(node))
    if not reached and p["fail_on_timeout"]:
        module.fail_json(msg="Node %s did not reach Ready in %s within %ss (last: %s)"
                         % (p["name"], p["ready"], p["timeout"], status), **result)
    module.exit_json(**result)


def main():
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
