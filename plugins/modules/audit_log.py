#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: audit_log
short_description: Append an administrative action to the hash-chained audit log, or verify the chain
version_added: "0.1.0"
description:
  - Appends one JSON line (change ID, approver, executor, target, action, result, time, details)
    to an append-only log on the host the module runs on (the control host; delegate to
    localhost). Each line carries the hash of the line before, so an edited, removed or
    reordered line is detected.
  - The chain alone is unkeyed, so every append also anchors the new head (seq and hash)
    outside the log, in an anchors file beside it (O(anchors)), in the control host's syslog
    and journal (O(syslog), tag C(hybridgpu-audit)) and, when O(checkpoint_key) is given, every
    O(checkpoint_every) entries as a checkpoint signed with C(ssh-keygen -Y sign) under the
    namespace C(hybridgpu.fleet-audit). A head that cannot be sent to syslog is returned as a
    warning; a head that cannot be written to the anchors file fails the task.
  - The checkpoint key is a pinned setting. The action plugin reads the inventory variable
    C(hgpu_audit_checkpoint_key) (refused as an extra var), else uses
    C(/etc/hybridgpu/audit_checkpoint_key) when that file exists, and then signs a checkpoint
    at every append (the head) and fails the task when it cannot; a task cannot name another
    key. State V(verified) then requires a signed checkpoint at the head and at least every
    O(checkpoint_every) entries, checked against the key's public half (C(KEY.pub)) unless
    O(allowed_signers) is given.
  - The log, its folder, its anchors and the records folder above an C(audit) folder are never
    opened through a symbolic link; a link there fails the task.
  - After each append (and repair) writes a self-contained HTML page beside the log
    (C(audit.html) for C(audit.jsonl)) with the newest 500 entries, newest first, and per change ID
    who approved it, who ran it and on which targets. The log stays the record and keeps its chain
    and anchors; the page is a view that checks nothing. A page that cannot be written is a warning.
  - Refuses to start a fresh chain where the anchors file records a head (the log was
    deleted or emptied), to append to a log whose head is behind its anchors, and to append
    after a torn last line (a write cut short).
  - With O(state=verified) checks the whole chain, the log against its anchors, its signed
    checkpoints (required with a checkpoint key, since a log without them was rewritten), the
    ledger of used change IDs beside it (C(<records>/approvals) for a log at
    C(<records>/audit/audit.jsonl)), whose entries each name the audit entry of their first
    use, so a log deleted and started again fails, and the heads syslog kept for it where they
    can be read (O(syslog_heads)). It fails naming the first bad entry and what was found
    (broken, torn, truncated, rewritten, deleted, missing, refused).
  - With O(state=repaired) moves a torn last line aside into C(PATH.torn-TIME) and appends an
    C(audit_repair) event with the removed bytes' sha256 (the same as
    C(bin/hgpu-audit-verify --repair-torn-tail PATH)). A last line that is not torn is left alone.
  - Returns C(journal_line), the text roles send to the node's journal with
    C(logger -t hybridgpu-audit).
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  path:
    description: Audit log file (created with mode 0640 when missing).
    type: path
    required: true
  state:
    description: V(present) appends an event; V(verified) checks the chain and its anchors;
      V(repaired) moves a torn last line aside and audits that (needs O(executor)).
    type: str
    choices: [present, verified, repaired]
    default: present
  change_id:
    description: Change ID of the approved change record. With O(state=repaired) defaults to
      V(audit-repair).
    type: str
  approver:
    description: Person id who approved the change. With O(state=repaired) defaults to O(executor).
    type: str
  executor:
    description: Person id who ran it.
    type: str
  target:
    description: Node (or other object) acted on.
    type: str
  action:
    description: What was done.
    type: str
    choices: [label, unlabel, cordon, uncordon, drain, driver_upgrade, reboot, remove, delete_node,
              revoke_credential, remove_ssh_key, remove_agent, firewall, restore_standalone, validate,
              approval, audit_repair, hold_override, approve_csr, close_api_path]
  result:
    description: Outcome of the action.
    type: str
    choices: [started, ok, changed, failed, refused, skipped]
  details:
    description: Extra facts (versions, pod names, durations).
    type: dict
    default: {}
  once:
    description: Do not append when an entry with the same change ID, target, action and result
      exists (keeps reruns of a finished change from adding lines).
    type: bool
    default: false
  head:
    description: With O(state=verified), the last hash recorded elsewhere; a log that ends
      before it fails (lines cut off the end).
    type: str
  anchors:
    description: File that receives every head (and the signed checkpoints), and that
      O(state=verified) checks the log against. Defaults to O(path) with C(.anchors) appended.
      Keep it with the log; copy it off the host with the records.
    type: path
  syslog:
    description: Send every new head to the control host's syslog (C(/dev/log), else
      C(logger)) under the tag C(hybridgpu-audit), so C(journalctl -t hybridgpu-audit) keeps a
      copy outside the log's folder. A failure is returned as a warning.
    type: bool
    default: true
  checkpoint_key:
    description: The SSH private key (or the public key of a key held in C(ssh-agent)) that
      signs a checkpoint of the head into the anchors file, under the namespace
      C(hybridgpu.fleet-audit). No checkpoints are signed without it. The key must not need a
      passphrase typed in (use the agent). A failed signature is a warning, or with
      O(checkpoint_head) a failure. With O(state=verified), checkpoints are required and checked
      against its public half (C(KEY.pub)) unless O(allowed_signers) is given. The action
      plugin sets it from the pinned setting (C(hgpu_audit_checkpoint_key)); a task that names
      another key is refused.
    type: path
  checkpoint_every:
    description: Sign a checkpoint when the head is this many entries past the last one (with
      O(checkpoint_head), at every append). With O(state=verified), the most entries allowed
      between signed checkpoints when they are required.
    type: int
    default: 100
  checkpoint_head:
    description: Sign a checkpoint of the head at every append, and fail the task when it cannot
      be signed (the entry is appended; the message says so). The action plugin sets it with
      the pinned key.
    type: bool
    default: false
  require_checkpoints:
    description: With O(state=verified), require a signed checkpoint at the head and at least
      every O(checkpoint_every) entries. Defaults to whether a checkpoint key is set.
    type: bool
  all_signatures:
    description: With O(state=verified), check the signature of every checkpoint, not only one
      per O(checkpoint_every) entries and the head's (the chain links everything before each).
    type: bool
    default: false
  ledger_dir:
    description: With O(state=verified), the ledger of used change IDs whose references the log
      must hold. Defaults to C(<records>/approvals) for a log at C(<records>/audit/NAME).
    type: path
  syslog_heads:
    description: With O(state=verified), where to read the heads syslog kept for this log, to
      compare the log with them. V(auto) reads the journal (C(journalctl -t hybridgpu-audit)),
      else C(/var/log/syslog) or C(/var/log/messages), and skips the check where none can be
      read; V(journal) the journal only; V(none) skips it; any other value is a syslog file.
    type: str
    default: auto
  allowed_signers:
    description: With O(state=verified), an allowed_signers file (sshd(8) format, one
      C(PERSON namespaces="hybridgpu.fleet-audit" KEY) line per operator key) that every
      checkpoint's signature must verify against. Without it checkpoints are counted, not checked.
    type: path
