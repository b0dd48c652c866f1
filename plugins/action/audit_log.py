# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs hybridgpu.fleet.audit_log with the pinned checkpoint key.

The key that signs the audit log's checkpoints is a pinned setting: the inventory variable
``hgpu_audit_checkpoint_key`` (a path on the control host; refused as an extra var, like the
boundary signers: plugin_utils/pinned.py), else ``/etc/hybridgpu/audit_checkpoint_key`` when
that file exists. With a key, every append signs a checkpoint of the new head (and fails when
it cannot), and ``state: verified`` requires the checkpoints and checks them against the key's
public half. A task cannot name another key. Without a key the module runs as the task says.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.hybridgpu.fleet.plugins.plugin_utils import pinned


def module_args(args, key):
    """The module's arguments with the pinned ``key`` (None: as the task gave them)."""
    args = dict(args)
    if key is None:
        return args
    if args.get("checkpoint_key") not in (None, "", key):
        raise AnsibleActionFail("checkpoint_key: the checkpoint key is pinned (%s = %s); a task cannot name "
                                "another (%s); nothing was written" % (pinned.AUDIT_KEY_VAR, key, args["checkpoint_key"]))
    args["checkpoint_key"] = key
    if args.get("state", "present") in ("present", "repaired"):
        args["checkpoint_head"] = True
    return args


class ActionModule(ActionBase):

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        key = pinned.checkpoint_key(self._loader, self._templar, task_vars)
        args = module_args(self._task.args, key)
        result.update(self._execute_module(module_name="hybridgpu.fleet.audit_log", module_args=args,
                                           task_vars=task_vars))
        return result
