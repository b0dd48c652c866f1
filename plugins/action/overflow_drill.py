# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs hybridgpu.fleet.overflow_drill; the unsafe drills only under a verified change record.

The unsafe drills break shared parts of an estate (they cut links, stop cloud nodes, hold the
quota, damage stored results), so they are a destructive action like a removal. When the task's
drills include unsafe ones on an estate declared disposable and a change record is given, the
record is verified here, on the control host, in the task that runs them: the boundary signed by
the pinned boundary signers, the record signed by an approver of overflow_drill for
overflow_drill.yml whose targets list every unsafe drill of this run, the window, the executor
(the AWX user under AWX) and the ledger of used change ids (plugin_utils/pinned.py says where each
comes from; a launcher can choose none of them). Only then does the module get the verified
approval, and the module runs no unsafe drill without it. Without a record the unsafe drills are
refused and named; the safe drills run either way.

When unsafe drills are to run, the estate and its drill script must come from the inventory:
given as extra vars they are refused.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.vars import load_extra_vars

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import drills
from ansible_collections.hybridgpu.fleet.plugins.plugin_utils import pinned

ACTION = "overflow_drill"
PLAYBOOK = "overflow_drill.yml"
RECORD_ARGS = ("record_path", "record_text", "signature", "executor")
# What decides whether and which unsafe drills run, and what runs them: the inventory's, never -e.
ESTATE_VARS = ("hgpu_overflow_drill_estate", "overflow_drill_estate", "hgpu_overflow_drill_script",
               "overflow_drill_script", "overflow_drill_python")


def unsafe_to_run(args):
    """The unsafe drills this task would run: chosen, on an estate declared disposable."""
    if args.get("estate") != "disposable":
        return []
    try:
        dummy, unsafe = drills.split(args.get("drills"))
    except drills.DrillRefused:
        return []           # the module names the unknown drill and runs nothing
    return unsafe


def verify(args, unsafe, check_mode):
    """The verified approval of the unsafe drills (ApprovalError when refused)."""
    params = dict(args, action=ACTION, playbook=PLAYBOOK, targets=list(unsafe),
                  ledger_dir=None if check_mode else args["ledger_dir"])
    verified = approval.gate(params)
    return dict((k, v) for k, v in verified.items() if k != "ledger")


class ActionModule(ActionBase):

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        given = [k for k in pinned.PRIVATE_ARGS if args.get(k) is not None]
        if given:
            raise AnsibleActionFail("%s may not be set by a task (the action plugin sets it from a verified change "
                                    "record); nothing was run" % ", ".join(given))
        unsafe = unsafe_to_run(args)
        module_args = dict((k, v) for k, v in args.items() if k not in RECORD_ARGS)
        if unsafe and any(args.get(k) for k in RECORD_ARGS[:3]):
            bad = sorted(set(load_extra_vars(self._loader)) & set(ESTATE_VARS))
            if bad:
                raise AnsibleActionFail("%s given as an extra var; with unsafe drills the estate and its drill script "
                                        "come from the inventory; nothing was run" % ", ".join(bad))
            full = pinned.module_args(self, task_vars)
            try:
                module_args["approval"] = verify(full, unsafe, self._play_context.check_mode)
            except approval.ApprovalError as exc:
                result.update(failed=True, msg="%s. No drill was run." % exc, problems=exc.problems,
                              change_id=exc.change_id, unsafe=unsafe)
                return result
        result.update(self._execute_module(module_name=self._task.action, module_args=module_args,
                                           task_vars=task_vars))
        return result
