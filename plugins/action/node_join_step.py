# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""hybridgpu.fleet.node_join_step: one task runs the join method's module on the node, so the nodes
of a wave that mixes methods run it side by side instead of one task per method after another."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase
from ansible.utils.vars import merge_hash

MODULES = {"kubeadm": "hybridgpu.fleet.kubeadm_node", "command": "hybridgpu.fleet.node_join_command"}

ARGUMENT_SPEC = dict(
    method=dict(type="str", required=True, choices=sorted(MODULES)),
    kubeadm=dict(type="dict", default={}),
    command=dict(type="dict", default={}),
)


class ActionModule(ActionBase):

    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        # The chosen module checks its own options; the other method's are not looked at.
        _checked, params = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        method = params["method"]
        module = MODULES[method]
        result = merge_hash(result, self._execute_module(module_name=module, module_args=params[method],
                                                         task_vars=task_vars))
        self._remove_tmp_path(self._connection._shell.tmpdir)
        result["module"] = module
        return result
