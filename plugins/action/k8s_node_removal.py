# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs hybridgpu.fleet.k8s_node_removal on the control host, in the playbook's process
(plugin_utils/controller.py), with what a launcher cannot choose added to its arguments: the
pinned boundary signers, the pinned boundary, the ledger in the pinned records folder, the AWX
user, the run's hosts as the targets and the host the task runs for (plugin_utils/removal_run.py;
pinned.py also refuses a run whose extra vars carry trust). The module verifies the change record
itself before it changes the cluster (lifecycle/removal.py, authorise)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8sTask, TaskEnd, with_auth
from ansible_collections.hybridgpu.fleet.plugins.modules import k8s_node_removal
from ansible_collections.hybridgpu.fleet.plugins.plugin_utils.controller import K8sAction
from ansible_collections.hybridgpu.fleet.plugins.plugin_utils.removal_run import run_args


class ActionModule(K8sAction):
    module = k8s_node_removal

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(K8sAction, self).run(tmp, task_vars)  # pylint: disable=bad-super-call
        del tmp
        args = run_args(self, task_vars)
        validated = ArgumentSpecValidator(with_auth(self.module.ARGUMENT_SPEC), **self.module.SPEC_OPTIONS).validate(args)
        if validated.error_messages:
            result.update(failed=True, msg="%s: %s" % (self._task.action, validated.error_messages[0]))
            return result
        params = dict(args, **validated.validated_parameters)
        try:
            self.module.run(K8sTask(params, check_mode=bool(self._task.check_mode), diff=bool(self._task.diff)))
        except TaskEnd as end:
            result.update(end.result)
            return result
        raise AnsibleActionFail("%s ended without a result" % self._task.action)