attributes:
  check_mode:
    support: full
    details: Reports the entry that would be appended without writing it.
  diff_mode:
    support: none
notes:
  - >-
    Put the returned RV(head) into the records a run writes, so each record names the head it
    saw; for example C(audit_head: "{{ audit.head }}") where the record is written after a
    task registered as C(audit).
  - Whoever can write the log's folder can rewrite the head lines of the anchors file too;
    the syslog copy, the signed checkpoints and the ledger's references are what such a rewrite
    cannot reach.
  - Set C(hgpu_audit_checkpoint_key) in the inventory's group_vars (or install
    C(/etc/hybridgpu/audit_checkpoint_key) with its C(.pub)); without a key no checkpoint is
    signed or required.
seealso:
  - name: bin/hgpu-audit-verify
    description: The same verification and repair from the command line.
    link: https://github.com/hybridgpu/fleet/blob/main/bin/hgpu-audit-verify
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Record the cordon
  hybridgpu.fleet.audit_log:
    path: "{{ hgpu_audit_log }}"
    change_id: "{{ approval.approval.change_id }}"
    approver: "{{ approval.approval.approver }}"
    executor: ops-oncall
    target: "{{ inventory_hostname }}"
    action: cordon
    result: changed
  delegate_to: localhost

- name: Record the drain (signed into a checkpoint with the pinned key, when one is set)
  hybridgpu.fleet.audit_log:
    path: "{{ hgpu_audit_log }}"
    change_id: "{{ approval.approval.change_id }}"
    approver: "{{ approval.approval.approver }}"
    executor: ops-oncall
    target: "{{ inventory_hostname }}"
    action: drain
    result: changed
  delegate_to: localhost
  register: audit

