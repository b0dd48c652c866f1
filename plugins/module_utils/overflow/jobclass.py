# -*- coding: utf-8 -*-
"""Job classes for the overflow rule, read from YAML and validated.

File layout:
    defaults:                  # optional, shared by all classes; a class may override any of them
      link_bps: 5Gbps          # effective (sustained) link to cloud storage
      dispatch: 10min
      cloud_queue_wait: 15min
    classes:
      small-input:
        input_size: 20GB
        output_size: 2GB
        image_size: 12GB
        typical_runtime: 2h
        data_may_leave_site: true
        gpu_type: NVIDIA A100-SXM4-80GB
        gpus: 1
        queue_wait_threshold: 30min
        slurm:                 # optional: which Slurm jobs are of this class
          partition: cloudable # any of partition, qos, account; a job matches when all given ones are equal
        kubernetes:            # optional: which Kubernetes Jobs are of this class
          namespace: ml-batch  # any of namespace, queue (the Kueue LocalQueue, label kueue.x-k8s.io/queue-name);
          queue: cloud-ok      # a Job matches when all given ones are equal
        image_pins:            # optional: the on-prem digest of an image no on-prem node reports (prepull.py)
          - registry.site.example/ml/train@sha256:<64 hex>
        allow_unpinned_images: false   # true: an image without an on-prem digest moves unpinned, not pre-pulled
    restricted_placement:      # optional: node labels and taints that mark restricted-data placement
      labels: [site.example/data-class]   # a Job whose nodeSelector or node affinity names one never moves
      taints: [site.example/restricted]   # a Job that tolerates one (or every taint) never moves
    cost:                      # optional, read by load_cost() (the drill's cost section)
      prices: {gpu_hour: 3.0, storage_gb_month: 0.02, ...}   # cost.PRICE_FIELDS
      operator_minutes_per_move: 10                          # hands-on time per operator-driven move
      warm_pool_gpus: 0                                      # GPUs kept idle in a warm pool
Errors name the file and the field; unknown keys are rejected.
A Slurm job's class comes only from its partition, QOS and account, facts the site controls
(slurm_class); a Kubernetes Job's only from its namespace and Kueue LocalQueue (kubernetes_class:
the site creates the LocalQueues each namespace may use; without Kueue nothing checks the queue
label, so such a site maps by namespace alone). A label the submitter sets on the Job is never
read. A job that matches no class, or more than one, has no class and never moves. Two
classes may not declare the same `slurm` or `kubernetes` match.
Label and taint keys under node-restriction.kubernetes.io/ always mark restricted placement
(RESTRICTED_PREFIX); `restricted_placement` adds the site's own.
"""
from __future__ import annotations

import re

from . import timemodel

PIN = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")

# field -> (kind, required)
CLASS_FIELDS = {
    "description": ("str", False),
    "input_size": ("size", True),
    "output_size": ("size", True),
    "image_size": ("size", True),
    "typical_runtime": ("duration", True),
    "data_may_leave_site": ("bool", True),
    "gpu_type": ("str", True),
    "gpus": ("posint", False),
    "queue_wait_threshold": ("duration", True),
    "cloud_runtime": ("duration", False),
    "inputs_in_cloud": ("bool", False),
    "image_cached": ("bool", False),
    "min_gain": ("duration", False),
    "slurm": ("slurm", False),
    "kubernetes": ("kubernetes", False),
    "image_pins": ("pins", False),
    "allow_unpinned_images": ("bool", False),
}
SLURM_FIELDS = ("partition", "qos", "account")
KUBERNETES_FIELDS = ("namespace", "queue")
# The label Kueue reads a Job's LocalQueue from.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
RESTRICTED_PREFIX = "node-restriction.kubernetes.io/"
PLACEMENT_FIELDS = ("labels", "taints")
DEFAULT_FIELDS = {
    "link_bps": ("rate", True),
    "return_link_bps": ("rate", False),
    "dispatch": ("duration", False),
    "cloud_queue_wait": ("duration", False),
    "startup": ("duration", False),
}
BUILTIN = {"dispatch": 0.0, "cloud_queue_wait": 0.0, "startup": 0.0, "gpus": 1, "inputs_in_cloud": False,
           "image_cached": True, "min_gain": 0.0, "allow_unpinned_images": False}


