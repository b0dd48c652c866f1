# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pinned boundary signers and the AWX identity, for action plugins of modules that verify
change records (change_approval, node_removal_state, driver_package).

The boundary signers are the trust root of every approval, so a launcher must not be able to
choose them. They come from, in this order:

1. /etc/hybridgpu/boundary_signers in the execution environment, when it exists; it must be
   owned by root and not writable by group or others;
2. the inventory variable ``hgpu_boundary_signers`` (allowed_signers text, group_vars). The
   run is refused when that variable, or a variable its template refers to, is an extra var:
   extra vars (``-e``, AWX launch variables and survey answers) are what a launcher controls
   and they override inventory values.

The access boundary is found at a pinned path too: /etc/hybridgpu/boundary.yml in the execution
environment when it exists (owned by root, not writable by group or others), else the inventory
variable ``hgpu_boundary_path``. The action plugin passes it to the module; a task cannot.

The ledger of used change ids lives under the inventory's records folder
(``hgpu_records_dir``, refused as an extra var, else ./records where ansible-playbook started),
so a launcher cannot point a replay at an empty ledger.

The key that signs the audit log's checkpoints is pinned too: the inventory variable
``hgpu_audit_checkpoint_key`` (a path on the control host, refused as an extra var), else
/etc/hybridgpu/audit_checkpoint_key when that file exists. The action plugin passes it to the
module (``checkpoint_key``), where the ledger's claim and done marks sign the audit head with
it; a task cannot.

Every variable that carries trust (the pinned settings above, the boundary and records folders a
playbook could be pointed at, and what a destructive play derives from a verified record: the
approval, the plan, the phases done, the state files, the member's keys and objects, the home
folders) is refused when it is an extra var, by every action plugin that uses this module, so
``-e`` together with ``--start-at-task`` cannot stand in for a verification that did not run.

The executor of an AWX job is the AWX user name AWX injects (``awx_user_name``), not an
answer of the launcher.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible import context
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.vars import load_extra_vars

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval, audit_anchor

PINNED_FILE = "/etc/hybridgpu/boundary_signers"
PINNED_VAR = "hgpu_boundary_signers"
PINNED_BOUNDARY_FILE = "/etc/hybridgpu/boundary.yml"
BOUNDARY_VAR = "hgpu_boundary_path"
RECORDS_VAR = "hgpu_records_dir"
AUDIT_KEY_VAR = "hgpu_audit_checkpoint_key"
# Module options only the action plugin sets.
PRIVATE_ARGS = ("boundary_signers", "boundary", "awx_user", "ledger_dir", "approval", "done_at", "checkpoint_key")
# Variables that carry trust: refused as extra vars (refuse_trust_extra_vars).
TRUST_VARS = frozenset((
    PINNED_VAR, BOUNDARY_VAR, RECORDS_VAR, AUDIT_KEY_VAR,
    # boundaries and records folders a destructive playbook could be pointed at
    "remove_boundary", "revoke_boundary", "upgrade_boundary",
    "remove_records_dir", "revoke_records_dir", "upgrade_records_dir",
    # what a destructive play derives from a verified change record
    "remove_approval", "revoke_approval", "revoke_change", "revoke_keys", "revoke_objects",
    "revoke_home_of", "revoke_homes", "revoke_bnd", "revoke_records", "revoke_audit_log",
    "upgrade_approval", "upgrade_change", "upgrade_records", "upgrade_audit_log",
    "drain_change", "common_audit_change",
))
# Prefixes of role variables that are the verified change, its plan and its state.
TRUST_PREFIXES = ("node_removal_", "driver_upgrade_boundary", "driver_upgrade_record",
                  "driver_upgrade_signature", "driver_upgrade_targets", "driver_upgrade_executor")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _referenced(value, task_vars, depth=0):
    """Variable names a (templated) value refers to, following string variables a few levels."""
    if not isinstance(value, str) or "{" not in value or depth > 5:
        return set()
    names = set(_NAME.findall(value))
    found = set(names)
    for name in names:
        if name in task_vars and name not in (PINNED_VAR, RECORDS_VAR):
            found |= _referenced(task_vars[name], task_vars, depth + 1)
    return found