- name: A record that names the audit head it saw
  ansible.builtin.copy:
    dest: "{{ hgpu_records_dir }}/drain-{{ inventory_hostname }}.json"
    content: "{{ {'node': inventory_hostname, 'audit_head': audit.head} | to_nice_json }}"
    mode: "0640"
  delegate_to: localhost

- name: Check the chain, its anchors, the signed checkpoints, the ledger and the journal's heads
  hybridgpu.fleet.audit_log:
    path: "{{ hgpu_audit_log }}"
    state: verified
    allowed_signers: /etc/hybridgpu/audit_allowed_signers
    checkpoint_every: 100
  delegate_to: localhost

- name: Move a torn last line aside (after a crash mid-write) and audit the repair
  hybridgpu.fleet.audit_log:
    path: "{{ hgpu_audit_log }}"
    state: repaired
    executor: ops-oncall
  delegate_to: localhost
"""

RETURN = r"""
entry:
  description: The appended entry (or the one that would be appended in check mode).
  returned: state=present
  type: dict
journal_line:
  description: Text for the node's journal.
  returned: state=present
  type: str
head:
  description: The head of the chain after the append (in check mode, or when O(once) found
    the entry, the head as it is). Put it in the records the run writes.
  returned: state=present or state=repaired, when the log has an entry
  type: dict
  contains:
    seq:
      description: Sequence number of the last entry.
      type: int
    hash:
      description: Hash of the last entry.
      type: str
  sample: {seq: 42, hash: 3f0c...}
anchored:
  description: Where the new head was anchored.
  returned: state=present or state=repaired, when an entry was appended
  type: dict
  contains:
    anchors:
      description: The anchors file.
      type: str
    syslog:
      description: Whether syslog took the head.
      type: bool
    checkpoint:
      description: Whether a signed checkpoint was written for this head.
      type: bool
verification:
  description: C(ok), C(entries), C(head), C(first_bad) (line, seq, problem, kind = broken, torn,
    truncated, rewritten, deleted, missing or refused), C(anchors) (path, heads, checkpoints,
    signers, required, every), C(ledger) (path, references), C(syslog) (source, heads) and
    C(warnings).
  returned: state=verified
  type: dict
repair:
  description: C(moved_to) (the file holding the torn bytes), C(bytes), C(sha256) and C(line).
  returned: state=repaired
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import audit, audit_anchor, audit_verify


def _anchoring(p):
    return dict(anchors=p["anchors"], checkpoint_key=p["checkpoint_key"],
                checkpoint_every=1 if p["checkpoint_head"] else p["checkpoint_every"],
                checkpoint_required=bool(p["checkpoint_head"] and p["checkpoint_key"]),
                syslog_socket=audit_anchor.SYSLOG_SOCKET if p["syslog"] else None)


