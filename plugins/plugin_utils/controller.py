# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugins for modules whose work happens on the control host: the module's ``execute``
runs in the playbook's process, with the module's own argument spec and the task's check and
diff modes, instead of a module process per task (module_utils/common/controller_task.py).

The task needs no connection: with or without ``delegate_to: localhost`` the work reads and
writes the control host's files.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.controller_task import TaskFailure


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
