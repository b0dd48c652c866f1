# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs hybridgpu.fleet.k8s_drain on the control host, in the playbook's process
(plugin_utils/controller.py), only under a verified change record: the record of the change the
drain belongs to (a removal or a driver upgrade) is verified for this host at the moment of the
drain (plugin_utils/pinned.py verify_for_host), and the Node drained must be one of its targets."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval
from ansible_collections.hybridgpu.fleet.plugins.modules import k8s_drain
from ansible_collections.hybridgpu.fleet.plugins.plugin_utils import pinned
from ansible_collections.hybridgpu.fleet.plugins.plugin_utils.controller import K8sAction

# The changes a drain is part of, and the playbook each one's record names.
PLAYBOOKS = {"remove": "remove.yml", "driver_upgrade": "upgrade_rehearsal.yml"}


class ActionModule(K8sAction):
    module = k8s_drain

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        change = self._task.args.get("change_action")
        if change not in PLAYBOOKS:
            return {"failed": True, "changed": False,
                    "msg": "change_action: %r is not one of %s; nothing was changed" % (change, ", ".join(sorted(PLAYBOOKS)))}
        try:
            verified, dummy = pinned.verify_for_host(self, task_vars, change, PLAYBOOKS[change])
        except approval.ApprovalError as exc:
            return pinned.refused({}, exc)
        name = self._task.args.get("name")
        if name not in verified["approved_targets"]:
            return pinned.refused({}, approval.ApprovalError(
                ["targets: Node %s is not one of the approved targets [%s]"
                 % (name, ", ".join(verified["approved_targets"]))], verified["change_id"]))
        result = super(ActionModule, self).run(tmp, task_vars)
        result["change_id"] = verified["change_id"]
        return result
