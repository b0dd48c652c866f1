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
    for the chosen jobs; inputs are staged to cloud storage (rsync/SSH or an S3-compatible bucket) with sha256 checks,
    results come back on-prem and are verified before the single commit in the ledger (I(ledger), a SQLite file
    or objects in a Kubernetes namespace that every run can reach).
  - One pass runs at a time per ledger; a second pass waits up to I(ledger.wait_s), then returns C(busy)
    naming the holder and changes nothing.
  - On the C(operator) path the jobs named in I(jobs) move (restricted classes are refused); on the
    C(policy) path the trigger decides. Jobs already in flight are advanced one step in every pass.
  - Every result is labelled with the path that produced it.
version_added: "0.1.0"
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.overflow_storage
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
    description:
      - Job IDs for the operator path and for C(return_to_local), each the Job name on a Kubernetes local queue
        or Slurm's numeric job ID on a Slurm local queue.
      - Each must match C([A-Za-z0-9][A-Za-z0-9._-]{0,127}) and hold no C(..); anything else is refused before any command runs.
    type: list
    elements: str
    default: []
  actor:
    description: Who runs the pass (recorded in the attempt log).
    type: str
  tracker_db:
    description: Path of the SQLite job tracker; the same as I(ledger) with kind C(sqlite) and this I(path).
    type: path
  ledger:
    description:
      - Where the exactly-once ledger lives. Required unless I(tracker_db) is set.
      - C(sqlite) is one file on the host that runs the pass (a scheduled AWX job in a fresh container
        does not see the last run's file). C(kubernetes) keeps it in the API of the cluster named by
        I(kubeconfig), I(context) and I(namespace) (the namespace must exist) as a Lease
        C(<name_prefix>-dispatch), a ConfigMap C(<name_prefix>-job-<name>) per job and one
        C(<name_prefix>-commit-<name>) per committed job (see docs/runbooks/overflow_move.md for the RBAC).
    type: dict
    suboptions:
      kind:
        description: The ledger's store.
        type: str
        choices: [sqlite, kubernetes]
        default: sqlite
      path:
        description: SQLite file (kind sqlite).
        type: path
      kubeconfig:
        description: Kubeconfig of the cluster that holds the ledger (kind kubernetes).
        type: path
      context:
        description: Context in I(kubeconfig) (kind kubernetes).
        type: str
      namespace:
        description: Namespace of the ledger's objects (kind kubernetes; required there).
        type: str
      name_prefix:
        description: Prefix of the ledger's object names (kind kubernetes).
        type: str
        default: hgpu-overflow
      lease_seconds:
        description: How long the pass Lease stays valid without renewal (kind kubernetes); the pass renews it as it writes.
        type: int
        default: 300
      wait_s:
        description: Seconds a pass waits for another pass to finish before it returns C(busy).
        type: float
        default: 0
  job_classes:
    description: Job classes YAML (see M(hybridgpu.fleet.overflow_decide)).
    type: path
    required: true
  local_queue:
    description:
      - The local queue. C(kind) is C(kubernetes) (with the Kubernetes connection options and C(namespace))
        or C(slurm) (C(host), C(ssh_key), C(user), C(known_hosts)). Unknown keys are refused.
      - A Slurm job's class comes from its partition, QOS and account (the C(slurm) block of each class in
        I(job_classes)), never from anything the job's owner writes in the job.
      - A Kubernetes Job's class comes from its namespace and Kueue LocalQueue (label C(kueue.x-k8s.io/queue-name);
        the C(kubernetes) block of each class), never from a label its submitter sets. A Job whose nodeSelector,
        node affinity or tolerations select restricted placement (keys under C(node-restriction.kubernetes.io/), or
        the C(restricted_placement) labels and taints of I(job_classes)) never moves, whatever its class.
      - The cloud pod spec is built from an allowlist of the queued Job's pod template; any other field is refused
        before any hold, with its path named (docs/runbooks/overflow_check.md, "How a job is carried").
    type: dict
    required: true
    suboptions:
      kind:
        description: C(kubernetes) or C(slurm).
        type: str
      namespace:
        description: Kubernetes only. Namespace of the local Jobs (C(overflow-local) when omitted).
        type: str
      node_selector:
        description: Kubernetes only. Node selector of the local Jobs.
        type: dict
      tolerations:
        description: Kubernetes only. Tolerations of the local Jobs.
        type: list
        elements: dict
      host:
        description: Slurm, the controller reached over SSH; Kubernetes, the API server URL (overrides the kubeconfig).
        type: str
      ssh_key:
        description: Private key for SSH.
        type: path
      user:
        description: SSH user (C(root) when omitted).
        type: str
      known_hosts:
        description:
          - File of trusted host keys (OpenSSH C(known_hosts) format). The host key is always checked
            (C(StrictHostKeyChecking=yes)); without this file, against the user's own known_hosts files.
        type: path
      kubeconfig:
        description: Kubernetes only. Path to a kubeconfig file.
        type: path
      context:
        description: Kubernetes only. Context of the kubeconfig; the current context when omitted.
        type: str
      api_key:
        description: Kubernetes only. Bearer token, overriding the kubeconfig's credentials.
        type: str
      ca_cert:
        description: Kubernetes only. CA bundle that signs the API server's certificate.
        type: path
        aliases: [ssl_ca_cert]
      validate_certs:
        description: Kubernetes only. Verify the API server's certificate (on when omitted).
        type: bool
        aliases: [verify_ssl]
      request_timeout:
        description: Kubernetes only. Seconds to wait for one API request (10 when omitted).
        type: float
      api_retries:
        description: Kubernetes only. Retries of a failed API request (the shared Kubernetes default when omitted).
        type: int
  total_gpus:
    description: Site GPU pool by type, used when the queue backend cannot see the nodes.
    type: dict
  cloud:
    description: The cloud cluster (Kubernetes connection options, C(namespace), C(pool), C(submit_workers), C(submit_qps)). Unknown keys are refused.
    type: dict
    required: true
    suboptions:
      namespace:
        description: Namespace of the cloud Jobs (C(overflow) when omitted).
        type: str
      pool:
        description: The cloud node pool (C(warm) when omitted).
        type: str
        choices: [warm, on_demand]
      submit_workers:
        description:
          - Threads that send the cloud creates of a pass at once (8 when omitted). They share one API client whose
            connection pool keeps this many connections open for reuse.
          - The creates of the whole pass go out after every chosen job is held and staged; one list by the job-ID
            label (per 100 jobs) then confirms them, adopts a Job whose create answered 409 or got no answer, and
            finds none where a create without an answer did not land.
        type: int
      submit_qps:
        description:
          - Client-side limit on the cloud creates per second, all workers together (50 when omitted; C(0) sets no
            limit). Set it under the rate the cloud's API server allows this client.
        type: float
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
      - How a moved job's cloud Job is made from the queued job. A Kubernetes Job's pod template is copied and only
        the cloud pool, image registry and staged input volumes are rewritten; a Slurm job's batch script runs with
        its own TRES in the image of its C(#SBATCH --container-image) line or O(job_template.image).
      - The job's main command runs inside the collection's upload step (C(python3) must be in the image), which pulls
        the staged inputs first and uploads the declared outputs with a sha256 manifest when the command ends.
      - A job that needs anything on-prem that cannot be mapped is refused before it is held. Unknown keys are refused.
    type: dict
    required: true
    suboptions:
      image:
        description: Image for a Slurm job whose script names none (C(#SBATCH --container-image)).
        type: str
      node_selector:
        description: Node selector of the cloud pool (replaces the job's own).
        type: dict
      tolerations:
        description: Tolerations of the cloud pool (replace the job's own).
        type: list
        elements: dict
      request_gpus:
        description: Give a Slurm job without C(gres/gpu) in its TRES the class's GPU count.
        type: bool
        default: true
      cloud_gpu_type:
        description: GPU product label value the cloud pool offers, when it differs from the job's.
        type: str
      registry_map:
        description: Image reference prefix on-prem to its prefix for the cloud (longest prefix wins).
        type: dict
      onprem_registries:
        description: Registry prefixes only the site can reach; an image from one with no O(job_template.registry_map) entry is refused.
        type: list
        elements: str
      onprem_services:
        description: Names of on-prem services; a job whose env names one (or any C(.svc) name) is refused.
        type: list
        elements: str
      staged_claims:
        description: PVC names that hold a job's inputs; they become an emptyDir filled with the staged inputs. Any other PVC is refused.
        type: list
        elements: str
      inputs_dir:
        description: Where the staged inputs go when no staged volume names a mount path (relative to the working directory).
        type: str
      outputs:
        description:
          - Output paths uploaded when the job ends (relative to its working directory, or absolute).
          - A Kubernetes Job may name its own in the annotation C(hybridgpu.io/overflow-outputs) (comma-separated).
        type: list
        elements: str
      upload:
        description: Cloud storage as the cloud nodes reach it, for the upload step.
        type: dict
        suboptions:
          host:
            description: Storage host.
            type: str
            required: true
          ssh_key:
            description: SSH key path on the cloud nodes.
            type: str
            required: true
          root:
            description: Storage root (the stager's remote root).
            type: str
            required: true
          user:
            description: SSH user.
            type: str
            default: root
          known_hosts:
            description:
              - known_hosts path on the cloud nodes. The storage host's key is always checked; give this or
                O(job_template.upload.host_keys).
            type: str
          host_keys:
            description: The storage host's known_hosts lines, carried in the cloud Job (instead of O(job_template.upload.known_hosts)).
            type: str
  images:
    description:
      - Pin a moved job's images by digest and pre-pull them on the cloud pool before its first attempt.
        Without this option images are carried by tag and the time model keeps the class's I(image_size) estimate.
      - The on-prem digest of an image is the one its reference carries, else a pin (O(images.pins), or the class's
        C(image_pins)), else what the on-prem kubelets report in C(Node.status.images) (Kubernetes local queue).
        An image without one is refused before any hold, unless its class sets C(allow_unpinned_images).
      - Before the first attempt of a class, and whenever its digest changes, a Job labelled
        C(hybridgpu.io/overflow-prepull) runs the mapped image by digest with a no-op command on the cloud pool (the
        carried job's node selector and tolerations); the C(imageID) its kubelet reports must carry the on-prem
        digest, else the move is refused naming both. The moved Job then runs the image by digest.
      - What was pulled, at which digest and in how long, is kept in the ConfigMap C(hgpu-overflow-prepull) in the
        cloud namespace; a class recorded at the digest is not pulled again, and the measured pull replaces the
        estimate in the time model.
    type: dict
    suboptions:
      prepull:
        description: Pin and pre-pull (C(false) turns the whole option off).
        type: bool
        default: true
      pins:
        description: Site-wide pins, each C(<repo>@sha256:<64 hex>), for images no on-prem node reports.
        type: list
        elements: str
        default: []
      command:
        description: The no-op command of the pre-pull container (it must exist in every image).
        type: list
        elements: str
        default: ["true"]
      timeout_s:
        description: Seconds the pre-pull may take before the move is refused.
        type: float
        default: 600
      poll_s:
        description: Seconds between looks at the pre-pull pod.
        type: float
        default: 2
  inputs:
    description:
      - Inputs per job class, each a list of C(name), C(path) (file on the controller), C(shared).
      - Input and dataset names (like job IDs) must match C([A-Za-z0-9][A-Za-z0-9._-]{0,127}) and hold no C(..);
        anything else is refused before any command runs.
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
    suboptions:
      interrupt_transfers:
        description: Input copies killed part way.
        type: int
        default: 0
      corrupt_results:
        description: Returned outputs that land with one flipped byte.
        type: int
        default: 0
      failed_returns:
        description: Return copies that fail.
        type: int
        default: 0
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
    ledger: {kind: kubernetes, kubeconfig: ~/.kube/config, context: onprem, namespace: overflow-ledger, wait_s: 60}
    job_classes: "{{ inventory_dir }}/overflow/job_classes.yml"
    local_queue: {kind: slurm, host: 10.40.0.5, ssh_key: ~/.ssh/id_ed25519, known_hosts: /etc/overflow/known_hosts}
    total_gpus: {"NVIDIA A100-SXM4-80GB": 8}
    cloud: {kubeconfig: ~/.kube/config, context: cloud, namespace: overflow, submit_workers: 8, submit_qps: 50}
    storage: {host: 10.128.8.30, ssh_key: ~/.ssh/id_ed25519, known_hosts: /etc/overflow/known_hosts,
              onprem_root: /srv/overflow/results}
    job_template:
      node_selector: {pool: overflow}
      registry_map: {"registry.site.example/": "registry.cloud.example/site/"}
      staged_claims: [training-inputs]
      outputs: [output]
      upload: {host: storage.cloud.example, ssh_key: /etc/overflow/storage_key, root: /srv/cloud-storage}
    images:
      pins: ["registry.site.example/ml/base@sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"]
      timeout_s: 900
  register: pass_result
"""

RETURN = r"""
path:
  description: The dispatch path of this pass.
  returned: always
  type: str
busy:
  description: Set when another pass held the ledger past I(ledger.wait_s) (holder, renewed, reason); nothing was done.
  returned: when another pass holds the ledger
  type: dict
results:
  description:
    - One entry per job touched (job_id, path, outcome, reason, state, attempt_id, cloud_name, staging, marks).
    - images (with I(images)) lists each image of a moved job with its on-prem digest, where the digest came from,
      the reference the cloud Job runs, C(outcome) (C(pulled), C(recorded) when an earlier pre-pull holds the digest,
      C(unpinned)) and the measured C(pull_s).
    - marks holds the attempt's five marks (dispatch, transfer_in, start, end, return; epoch seconds, those
      reached so far) and the seconds between them.
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
refused:
  description:
    - Jobs of the local queue whose fields could not be read (C(job_id), C(reason)), such as a Slurm job that
      C(squeue) gave in no readable form or a Kubernetes Job whose deadline annotation is not a number. Each is
      refused on its own and stays where it is; every other job is judged.
  returned: always
  type: list
  elements: dict
submission:
  description:
    - The cloud creates of this pass (jobs), how many the confirming list showed (confirmed), the list calls made
      (lists), the pool's workers and qps, and the seconds it took. Each result it settled carries C(confirmed).
  returned: when the pass sent cloud creates
  type: dict
notes:
  description: What the pass could not read and did without (the pre-pull record, with I(images)).
  returned: when something could not be read
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import k8s
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8S_AUTH_ARG_SPEC
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends, dispatch_run, jobclass
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.stagers import STORAGE_OPTIONS
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.slurm_backend import SlurmError

CHANGING = frozenset(["submitted", "adopted", "released", "finished", "abandoned", "released_resources"])

# The Kubernetes connection options inside local_queue and cloud: the shared spec's types, aliases and
# no_log, without its defaults and environment fallbacks (dispatch_run applies its own defaults).
K8S_SUBOPTIONS = dict((key, dict((k, v) for k, v in spec.items() if k in ("type", "aliases", "no_log")))
                      for key, spec in K8S_AUTH_ARG_SPEC.items())
SSH_SUBOPTIONS = dict(
    host=dict(type="str"),
    ssh_key=dict(type="path", no_log=False),
    user=dict(type="str"),
    known_hosts=dict(type="path"),
)
LOCAL_QUEUE_OPTIONS = dict(
    K8S_SUBOPTIONS, **SSH_SUBOPTIONS,
    kind=dict(type="str"),
    namespace=dict(type="str"),
    node_selector=dict(type="dict"),
    tolerations=dict(type="list", elements="dict"),
)
CLOUD_OPTIONS = dict(
    K8S_SUBOPTIONS,
    namespace=dict(type="str"),
    pool=dict(type="str", choices=["warm", "on_demand"]),
    submit_workers=dict(type="int"),
    submit_qps=dict(type="float"),
)
UPLOAD_OPTIONS = dict(
    host=dict(type="str", required=True),
    ssh_key=dict(type="str", required=True, no_log=False),
    root=dict(type="str", required=True),
    user=dict(type="str", default="root"),
    known_hosts=dict(type="str"),
    host_keys=dict(type="str", no_log=False),
)
JOB_TEMPLATE_OPTIONS = dict(
    image=dict(type="str"),
    node_selector=dict(type="dict"),
    tolerations=dict(type="list", elements="dict"),
    request_gpus=dict(type="bool", default=True),
    cloud_gpu_type=dict(type="str"),
    registry_map=dict(type="dict"),
    onprem_registries=dict(type="list", elements="str"),
    onprem_services=dict(type="list", elements="str"),
    staged_claims=dict(type="list", elements="str"),
    inputs_dir=dict(type="str"),
    outputs=dict(type="list", elements="str"),
    upload=dict(type="dict", options=UPLOAD_OPTIONS),
)
LEDGER_OPTIONS = dict(
    kind=dict(type="str", choices=["sqlite", "kubernetes"], default="sqlite"),
    path=dict(type="path"),
    kubeconfig=dict(type="path"),
    context=dict(type="str"),
    namespace=dict(type="str"),
    name_prefix=dict(type="str", default="hgpu-overflow"),
    lease_seconds=dict(type="int", default=300),
    wait_s=dict(type="float", default=0),
)
IMAGE_OPTIONS = dict(
    prepull=dict(type="bool", default=True),
    pins=dict(type="list", elements="str", default=[]),
    command=dict(type="list", elements="str", default=["true"]),
    timeout_s=dict(type="float", default=600),
    poll_s=dict(type="float", default=2),
)
FAULT_OPTIONS = dict(
    interrupt_transfers=dict(type="int", default=0),
    corrupt_results=dict(type="int", default=0),
    failed_returns=dict(type="int", default=0),
)


def argument_spec():
    return dict(
        path=dict(type="str", choices=["operator", "policy"], required=True),
        action=dict(type="str", choices=["dispatch", "step", "return_to_local"], default="dispatch"),
        jobs=dict(type="list", elements="str", default=[]),
        actor=dict(type="str"),
        tracker_db=dict(type="path"),
        ledger=dict(type="dict", options=LEDGER_OPTIONS),
        job_classes=dict(type="path", required=True),
        local_queue=dict(type="dict", required=True, options=LOCAL_QUEUE_OPTIONS),
        total_gpus=dict(type="dict"),
        cloud=dict(type="dict", required=True, options=CLOUD_OPTIONS),
        storage=dict(type="dict", required=True, no_log=False, options=STORAGE_OPTIONS),
        job_template=dict(type="dict", required=True, options=JOB_TEMPLATE_OPTIONS),
        images=dict(type="dict", options=IMAGE_OPTIONS),
        inputs=dict(type="dict", default={}),
        max_attempts=dict(type="int", default=3),
        faults=dict(type="dict", options=FAULT_OPTIONS),
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True,
                           required_one_of=[("tracker_db", "ledger")])
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
    if out.get("busy"):
        module.warn(out["busy"]["reason"])
    module.exit_json(changed=changed, **out)


if __name__ == "__main__":
    main()
