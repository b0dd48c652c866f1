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
  - With I(jobs), several Jobs run side by side in one module run, each may name its own
    context. All are created, then waited on together, and each is read back into I(results).
    A value an entry leaves out comes from the module's options.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.k8s_auth
options:
  name:
    description: Job name (RFC 1123). Required unless I(jobs) is given.
    type: str
  jobs:
    description:
      - Jobs to run side by side (I(state=run) only), instead of I(name). Each entry takes
        C(name) (required), C(context), C(namespace), C(image), C(command), C(args), C(env),
        C(node_name), C(node_selector), C(tolerations), C(gpus), C(labels), C(wait) and
        C(wait_timeout); what it leaves out comes from the options of the same name.
      - I(replace), I(cleanup) and I(fail_on_error) apply to each; the task fails after all have
        been read back when any failed.
    type: list
    elements: dict
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
  replace:
    description:
      - With I(state=run), delete a Job of that name left from an earlier run and create it anew,
        instead of waiting for the earlier one. Its Pods may still be going; the result is read
        from the new Job's Pod only.
    type: bool
    default: false
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
- name: The same reference job on both sides at once
  hybridgpu.fleet.k8s_job_run:
    image: python:3.11-slim
    command: [python3, -c, "print('hello')"]
    gpus: 1
    replace: true
    cleanup: true
    jobs:
      - {name: ref-dh1-a100-01, context: onprem, node_name: dh1-a100-01}
      - {name: ref-cloud-dh1-a100-01, context: cloud, node_name: gpu-node-7}
  register: refs

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
  returned: without jobs
  type: str
results:
  description:
    - With I(jobs), one entry per Job in their order, each with C(job), C(context) and the keys
      below that a single Job returns.
  returned: with jobs
  type: list
  elements: dict
replaced:
  description: Whether a Job of that name from an earlier run was deleted first (I(replace=true)).
  returned: when replace=true and a Job was created
  type: bool
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

from concurrent.futures import ThreadPoolExecutor

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8sModule, describe
from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate.job_run import JobRun, job_manifest

# What one entry of `jobs` may set; the rest comes from the module's options.
JOB_KEYS = ("name", "context", "namespace", "image", "command", "args", "env", "node_name",
            "node_selector", "tolerations", "gpus", "labels", "wait", "wait_timeout")
WAITS = ("finished", "scheduled", "none")


def env_list(env):
    if isinstance(env, dict):
        return [{"name": k, "value": env[k]} for k in sorted(env)]
    return env


def job_params(module, index, entry):
    """One entry of `jobs` over the module's options; fails naming the entry and the field."""
    head = "jobs[%d]" % index
    if not isinstance(entry, dict):
        module.fail_json(msg="%s: each entry is a mapping, got %r" % (head, entry))
    unknown = sorted(set(entry) - set(JOB_KEYS))
    if unknown:
        module.fail_json(msg="%s: unknown key(s) %s; an entry takes %s" % (head, ", ".join(unknown), ", ".join(JOB_KEYS)))
    if not entry.get("name"):
        module.fail_json(msg="%s: name is required" % head)
    p = dict((k, module.params[k]) for k in JOB_KEYS)
    p.update((k, v) for k, v in entry.items() if v is not None)
    for key in ("name", "context", "namespace", "image", "node_name"):
        if p[key] is not None and not isinstance(p[key], str):
            module.fail_json(msg="%s: %s must be a string, got %r" % (head, key, p[key]))
    if p["wait"] not in WAITS:
        module.fail_json(msg="%s (%s): wait must be one of %s, got %r" % (head, p["name"], ", ".join(WAITS), p["wait"]))
    for key, kind in (("gpus", int), ("wait_timeout", float)):
        try:
            p[key] = kind(p[key])
        except (TypeError, ValueError):
            module.fail_json(msg="%s (%s): %s must be a number, got %r" % (head, p["name"], key, p[key]))
    for key, kind, what in (("command", list, "a list of strings"), ("args", list, "a list of strings"),
                            ("node_selector", dict, "a mapping"), ("labels", dict, "a mapping"),
                            ("tolerations", list, "a list of mappings"), ("env", (dict, list), "a mapping or a list")):
        value = p[key]
        if value is not None and (not isinstance(value, kind) or
                                  (what == "a list of strings" and not all(isinstance(v, str) for v in value))):
            module.fail_json(msg="%s (%s): %s must be %s, got %r" % (head, p["name"], key, what, value))
    return p


def where(p):
    context = p.get("context")
    return "%s (%s)" % (describe("Job", p["name"], p["namespace"]),
                        "context %s" % context if context else "current context")


