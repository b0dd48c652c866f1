#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: access_boundary
short_description: Validate the written access boundary and report whether it is signed
version_added: "0.1.0"
description:
  - Reads the boundary YAML (root and BMC holders, change rights and approvals, agents on owned
    hosts, console members, credentials with a revocation step per kind, data placement and
    egress allowlist, secrets and rotation, audit, signature) and validates it.
  - Errors name the file and the field path, unknown keys are rejected and malformed YAML is
    reported with its line.
  - Reports C(signed) or C(unsigned) (not signed, expired, or signed by someone other than the
    security owner); an unsigned boundary holds the nodes it covers in M(hybridgpu.fleet.compat_matrix).
  - Returns the helpers later work relies on, the allowed agents, the egress allowlist, and
    approvers and approval needs per action.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.attributes.read_only
options:
  path:
    description: Path of the boundary YAML file on the host the module runs on.
    type: path
    required: true
  now:
    description: Time to judge expiry against (ISO 8601); defaults to the current UTC time.
    type: str
  require_signed:
    description: Fail when the boundary is unsigned.
    type: bool
    default: false
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Validate the inventory's access boundary
  hybridgpu.fleet.access_boundary:
    path: "{{ inventory_dir }}/preflight/boundary.yml"
  delegate_to: localhost
  run_once: true
  register: boundary
"""

RETURN = r"""
status:
  description: Signature status; pass it to compat_matrix as boundary_status.
  returned: success
  type: dict
  sample: {status: unsigned, reasons: [not signed], security_owner: sec-owner, applies_to: {nodes: [dh1-a100-01], groups: []}}
allowed_agents:
  description: Agents allowed on owned hosts, sorted by name.
  returned: success
  type: list
  elements: dict
egress_allowlist:
  description: Egress entries as {cidr, port_min, port_max, entry}.
  returned: success
  type: list
  elements: dict
actions:
  description: Per action, who performs and approves it, whether it needs approval and four eyes.
  returned: success
  type: dict
  sample: {drain: {performers: [ops-oncall], approvers: [ops-lead], needs_approval: true, four_eyes: false}}
revocation_steps:
  description: Revocation steps per credential kind.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import boundary
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import schema


def run(params):
    now = None
    if params.get("now"):
        now = schema.parse_timestamp(params["now"])
        if now is None:
            raise schema.SchemaError(["now: %r is not an ISO 8601 time" % params["now"]])
    bnd = boundary.load_boundary(params["path"])
    status = bnd.status(now=now)
    result = {
        "status": status,
        "allowed_agents": bnd.allowed_agents(),
        "egress_allowlist": bnd.egress_allowlist(),
        "actions": {a: {"performers": bnd.performers_for(a), "approvers": bnd.approvers_for(a),
                        "needs_approval": bnd.needs_approval(a), "four_eyes": bnd.four_eyes(a)}
                    for a in boundary.ACTIONS},
        "revocation_steps": bnd.revocation_steps(),
    }
    failure = None
    if params.get("require_signed") and status["status"] != "signed":
        failure = "%s: boundary is unsigned: %s" % (bnd.filename, "; ".join(status["reasons"]))
    return result, failure


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            now=dict(type="str"),
            require_signed=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    try:
        result, failure = run(module.params)
    except schema.SchemaError as exc:
        module.fail_json(msg="invalid access boundary:\n" + "\n".join(exc.errors), errors=exc.errors)
    if failure:
        module.fail_json(msg=failure, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