def _written(module, res, **extra):
    for warning in res["warnings"]:
        module.warn(warning)
    entry = res["entry"]
    module.exit_json(changed=True, entry=entry, journal_line=audit.journal_line(entry), head=res["head"],
                     anchored={"anchors": res["anchors"], "syslog": res["syslog"],
                               "checkpoint": res["checkpoint"] is not None}, **extra)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            state=dict(type="str", choices=["present", "verified", "repaired"], default="present"),
            change_id=dict(type="str"),
            approver=dict(type="str"),
            executor=dict(type="str"),
            target=dict(type="str"),
            action=dict(type="str", choices=[a for a in audit.ACTIONS if a not in audit.LEDGER_ACTIONS]),
            result=dict(type="str", choices=list(audit.RESULTS)),
            details=dict(type="dict", default={}),
            once=dict(type="bool", default=False),
            head=dict(type="str"),
            anchors=dict(type="path"),
            syslog=dict(type="bool", default=True),
            # A path to a key file, not the key itself.
            checkpoint_key=dict(type="path", no_log=False),
            checkpoint_every=dict(type="int", default=100),
            checkpoint_head=dict(type="bool", default=False),
            require_checkpoints=dict(type="bool"),
            all_signatures=dict(type="bool", default=False),
            ledger_dir=dict(type="path"),
            syslog_heads=dict(type="str", default="auto"),
            allowed_signers=dict(type="path"),
        ),
        required_if=[("state", "present", ("change_id", "approver", "executor", "target",
                                           "action", "result")),
                     ("state", "repaired", ("executor",))],
        supports_check_mode=True,
    )
    p = module.params
    if p["checkpoint_every"] < 1:
        module.fail_json(msg="checkpoint_every must be 1 or more, got %d" % p["checkpoint_every"])
    if p["state"] == "verified":
        res = audit_verify.verify(p["path"], p.get("head"), p["anchors"], p["allowed_signers"],
                                  checkpoint_every=p["checkpoint_every"], checkpoint_key=p["checkpoint_key"],
                                  require_checkpoints=p["require_checkpoints"], ledger_dir=p["ledger_dir"],
                                  syslog=None if p["syslog_heads"] == "none" else p["syslog_heads"],
                                  all_signatures=p["all_signatures"])
        for warning in res["warnings"]:
            module.warn(warning)
        if not res["ok"]:
            bad = res["first_bad"]
            module.fail_json(msg="audit log %s: first bad entry at line %d (seq %s): %s"
                             % (p["path"], bad["line"], bad["seq"], bad["problem"]), verification=res)
        module.exit_json(changed=False, verification=res)
    if p["state"] == "repaired":
        if module.check_mode:
            module.exit_json(changed=False, msg="check mode: the torn tail of %s is not repaired" % p["path"],
                             head=audit_verify.current_head(p["path"]))
        try:
            res = audit.repair_torn_tail(p["path"], p["executor"], p["change_id"] or "audit-repair",
                                         p["approver"], **_anchoring(p))
        except (audit.AuditError, ValueError, OSError) as exc:
            module.fail_json(msg="audit log %s: %s" % (p["path"], exc))
        _written(module, res, repair=dict((k, res[k]) for k in ("moved_to", "bytes", "sha256", "line")))
    try:
        event = audit.make_event(p["change_id"], p["approver"], p["executor"], p["target"],
                                 p["action"], p["result"], p["details"])
        if p["once"]:
            for old in audit_verify.read(p["path"], change_id=p["change_id"], target=p["target"]):
                if old.get("action") == p["action"] and old.get("result") == p["result"]:
                    module.exit_json(changed=False, entry=old, journal_line=audit.journal_line(old),
                                     head=audit_verify.current_head(p["path"]))
        if module.check_mode:
            module.exit_json(changed=True, entry=event, journal_line=audit.journal_line(event),
                             head=audit_verify.current_head(p["path"]))
        res = audit.write(p["path"], event, **_anchoring(p))
    except (audit.AuditError, ValueError, OSError) as exc:
        module.fail_json(msg="audit log %s: %s" % (p["path"], exc))
    _written(module, res)


if __name__ == "__main__":
    main()
