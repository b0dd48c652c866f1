#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run the overflow failure drills: the safe ones in a test namespace with a test class, the unsafe ones only
on a disposable estate under a verified change record."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: overflow_drill
short_description: Run the overflow failure drills; the unsafe ones only under a verified change record
description:
  - Moves one test job of a test class per drill through the real exactly-once dispatch protocol (the cloud
    cluster backend, the stager named by I(storage), a SQLite ledger in I(out)) in a test namespace of the cloud
    cluster, and injects the drill's fault in this process only, around the client calls.
  - C(lost_submission_response) drops the answer of the Job create (the Job is created); the protocol must confirm
    by the job-ID label and adopt it, never create a second Job. C(lost_result_return) drops the acknowledgement of
    the return copy (the copy lands); the retry must verify the checksum and commit once. C(retried_commit) sends
    the commit twice; one commit record. C(link_cut_dispatch), C(link_cut_transfer_in), C(link_cut_start),
    C(link_cut_end), C(link_cut_return) make this process's calls to the cloud API fail as a refused connection for
    I(cut_calls) calls from the moment the mark is recorded; the job must reach exactly one final state.
  - The test job's local entry lives in this process; no entry of the site's local queue is held or released.
    The test Job runs the site's image (I(image), else I(job_template.image)) with a shell step that writes one
    small file, inside the collection's upload step, asking for no GPU.
  - Every drill records its checks and evidence (Jobs carrying the job-ID label, ledger entries, checksums) and
    deletes the Jobs it created in the test namespace. The report is C(<out>/safe_drill.json) and
    C(<out>/safe_drill.html).
  - Drills that cannot be safe on a real estate (they break shared parts such as a cloud node, the namespace quota, the
    storage host, stored results, the site's local queue) are a destructive action. Named in I(drills), they come
    back in C(refused) with why unless I(estate) is C(disposable) B(and) a signed change record approves them
    (action C(overflow_drill), playbook C(overflow_drill.yml), C(targets) listing every unsafe drill of the run;
    docs/approvals.md). The record is verified by this module's action plugin, in this task, against the pinned
    boundary signers, the pinned boundary and the ledger of used change ids; a task or an extra var cannot supply
    the verified approval. Then the estate's drill script (I(script)) runs them, after the safe drills.
version_added: "0.1.0"
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.overflow_storage
options:
  drills:
    description:
      - Drills to run; empty runs every safe drill. Unsafe drill names are accepted and listed in C(refused)
        (or C(disposable), left to the estate's drill script); unknown names fail the task.
    type: list
    elements: str
    default: []
  estate:
    description:
      - What the inventory declares the estate to be. C(production) (the default) refuses every unsafe drill;
        C(disposable) (a test estate that may be broken) runs them with the estate's drill script under a verified
        change record. With unsafe drills and a record, the estate and the script may not be extra vars.
    type: str
    choices: [production, disposable]
    default: production
  script:
    description:
      - The disposable estate's drill script that runs the unsafe drills (inventory variable
        C(hgpu_overflow_drill_script)); run as I(python) C(script --out) I(script_out) C(--min-runs --max-runs
        --backend= --class= --failure=none --failure=<each unsafe drill>). Exit status 0 (pass) or 1 (fail) is a
        finished run; its report is C(<script_out>/drill.json).
    type: path
  python:
    description: Python that runs I(script); the one running this module when omitted.
    type: path
  script_out:
    description: Report folder of I(script); the parent of I(out) when omitted.
    type: path
  script_backends:
    description: Local queue backends the script drills.
    type: list
    elements: str
    default: [slurm, kubernetes]
  script_classes:
    description: Job classes the script drills.
    type: list
    elements: str
    default: [small-input, large-input]
  script_min_runs:
    description: Fewest clean runs of the script before its spread stopping rule may stop.
    type: int
    default: 4
  script_max_runs:
    description: Most clean runs of the script.
    type: int
    default: 8
  record_path:
    description: The change record file that approves the unsafe drills (its signature is read from PATH.sig).
    type: path
  record_text:
    description: The signed change record text (AWX survey), byte for byte.
    type: str
  signature:
    description: The record's ssh-keygen -Y sign signature text.
    type: str
  executor:
    description: Person id (boundary) running the drill; a performer of overflow_drill. Under AWX the launching user.
    type: str
  approval:
    description: Set only by the action plugin from the verified change record; a task that sets it is refused.
    type: dict
  namespace:
    description: The test namespace in the cloud cluster (created when missing). It may not be I(cloud.namespace).
    type: str
    required: true
  job_class:
    description: The test job class, a class of I(job_classes) whose data may leave the site.
    type: str
    required: true
  job_classes:
    description: Job classes YAML (see M(hybridgpu.fleet.overflow_decide)).
    type: path
    required: true
  cloud:
    description:
      - The cloud cluster (Kubernetes connection options, C(pool)); its C(namespace) is the production overflow
        namespace, which the drill refuses to use (I(namespace) names the test namespace). Unknown keys are refused.
    type: dict
    required: true
    suboptions:
      namespace:
        description: The production overflow namespace (C(overflow) when omitted); the drill never runs there.
        type: str
      pool:
        description: The cloud node pool (C(warm) when omitted).
        type: str
        choices: [warm, on_demand]
      host:
        description: API server URL, overriding the kubeconfig's server.
        type: str
      kubeconfig:
        description: Path to a kubeconfig file.
        type: path
      context:
        description: Context of the kubeconfig; the current context when omitted.
        type: str
      api_key:
        description: Bearer token, overriding the kubeconfig's credentials.
        type: str
      ca_cert:
        description: CA bundle that signs the API server's certificate.
        type: path
        aliases: [ssl_ca_cert]
      validate_certs:
        description: Verify the API server's certificate (on when omitted).
        type: bool
        aliases: [verify_ssl]
      request_timeout:
        description: Seconds to wait for one API request (10 when omitted).
        type: float
      api_retries:
        description: Retries of a failed API request (the shared Kubernetes default when omitted).
        type: int
  job_template:
    description:
      - How a moved job's cloud Job is made (as in M(hybridgpu.fleet.overflow_dispatch)); the drill uses its
        C(image), C(node_selector), C(tolerations) and C(upload) (required), and sets the outputs itself.
    type: dict
    required: true
  image:
    description: Image of the test Job (the job template's C(image) when omitted).
    type: str
  out:
    description: Report folder; it also holds the drill's SQLite ledger (C(drill.db)) and its test input.
    type: path
    required: true
  cut_calls:
    description: How many cloud API calls fail in a link cut before the link is back.
    type: int
    default: 3
  poll_s:
    description: Seconds between looks at a drill's test job (the test job runs for three of them).
    type: float
    default: 2
  timeout_s:
    description: Seconds one drill may take before it fails as not reaching a final state.
    type: float
    default: 900
attributes:
  check_mode:
    support: full
    details: Reports which drills would run and which are refused (the change record is verified, not used); creates and runs nothing.
  diff_mode:
    support: none
    details: The drills create and delete test Jobs; there is no state to diff.
notes:
  - The drills talk to the cloud API and to the storage host exactly as a dispatch pass does; the faults are
    in this process. They create Jobs only in I(namespace) and staged files only under the test job IDs
    (C(drill-<drill>-<tag>)) in cloud storage, which stay there.
"""

EXAMPLES = r"""
- name: Safe overflow drills in the test namespace
  hybridgpu.fleet.overflow_drill:
    namespace: overflow-drill
    job_class: drill-test
    job_classes: "{{ hgpu_overflow_job_classes }}"
    cloud: "{{ hgpu_overflow_cloud }}"
    storage: "{{ {'onprem_root': '/var/lib/hybridgpu/drill/results'} | combine(hgpu_overflow_storage) }}"
    job_template: "{{ hgpu_overflow_job_template }}"
    out: /var/lib/hybridgpu/records/overflow/drill-safe
  register: drill

- name: Only the lost submission response and the link cut at start
  hybridgpu.fleet.overflow_drill:
    drills: [lost_submission_response, link_cut_start]
    namespace: overflow-drill
    job_class: drill-test
    job_classes: /etc/hybridgpu/job_classes.yml
    cloud: {kubeconfig: /etc/hybridgpu/kubeconfig, context: cloud, namespace: overflow}
    storage: {host: stage.cloud.example.internal, ssh_key: /etc/hybridgpu/ssh/overflow_ed25519,
              onprem_root: /var/lib/hybridgpu/drill/results}
    job_template: "{{ hgpu_overflow_job_template }}"
    out: /tmp/drill
"""

RETURN = r"""
pass:
  description: Every drill that ran passed.
  returned: always
  type: bool
drills:
  description: One record per drill that ran (C(drill), C(job_id), C(final_state), C(pass), C(checks), C(evidence), C(cleanup)).
  returned: always
  type: list
  elements: dict
refused:
  description: Unsafe drills that did not run, with why (C(drill), C(reason)); the estate is not disposable, or no verified change record approves them.
  returned: always
  type: list
  elements: dict
unsafe:
  description: Unsafe drills chosen.
  returned: always
  type: list
  elements: str
estate_drill:
  description:
    - The unsafe drills run by the estate's drill script under the verified record (C(ran), C(drills), C(change_id),
      C(rc), C(report) (the script's drill.json), C(output) (the end of what it printed)).
  returned: when a verified change record approved unsafe drills
  type: dict
table:
  description: Every drill with C(safe) (on a real estate) and C(why).
  returned: always
  type: list
  elements: dict
would_run:
  description: The safe drills chosen (run unless in check mode).
  returned: always
  type: list
  elements: str
report:
  description: Path of the JSON report (the HTML page is beside it).
  returned: when drills ran
  type: str
"""

import json
import os
import subprocess
import sys
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import files, k8s
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8S_AUTH_ARG_SPEC
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends, carry, dispatch_run, drill_page, drills, jobclass
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.stagers import STORAGE_OPTIONS
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.tracker import Tracker

K8S_SUBOPTIONS = dict((key, dict((k, v) for k, v in spec.items() if k in ("type", "aliases", "no_log")))
                      for key, spec in K8S_AUTH_ARG_SPEC.items())
CLOUD_OPTIONS = dict(
    K8S_SUBOPTIONS,
    namespace=dict(type="str"),
    pool=dict(type="str", choices=["warm", "on_demand"]),
)


def argument_spec():
    return dict(
        drills=dict(type="list", elements="str", default=[]),
        estate=dict(type="str", choices=["production", "disposable"], default="production"),
        namespace=dict(type="str", required=True),
        job_class=dict(type="str", required=True),
        job_classes=dict(type="path", required=True),
        cloud=dict(type="dict", required=True, options=CLOUD_OPTIONS),
        storage=dict(type="dict", required=True, no_log=False, options=STORAGE_OPTIONS),
        job_template=dict(type="dict", required=True),
        image=dict(type="str"),
        out=dict(type="path", required=True),
        cut_calls=dict(type="int", default=3),
        poll_s=dict(type="float", default=2),
        timeout_s=dict(type="float", default=900),
        script=dict(type="path"),
        python=dict(type="path"),
        script_out=dict(type="path"),
        script_backends=dict(type="list", elements="str", default=["slurm", "kubernetes"]),
        script_classes=dict(type="list", elements="str", default=["small-input", "large-input"]),
        script_min_runs=dict(type="int", default=4),
        script_max_runs=dict(type="int", default=8),
        record_path=dict(type="path"),
        record_text=dict(type="str"),
        signature=dict(type="str"),
        executor=dict(type="str"),
        approval=dict(type="dict"),
    )


def check_class(params):
    classes = jobclass.load(params["job_classes"])
    cls = classes.get(params["job_class"])
    if cls is None:
        raise drills.DrillRefused("job_class %s is not in %s" % (params["job_class"], params["job_classes"]))
    if cls["restricted"]:
        raise drills.DrillRefused("job_class %s is restricted: its data may not leave the site" % params["job_class"])


def unsafe_plan(params, unsafe):
    """(unsafe drills to run, refused records) for this estate and the verified approval.
    Raises DrillRefused when an approval does not cover the run or no script is named."""
    refused = drills.refused(unsafe, params["estate"])
    if params["estate"] != "disposable" or not unsafe:
        return [], refused
    granted = params.get("approval") or {}
    if not granted.get("approved") or granted.get("action") != "overflow_drill":
        return [], [{"drill": n, "safe": False, "ran": False,
                     "reason": "refused: no verified change record approves it (action overflow_drill, playbook "
                               "overflow_drill.yml, targets listing the unsafe drills); %s" % dict(drills.UNSAFE)[n]}
                    for n in unsafe]
    missing = [n for n in unsafe if n not in (granted.get("approved_targets") or [])]
    if missing:
        raise drills.DrillRefused("the change record %s does not approve %s" % (granted.get("change_id"), ", ".join(missing)))
    script = params.get("script")
    if not script or not os.path.isfile(script):
        raise drills.DrillRefused("the estate is declared disposable and unsafe drills were approved, but no drill "
                                  "script runs them (script, inventory variable hgpu_overflow_drill_script: %r)" % (script,))
    return list(unsafe), []


def run_script(params, unsafe):
    """Run the estate's drill script for the approved unsafe drills; its record."""
    out = params.get("script_out") or os.path.dirname(params["out"].rstrip("/")) or params["out"]
    argv = [params.get("python") or sys.executable, params["script"], "--out", out,
            "--min-runs", "%d" % params["script_min_runs"], "--max-runs", "%d" % params["script_max_runs"]]
    argv += ["--backend=%s" % b for b in params["script_backends"]]
    argv += ["--class=%s" % c for c in params["script_classes"]]
    argv += ["--failure=%s" % f for f in ["none"] + list(unsafe)]
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    return {"ran": True, "drills": list(unsafe), "change_id": (params.get("approval") or {}).get("change_id"), "rc": res.returncode,
            "report": os.path.join(out, "drill.json"), "output": ((res.stdout or "") + (res.stderr or ""))[-4000:]}


def run(params):
    out = params["out"]
    os.makedirs(out, exist_ok=True)
    if not params["safe"]:
        return []
    files.write(os.path.join(out, "drill-input.txt"), "overflow drill test input\n")
    cloud = dispatch_run.build_cloud(dict(params["cloud"], namespace=params["namespace"]))
    storage = dict(params["storage"])
    storage.setdefault("onprem_root", os.path.join(out, "results"))
    stager = dispatch_run.build_stager(dict((k, v) for k, v in storage.items() if v is not None))
    inputs = [{"name": "drill-input.txt", "path": os.path.join(out, "drill-input.txt"), "size": 26}]
    tag = "%x" % int(time.time())
    cloud.ensure_namespace()
    records = []
    for name in params["safe"]:
        ledger = Tracker(os.path.join(out, "drill.db"))
        try:
            records.append(drills.run_drill(
                name, cloud, stager, ledger, params["job_class"],
                lambda job_id: drills.test_spec(job_id, params["job_template"], params.get("image"),
                                                run_s=3 * params["poll_s"]), inputs, tag=tag,
                cut_calls=params["cut_calls"], poll_s=params["poll_s"], timeout_s=params["timeout_s"]))
        except (k8s.K8sError, backends.LinkDown, backends.TransferInterrupted, backends.ReturnFailed) as exc:
            # the drill's test Jobs were deleted on the way out; the next drill still runs
            records.append({"drill": name, "job_id": None, "safe": True, "ran": True, "pass": False, "final_state": None,
                            "checks": [{"check": "ran to the end", "pass": False, "detail": str(exc)}],
                            "evidence": {}, "cleanup": None})
        finally:
            ledger.close()
    return records


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    params = dict(module.params)
    cloud_ns = (params["cloud"] or {}).get("namespace") or "overflow"
    try:
        drills.check_namespace(params["namespace"], cloud_ns)
        safe, unsafe = drills.split(params["drills"])
        check_class(params)
    except jobclass.JobClassError as exc:
        module.fail_json(msg="invalid job classes: %s" % exc, errors=exc.errors)
    except drills.DrillRefused as exc:
        module.fail_json(msg="%s; nothing was run" % exc)
    try:
        run_unsafe, refused = unsafe_plan(params, unsafe)
    except drills.DrillRefused as exc:
        module.fail_json(msg="%s; nothing was run" % exc)
    result = dict(changed=False, drills=[], refused=refused, unsafe=unsafe, table=drills.table(), would_run=safe)
    if module.check_mode:
        module.exit_json(**dict(result, **{"pass": True}))
    params["safe"] = safe
    try:
        drills.test_spec("drill-check", params["job_template"], params.get("image"))
        records = run(params)
    except (dispatch_run.RunError, carry.CarryRefused, ValueError) as exc:
        module.fail_json(msg="overflow drill: %s" % exc, **result)
    except (k8s.K8sError, backends.LinkDown) as exc:
        module.fail_json(msg="overflow drill: the cloud cluster answered %s" % exc, **result)
    rep = drill_page.report(records, refused, {"namespace": params["namespace"], "job_class": params["job_class"],
                                               "estate": params["estate"], "cut_calls": params["cut_calls"]})
    path = os.path.join(params["out"], "safe_drill.json")
    files.write(os.path.join(params["out"], "safe_drill.html"), drill_page.render(rep))
    files.write(path, json.dumps(rep, indent=1, sort_keys=True, default=str) + "\n")
    result.update(changed=bool(records), drills=records, report=path)
    result["pass"] = rep["pass"]
    if run_unsafe:
        result["estate_drill"] = run_script(params, run_unsafe)
        result["changed"] = True
        if result["estate_drill"]["rc"] not in (0, 1):
            module.fail_json(msg="overflow drill: the estate's drill script %s ended with status %d"
                                 % (params["script"], result["estate_drill"]["rc"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
