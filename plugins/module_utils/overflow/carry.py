# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Carry a queued job to the cloud: the cloud Job's pod spec is made from the job itself.

Kubernetes (k8s_pod_spec): the cloud pod spec is built from an allowlist of the queued Job's pod
template (podspec.py): the containers' image, command, args, env, resources,
working directory, ports without host ports, volume mounts of the allowed volume kinds (emptyDir,
downwardAPI, a staged PVC), a non-privileged security context (no privileged, no added
capabilities, seccomp and AppArmor RuntimeDefault only), and the fields kube-apiserver defaults
(dnsPolicy, schedulerName, terminationMessagePath, ...) only with their default values. Any other
field, or a listed field with another value, is refused with its path named
(`spec.template.spec.hostNetwork`), before anything is held or sent. A placement that selects
restricted data (restricted_placement) is refused too. Only what must change for the cloud is
rewritten; each rewrite is one entry {"field", "from", "to", "why"}:
- nodeSelector and tolerations become the cloud pool's (`node_selector`, `tolerations`; the GPU
  product label becomes `cloud_gpu_type`, and is dropped when that is not set);
- an image whose reference starts with a `registry_map` key gets that prefix replaced;
- a volume whose PVC is one of `staged_claims` (the job's inputs, staged by the collection)
  becomes an emptyDir that the upload step fills from cloud storage before the job starts;
- the main container (the one asking for GPUs, else the first) runs inside the upload step
  (upload_step.py), which uploads the declared outputs with a sha256 manifest when it ends.
What cannot be mapped is refused (CarryRefused, naming everything the job needs): a hostPath,
any other PVC (with its storage class), a configMap, secret, projected or other volume (they would
carry the site's configuration and secrets out of it), env naming an on-prem
service (`onprem_services`, or any `*.svc` / `*.svc.cluster.local` name), env from a Secret or
ConfigMap, an image from an `onprem_registries` prefix with no mapping, a main container without
a command (its image entrypoint is unknown, so it cannot be wrapped), no declared outputs.

Slurm (slurm_pod_spec): the batch script runs in the image its `#SBATCH --container-image` names
(Pyxis), else `image`, with the job's GPUs, CPUs, memory and time limit, in its working directory.
"""
from __future__ import annotations

import inspect
import json

from . import upload_step
from .podspec import POD_PATH, build, disallowed_fields, restricted_placement

GPU = "nvidia.com/gpu"
GPU_PRODUCT = "nvidia.com/gpu.product"
OUTPUTS_ANNOTATION = "hybridgpu.io/overflow-outputs"
ALLOWED_VOLUMES = ("emptyDir", "downwardAPI")


class CarryRefused(ValueError):
    """The job needs something on-prem that the cloud cannot have; `needs` lists each thing."""

    def __init__(self, job_id, needs):
        self.needs = list(needs)
        ValueError.__init__(self, "job %s cannot run in the cloud: it needs %s" % (job_id, "; ".join(self.needs)))


def _rw(rewrites, field, old, new, why):
    rewrites.append({"field": field, "from": old, "to": new, "why": why})


def map_image(image, registry_map):
    """Image reference through the registry mapping (longest matching prefix); None when unmapped."""
    for prefix in sorted(registry_map or {}, key=len, reverse=True):
        if image.startswith(prefix):
            return registry_map[prefix] + image[len(prefix):]
    return None


def _onprem_names(tpl):
    return [n for n in tpl.get("onprem_services") or [] if n]


def _env_needs(container, tpl):
    needs = []
    names = _onprem_names(tpl)
    for item in container.get("env") or []:
        value = str(item.get("value") or "")
        src = item.get("valueFrom") or {}
        for kind in ("secretKeyRef", "configMapKeyRef"):
            if kind in src:
                needs.append("env %s from on-prem %s %s" % (item.get("name"), kind[:-6], (src[kind] or {}).get("name")))
        hits = [n for n in names if n in value]
        words = [w for w in value.replace("/", " ").replace(":", " ").split() if ".svc" in w]
        if hits or words:
            needs.append("env %s names on-prem service %s" % (item.get("name"), (hits or words)[0]))
    for src in container.get("envFrom") or []:
        for kind in ("secretRef", "configMapRef"):
            if kind in src:
                needs.append("envFrom on-prem %s %s" % (kind[:-3], (src[kind] or {}).get("name")))
    return needs


def _image(container, tpl, rewrites, needs, where):
    image = container.get("image") or ""
    mapped = map_image(image, tpl.get("registry_map"))
    if mapped is not None:
        if mapped != image:
            container["image"] = mapped
            _rw(rewrites, "%s.image" % where, image, mapped, "registry mapping")
        return
    for prefix in tpl.get("onprem_registries") or []:
        if image.startswith(prefix):
            needs.append("image %s from on-prem registry %s (no registry_map entry)" % (image, prefix))


def _volumes(pod, tpl, claim_classes, rewrites, needs):
    staged = set(tpl.get("staged_claims") or [])
    replaced = {}
    for i, vol in enumerate(pod.get("volumes") or []):
        if not isinstance(vol, dict):
            needs.append("%s.volumes[%d]: a volume" % (POD_PATH, i))
            continue
        name = vol.get("name")
        kinds = [k for k in vol if k != "name"]
        where = "%s.volumes[%d]" % (POD_PATH, i)
        if "hostPath" in vol:
            needs.append("%s: volume %s: hostPath %s" % (where, name, (vol["hostPath"] or {}).get("path")))
        elif len(kinds) != 1 or kinds[0] not in ALLOWED_VOLUMES + ("persistentVolumeClaim",):
            needs.append("%s: volume %s: %s" % (where, name, ", ".join(kinds) or "no source"))
        elif "persistentVolumeClaim" in vol:
            claim = vol["persistentVolumeClaim"].get("claimName")
            if claim in staged:
                new = {"name": name, "emptyDir": {}}
                _rw(rewrites, "volumes.%s" % name, {"persistentVolumeClaim": claim}, {"emptyDir": {}},
                    "on-prem inputs replaced by the staged inputs")
                replaced[name] = claim
                vol.clear()
                vol.update(new)
            else:
                needs.append("%s: volume %s: PVC %s (storage class %s)" % (where, name, claim, (claim_classes or {}).get(claim)
                                                                           or "unknown"))
    return replaced


def _main_container(containers):
    for c in containers:
        if int(((c.get("resources") or {}).get("limits") or {}).get(GPU, 0) or 0):
            return c
    return containers[0]


def _source():
    return inspect.getsource(upload_step)


def wrap(container, step_cfg):
    """The container runs the upload step around its own command and args (both kept as given)."""
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    container["command"] = ["python3", "-c", _source(), json.dumps(step_cfg, sort_keys=True), "--"] + argv
    container.pop("args", None)


def _storage(tpl):
    up = dict(tpl.get("upload") or {})
    missing = [k for k in ("host", "ssh_key", "root") if not up.get(k)]
    if not up.get("known_hosts") and not up.get("host_keys"):
        missing.append("known_hosts or host_keys (the storage host's key is always checked)")
    if missing:
        raise ValueError("job_template.upload needs %s" % ", ".join(missing))
    return up


def inputs_of(job_id, inputs, target_dir):
    """Upload-step input entries: the job's own inputs and its shared datasets into target_dir."""
    own = [it for it in inputs or [] if not it.get("shared")]
    out = [{"dir": target_dir, "remote": "jobs/%s/inputs" % job_id}] if own else []
    for it in inputs or []:
        if it.get("shared"):
            out.append({"dir": target_dir, "remote": "shared/%s" % it["name"], "file": True})
    return out


def _pool(pod, queued, tpl, rewrites):
    # the on-prem GPU product means nothing in the cloud pool: cloud_gpu_type, when set, replaces it
    selector = dict(tpl.get("node_selector") or {})
    old_sel = queued.get("nodeSelector") or {}
    if tpl.get("cloud_gpu_type") and GPU_PRODUCT in old_sel:
        selector[GPU_PRODUCT] = tpl["cloud_gpu_type"].replace(" ", "-")
    if selector != old_sel:
        _rw(rewrites, "nodeSelector", old_sel, selector, "cloud pool")
    if selector:
        pod["nodeSelector"] = selector
    else:
        pod.pop("nodeSelector", None)
    tol = list(tpl.get("tolerations") or [])
    if tol != (queued.get("tolerations") or []):
        _rw(rewrites, "tolerations", queued.get("tolerations") or [], tol, "cloud pool")
    if tol:
        pod["tolerations"] = tol
    else:
        pod.pop("tolerations", None)


def k8s_pod_spec(job_id, job, tpl, inputs=(), claim_classes=None, placement=None):
    """(pod spec, rewrites) for the cloud copy of the queued Job `job`; CarryRefused when it cannot move.
    placement: the site's restricted labels and taints (restricted_placement)."""
    queued = (((job.get("spec") or {}).get("template") or {}).get("spec")) or {}
    restricted = restricted_placement(queued, placement)
    if restricted:
        raise CarryRefused(job_id, ["restricted data, which never leaves the site (its placement selects it: %s)"
                                    % ", ".join(restricted)])
    bad = disallowed_fields(queued)
    if bad:
        raise CarryRefused(job_id, ["only allowlisted pod fields (%s)" % f for f in bad])
    pod = build(queued)
    rewrites, needs = [], []
    containers = pod.get("containers") or []
    if not containers:
        raise CarryRefused(job_id, ["a pod template with containers"])
    for kind in ("initContainers", "containers"):
        for c in pod.get(kind) or []:
            where = "%s.%s" % (kind, c.get("name"))
            _image(c, tpl, rewrites, needs, where)
            needs += ["%s: %s" % (where, n) for n in _env_needs(c, tpl)]
    replaced = _volumes(pod, tpl, claim_classes, rewrites, needs)
    main = _main_container(containers)
    if not main.get("command"):
        needs.append("container %s to name its command (its image entrypoint cannot be wrapped)" % main.get("name"))
    ann = ((job.get("metadata") or {}).get("annotations") or {}).get(OUTPUTS_ANNOTATION)
    outputs = [p.strip() for p in ann.split(",") if p.strip()] if ann else list(tpl.get("outputs") or [])
    if not outputs:
        needs.append("declared outputs (annotation %s or job_template.outputs)" % OUTPUTS_ANNOTATION)
    for key in ("serviceAccountName", "serviceAccount"):
        if queued.get(key):
            needs.append("%s.%s: service account %s" % (POD_PATH, key, queued[key]))
    if needs:
        raise CarryRefused(job_id, needs)
    _pool(pod, queued, tpl, rewrites)
    mounts = [m for m in main.get("volumeMounts") or [] if m.get("name") in replaced]
    for m in mounts:
        if m.get("readOnly"):
            # the upload step writes the staged inputs there from inside the container
            m["readOnly"] = False
            _rw(rewrites, "containers.%s.volumeMounts.%s.readOnly" % (main.get("name"), m["name"]), True, False,
                "the upload step fills the staged inputs")
    target = mounts[0]["mountPath"] if mounts else tpl.get("inputs_dir") or "."
    cfg = {"storage": _storage(tpl), "inputs": inputs_of(job_id, inputs, target), "outputs": outputs}
    if main.get("workingDir"):
        cfg["workdir"] = main["workingDir"]
    wrap(main, cfg)
    _rw(rewrites, "containers.%s.command" % main.get("name"), "the job's command", "upload step around it",
        "outputs uploaded with a sha256 manifest when the command ends")
    pod["restartPolicy"] = "Never"
    return pod, rewrites


def slurm_pod_spec(job_id, req, script, tpl, inputs=()):
    """(pod spec, rewrites) that run a Slurm batch job's script in the cloud.
    req: parsers.slurm_job.job_request; script: parsers.slurm_job.parse_batch_script."""
    image = script.get("container_image") or tpl.get("image")
    if not image:
        raise CarryRefused(job_id, ["an image (#SBATCH --container-image or job_template.image)"])
    rewrites = []
    mapped = map_image(image, tpl.get("registry_map"))
    if mapped is not None and mapped != image:
        _rw(rewrites, "image", image, mapped, "registry mapping")
        image = mapped
    elif mapped is None and any(image.startswith(p) for p in tpl.get("onprem_registries") or []):
        raise CarryRefused(job_id, ["image %s from an on-prem registry (no registry_map entry)" % image])
    outputs = list(tpl.get("outputs") or [])
    if not outputs:
        raise CarryRefused(job_id, ["declared outputs (job_template.outputs)"])
    res = {"limits": {}, "requests": {}}
    if req.get("gpus"):
        res["limits"][GPU] = res["requests"][GPU] = "%d" % req["gpus"]
    if req.get("cpus"):
        res["requests"]["cpu"] = "%d" % req["cpus"]
    if req.get("mem_mb"):
        res["limits"]["memory"] = res["requests"]["memory"] = "%dMi" % req["mem_mb"]
    workdir = req.get("workdir") or "/tmp/ovf-%s" % job_id
    env = [{"name": "SLURM_JOB_ID", "value": str(req["job_id"])},
           {"name": "SLURM_SUBMIT_DIR", "value": workdir}]
    if req.get("cpus"):
        env.append({"name": "SLURM_CPUS_ON_NODE", "value": "%d" % req["cpus"]})
    shell = (script.get("shebang") or "#!/bin/bash")[2:].split() or ["/bin/bash"]
    path = "%s/.ovf-batch-%s" % (workdir, req["job_id"])
    container = {"name": "job", "image": image, "command": shell + [path], "env": env,
                 "resources": dict((k, v) for k, v in res.items() if v)}
    cfg = {"storage": _storage(tpl), "inputs": inputs_of(job_id, inputs, tpl.get("inputs_dir") or workdir),
           "outputs": outputs, "workdir": workdir, "script": {"path": path, "text": script.get("body") or ""}}
    wrap(container, cfg)
    pod = {"restartPolicy": "Never", "containers": [container]}
    selector = dict(tpl.get("node_selector") or {})
    if req.get("gpus") and tpl.get("cloud_gpu_type"):
        selector[GPU_PRODUCT] = tpl["cloud_gpu_type"].replace(" ", "-")
    if selector:
        pod["nodeSelector"] = selector
    if tpl.get("tolerations"):
        pod["tolerations"] = list(tpl["tolerations"])
    if req.get("time_limit_s"):
        pod["activeDeadlineSeconds"] = int(req["time_limit_s"])
    _rw(rewrites, "batch script", "sbatch job %s" % req["job_id"], "container %s" % image,
        "the script runs with the job's TRES in the upload step")
    return pod, rewrites
