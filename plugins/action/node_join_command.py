# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""hybridgpu.fleet.node_join_command: with validate_only the inputs are checked here, in the
playbook's process, with the module's own argument spec (no connection, no module process);
every other run is the module on the node, as for any module."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.common.parameters import remove_values
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.vars import merge_hash

from ansible_collections.hybridgpu.fleet.plugins.modules import node_join_command


class ActionModule(ActionBase):

    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        if boolean(self._task.args.get("validate_only", False), strict=False):
            validation, params = self.validate_argument_spec(argument_spec=node_join_command.ARGUMENT_SPEC)
            _spec, checked, problems = node_join_command.inputs(params)
            result.update(checked)
            if problems:
                result.update(failed=True, msg=node_join_command.problems_message(params, problems),
                              problems=problems)
            # As the module's exit would: the secret never comes back, wherever it was given.
            return remove_values(result, validation._no_log_values)
        wrap_async = self._task.async_val and not self._connection.has_native_async
        result = merge_hash(result, self._execute_module(task_vars=task_vars, wrap_async=wrap_async))
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
