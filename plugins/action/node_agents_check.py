# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs hybridgpu.fleet.node_agents_check on the control host, in the playbook's process
(plugin_utils/controller.py)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import agents_task
from ansible_collections.hybridgpu.fleet.plugins.plugin_utils.controller import ControllerAction


class ActionModule(ControllerAction):
    task = agents_task