def _inventory_value(loader, templar, task_vars, name):
    """The templated value of inventory variable ``name`` (None when unset); refused when it,
    or a variable its template refers to, is an extra var."""
    raw = task_vars.get(name)
    bad = sorted(({name} | _referenced(raw, task_vars)) & set(load_extra_vars(loader)))
    if bad:
        raise AnsibleActionFail("%s given as an extra var; %s is pinned in the inventory's group_vars "
                                "and a launcher cannot choose it; nothing was changed" % (", ".join(bad), name))
    if raw is None:
        return None
    try:
        return templar.template(raw)
    except Exception as exc:  # pylint: disable=broad-except  # a failed lookup names itself
        raise AnsibleActionFail("%s cannot be read: %s; nothing was changed" % (name, exc))


def trust_extra_vars(loader):
    """The extra vars of this run that carry trust (TRUST_VARS, TRUST_PREFIXES), sorted."""
    return sorted(name for name in load_extra_vars(loader)
                  if name in TRUST_VARS or name.startswith(TRUST_PREFIXES))


def refuse_trust_extra_vars(loader):
    """Stop the task when an extra var carries trust: a verified record, its plan, its state, a
    boundary or a records folder come from the inventory and the verified record, never -e."""
    bad = trust_extra_vars(loader)
    if bad:
        raise AnsibleActionFail("%s given as an extra var; a launcher cannot supply what the change record, "
                                "the pinned boundary and the records folder decide; nothing was changed"
                                % ", ".join(bad))


def _root_owned(path, what):
    st = os.stat(path)
    if st.st_uid != 0 or st.st_mode & 0o022:
        raise AnsibleActionFail("%s must be owned by root and not writable by group or others "
                                "(it pins %s); nothing was changed" % (path, what))


def boundary_signers(loader, templar, task_vars, pinned_file=PINNED_FILE):
    """(allowed_signers text, where it came from); ('', None) when nothing is pinned."""
    if os.path.exists(pinned_file):
        _root_owned(pinned_file, "the boundary signers")
        with open(pinned_file, "r", encoding="utf-8") as fh:
            return fh.read(), pinned_file
    text = _inventory_value(loader, templar, task_vars, PINNED_VAR)
    if text is None:
        return "", None
    return (text if isinstance(text, str) else ""), "inventory variable %s" % PINNED_VAR


def boundary_path(loader, templar, task_vars, pinned_file=PINNED_BOUNDARY_FILE):
    """The access boundary: /etc/hybridgpu/boundary.yml when it exists, else the inventory's
    hgpu_boundary_path ('' when neither is set)."""
    if os.path.exists(pinned_file):
        _root_owned(pinned_file, "the access boundary")
        return pinned_file
    value = _inventory_value(loader, templar, task_vars, BOUNDARY_VAR)
    return value if isinstance(value, str) else ""


def ledger_dir(loader, templar, task_vars):
    """The ledger folder: <hgpu_records_dir>/approvals, else ./records/approvals."""
    value = _inventory_value(loader, templar, task_vars, RECORDS_VAR)
    if not value:
        value = (os.environ.get("PWD") or os.getcwd()) + "/records"
    return os.path.join(value, "approvals")


def checkpoint_key(loader, templar, task_vars, default=audit_anchor.DEFAULT_KEY):
    """The pinned audit checkpoint key's path (inventory hgpu_audit_checkpoint_key, else
    ``default`` when that file exists), or None when neither is set."""
    value = _inventory_value(loader, templar, task_vars, AUDIT_KEY_VAR)
    if value in (None, ""):
        return default if os.path.isfile(default) else None
    if not isinstance(value, str) or not os.path.isabs(value):
        raise AnsibleActionFail("%s must be an absolute path to the checkpoint key on the control host, got %r; "
                                "nothing was written" % (AUDIT_KEY_VAR, value))
    if not os.path.isfile(value):
        raise AnsibleActionFail("%s names %s, which does not exist on the control host; nothing was written"
                                % (AUDIT_KEY_VAR, value))
    return value


def awx_user(task_vars):
    """The AWX user name of the job, when this is an AWX job."""
    if task_vars.get("awx_job_id") is None and task_vars.get("tower_job_id") is None:
        return None
    return task_vars.get("awx_user_name") or task_vars.get("tower_user_name") or None


