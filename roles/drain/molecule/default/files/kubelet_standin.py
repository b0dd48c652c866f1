#!/usr/bin/env python3
"""A minimal kubelet stand-in for the drain scenario's two Nodes (no agent runs for them).

Every second: post a Ready heartbeat for each Node, report every pod of the scenario's
namespace bound to one of them as Running and Ready (what a kubelet does once the containers
started), and confirm the deletion of a pod that is terminating there (a kubelet's grace-0
delete once the containers stopped). Stops when the namespace is gone (cleanup deleted it) or after --seconds.
Talks only to the emulator given by --api. The admin token comes from HGPU_MOL_TOKEN.
"""
import argparse
import datetime
import json
import os
import ssl
import time
import urllib.error
import urllib.request


def call(args, ctx, method, path, body=None, ctype="application/merge-patch+json"):
    req = urllib.request.Request(args.api + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None)
    req.add_header("Authorization", "Bearer " + os.environ["HGPU_MOL_TOKEN"])
    if body is not None:
        req.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--node", action="append", required=True)
    ap.add_argument("--seconds", type=float, default=240)
    args = ap.parse_args()
    ctx = ssl.create_default_context(cafile=args.ca)
    end = time.monotonic() + args.seconds
    seen_ns = False
    while time.monotonic() < end:
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        status, _ = call(args, ctx, "GET", "/api/v1/namespaces/%s" % args.namespace)
        if status == 404 and seen_ns:
            return 0
        seen_ns = seen_ns or status == 200
        for node in args.node:
            call(args, ctx, "PATCH", "/api/v1/nodes/%s/status" % node, {"status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "molecule kubelet stand-in", "lastHeartbeatTime": now,
                 "lastTransitionTime": now}]}})
        status, pods = call(args, ctx, "GET", "/api/v1/namespaces/%s/pods" % args.namespace)
        for pod in pods.get("items", []) if status == 200 else []:
            st = pod.get("status") or {}
            meta = pod["metadata"]
            if pod["spec"].get("nodeName") in args.node and meta.get("deletionTimestamp"):
                call(args, ctx, "DELETE", "/api/v1/namespaces/%s/pods/%s" % (args.namespace, meta["name"]),
                     {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                      "preconditions": {"uid": meta["uid"]}}, ctype="application/json")
                continue
            if pod["spec"].get("nodeName") in args.node and st.get("phase") in (None, "Pending"):
                call(args, ctx, "PATCH", "/api/v1/namespaces/%s/pods/%s/status"
                     % (args.namespace, pod["metadata"]["name"]),
                     {"status": {"phase": "Running", "startTime": now, "conditions": [
                         {"type": "PodScheduled", "status": "True"},
                         {"type": "Ready", "status": "True", "lastTransitionTime": now}]}})
        time.sleep(1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
