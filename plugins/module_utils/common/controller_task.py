# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Modules whose work happens on the control host (records, checks of inputs) keep it in one
function, ``execute(params, check_mode, diff)``, that returns the result or raises TaskFailure.

Two callers share it: the module's ``main()`` (through run_module, as Ansible runs any module)
and the collection's action plugin of the same name (plugin_utils/controller.py), which calls it
in the playbook's own process. The action plugin is what a task gets; it saves a Python start,
the AnsiballZ payload and its imports for each task, which is most of what such a task costs,
on every node of a wave.
"""

from __future__ import annotations


class TaskFailure(Exception):
    """The task fails with this message; ``extra`` goes into the result beside it."""

    def __init__(self, msg, **extra):
        super(TaskFailure, self).__init__(msg)
        self.extra = extra


def run_module(argument_spec, execute, **spec_options):
    """Run ``execute`` as an Ansible module: parameters from AnsibleModule (``spec_options``: its
    other arguments, supports_check_mode among them), result or failure out."""
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(argument_spec=argument_spec, **spec_options)
    try:
        result = execute(module.params, check_mode=module.check_mode, diff=module._diff)
    except TaskFailure as err:
        module.fail_json(msg=str(err), **err.extra)
    module.exit_json(**result)