def plain_args(action):
    """The task's module args; refuses a run whose extra vars carry trust and a task that sets an
    option only the action plugin sets."""
    refuse_trust_extra_vars(action._loader)  # pylint: disable=protected-access
    args = dict(action._task.args)  # pylint: disable=protected-access
    given = [k for k in PRIVATE_ARGS if args.get(k) is not None]
    if given:
        raise AnsibleActionFail("%s may not be set by a task (the action plugin sets it from the "
                                "pinned signers and the AWX job); nothing was changed" % ", ".join(given))
    return args


def module_args(action, task_vars):
    """The task's module args plus the pinned signers, the pinned boundary, the ledger folder, the
    pinned checkpoint key (``checkpoint_key``, only when one is set) and the AWX user."""
    args = plain_args(action)
    text, dummy = boundary_signers(action._loader, action._templar, task_vars)  # pylint: disable=protected-access
    args["boundary_signers"] = text
    args["boundary"] = boundary_path(action._loader, action._templar, task_vars)  # pylint: disable=protected-access
    args["ledger_dir"] = ledger_dir(action._loader, action._templar, task_vars)  # pylint: disable=protected-access
    key = checkpoint_key(action._loader, action._templar, task_vars)  # pylint: disable=protected-access
    if key:
        args["checkpoint_key"] = key
    user = awx_user(task_vars)
    if user:
        args["awx_user"] = user
    return args


# Extra vars that would name another node or move where its connection goes: a change acts on
# the inventory's host, the one the record names.
WHERE_VARS = ("inventory_hostname", "inventory_hostname_short", "ansible_host", "ansible_ssh_host",
              "ansible_connection", "ansible_port", "ansible_ssh_port", "ansible_ssh_args",
              "ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_ssh_executable")
# Command-line options that do the same, with the value each has when not given.
WHERE_OPTIONS = {"connection": ("ssh", "smart", None), "ssh_common_args": ("", None), "ssh_extra_args": ("", None)}


def refuse_moved_connection(action):
    """Stop a change on a node when the launcher named the node or moved its connection (extra
    vars, or -c/--ssh-common-args/--ssh-extra-args on the command line)."""
    bad = sorted(set(WHERE_VARS) & set(load_extra_vars(action._loader)))  # pylint: disable=protected-access
    bad += ["--%s" % k.replace("_", "-") for k, unset in sorted(WHERE_OPTIONS.items())
            if context.CLIARGS.get(k) not in unset]
    if bad:
        raise AnsibleActionFail("%s given by the launcher; which node a change acts on and where its connection goes "
                                "come from the inventory; nothing was changed" % ", ".join(bad))


# Options of a task that acts under a change record: what the verification reads.
RECORD_ARGS = ("record_path", "record_text", "signature", "executor", "targets", "playbook")


def verify_for_host(action, task_vars, change_action, playbook):
    """Verify the task's signed change record for the host the task is about to change.

    Runs the full approval check (approval.gate: the pinned boundary and signers, the record's
    signature, action, playbook, window, executor, and the ledger of change ids; no ledger write
    in check mode) for ``change_action`` and refuses a host that is not one of the run's targets.
    The targets are the task's ``targets``, else the play's hosts. Returns (verified approval,
    the task's arguments with the pinned ones added); raises approval.ApprovalError."""
    refuse_moved_connection(action)
    args = module_args(action, task_vars)
    host = task_vars.get("inventory_hostname")
    targets = args.get("targets") or list(task_vars.get("ansible_play_hosts_all") or [])
    if host not in targets:
        raise approval.ApprovalError(["targets: this node %s is not one of the run's targets [%s]"
                                      % (host, ", ".join(targets))])
    check_mode = action._task.check_mode  # pylint: disable=protected-access
    params = dict(args, targets=targets, action=change_action, playbook=args.get("playbook") or playbook,
                  ledger_dir=None if check_mode else args["ledger_dir"])
    return approval.gate(params), args


def refused(result, exc):
    """``result`` updated to say why the change record was refused (approval.ApprovalError)."""
    result.update(failed=True, changed=False, msg="%s. Nothing was changed." % exc, problems=exc.problems,
                  change_id=exc.change_id)
    return result


class PinnedArgsAction(ActionBase):
    """An action plugin that runs its module with the pinned signers, the pinned boundary, the
    ledger folder and the AWX user added to the task's arguments (module_args); nothing else."""

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(PinnedArgsAction, self).run(tmp, task_vars)
        args = module_args(self, task_vars)
        result.update(self._execute_module(module_name=self._task.action, module_args=args,
                                           task_vars=task_vars))
        return result
