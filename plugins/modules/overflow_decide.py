#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Evaluate the overflow trigger for the pending jobs of a local queue snapshot."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: overflow_decide
short_description: Decide which queued jobs move to cloud GPUs under the overflow rule
description:
  - Reads the job classes file (YAML, validated; unknown keys are rejected, errors name the file and field)
    and evaluates the trigger rule for every pending job of a local queue snapshot.
  - A job's class is "full" when its wait is above the class threshold, no GPUs of its type are free,
    or its deadline cannot be met locally. Restricted classes (C(data_may_leave_site=false)) never move.
  - A full job moves only when the completion-time model says the cloud path finishes sooner
    (dispatch, input transfer, image pull, cloud queue, runtime, result return) than waiting locally.
  - The module only computes; it changes nothing. Dispatch is a separate step.
version_added: "0.1.0"
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.attributes.read_only
options:
  job_classes:
    description: Path of the job classes YAML file on the controller-side host running the module.
    type: path
    required: true
  snapshot:
    description:
      - The local queue at one moment, as a queue backend reports it.
      - C(now) (epoch seconds), C(jobs) (list of C(job_id), C(job_class), C(submit_time), C(state),
        C(gpus), C(gpu_type), optional C(deadline), C(expected_start) and C(restricted_placement), the job's
        placement fields that select restricted data; such a job never moves), C(free_gpus) (map of GPU type to count),
        optional C(total_gpus).
    type: dict
    required: true
  path:
    description: Dispatch path that labels every decision.
    type: str
    choices: [operator, policy]
    default: policy"""

EXAMPLES = r"""
- name: Evaluate the overflow rule against the current queue
  hybridgpu.fleet.overflow_decide:
    job_classes: "{{ inventory_dir }}/overflow/job_classes.yml"
    snapshot: "{{ queue_snapshot }}"
    path: policy
  register: overflow

- name: Show the jobs to move
  ansible.builtin.debug:
    var: overflow.move
"""

RETURN = r"""
decisions:
  description: One entry per pending job with decision (move or stay), full reasons, reason, time model breakdown.
  returned: always
  type: list
  elements: dict
move:
  description: Job IDs the rule moves to the cloud.
  returned: always
  type: list
  elements: str
path:
  description: The dispatch path that produced the decisions.
  returned: always
  type: str
refused:
  description:
    - Jobs of the snapshot whose fields could not be read (C(job_id), or C(jobs[N]) when it has none, and C(reason)).
      Each is refused on its own and never moves; every other job is judged.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import jobclass, trigger


def main():
    module = AnsibleModule(
        argument_spec=dict(
            job_classes=dict(type="path", required=True),
            snapshot=dict(type="dict", required=True),
            path=dict(type="str", choices=["operator", "policy"], default="policy"),
        ),
        supports_check_mode=True,
    )
    try:
        classes = jobclass.load(module.params["job_classes"])
    except jobclass.JobClassError as exc:
        module.fail_json(msg="invalid job classes: %s" % exc, errors=exc.errors)
    given = dict(module.params["snapshot"])
    jobs, refused = [], []
    for i, job in enumerate(given.get("jobs") or []):
        # a job whose fields cannot be read is refused on its own; every other job is judged
        try:
            jobs.append(trigger.QueueJob.from_dict(job))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            jid = job.get("job_id") if isinstance(job, dict) else None
            refused.append({"job_id": jid if isinstance(jid, str) else "jobs[%d]" % i,
                            "reason": "snapshot: jobs[%d]: missing or bad field %s; each job needs job_id, job_class, "
                                      "submit_time, state, gpu_type" % (i, exc)})
    try:
        snap = trigger.QueueSnapshot.from_dict(dict(given, jobs=[]))
    except (KeyError, TypeError, ValueError) as exc:
        module.fail_json(msg="snapshot: missing or bad field %s; the snapshot needs now and free_gpus" % exc)
    snap.jobs = jobs
    decisions = trigger.evaluate(snap, classes, path=module.params["path"])
    module.exit_json(changed=False, decisions=decisions, path=module.params["path"], refused=refused,
                     move=[d["job_id"] for d in decisions if d["decision"] == "move"])


if __name__ == "__main__":
    main()
