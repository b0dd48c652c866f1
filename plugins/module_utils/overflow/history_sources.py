# -*- coding: utf-8 -*-
"""Job history for the pool-sizing report, read from a Slurm `sacct --parsable2` export or from the
Kubernetes Jobs of a cluster.

Every finished GPU job becomes a tuple in history.FIELDS order with one more item, whether it
completed: (class, submit, start, end, gpus, input_bytes, output_bytes, completed). The class comes
from the job classes file (jobclass): for Slurm from the job's partition, QOS and account
(jobclass.slurm_class), for Kubernetes from the Job's class label; input and output bytes are the
class's declared sizes. A job of no class is kept as UNCLASSIFIED (it counts in the waits, never moves).
Jobs that never started, are still running or asked for no GPU are counted in `skipped`, not analysed.
"""
from __future__ import annotations

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import schema
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import kubectl_node, slurm_job

from . import jobclass
from .history import HistoryError

UNCLASSIFIED = "(no class)"
# The class label a submitter sets on a Job (k8s_backend.CLASS_LABEL): the history reports group by
# it; the overflow rule never reads it (a Job's class there comes from its namespace and LocalQueue).
CLASS_LABEL = "hybridgpu.io/job-class"
GPU_RESOURCE = "nvidia.com/gpu"
SACCT_FIELDS = ("JobID", "State", "Submit", "Start", "End", "Partition")
SACCT_GPU_FIELDS = ("AllocTRES", "ReqTRES")
# sacct prints these for a time that has not happened (yet)
NO_TIME = ("", "Unknown", "None", "N/A")


def _empty_skips():
    return {"not_started": 0, "running": 0, "no_gpu": 0}


def _epoch(text, where, field):
    dt = schema.parse_timestamp(text)
    if dt is None:
        raise HistoryError("%s: field %s: cannot read time %r (ISO 8601, as sacct prints it)" % (where, field, text))
    return dt.timestamp()


def _sizes(classes, name):
    cls = classes.get(name) or {}
    return int(cls.get("input_size", 0)), int(cls.get("output_size", 0))


def _sacct_header(path, line, classes):
    header = line.rstrip("\r\n").split("|")
    if header and header[-1] == "":
        header = header[:-1]   # --parsable (-p) ends every line with a separator
    names = set(header)
    if "JobID" not in names and "JobIDRaw" in names:
        header = ["JobID" if h == "JobIDRaw" else h for h in header]
        names = set(header)
    for field in SACCT_FIELDS:
        if field not in names:
            raise HistoryError("%s: line 1: header lacks field %s (export with sacct --parsable2 --format=%s)"
                               % (path, field, ",".join(SACCT_FIELDS + SACCT_GPU_FIELDS[:1])))
    if not names.intersection(SACCT_GPU_FIELDS):
        raise HistoryError("%s: line 1: header lacks field AllocTRES (or ReqTRES): the GPUs of each job" % path)
    for name, cls in sorted(classes.items()):
        for key in sorted((cls.get("slurm") or {})):
            field = {"partition": "Partition", "qos": "QOS", "account": "Account"}[key]
            if field not in names:
                raise HistoryError("%s: line 1: header lacks field %s (class %s matches Slurm jobs on %s)"
                                   % (path, field, name, key))
    return header


def read_sacct(path, classes):
    """Jobs of a `sacct --parsable2` export (header line first). Returns (records, skipped).

    Step rows (JobID with a dot: 123.batch, 123.0) are left out. A row with the wrong number of
    fields or a time that cannot be read fails naming the file, the line and the field."""
    records, skipped = [], _empty_skips()
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.readlines()
    except OSError as exc:
        raise HistoryError("%s: cannot read: %s" % (path, exc.strerror or exc))
    if not lines:
        raise HistoryError("%s: line 1: empty file, expected the sacct header" % path)
    header = _sacct_header(path, lines[0], classes)
    trailing = lines[0].rstrip("\r\n").endswith("|")
    for number, line in enumerate(lines[1:], 2):
        text = line.rstrip("\r\n")
        if not text.strip():
            continue
        values = text.split("|")
        if trailing and values and values[-1] == "":
            values = values[:-1]
        where = "%s: line %d" % (path, number)
        if len(values) != len(header):
            raise HistoryError("%s: %d fields where the header has %d" % (where, len(values), len(header)))
        row = dict(zip(header, values))
        if not row["JobID"]:
            raise HistoryError("%s: field JobID: empty" % where)
        if "." in row["JobID"]:
            continue
        gpus = max(slurm_job._gpus_from_tres(row.get(f))[0] for f in SACCT_GPU_FIELDS)
        if not gpus:
            skipped["no_gpu"] += 1
            continue
        if row["Start"] in NO_TIME:
            skipped["not_started"] += 1
            continue
        if row["End"] in NO_TIME:
            skipped["running"] += 1
            continue
        submit, start, end = (_epoch(row[f], where, f) for f in ("Submit", "Start", "End"))
        if not submit <= start <= end:
            raise HistoryError("%s: fields Submit, Start, End: times must satisfy Submit <= Start <= End" % where)
        name = jobclass.slurm_class(classes, partition=row.get("Partition") or None, qos=row.get("QOS") or None,
                                    account=row.get("Account") or None) or UNCLASSIFIED
        inb, outb = _sizes(classes, name)
        records.append((name, submit, start, end, gpus, inb, outb, row["State"].startswith("COMPLETED")))
    return records, skipped


def _condition(job, kind):
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None


def job_gpus(job):
    """GPUs a Job asks for: per pod, the containers' nvidia.com/gpu limits (else requests), times parallelism."""
    spec = job.get("spec") or {}
    pod = ((spec.get("template") or {}).get("spec")) or {}
    per_pod = 0
    for container in pod.get("containers") or []:
        res = container.get("resources") or {}
        value = (res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(GPU_RESOURCE)
        number = kubectl_node.parse_quantity(value) if value is not None else None
        per_pod += int(number) if number else 0
    parallelism = spec.get("parallelism")
    return per_pod * (1 if parallelism is None else int(parallelism))


def read_k8s_jobs(items, classes):
    """Jobs from the Kubernetes API (dicts as k8s.Kube.list_jobs returns them). Returns (records, skipped).

    submit = metadata.creationTimestamp; start = status.startTime (with a queue that suspends Jobs
    until admitted, such as Kueue, that is the admission); end = status.completionTime, or the time
    of the Failed condition. completed = the Complete condition is True."""
    records, skipped = [], _empty_skips()
    for job in items:
        meta = job.get("metadata") or {}
        status = job.get("status") or {}
        where = "Job %s/%s" % (meta.get("namespace"), meta.get("name"))
        gpus = job_gpus(job)
        if not gpus:
            skipped["no_gpu"] += 1
            continue
        if not status.get("startTime"):
            skipped["not_started"] += 1
            continue
        failed = _condition(job, "Failed")
        end_text = status.get("completionTime") or (failed or {}).get("lastTransitionTime")
        if not end_text:
            skipped["running"] += 1
            continue
        submit = _epoch(meta.get("creationTimestamp"), where, "metadata.creationTimestamp")
        start = _epoch(status["startTime"], where, "status.startTime")
        end = _epoch(end_text, where, "status.completionTime")
        start = max(start, submit)   # both to the second; a Job is never admitted before it exists
        end = max(end, start)
        label = (meta.get("labels") or {}).get(CLASS_LABEL)
        name = label if label in classes else UNCLASSIFIED
        inb, outb = _sizes(classes, name)
        records.append((name, submit, start, end, gpus, inb, outb, _condition(job, "Complete") is not None))
    return records, skipped
