"""The lab's queued jobs as their users write them, and the local reference run of the same job.

The user's program is ovfjob.py `train` (deterministic: the output depends only on the inputs and
the parameters). A Kubernetes user writes a Job that reads its inputs from a PVC and writes
`output/` in its working directory; a Slurm user writes a batch script that does the same from
its working directory. Neither knows about overflow: the collection carries the job (carry.py),
stages the inputs where the job reads them and uploads `output/` with a manifest (upload_step.py).

The settings the overflow pass needs for these jobs (job_template) match
inventories/lab/group_vars/all.yml: `ovf-inputs` is the claim that holds a job's inputs,
`output` the declared output, uploads go to cloud-storage with the key the lab gives cloud nodes.
"""
import os
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
JOB_SCRIPT = os.path.join(HERE, "ovfjob.py")
INPUTS_CLAIM = "ovf-inputs"
CLOUD_NODE_STORAGE_KEY = "/etc/hybridgpu-lab/storage_id_ed25519"
CLASS_LABEL = "hybridgpu.io/job-class"
# The user picks the LocalQueue; the site's job classes map it to a class (job_classes.yml `kubernetes`).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CLASSES = os.path.join(HERE, "job_classes.yml")
GPU_TYPE_ANNOTATION = "hybridgpu.io/gpu-type"


def job_template(storage_host, remote_root, host_keys=None):
    """How the overflow pass makes the cloud Job for the lab's user jobs (module option job_template).
    host_keys: known_hosts lines for the storage host (default: the lab's known_hosts file)."""
    if host_keys is None:
        from lablib import config
        with open(config.path("ssh", "known_hosts")) as fh:
            host_keys = fh.read()
    return {"image": "localhost/overflow-job:1", "staged_claims": [INPUTS_CLAIM], "inputs_dir": "inputs",
            "outputs": ["output"],
            "upload": {"host": storage_host, "ssh_key": CLOUD_NODE_STORAGE_KEY, "root": remote_root,
                       "host_keys": host_keys}}


def train_args(inputs, steps=60, pace=0.0, stop_at=None):
    args = ["train", "--out", "output", "--inputs", inputs, "--steps", str(steps), "--pace", str(pace)]
    return args + (["--stop-at", str(stop_at)] if stop_at is not None else [])


def class_queue(job_class):
    """The LocalQueue the lab's job classes map to `job_class`."""
    import yaml
    with open(CLASSES) as fh:
        return yaml.safe_load(fh)["classes"][job_class]["kubernetes"]["queue"]


def k8s_job(name, job_class, gpus, gpu_type, node_selector, tolerations, **train):
    """The user's Job, in the LocalQueue of its class: the program inline (the lab runs pods as
    processes, not images), inputs on a PVC."""
    mount = "/ovf-jobs/%s/inputs" % name
    container = {"name": "train", "image": "localhost/overflow-job:1",
                 "command": ["python3", "-c", open(JOB_SCRIPT).read()], "args": train_args(mount, **train),
                 "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"nvidia.com/gpu": str(gpus)}},
                 "securityContext": {"allowPrivilegeEscalation": False},
                 "volumeMounts": [{"name": "inputs", "mountPath": mount, "readOnly": True}]}
    pod = {"restartPolicy": "Never", "containers": [container], "nodeSelector": dict(node_selector),
           "tolerations": list(tolerations),
           "volumes": [{"name": "inputs", "persistentVolumeClaim": {"claimName": INPUTS_CLAIM}}]}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {CLASS_LABEL: job_class, QUEUE_LABEL: class_queue(job_class)},
                         "annotations": {GPU_TYPE_ANNOTATION: gpu_type}},
            "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": {CLASS_LABEL: job_class}}, "spec": pod}}}


def slurm_script(**train):
    """The user's batch script: ten minutes, one CPU, the program from a here-document."""
    return "\n".join([
        "#!/bin/bash",
        "#SBATCH --time=00:10:00",
        "#SBATCH --cpus-per-task=1",
        "set -e",
        "python3 - %s <<'OVFJOB'" % " ".join(shlex.quote(a) for a in train_args("inputs", **train)),
        open(JOB_SCRIPT).read().rstrip("\n"),
        "OVFJOB", ""])


def submit_slurm(queue, name, partition, script, cpus=1):
    """sbatch the script (what the user does) from its own working directory; returns Slurm's job ID."""
    workdir = "/tmp/ovf-user/%s" % name
    cmd = "mkdir -p %s && printf '%%s' %s | sbatch --parsable -J %s --partition %s -c %d --chdir %s" % (
        shlex.quote(workdir), shlex.quote(script), shlex.quote(name), shlex.quote(partition), cpus, shlex.quote(workdir))
    dummy, out, dummy = queue.run(cmd)
    return out.strip().split(";")[0]


def reference(inputs, steps=60, stop_at=None):
    """Run the same program locally on the same inputs and build the tree the upload step uploads
    (output/ plus MANIFEST.sha256); returns (tree digest, tree path)."""
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import upload_step
    work = tempfile.mkdtemp(prefix="ovf-ref-")
    args = train_args(inputs, steps=steps, stop_at=stop_at)
    subprocess.run([sys.executable, JOB_SCRIPT] + args, cwd=work, check=True, capture_output=True)
    tree = os.path.join(work, "tree")
    os.makedirs(tree)
    missing = upload_step.collect(["output"], work, tree)
    if missing:
        raise RuntimeError("reference run wrote no %s" % ", ".join(missing))
    return upload_step.tree_digest(tree), tree
