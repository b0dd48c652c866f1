# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run one Kubernetes Job and read back where and how its Pod ran.

Builds a batch/v1 Job (backoffLimit 0, restartPolicy Never) pinned by required node
affinity on a hostname and/or a nodeSelector, creates it through ``k8s.Kube``, polls the
Job and its Pod until it finishes (or, for placement checks, only until it is scheduled),
and returns plain facts: the Pod's node, phase, exit code and log.
"""
from __future__ import annotations

import time

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError


def job_manifest(name, namespace, image, command, args=None, env=None, node_name=None,
                 node_selector=None, gpus=0, labels=None, annotations=None, tolerations=None,
                 active_deadline_s=None):
    """The Job body. ``node_name`` becomes a required node affinity on kubernetes.io/hostname
    (not spec.nodeName, so the scheduler, taints and capacity still decide)."""
    container = {"name": "main", "image": image, "command": list(command)}
    if args:
        container["args"] = list(args)
    if env:
        container["env"] = [{"name": var["name"], "value": str(var["value"])} for var in env]
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    pod_spec = {"restartPolicy": "Never", "containers": [container]}
    if node_name:
        pod_spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node_name]}]}]}}}
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        pod_spec["tolerations"] = list(tolerations)
    meta = {"labels": dict(labels or {})}
    if annotations:
        meta["annotations"] = dict(annotations)
    spec = {"backoffLimit": 0, "template": {"metadata": meta, "spec": pod_spec}}
    if active_deadline_s:
        spec["activeDeadlineSeconds"] = int(active_deadline_s)
    body = {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
            "spec": spec}
    if annotations:
        body["metadata"]["annotations"] = dict(annotations)
    return body


def _exit_code(pod):
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (status.get("state") or {}).get("terminated")
        if term and term.get("exitCode") is not None:
            return term["exitCode"]
    return None


def pod_facts(pod):
    if not pod:
        return {"pod": None, "node": None, "phase": None, "exit_code": None}
    return {"pod": pod["metadata"]["name"], "node": (pod.get("spec") or {}).get("nodeName"),
            "phase": (pod.get("status") or {}).get("phase"), "exit_code": _exit_code(pod)}


class JobRun(object):
    """Create/await/read back one Job. ``clock``/``sleep`` are injectable for tests."""

    def __init__(self, kube, namespace, name, poll=0.5, clock=time.time, sleep=time.sleep):
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.poll = poll
        self.clock = clock
        self.sleep = sleep

    def create(self, body):
        self.kube.ensure_namespace(self.namespace)
        try:
            self.kube.create_job(self.namespace, body)
            return True
        except K8sError as err:
            if err.conflict:
                return False
            raise

    def replace(self, body, timeout=30.0):
        """Create the Job; a Job of that name left from an earlier run is deleted first (its Pods
        may linger a while: wait() tells them apart by their owner). Returns whether one was there."""
        self.kube.ensure_namespace(self.namespace)
        start, replaced = self.clock(), False
        while True:
            try:
                self.kube.create_job(self.namespace, body)
                return replaced
            except K8sError as err:
                if not err.conflict:
                    raise
            if replaced:
                if self.clock() - start >= timeout:
                    raise K8sError("replace job %s/%s" % (self.namespace, self.name), status=409,
                                   reason="AlreadyExists",
                                   message="the earlier Job of that name was still there after %ss" % timeout)
                self.sleep(self.poll)
            else:
                self.delete()
                replaced = True

    def pod(self, owner_uid=None):
        """The Job's newest Pod; with owner_uid, only a Pod of that Job (not of an earlier Job of
        the same name whose Pods are still going)."""
        pods = self.kube.list_pods(self.namespace, label_selector="job-name=%s" % self.name)
        if owner_uid:
            pods = [p for p in pods if any(r.get("uid") == owner_uid
                                           for r in p["metadata"].get("ownerReferences") or [])]
        if not pods:
            return None
        return sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")[-1]

    def wait(self, timeout, until="finished"):
        """Poll until the Job finished (until='finished') or its Pod has a node
        (until='scheduled'). Returns facts; ``timed_out`` says whether the wait ran out."""
        start = self.clock()
        scheduled_at = None
        while True:
            job = self.kube.get_job(self.namespace, self.name)
            if job is None:
                raise K8sError("wait for job %s/%s" % (self.namespace, self.name),
                               status=404, reason="NotFound", message="the Job disappeared")
            status = job.get("status") or {}
            pod = self.pod((job.get("metadata") or {}).get("uid"))
            facts = pod_facts(pod)
            if facts["node"] and scheduled_at is None:
                scheduled_at = self.clock()
            done = bool(status.get("succeeded") or status.get("failed"))
            if until == "scheduled" and facts["node"]:
                break
            if until == "finished" and done:
                break
            if self.clock() - start >= timeout:
                facts.update(self._finish(status, start, scheduled_at, timed_out=True))
                return facts
            self.sleep(self.poll)
        facts.update(self._finish(status, start, scheduled_at, timed_out=False))
        if until == "finished" and facts["pod"]:
            facts["log"] = self.log(facts["pod"])
        return facts

    def _finish(self, status, start, scheduled_at, timed_out):
        return {"succeeded": bool(status.get("succeeded")), "failed": bool(status.get("failed")),
                "timed_out": timed_out, "waited_s": round(self.clock() - start, 2),
                "scheduled_after_s": round(scheduled_at - start, 2) if scheduled_at else None}

    def log(self, pod_name):
        try:
            return self.kube.pod_log(self.namespace, pod_name)
        except Exception:  # a log that cannot be read is reported, not fatal
            return ""

    def delete(self):
        return self.kube.delete_job(self.namespace, self.name, propagation="Background")
