# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs hybridgpu.fleet.driver_reload only under a verified driver_upgrade change record for this
node (plugin_utils/pinned.py verify_for_host): stopping the GPU daemons and unloading the kernel
module is part of the change the record approves, so it is verified at the moment it acts."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval
from ansible_collections.hybridgpu.fleet.plugins.plugin_utils import pinned

ACTION = "driver_upgrade"
PLAYBOOK = "upgrade_rehearsal.yml"


def summary(verified):
    """What the node-side module is told of the verified change."""
    return {k: verified.get(k) for k in ("approved", "change_id", "action", "approver", "executor")}


class ActionModule(ActionBase):

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        try:
            verified, args = pinned.verify_for_host(self, task_vars, ACTION, PLAYBOOK)
        except approval.ApprovalError as exc:
            return pinned.refused(result, exc)
        module_args = {k: v for k, v in args.items()
                       if k not in pinned.RECORD_ARGS + ("boundary", "boundary_signers", "ledger_dir", "awx_user", "checkpoint_key")}
        module_args["approval"] = summary(verified)
        result.update(self._execute_module(module_name=self._task.action, module_args=module_args,
                                           task_vars=task_vars))
        return result
