# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The control plane's node grace period, read from the cluster where it shows.

kube-controller-manager marks a Node whose kubelet stopped reporting NotReady (Unknown) after
--node-monitor-grace-period. On kubeadm-built and other self-managed clusters it runs as a
static pod whose mirror pod in kube-system (label component=kube-controller-manager) carries
its command line; managed control planes show no such pod. The flag's default is 40 s up to
Kubernetes 1.31 and 50 s from 1.32."""

from __future__ import annotations

import re

FLAG = "--node-monitor-grace-period"
SELECTOR = "component=kube-controller-manager"
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 0.000001, "µs": 0.000001, "ns": 0.000000001}
_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?)(h|ms|us|µs|ns|m|s)")


def parse_duration(text):
    """Seconds in a Go duration ("40s", "1m0s", "1m30.5s"); ValueError when it is not one."""
    value = str(text).strip()
    if value in ("0", "+0", "-0"):
        return 0.0
    pos, total = 0, 0.0
    for m in _PART.finditer(value):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(value) or not value:
        raise ValueError("%r is not a duration such as 40s or 1m0s" % text)
    return total


def default_grace(git_version):
    """The flag's default for a server version ("v1.30.4"): 40 s before 1.32, 50 s after."""
    m = re.match(r"v?(\d+)\.(\d+)", str(git_version or ""))
    if not m:
        return 40.0
    return 50.0 if (int(m.group(1)), int(m.group(2))) >= (1, 32) else 40.0


def flag_value(pod):
    """The flag's value in a pod's containers' command and args, or None when it is not set."""
    spec = pod.get("spec") or {}
    for c in spec.get("containers") or []:
        words = list(c.get("command") or []) + list(c.get("args") or [])
        for i, word in enumerate(words):
            if word == FLAG and i + 1 < len(words):
                return words[i + 1]
            if word.startswith(FLAG + "="):
                return word.split("=", 1)[1]
    return None


def grace_period(pods, git_version):
    """(seconds, source) from the kube-controller-manager pods; (None, why) when none shows.
    Several controller managers (HA control plane) that disagree give the longest."""
    found = []
    for pod in pods:
        name = (pod.get("metadata") or {}).get("name", "?")
        raw = flag_value(pod)
        if raw is None:
            found.append((default_grace(git_version), "%s: flag not set, the default for %s" % (name, git_version)))
            continue
        try:
            found.append((parse_duration(raw), "%s: %s=%s" % (name, FLAG, raw)))
        except ValueError as exc:
            raise ValueError("pod kube-system/%s: %s" % (name, exc))
    if not found:
        return None, "no kube-controller-manager pod in kube-system (a managed control plane does not show one)"
    return max(found)


def link_window(configured, grace, margin):
    """The cut must outlast the grace period so the Node is reported: the configured window, or
    grace + margin when that is longer."""
    if grace is None:
        return int(configured)
    return int(max(int(configured), -(-(grace + margin) // 1)))