class JobClasses(dict):
    """{class name: resolved settings}, with the site's restricted placement
    ({"labels": [keys], "taints": [keys]}) as `restricted_placement`."""

    restricted_placement = {"labels": [], "taints": []}


class JobClassError(ValueError):
    """Invalid job class file. `errors` lists every problem found."""

    def __init__(self, errors):
        super(JobClassError, self).__init__("; ".join(errors))
        self.errors = errors


def _convert(kind, value):
    if kind == "size":
        return timemodel.parse_size(value)
    if kind == "rate":
        return timemodel.parse_rate(value)
    if kind == "duration":
        return timemodel.parse_duration(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError("must be true or false, not %r" % (value,))
        return value
    if kind in ("slurm", "kubernetes"):
        allowed = SLURM_FIELDS if kind == "slurm" else KUBERNETES_FIELDS
        if not isinstance(value, dict) or not value:
            raise ValueError("must be a mapping of at least one of %s, not %r" % (", ".join(allowed), value))
        unknown = sorted(str(k) for k in value if k not in allowed)
        if unknown:
            raise ValueError("unknown key %s (allowed: %s)" % (", ".join(unknown), ", ".join(allowed)))
        for k, v in value.items():
            if not isinstance(v, str) or not v:
                raise ValueError("%s must be a non-empty string, not %r" % (k, v))
        return dict(value)
    if kind == "pins":
        if not isinstance(value, list):
            raise ValueError("must be a list of <repo>@sha256:<64 hex>, not %r" % (value,))
        bad = [p for p in value if not isinstance(p, str) or not PIN.match(p)]
        if bad:
            raise ValueError("%s: not <repo>@sha256:<64 hex>" % ", ".join(repr(p) for p in bad))
        return list(value)
    if kind == "posint":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError("must be a whole number of at least 1, not %r" % (value,))
        return value
    if not isinstance(value, str) or not value:
        raise ValueError("must be a non-empty string, not %r" % (value,))
    return value


def _read_block(source, where, block, fields, errors, require=True):
    out = {}
    if not isinstance(block, dict):
        errors.append("%s: %s: must be a mapping" % (source, where))
        return out
    for key in block:
        if key not in fields:
            errors.append("%s: %s.%s: unknown key (allowed: %s)" % (source, where, key, ", ".join(sorted(fields))))
    for key, (kind, required) in fields.items():
        if key not in block:
            if required and require:
                errors.append("%s: %s.%s: required" % (source, where, key))
            continue
        try:
            out[key] = _convert(kind, block[key])
        except ValueError as exc:
            errors.append("%s: %s.%s: %s" % (source, where, key, exc))
    return out


def validate(data, source="<job classes>"):
    """Validate parsed YAML. Returns {class name: resolved settings (bytes, seconds, bit/s)}."""
    errors = []
    if not isinstance(data, dict):
        raise JobClassError(["%s: top level must be a mapping with 'classes'" % source])
    for key in data:
        if key not in ("defaults", "classes", "cost", "restricted_placement"):
            errors.append("%s: %s: unknown key (allowed: classes, cost, defaults, restricted_placement)" % (source, key))
    if "cost" in data:
        _read_cost(source, data["cost"], errors)
    placement = _read_placement(source, data.get("restricted_placement"), errors)
    defaults = {}
    if "defaults" in data:
        defaults = _read_block(source, "defaults", data["defaults"], DEFAULT_FIELDS, errors, require=False)
    classes = data.get("classes")
    if not isinstance(classes, dict) or not classes:
        errors.append("%s: classes: required, a mapping of class name to settings" % source)
        raise JobClassError(errors)
    resolved = JobClasses()
    resolved.restricted_placement = placement
    for name, block in classes.items():
        where = "classes.%s" % name
        fields = dict(CLASS_FIELDS)
        fields.update({k: (kind, False) for k, (kind, dummy) in DEFAULT_FIELDS.items()})
        own = _read_block(source, where, block, fields, errors)
        merged = dict(BUILTIN)
        merged.update(defaults)
        merged.update(own)
        if "link_bps" not in merged:
            errors.append("%s: %s.link_bps: required (here or in defaults)" % (source, where))
        merged["name"] = str(name)
        merged["restricted"] = not merged.get("data_may_leave_site", False)
        resolved[str(name)] = merged
    seen = {}
    for name, cls in resolved.items():
        for kind in ("slurm", "kubernetes"):
            if kind in cls:
                key = (kind, tuple(sorted(cls[kind].items())))
                if key in seen:
                    errors.append("%s: classes.%s.%s: the same match as class %s" % (source, name, kind, seen[key]))
                seen.setdefault(key, name)
    if errors:
        raise JobClassError(errors)
    return resolved


def slurm_class(classes, partition=None, qos=None, account=None):
    """The class of a Slurm job from its partition, QOS and account: the one class whose `slurm`
    fields all equal the job's. None when no class matches, or when several do (an ambiguous job
    never moves: a restricted match must not be outweighed by a movable one)."""
    job = {"partition": partition, "qos": qos, "account": account}
    found = [name for name, cls in classes.items()
             if cls.get("slurm") and all(job.get(k) == v for k, v in cls["slurm"].items())]
    return found[0] if len(found) == 1 else None


def kubernetes_class(classes, namespace=None, queue=None):
    """The class of a Kubernetes Job from its namespace and Kueue LocalQueue: the one class whose
    `kubernetes` fields all equal the Job's. None when no class matches, or when several do."""
    job = {"namespace": namespace, "queue": queue}
    found = [name for name, cls in classes.items()
             if cls.get("kubernetes") and all(job.get(k) == v for k, v in cls["kubernetes"].items())]
    return found[0] if len(found) == 1 else None


def _read_placement(source, block, errors):
    out = {"labels": [], "taints": []}
    if block is None:
        return out
    if not isinstance(block, dict):
        errors.append("%s: restricted_placement: must be a mapping of labels and taints" % source)
        return out
    for key in block:
        if key not in PLACEMENT_FIELDS:
            errors.append("%s: restricted_placement.%s: unknown key (allowed: %s)" % (source, key, ", ".join(PLACEMENT_FIELDS)))
    for key in PLACEMENT_FIELDS:
        value = block.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            errors.append("%s: restricted_placement.%s: must be a list of label or taint keys, not %r" % (source, key, value))
        else:
            out[key] = list(value)
    return out


COST_FIELDS = ("prices", "operator_minutes_per_move", "warm_pool_gpus")


def _read_cost(source, block, errors):
    from .cost import PRICE_FIELDS
    out = {"prices": {}, "operator_minutes_per_move": 0.0, "warm_pool_gpus": 0}
    if not isinstance(block, dict):
        errors.append("%s: cost: must be a mapping" % source)
        return out
    for key in block:
        if key not in COST_FIELDS:
            errors.append("%s: cost.%s: unknown key (allowed: %s)" % (source, key, ", ".join(COST_FIELDS)))
    prices = block.get("prices") or {}
    if not isinstance(prices, dict):
        errors.append("%s: cost.prices: must be a mapping" % source)
        prices = {}
    for key, value in prices.items():
        if key not in PRICE_FIELDS:
            errors.append("%s: cost.prices.%s: unknown price (allowed: %s)" % (source, key, ", ".join(PRICE_FIELDS)))
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            errors.append("%s: cost.prices.%s: must be a number of at least 0, not %r" % (source, key, value))
        else:
            out["prices"][key] = float(value)
    for key in ("operator_minutes_per_move", "warm_pool_gpus"):
        if key in block:
            value = block[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                errors.append("%s: cost.%s: must be a number of at least 0, not %r" % (source, key, value))
            else:
                out[key] = value
    return out


def load_cost(path):
    """The optional `cost` block of a job class file: {"prices", "operator_minutes_per_move", "warm_pool_gpus"}."""
    import yaml
    try:
        with open(path) as fh:
            data = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError) as exc:
        raise JobClassError(["%s: cannot read: %s" % (path, exc)])
    errors = []
    out = _read_cost(path, (data or {}).get("cost") or {}, errors) if isinstance(data, dict) else None
    if errors or out is None:
        raise JobClassError(errors or ["%s: top level must be a mapping" % path])
    return out


def load(path):
    """Read and validate a job class YAML file."""
    import yaml
    try:
        with open(path) as fh:
            data = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError) as exc:
        raise JobClassError(["%s: cannot read: %s" % (path, exc)])
    return validate(data, source=path)
