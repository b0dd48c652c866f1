#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run one overflow dispatch pass against the real local queue, cloud cluster and cloud storage."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: overflow_dispatch
short_description: Move queued jobs to cloud GPUs exactly once (operator or policy path)
description:
  - Reads the local queue (Kubernetes Jobs held with C(spec.suspend) plus an annotation, or Slurm held with
    C(scontrol hold)), evaluates the overflow trigger against it, and runs the exactly-once dispatch protocol
    for the chosen jobs; inputs are staged to cloud storage over rsync/SSH with sha256 checks, results come
    back on-prem and are verified before the single commit in the SQLite job tracker.
  - On the C(operator) path the jobs named in I(jobs) move (restricted classes are refused); on the
    C(policy) path the trigger decides. Jobs already in flight are advanced one step in every pass.
  - Every result is labelled with the path that produced it.
version_added: "0.1.0"
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  path:
    description: Dispatch path that labels every result.
    type: str
    choices: [operator, policy]
    required: true
  action:
    description:
      - C(dispatch) moves jobs and advances jobs in flight; C(step) only advances jobs in flight;
        C(return_to_local) stops the cloud attempt of each job in I(jobs) first, then releases it locally.
    type: str
    choices: [dispatch, step, return_to_local]
    default: dispatch
  jobs:
    description: Job IDs for the operator path and for C(return_to_local).
    type: list
    elements: str
    default: []
  actor:
    description: Who runs the pass (recorded in the attempt log).
    type: str
  tracker_db:
    description: Path of the SQLite job tracker.
    type: path
    required: true
  job_classes:
    description: Job classes YAML (see M(hybridgpu.fleet.overflow_decide)).
    type: path
    required: true
  local_queue:
    description:
      - The local queue. C(kind) is C(kubernetes) (with the auth options of the shared Kubernetes fragment,
        e.g. C(kubeconfig), C(context), and C(namespace)) or C(slurm) (C(host), C(ssh_key), C(user)).
    type: dict
    required: true
  total_gpus:
    description: Site GPU pool by type, used when the queue backend cannot see the nodes.
    type: dict
  cloud:
    description: The cloud cluster (Kubernetes auth options, C(namespace), C(pool) C(warm) or C(on_demand)).
    type: dict
    required: true
  storage:
    description: Cloud storage over rsync/SSH (C(host), C(ssh_key), C(remote_root), C(onprem_root)).
    type: dict
    required: true
  job_template:
    description:
      - The cloud Job's C(command) (list; C({job_id}) is replaced, a C({shared}) item expands to
        C(--shared NAME) per shared input), optional C(image), C(env), C(node_selector), C(request_gpus).
    type: dict
    required: true
  inputs:
    description: Inputs per job class, each a list of C(name), C(path) (file on the controller), C(shared).
    type: dict
    default: {}
  max_attempts:
    description: Cloud attempts per job before it stays local.
    type: int
    default: 3
  faults:
    description:
      - Drill only. C(interrupt_transfers), C(corrupt_results), C(failed_returns) (counts for this pass).
        Link faults are injected in the link proxy, not here.
    type: dict
attributes:
  check_mode:
    support: full
    details: In check mode the queue is read and the trigger evaluated; nothing is held, staged or submitted.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Policy pass (an AWX schedule runs this every few minutes)
  hybridgpu.fleet.overflow_dispatch:
    path: policy
    tracker_db: /srv/overflow/tracker.db
    job_classes: "{{ inventory_dir }}/overflow/job_classes.yml"
    local_queue: {kind: slurm, host: 10.40.0.5, ssh_key: ~/.ssh/id_ed25519}
    total_gpus: {"NVIDIA A100-SXM4-80GB": 8}
    cloud: {kubeconfig: ~/.kube/config, context: cloud, namespace: overflow}
    storage: {host: 10.128.8.30, ssh_key: ~/.ssh/id_ed25519, onprem_root: /srv/overflow/results}
    job_template: {command: [python3, /opt/job.py, "{shared}"]}
  register: pass_result
"""

RETURN = r"""
path:
  description: The dispatch path of this pass.
  returned: always
  type: str
results:
  description: One entry per job touched (job_id, path, outcome, reason, state, attempt_id, cloud_name, staging).
  returned: always
  type: list
  elements: dict
decisions:
  description: The trigger's decision for every pending job of the local queue.
  returned: always
  type: list
  elements: dict
snapshot:
  description: The local queue as read for this pass (now, free_gpus, total_gpus, jobs).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import k8s
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends, dispatch_run, jobclass
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.slurm_backend import SlurmError

CHANGING = frozenset(["submitted", "adopted", "released", "finished", "abandoned", "released_resources"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="str", choices=["operator", "policy"], required=True),
            action=dict(type="str", choices=["dispatch", "step", "return_to_local"], default="dispatch"),
            jobs=dict(type="list", elements="str", default=[]),
            actor=dict(type="str"),
            tracker_db=dict(type="path", required=True),
            job_classes=dict(type="path", required=True),
            local_queue=dict(type="dict", required=True),
            total_gpus=dict(type="dict"),
            cloud=dict(type="dict", required=True),
            storage=dict(type="dict", required=True, no_log=False),
            job_template=dict(type="dict", required=True),
            inputs=dict(type="dict", default={}),
            max_attempts=dict(type="int", default=3),
            faults=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    params = dict(module.params, check_mode=module.check_mode)
    if params["path"] == "operator" and params["action"] == "dispatch" and not params["jobs"]:
        module.fail_json(msg="path=operator needs the job IDs to move in jobs")
    try:
        out = dispatch_run.run(params)
    except jobclass.JobClassError as exc:
        module.fail_json(msg="invalid job classes: %s" % exc, errors=exc.errors)
    except dispatch_run.RunError as exc:
        module.fail_json(msg=str(exc))
    except (k8s.K8sError, SlurmError, backends.LinkDown) as exc:
        module.fail_json(msg="overflow pass (%s path) failed: %s" % (params["path"], exc))
    changed = any(r.get("outcome") in CHANGING for r in out["results"])
    module.exit_json(changed=changed, **out)


if __name__ == "__main__":
    main()
