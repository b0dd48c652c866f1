# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs hybridgpu.fleet.driver_package only under a verified change record.

The record is verified here, on the control host, before the module runs on the node: the
boundary signed by the pinned boundary signers, the record signed by an approver of
driver_upgrade for this playbook and these targets, the executor (the AWX user under AWX),
and the ledger of used change ids (plugin_utils/pinned.py says where each comes from; a
launcher can choose none of them). A successful change is noted in the ledger entry, so the
same change id cannot change the node's driver a second time."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval, ledger
from ansible_collections.hybridgpu.fleet.plugins.plugin_utils import pinned

ACTION = "driver_upgrade"
PLAYBOOK = "upgrade_rehearsal.yml"


class ActionModule(ActionBase):

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        host = task_vars.get("inventory_hostname")
        try:
            verified, args = pinned.verify_for_host(self, task_vars, ACTION, PLAYBOOK)
        except approval.ApprovalError as exc:
            return pinned.refused(result, exc)
        done_at = (((verified.get("ledger") or {}).get("done") or {}).get(host) or {}).get("at")
        module_args = {k: v for k, v in args.items() if k not in ("boundary_signers", "ledger_dir", "awx_user", "checkpoint_key")}
        module_args["approval"] = {k: v for k, v in verified.items() if k != "ledger"}
        if done_at:
            module_args["done_at"] = done_at
        result.update(self._execute_module(module_name=self._task.action, module_args=module_args,
                                           task_vars=task_vars))
        if result.get("changed") and not result.get("failed") and not self._play_context.check_mode:
            plan = result.get("plan") or {}
            ledger.mark_done(args["ledger_dir"], verified["change_id"], host,
                             {"package": args.get("package"), "version": args.get("version") or None,
                              "installed": bool(plan.get("install"))}, checkpoint_key=args.get("checkpoint_key"))
        return result
