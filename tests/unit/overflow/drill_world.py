"""A fake kubelet for the drill tests: it runs the test Job's pods in the cloud API emulator."""
import os
import threading
import time

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends, rsync_stager


class Kubelet(object):
    """Runs every pod in the namespace: Running for `hold_s`, then `output(job_id, attempt_id)` puts the
    job's output in cloud storage and answers (checksum, where), the pod log gets the OVF_OUTPUT line the
    upload step prints, and the pod Succeeds."""

    def __init__(self, kube, ns, output, hold_s=0.6):
        self.kube, self.ns, self.output, self.hold_s = kube, ns, output, hold_s
        self.running = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stop.is_set():
            try:
                self.tick()
            except Exception:       # a pod deleted between list and patch: look again next tick
                pass
            time.sleep(0.05)

    def tick(self):
        for pod in self.kube.list_pods(self.ns):
            name = pod["metadata"]["name"]
            phase = (pod.get("status") or {}).get("phase")
            if pod["metadata"].get("deletionTimestamp") or phase in ("Succeeded", "Failed"):
                continue
            if phase != "Running":
                self.kube.core.patch_namespaced_pod_status(name, self.ns, {"status": {"phase": "Running"}})
                self.running[name] = time.time()
            elif time.time() - self.running.get(name, 0) >= self.hold_s:
                env = dict((e["name"], e.get("value")) for e in pod["spec"]["containers"][0].get("env") or [])
                line = "OVF_OUTPUT %s %s\n" % self.output(env["OVF_JOB_ID"], env["OVF_ATTEMPT_ID"])
                api = self.kube.core.api_client
                req = api.param_serialize("PUT", "/api/v1/namespaces/%s/pods/%s/log" % (self.ns, name),
                                          header_params={"Content-Type": "text/plain"}, body=line,
                                          auth_settings=["BearerToken"])
                api.call_api(*req).read()
                self.kube.core.patch_namespaced_pod_status(name, self.ns, {"status": {"phase": "Succeeded"}})

    def close(self):
        self.stop.set()
        self.thread.join(5)


def memory_output(storage):
    """Output into backends.MemoryStorage (what MemoryStager returns)."""
    def put(job_id, attempt_id):
        data = ("output of %s %s" % (job_id, attempt_id)).encode()
        storage.cloud_outputs[job_id] = data
        return backends.sha256_hex(data), "jobs/%s/output" % job_id
    return put


def rsync_output(remote_root):
    """Output where the rsync stager fetches it (<remote_root>/jobs/<job>/<attempt>/output/), as the upload step writes it."""
    def put(job_id, attempt_id):
        out = os.path.join(remote_root, "jobs", job_id, attempt_id, "output")
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "drill.txt"), "w") as fh:
            fh.write("%s\n" % job_id)
        return rsync_stager.tree_digest(out), out
    return put
