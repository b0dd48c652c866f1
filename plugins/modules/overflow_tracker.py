#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Query, trace and commit in the overflow job tracker."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: overflow_tracker
short_description: Query, trace or commit jobs in the overflow ledger (SQLite or Kubernetes)
description:
  - C(query) lists jobs with state, attempt count, commit and the five marks of the last attempt (dispatch,
    transfer_in, start, end, return, with the seconds between them); C(trace) gives, per job ID, every attempt with its
    log, the commit, refused commits and a verdict that says whether a second attempt kept running or one
    attempt repeated its commit.
  - C(commit) records a verified output for one attempt. The tracker allows exactly one commit per job ID and
    stores every refused try; a refused commit is reported, not failed, so a drill can assert on it.
version_added: "0.1.0"
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  db:
    description: Path of the SQLite tracker database (or set I(ledger)).
    type: path
  ledger:
    description: The ledger as M(hybridgpu.fleet.overflow_dispatch) takes it (kind, path or kubeconfig, context, namespace, name_prefix).
    type: dict
  action:
    description: What to do.
    type: str
    choices: [query, trace, commit]
    default: query
  jobs:
    description: Job IDs to trace or query (all jobs when empty).
    type: list
    elements: str
    default: []
  job_id:
    description: Job ID to commit.
    type: str
  attempt_id:
    description: Attempt whose output is committed.
    type: str
  checksum:
    description: Verified checksum of the output (C(sha256:...)).
    type: str
  output_ref:
    description: Where the verified output lies on-prem.
    type: str
  actor:
    description: Who commits.
    type: str
    default: operator
attributes:
  check_mode:
    support: full
    details: C(query) and C(trace) only read; C(commit) in check mode says whether the commit would be accepted.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Trace every job of a drill
  hybridgpu.fleet.overflow_tracker:
    db: /srv/overflow/tracker.db
    action: trace
  register: trace

- name: Try a second commit (the drill expects it refused)
  hybridgpu.fleet.overflow_tracker:
    db: /srv/overflow/tracker.db
    action: commit
    job_id: train-42
    attempt_id: att-0123456789ab
    checksum: "sha256:{{ '0' * 64 }}"
"""

RETURN = r"""
jobs:
  description: For query, one entry per job (job_id, job_class, path, state, attempts, committed_attempt, marks).
  returned: when action is query
  type: list
  elements: dict
traces:
  description: For trace, job ID to its full trace (job, attempts with logs, commit, rejected_commits, verdict, marks per attempt).
  returned: when action is trace
  type: dict
commit:
  description: For commit, committed (bool), reason, existing_attempt_id.
  returned: when action is commit
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.ledger import open_ledger, summary
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.tracker import TrackerError


def open_for(module, p):
    """The ledger named by ledger, else the SQLite file db (which must exist)."""
    opts = dict(p["ledger"] or {"kind": "sqlite", "path": p["db"]})
    if (opts.get("kind") or "sqlite") == "sqlite":
        opts["path"] = opts.get("path") or p["db"]
        if not opts["path"] or not os.path.exists(opts["path"]):
            module.fail_json(msg="tracker database %s does not exist" % opts["path"])
    try:
        return open_ledger(opts), opts.get("path") or "%s/%s" % (opts.get("context"), opts.get("namespace"))
    except (ValueError, K8sError) as exc:
        module.fail_json(msg="ledger: %s" % exc)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            db=dict(type="path"),
            ledger=dict(type="dict"),
            action=dict(type="str", choices=["query", "trace", "commit"], default="query"),
            jobs=dict(type="list", elements="str", default=[]),
            job_id=dict(type="str"),
            attempt_id=dict(type="str"),
            checksum=dict(type="str"),
            output_ref=dict(type="str"),
            actor=dict(type="str", default="operator"),
        ),
        required_if=[("action", "commit", ("job_id", "attempt_id", "checksum"))],
        required_one_of=[("db", "ledger")],
        supports_check_mode=True,
    )
    p = module.params
    tr, where = open_for(module, p)
    try:
        ids = p["jobs"] or [j["job_id"] for j in tr.jobs()]
        if p["action"] == "query":
            rows = []
            for job_id in ids:
                job = tr.job(job_id)
                if job is None:
                    module.fail_json(msg="job %s is not in tracker %s" % (job_id, where))
                c = tr.commit_of(job_id)
                rows.append(dict(job_id=job_id, job_class=job["job_class"], path=job["path"], state=job["state"],
                                 attempts=len(tr.attempts(job_id)), committed_attempt=c["attempt_id"] if c else None,
                                 marks=summary(tr.marks(job_id), c["attempt_id"] if c else None)))
            module.exit_json(changed=False, jobs=rows)
        if p["action"] == "trace":
            try:
                module.exit_json(changed=False, traces=dict((j, dict(tr.trace(j), marks=tr.marks(j))) for j in ids))
            except TrackerError as exc:
                module.fail_json(msg="trace in %s: %s" % (where, exc))
        existing = tr.commit_of(p["job_id"])
        if module.check_mode:
            ok = existing is None and tr.attempt(p["attempt_id"]) is not None
            module.exit_json(changed=ok, commit={"committed": ok, "reason": "check mode: would %s" % (
                "commit" if ok else "be refused"), "existing_attempt_id": existing["attempt_id"] if existing else None})
        verdict = tr.commit(p["job_id"], p["attempt_id"], p["checksum"], p["actor"], output_ref=p["output_ref"])
        module.exit_json(changed=verdict["committed"], commit=verdict)
    finally:
        tr.close()


if __name__ == "__main__":
    main()
