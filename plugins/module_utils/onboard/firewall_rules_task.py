# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The work of hybridgpu.fleet.firewall_rules, run by its action plugin on the control host or by
the module itself (common/controller_task.py)."""

from __future__ import annotations

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.boundary import load_boundary
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.controller_task import TaskFailure
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import host_rules
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import path_map
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import schema

ARGUMENT_SPEC = dict(
    node=dict(type="str", required=True),
    side=dict(type="str", default="owned", choices=["owned", "cloud"]),
    path_table=dict(type="path", required=True),
    boundary=dict(type="path"),
    ssh_port=dict(type="int", default=22),
    extra_inbound=dict(type="list", elements="dict", default=[]),
    extra_provider_rules=dict(type="list", elements="dict", default=[]),
    enforce_egress=dict(type="bool", default=True),
    site_arrival=dict(type="list", elements="str", default=[]),
    site_group=dict(type="str", default="owned"),
)


def execute(p, check_mode=False, diff=False):
    """The node's host firewall variables (side owned) or provider rules (side cloud)."""
    try:
        table = path_map.load_path_table(p["path_table"])
        if p["node"] not in table.doc["hosts"]:
            raise TaskFailure("Node %s is not listed in the path table %s (hosts)" % (p["node"], p["path_table"]))
        if p["side"] == "cloud":
            rules = host_rules.provider_rules(table, p["node"], p["site_arrival"], p["site_group"],
                                              p["extra_provider_rules"])
            return dict(changed=False, provider_rules=rules)
        boundary = load_boundary(p["boundary"]) if p["boundary"] else None
        res = host_rules.host_rules(table, boundary, p["node"], p["ssh_port"], p["extra_inbound"], p["enforce_egress"])
    except schema.SchemaError as err:
        raise TaskFailure("Firewall rules for node %s: invalid input: %s" % (p["node"], err))
    except host_rules.RulesError as err:
        raise TaskFailure("Firewall rules: %s" % err)
    return dict(changed=False, **res)
