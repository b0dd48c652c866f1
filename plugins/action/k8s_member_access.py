# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs hybridgpu.fleet.k8s_member_access on the control host, in the playbook's process
(plugin_utils/controller.py), only under a verified change record and only on what the verified
boundary lists for the member.

At the moment the task acts: the change record is verified (approval.gate: the boundary signed
by the pinned boundary signers, the record's approver, action revoke_member, playbook
revoke_member.yml, this member, the play's hosts as targets, the window, the executor, the
ledger of change ids; no ledger write in check mode, the read-back). The objects are the
verified boundary's entries for the member in the task's context: a task that names items,
targets or a playbook is refused, and so is a run whose extra vars carry trust. After a
revocation the audit entry is written here, under the verified change id."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail

from ansible_collections.hybridgpu.fleet.plugins.action.member_ssh_keys import (
    ACTION, PLAYBOOK, checkpoint_key, revocation_steps)
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval, audit
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import member_access
from ansible_collections.hybridgpu.fleet.plugins.modules import k8s_member_access
from ansible_collections.hybridgpu.fleet.plugins.plugin_utils import pinned
from ansible_collections.hybridgpu.fleet.plugins.plugin_utils.controller import K8sAction

# Options the verification decides; a task may not set them.
DECIDED = ("items", "targets", "playbook")


class ActionModule(K8sAction):
    module = k8s_member_access

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        given = [k for k in DECIDED if self._task.args.get(k) is not None]
        if given:
            raise AnsibleActionFail("%s may not be set by a task: the objects are what the verified boundary lists "
                                    "for the member, under the change record for the play's hosts; nothing was "
                                    "changed" % ", ".join(given))
        member, context = self._task.args.get("member"), self._task.args.get("context")
        if not member or not context:
            raise AnsibleActionFail("member and context: both required (the record's member, and the kubeconfig "
                                    "context of the objects the boundary lists); nothing was changed")
        check_mode = bool(self._task.check_mode)
        try:
            args = pinned.module_args(self, task_vars)
            params = dict(args, action=ACTION, playbook=PLAYBOOK, member=member,
                          targets=list(task_vars.get("ansible_play_hosts_all") or []),
                          ledger_dir=None if check_mode else args["ledger_dir"])
            verified = approval.gate(params)
            steps = revocation_steps(args)
        except approval.ApprovalError as exc:
            return pinned.refused({}, exc)
        cid = verified["change_id"]
        if not steps.get("kubernetes"):
            return dict(failed=True, changed=False, change_id=cid,
                        msg="%s: credentials list no revocation step for kind kubernetes; nothing was changed"
                        % args["boundary"])
        items = [i for i in (verified.get("member_access") or {}).get("kubernetes") or [] if i.get("context") == context]
        if not items:
            return dict(failed=True, changed=False, change_id=cid,
                        msg="context: the verified boundary lists no Kubernetes object of %s in context %s; "
                            "nothing was changed" % (member, context))
        self._task = self._task.copy()
        self._task.args = dict(self._task.args, items=items)
        result = super(ActionModule, self).run(tmp, task_vars)
        result.update(change_id=cid, revocation_steps=steps)
        if not result.get("changed") or result.get("failed") or check_mode:
            return result
        details = {"kind": "kubernetes", "member": member, "context": context, "step": steps["kubernetes"][0],
                   "revoked": list(result.get("revoked") or []),
                   "manual_steps": {"bmc": steps.get("bmc") or [], "service_token": steps.get("service_token") or []}}
        try:
            res = member_access.audit_revocation(args["ledger_dir"], verified, "%s@%s" % (member, context), details,
                                                 checkpoint_key(self, task_vars))
        except (audit.AuditError, OSError) as exc:
            result.update(failed=True, msg="%s: the objects in %s were revoked, but the audit entry under %s could not "
                                           "be written: %s" % (member, context, cid, exc))
            return result
        entry = res["entry"]
        result["audit"] = {"change_id": entry["change_id"], "seq": entry["seq"], "hash": entry["hash"]}
        for warning in res["warnings"]:
            self._display.warning(warning)
        return result
