# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs hybridgpu.fleet.node_removal_state with the pinned boundary signers, the pinned boundary,
the ledger folder and the AWX user (plugin_utils/pinned.py), and the host the task runs for, when
it starts a removal, which verifies the change record; a launcher can supply none of them."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.hybridgpu.fleet.plugins.plugin_utils import pinned


class ActionModule(ActionBase):

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        if self._task.args.get("task_host") is not None:
            raise AnsibleActionFail("task_host may not be set by a task (the action plugin sets it); nothing was changed")
        if self._task.args.get("action") == "start":
            args = pinned.module_args(self, task_vars)
            args["task_host"] = task_vars.get("inventory_hostname")
        else:
            args = pinned.plain_args(self)
        result.update(self._execute_module(module_name=self._task.action, module_args=args,
                                           task_vars=task_vars))
        return result
