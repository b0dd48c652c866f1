# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pods and Jobs of a cluster before and after a change, and what the change affected.

Used by the upgrade rehearsal to show whether jobs on other nodes were affected: a pod on
another node that was replaced (new uid) or failed, or a Job that gained failures or a
Failed condition, counts as affected. Pods and Jobs that were deleted (by their owners, in a
shared cluster) are listed under ``deleted`` but not counted: deletion says nothing about the
change. Pods that finished normally and unscheduled pods are not checked.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type


def _job_state(job):
    status = job.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return {"active": status.get("active") or 0, "succeeded": status.get("succeeded") or 0,
            "failed": status.get("failed") or 0, "complete": conds.get("Complete") == "True",
            "failed_condition": conds.get("Failed") == "True"}


def snapshot(kube, namespace=None):
    pods = {}
    for pod in kube.list_pods(namespace):
        meta = pod.get("metadata") or {}
        pods["%s/%s" % (meta.get("namespace"), meta.get("name"))] = {
            "node": (pod.get("spec") or {}).get("nodeName"), "uid": meta.get("uid"),
            "phase": (pod.get("status") or {}).get("phase")}
    jobs = {}
    for job in kube.list_jobs(namespace):
        meta = job.get("metadata") or {}
        jobs["%s/%s" % (meta.get("namespace"), meta.get("name"))] = _job_state(job)
    return {"pods": pods, "jobs": jobs}


def compare(before, after, exclude_nodes=()):
    """{'affected': bool, 'pods': [...], 'jobs': [...], 'unchanged_pods': n, 'checked_jobs': n}."""
    exclude = set(exclude_nodes)
    pods, jobs, deleted = [], [], []
    checked = 0
    for key, old in sorted(before.get("pods", {}).items()):
        if not old.get("node") or old.get("node") in exclude or old.get("phase") in ("Succeeded", "Failed"):
            continue
        checked += 1
        new = after.get("pods", {}).get(key)
        if new is None:
            deleted.append({"pod": key, "node": old["node"]})
        elif new.get("uid") != old.get("uid"):
            pods.append({"pod": key, "node": old["node"], "problem": "replaced (new uid)"})
        elif new.get("phase") == "Failed":
            pods.append({"pod": key, "node": old["node"], "problem": "failed"})
    for key, old in sorted(before.get("jobs", {}).items()):
        new = after.get("jobs", {}).get(key)
        if new is None:
            deleted.append({"job": key})
        elif new["failed"] > old["failed"] or (new["failed_condition"] and not old["failed_condition"]):
            jobs.append({"job": key, "problem": "failures went from %d to %d%s" % (
                old["failed"], new["failed"], ", Failed condition set" if new["failed_condition"] else "")})
    return {"affected": bool(pods or jobs), "pods": pods, "jobs": jobs, "deleted": deleted,
            "checked_pods": checked,
            "checked_jobs": len(before.get("jobs", {}))}
