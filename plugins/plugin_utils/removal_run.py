# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The arguments the removal's acting action plugins (k8s_node_removal, node_removal_step) hand
to removal.authorise: the task's own (the change record, the executor, the playbook), the pinned
ones (pinned.module_args: boundary signers, boundary, ledger in the records folder, AWX user;
it also refuses a run whose extra vars carry trust), the run's hosts as the targets and the host
the task runs for. A task can set none of the last two."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail

from ansible_collections.hybridgpu.fleet.plugins.plugin_utils import pinned

# Options only the action plugin sets, besides pinned.PRIVATE_ARGS.
RUN_ARGS = ("targets", "task_host")
# Record options a role passes as '' when unset.
RECORD_ARGS = ("record_path", "record_text", "signature", "executor")


def run_args(action, task_vars, on_node=False):
    """The task's arguments plus the pinned ones, the run's targets and the task's host.
    ``on_node``: the step runs modules on the node (or a host it is delegated to), so a launcher
    who named the node or moved its connection is refused (pinned.refuse_moved_connection)."""
    given = [k for k in RUN_ARGS if action._task.args.get(k) is not None]  # pylint: disable=protected-access
    if given:
        raise AnsibleActionFail("%s may not be set by a task (the action plugin sets it from the run); "
                                "nothing was changed" % ", ".join(given))
    if on_node:
        pinned.refuse_moved_connection(action)
    args = pinned.module_args(action, task_vars)
    for key in RECORD_ARGS:
        if args.get(key) == "":
            del args[key]
    args["targets"] = list(task_vars.get("ansible_play_hosts_all") or [])
    args["task_host"] = task_vars.get("inventory_hostname")
    return args
