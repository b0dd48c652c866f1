# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ansible.builtin.reboot, run only under a verified driver_upgrade change record for this node
(plugin_utils/pinned.py verify_for_host). The record is verified on the control host at the
moment of the reboot, so starting the play at this task does not skip it."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action.reboot import ActionModule as RebootAction

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval
from ansible_collections.hybridgpu.fleet.plugins.plugin_utils import pinned

ACTION = "driver_upgrade"
PLAYBOOK = "upgrade_rehearsal.yml"


class ActionModule(RebootAction):

    _VALID_ARGS = RebootAction._VALID_ARGS | frozenset(pinned.RECORD_ARGS)

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        try:
            verified, dummy = pinned.verify_for_host(self, task_vars, ACTION, PLAYBOOK)
        except approval.ApprovalError as exc:
            return pinned.refused({"rebooted": False}, exc)
        result = super(ActionModule, self).run(tmp, task_vars)
        result["change_id"] = verified["change_id"]
        return result
