#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: k8s_job_run
short_description: Run a Kubernetes Job and read back its Pod's node, phase, exit code and log
version_added: "0.1.0"
description:
  - Creates a batch/v1 Job (backoffLimit 0, restartPolicy Never) whose Pod is pinned by a
    required node affinity on C(kubernetes.io/hostname) and/or a nodeSelector, waits for it
    and returns where the scheduler put the Pod and how it ended.
  - With I(wait=scheduled) it only waits until the Pod is bound to a node (placement checks);
    a Pod still unscheduled when I(wait_timeout) runs out is reported, not an error.
  - With I(state=attach) it creates nothing and waits for an existing Job (for example one
    started earlier with I(wait=none)).
  - The Job is deleted afterwards when I(cleanup=true).
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.k8s_auth
options:
  name:
    description: Job name (RFC 1123).
    type: str
    required: true
  namespace:
    description: Namespace; created when missing.
    type: str
    default: default
  state:
    description:
      - C(run) creates the Job (an existing Job of that name is reused) and waits.
      - C(attach) waits for an existing Job.
      - C(absent) deletes the Job and its Pods.
    type: str
    choices: [run, attach, absent]
    default: run
  image:
    description: Container image the Job runs.
    type: str
  command:
    description: Container command.
    type: list
    elements: str
  args:
    description: Container args.
    type: list
    elements: str
  env:
    description: "Environment, either a dict C({NAME: value}) or a list of C({name, value})."
    type: raw
  node_name:
    description: Required node affinity on C(kubernetes.io/hostname).
    type: str
  node_selector:
    description: Pod nodeSelector.
    type: dict
  tolerations:
    description: Pod tolerations.
    type: list
    elements: dict
  gpus:
    description: C(nvidia.com/gpu) limit.
    type: int
    default: 0
  labels:
    description: Labels on the Job and its Pod template.
    type: dict
  wait:
    description: What to wait for.
    type: str
    choices: [finished, scheduled, none]
    default: finished
  wait_timeout:
    description: Seconds to wait.
    type: float
    default: 120
  cleanup:
    description: Delete the Job (and its Pods) after reading it back.
    type: bool
    default: false
  fail_on_error:
    description: Fail when the Job failed or the wait timed out (I(wait=finished) only).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: Reports that a Job would be created or deleted; creates nothing and waits for nothing.
  diff_mode:
    support: none
    details: A Job is created whole; there is nothing meaningful to diff.
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Reference job on one node
  hybridgpu.fleet.k8s_job_run:
    context: onprem
    name: ref-dh1-a100-01
    image: python:3.11-slim
    command: [python3, -c, "print('hello')"]
    node_name: dh1-a100-01
    gpus: 1
    cleanup: true
  register: ref

- name: Where does a restricted job land?
  hybridgpu.fleet.k8s_job_run:
    context: cloud
    name: restricted-probe
    image: busybox
    command: [sh, -c, "true"]
    node_selector: {node-restriction.kubernetes.io/data-class: restricted}
    wait: scheduled
    wait_timeout: 10
    cleanup: true
"""

RETURN = r"""
job:
  description: Job name.
  returned: always
  type: str
pod:
  description: Name of the Job's Pod, null when none was created.
  returned: unless state=absent
  type: str
node:
  description: Node the Pod was scheduled on, null when unscheduled.
  returned: unless state=absent
  type: str
phase:
  description: Pod phase.
  returned: unless state=absent
  type: str
exit_code:
  description: Container exit code once terminated.
  returned: unless state=absent
  type: int
succeeded:
  description: Whether the Job succeeded.
  returned: unless state=absent
  type: bool
failed:
  description: Whether the Job failed.
  returned: unless state=absent
  type: bool
timed_out:
  description: Whether the wait ran out.
  returned: unless state=absent
  type: bool
waited_s:
  description: Seconds waited.
  returned: unless state=absent
  type: float
scheduled_after_s:
  description: Seconds until the Pod was bound to a node.
  returned: unless state=absent
  type: float
log:
  description: Pod log (I(wait=finished)).
  returned: when finished
  type: str
manifest:
  description: The Job body sent.
  returned: state=run
  type: dict
"""

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8sModule
from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate.job_run import JobRun, job_manifest


def main():
    spec = dict(
        name=dict(type="str", required=True),
        namespace=dict(type="str", default="default"),
        state=dict(type="str", choices=["run", "attach", "absent"], default="run"),
        image=dict(type="str"),
        command=dict(type="list", elements="str"),
        args=dict(type="list", elements="str"),
        env=dict(type="raw"),
        node_name=dict(type="str"),
        node_selector=dict(type="dict"),
        tolerations=dict(type="list", elements="dict"),
        gpus=dict(type="int", default=0),
        labels=dict(type="dict"),
        wait=dict(type="str", choices=["finished", "scheduled", "none"], default="finished"),
        wait_timeout=dict(type="float", default=120.0),
        cleanup=dict(type="bool", default=False),
        fail_on_error=dict(type="bool", default=True),
    )
    module = K8sModule(argument_spec=spec, supports_check_mode=True,
                       required_if=[("state", "run", ("image", "command"))])
    p = module.params
    where = module.where("", "Job", p["name"], p["namespace"])
    if isinstance(p["env"], dict):
        p["env"] = [{"name": k, "value": p["env"][k]} for k in sorted(p["env"])]
    for env in p["env"] or []:
        if not isinstance(env, dict) or "name" not in env or "value" not in env:
            module.fail_json(msg="%s: every env entry needs name and value, got %r" % (where, env))
    result = {"changed": False, "job": p["name"]}
    try:
        kube = module.client()
        run = JobRun(kube, p["namespace"], p["name"])
        if p["state"] == "absent":
            exists = kube.get_job(p["namespace"], p["name"]) is not None
            if exists and not module.check_mode:
                run.delete()
            result["changed"] = exists
            module.exit_json(**result)
        if p["state"] == "run":
            body = job_manifest(p["name"], p["namespace"], p["image"], p["command"], p["args"],
                                p["env"], p["node_name"], p["node_selector"], p["gpus"],
                                p["labels"], tolerations=p["tolerations"])
            result["manifest"] = body
            if module.check_mode:
                result["changed"] = kube.get_job(p["namespace"], p["name"]) is None
                module.exit_json(**result)
            result["changed"] = run.create(body)
        elif module.check_mode:
            module.exit_json(**result)
        if p["wait"] == "none":
            module.exit_json(**result)
        facts = run.wait(p["wait_timeout"], until=p["wait"])
        result.update(facts)
        if p["cleanup"]:
            run.delete()
            result["changed"] = True
    except K8sError as err:
        module.fail_api(err, "", "Job", p["name"], p["namespace"], **result)
    if p["wait"] == "finished" and p["fail_on_error"]:
        if result.get("timed_out"):
            module.fail_json(msg="%s did not finish within %ss (pod %s on node %s, phase %s)" % (
                where, p["wait_timeout"], result.get("pod"), result.get("node"), result.get("phase")),
                **result)
        if result.get("failed"):
            module.fail_json(msg="%s failed on node %s (exit code %s): %s" % (
                where, result.get("node"), result.get("exit_code"), (result.get("log") or "")[-500:]),
                **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