def check_job(module, p, head):
    p["env"] = env_list(p["env"])
    for env in p["env"] or []:
        if not isinstance(env, dict) or "name" not in env or "value" not in env:
            module.fail_json(msg="%s: every env entry needs name and value, got %r" % (head, env))
    if module.params["state"] == "run" and not (p["image"] and p["command"]):
        module.fail_json(msg="%s: state=run needs image and command" % head)


def failure(p, result):
    """Why a finished-wait Job counts as failed, or None."""
    if p["wait"] != "finished":
        return None
    if result.get("timed_out"):
        return "%s did not finish within %ss (pod %s on node %s, phase %s)" % (
            where(p), p["wait_timeout"], result.get("pod"), result.get("node"), result.get("phase"))
    if result.get("failed"):
        return "%s failed on node %s (exit code %s): %s" % (
            where(p), result.get("node"), result.get("exit_code"), (result.get("log") or "")[-500:])
    return None


def start(module, p, kube):
    """Create the Job (replacing a leftover when asked); returns the JobRun and its result so far."""
    run = JobRun(kube, p["namespace"], p["name"])
    body = job_manifest(p["name"], p["namespace"], p["image"], p["command"], p["args"], p["env"],
                        p["node_name"], p["node_selector"], p["gpus"], p["labels"],
                        tolerations=p["tolerations"])
    result = {"job": p["name"], "manifest": body}
    if module.check_mode:
        result["changed"] = module.params["replace"] or kube.get_job(p["namespace"], p["name"]) is None
    elif module.params["replace"]:
        result["replaced"] = run.replace(body)
        result["changed"] = True
    else:
        result["changed"] = run.create(body)
    return run, result


def finish(module, p, run, result):
    """Wait for the Job as asked, read it back, delete it when asked."""
    if p["wait"] == "none" or module.check_mode:
        return result
    result.update(run.wait(p["wait_timeout"], until=p["wait"]))
    if module.params["cleanup"]:
        run.delete()
        result["changed"] = True
    return result


def run_many(module):
    """Every entry of `jobs`: created one after another, waited on side by side."""
    params = [job_params(module, i, entry) for i, entry in enumerate(module.params["jobs"])]
    for i, p in enumerate(params):
        check_job(module, p, "jobs[%d] %s" % (i, where(p)))
    names = [(p["context"], p["namespace"], p["name"]) for p in params]
    if len(set(names)) != len(names):
        module.fail_json(msg="jobs: two entries name the same Job in the same context and namespace")
    results = [{"job": p["name"], "context": p["context"]} for p in params]
    runs, doing = [], None
    try:
        for p, res in zip(params, results):
            doing = p
            run, out = start(module, p, module.client(dict(module.params, context=p["context"])))
            res.update(out)
            runs.append(run)
        doing = None
        with ThreadPoolExecutor(max_workers=len(runs) or 1) as pool:
            waits = [pool.submit(finish, module, p, run, res) for p, run, res in zip(params, runs, results)]
            for p, fut in zip(params, waits):
                doing = p
                fut.result()
    except K8sError as err:
        module.fail_json(msg="%s: %s" % (where(doing) if doing else "jobs", err), http_status=err.status,
                         changed=any(r.get("changed") for r in results), results=results)
    changed = any(r.get("changed") for r in results)
    if module.params["fail_on_error"]:
        failed = [msg for msg in (failure(p, r) for p, r in zip(params, results)) if msg]
        if failed:
            module.fail_json(msg="; ".join(failed), changed=changed, results=results)
    module.exit_json(changed=changed, results=results)


ARGUMENT_SPEC = dict(
    name=dict(type="str"),
    jobs=dict(type="list", elements="dict"),
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
    replace=dict(type="bool", default=False),
)
SPEC_OPTIONS = dict(required_one_of=[("name", "jobs")], mutually_exclusive=[("name", "jobs")])


def run(module):
    """The module's work (module: K8sModule, or K8sTask in the action plugin)."""
    p = module.params
    if p["jobs"] is not None:
        if p["state"] != "run":
            module.fail_json(msg="jobs: only with state=run, got state=%s" % p["state"])
        run_many(module)
    where_ = module.where("", "Job", p["name"], p["namespace"])
    check_job(module, p, where_)
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
            run, out = start(module, p, kube)
            result.update(out)
            if module.check_mode:
                module.exit_json(**result)
        elif module.check_mode:
            module.exit_json(**result)
        finish(module, p, run, result)
    except K8sError as err:
        module.fail_api(err, "", "Job", p["name"], p["namespace"], **result)
    if p["fail_on_error"]:
        why = failure(p, result)
        if why:
            module.fail_json(msg=why, **result)
    module.exit_json(**result)


def main():
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **SPEC_OPTIONS))


if __name__ == "__main__":
    main()
