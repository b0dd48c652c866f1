# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The work of hybridgpu.fleet.node_agents_check, run by its action plugin on the control host or
by the module itself (common/controller_task.py)."""

from __future__ import annotations

from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard.agents import AgentError, check as check_agents
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.boundary import load_boundary
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.controller_task import TaskFailure
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import schema

ARGUMENT_SPEC = dict(agents=dict(type="list", elements="dict", required=True),
                     boundary=dict(type="path", required=True))


def execute(p, check_mode=False, diff=False):
    """The agents checked against the boundary and normalized, each with its drop-in text."""
    try:
        boundary = load_boundary(p["boundary"])
        agents = check_agents(p["agents"], boundary.allowed_agents())
    except schema.SchemaError as err:
        raise TaskFailure("Access boundary %s is invalid: %s" % (p["boundary"], err))
    except AgentError as err:
        raise TaskFailure("Refusing agents (boundary %s): %s" % (p["boundary"], err))
    return dict(changed=False, agents=agents)
