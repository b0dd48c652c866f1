#!/usr/bin/env python3
"""Benchmark: overflow dispatch throughput against the lab's cloud API emulator.

Measured: N jobs submitted through the overflow cloud backend (create, then confirmed by a
lookup on the job-ID label, as the protocol does) -> jobs per second.
Baseline in the same run: a plain loop of `kubectl create -f job.json` for N Jobs of the same
shape (kubectl at /usr/bin/kubectl, the lab kubeconfig, context cloud). Prints both rates and
their ratio; no thresholds. The Jobs select a node label nothing carries, so they stay Pending
(the node agents run nothing); both namespaces are deleted afterwards.

    .venv/bin/python bench/bench_dispatch.py [--jobs 50]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import k8s  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends as b  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.k8s_backend import (  # noqa: E402
    K8sCloudCluster, build_job)
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.protocol import (  # noqa: E402
    cloud_job_name, job_labels)

KUBECTL = "/usr/bin/kubectl"
NOWHERE = {"hybridgpu.io/bench": "no-such-node"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument("--kubeconfig", default=os.path.join(ROOT, ".lab", "k8s", "kubeconfig"))
    a = ap.parse_args()
    tag = "%x" % int(time.time())
    ns_ovf, ns_kc = "bench-ovf-" + tag, "bench-kubectl-" + tag
    kube = k8s.Kube({"kubeconfig": a.kubeconfig, "context": "cloud"})
    cloud = K8sCloudCluster(kube, namespace=ns_ovf)
    cloud.ensure_namespace()
    kube.ensure_namespace(ns_kc)
    try:
        t = time.monotonic()
        for i in range(a.jobs):
            job_id = "bench-%s-%d" % (tag, i)
            spec = {"command": ["true"], "gpus": 1, "node_selector": NOWHERE}
            spec.update(job_labels(job_id, "att-%d" % i, "policy"))
            res = cloud.submit(cloud_job_name(job_id), job_id, "att-%d" % i, spec)
            assert res.outcome == b.CREATED, res
            found = cloud.find_by_job_id(job_id)
            assert found is not None and found.attempt_id == "att-%d" % i
        ovf_s = time.monotonic() - t

        with tempfile.TemporaryDirectory() as tmp:
            files = []
            for i in range(a.jobs):
                body = build_job("plain-%s-%d" % (tag, i), ns_kc, ["true"], gpus=1, node_selector=NOWHERE)
                path = os.path.join(tmp, "job-%d.json" % i)
                with open(path, "w") as fh:
                    json.dump(body, fh)
                files.append(path)
            env = dict(os.environ, KUBECONFIG=a.kubeconfig)
            t = time.monotonic()
            for path in files:
                # --validate=false: the emulator serves no OpenAPI document for client-side validation
                subprocess.run([KUBECTL, "--context", "cloud", "create", "--validate=false", "-f", path], env=env,
                               check=True, capture_output=True)
            kc_s = time.monotonic() - t
    finally:
        kube.call("delete namespace", kube.core.delete_namespace, ns_ovf)
        kube.call("delete namespace", kube.core.delete_namespace, ns_kc)
    ovf_rate, kc_rate = a.jobs / ovf_s, a.jobs / kc_s
    print("jobs: %d" % a.jobs)
    print("overflow submit + confirm: %.2f s  (%.1f jobs/s, %d API calls)" % (ovf_s, ovf_rate, kube.calls))
    print("kubectl create loop:       %.2f s  (%.1f jobs/s)" % (kc_s, kc_rate))
    print("ratio (overflow / kubectl): %.2fx" % (ovf_rate / kc_rate))


if __name__ == "__main__":
    main()
