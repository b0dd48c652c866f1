# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs hybridgpu.fleet.member_ssh_keys only under a verified change record, with the keys the
verified boundary lists for the member.

On the control host, at the moment the task acts on a node: the change record is verified
(approval.gate through pinned.verify_for_host: the boundary signed by the pinned boundary
signers, the record's approver, action revoke_member, playbook revoke_member.yml, this member,
the play's hosts as targets, the window, the executor, the ledger of change ids; no ledger
write in check mode), and a node that is not one of the targets is refused. The keys come only
from the verified approval (member_access.ssh_keys): a task that names keys, targets or a
playbook is refused, and so is a run whose extra vars carry trust or name the node or where
its connection goes (inventory_hostname, ansible_host, ansible_connection, ...). After a
removal the audit entry is written here, under the verified change id, and mirrored to the
node's journal."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval, audit
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.approval_signing import verify_boundary
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import member_access
from ansible_collections.hybridgpu.fleet.plugins.modules.member_ssh_keys import USER_NAME
from ansible_collections.hybridgpu.fleet.plugins.plugin_utils import pinned

ACTION = "revoke_member"
PLAYBOOK = "revoke_member.yml"
# Options the verification decides; a task may not set them.
DECIDED = ("keys", "targets", "playbook")


def checkpoint_key(action, task_vars):
    """The pinned audit checkpoint key (pinned.checkpoint_key), or None."""
    return pinned.checkpoint_key(action._loader, action._templar, task_vars)  # pylint: disable=protected-access


def revocation_steps(args):
    """The verified boundary's revocation steps by credential kind."""
    return verify_boundary(args["boundary"], args.get("boundary_signers") or "").revocation_steps()


def decided_by_task(action, what):
    """Refuse a task that sets an option the verified record decides."""
    given = [k for k in DECIDED if action._task.args.get(k) is not None]  # pylint: disable=protected-access
    if given:
        raise AnsibleActionFail("%s may not be set by a task: %s come from the verified change record and the "
                                "signed boundary; nothing was changed" % (", ".join(given), what))


def mirror_to_journal(action, entry, task_vars):
    """Send the audit event to the node's journal; a warning (not a failure) when it cannot."""
    res = action._execute_module(  # pylint: disable=protected-access
        module_name="ansible.builtin.command",
        module_args={"argv": ["logger", "-t", "hybridgpu-audit", "--", audit.journal_line(entry)]},
        task_vars=task_vars)
    if res.get("failed") or res.get("rc"):
        return ["the node's journal did not take the audit event: %s" % (res.get("msg") or res.get("stderr") or "")]
    return []


class ActionModule(ActionBase):

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        host = task_vars.get("inventory_hostname")
        decided_by_task(self, "the keys are what the verified boundary lists for the member, on the play's hosts")
        member = self._task.args.get("member")
        if not member:
            raise AnsibleActionFail("member: required (the person id the change record names); nothing was changed")
        users = self._task.args.get("users") or ["root"]
        if not isinstance(users, list) or not all(isinstance(u, str) and USER_NAME.match(u) for u in users):
            raise AnsibleActionFail("users: %r is not a list of account names (POSIX user names); nothing was changed"
                                    % (users,))
        try:
            verified, args = pinned.verify_for_host(self, task_vars, ACTION, PLAYBOOK)
            steps = revocation_steps(args)
        except approval.ApprovalError as exc:
            return pinned.refused(result, exc)
        if host not in (verified.get("approved_targets") or []):
            result.update(failed=True, changed=False, change_id=verified["change_id"],
                          msg="targets: %s is not in the record's targets; nothing was changed" % host)
            return result
        if not steps.get("ssh_key"):
            result.update(failed=True, changed=False, change_id=verified["change_id"],
                          msg="%s: credentials list no revocation step for kind ssh_key; nothing was changed"
                          % args["boundary"])
            return result
        keys = list((verified.get("member_access") or {}).get("ssh_keys") or [])
        result.update(change_id=verified["change_id"], revocation_steps=steps)
        if not keys:
            result.update(changed=False, removed=[], missing_users=[], files={},
                          msg="the boundary lists no SSH key for %s; nothing to remove" % member)
            return result
        result.update(self._execute_module(module_name="hybridgpu.fleet.member_ssh_keys",
                                           module_args={"member": member, "users": users, "keys": keys},
                                           task_vars=task_vars))
        if not result.get("changed") or result.get("failed") or self._task.check_mode:
            return result
        details = {"kind": "ssh_key", "member": member, "step": steps["ssh_key"][0],
                   "keys": sorted(set(r["key"] for r in result.get("removed") or [])),
                   "users": sorted(set(r["user"] for r in result.get("removed") or [])),
                   "manual_steps": {"bmc": steps.get("bmc") or [], "service_token": steps.get("service_token") or []}}
        try:
            res = member_access.audit_revocation(args["ledger_dir"], verified, host, details,
                                                 checkpoint_key(self, task_vars))
        except (audit.AuditError, OSError) as exc:
            result.update(failed=True, msg="%s: the member's keys were removed, but the audit entry under %s could not "
                                           "be written: %s" % (host, verified["change_id"], exc))
            return result
        entry = res["entry"]
        result["audit"] = {"change_id": entry["change_id"], "seq": entry["seq"], "hash": entry["hash"]}
        for warning in res["warnings"] + mirror_to_journal(self, entry, task_vars):
            self._display.warning(warning)
        return result
