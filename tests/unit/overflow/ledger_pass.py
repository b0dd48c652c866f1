"""One overflow pass in a fresh process, as a scheduled AWX job runs it: dispatch_run.run with the
Kubernetes ledger, the Kubernetes local queue and cloud on the API emulator. Only the stager is a
stand-in (no storage host in unit tests), and the cloud Job's output checksum is read from the Job's
annotation (the emulator runs no containers, so there is no log line to read).

usage: ledger_pass.py SETTINGS.json   (prints the pass's result as JSON on the last line)
   or: ledger_pass.py SETTINGS.json commit JOB_ID ATTEMPT_ID   (one commit, no pass)
A file named by settings["go"] is waited for first, so that several processes start together."""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
import hgpu_testenv  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import dispatch_run  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.ledger import open_ledger  # noqa: E402

assert hgpu_testenv.COLLECTIONS
CHECKSUM_ANNOTATION = "test.hybridgpu.io/output-checksum"


class NullStager(object):
    """Staging that always lands at once; returns are the checksum the cloud Job reported."""

    def __init__(self):
        self.last = {}

    def stage_inputs(self, job_id, inputs):
        return {"files": len(inputs), "bytes": 0}

    def ensure_image(self, job_id, image):
        return {"outcome": "cached"}

    def fetch_outputs(self, job_id, cloud_job):
        return {"checksum": cloud_job.output_checksum, "ref": "results/%s" % job_id}


def reported_checksum(cloud):
    original = cloud._cloud_job      # pylint: disable=protected-access

    def read(job, pods):
        cj = original(job, pods)
        got = (job["metadata"].get("annotations") or {}).get(CHECKSUM_ANNOTATION)
        if got and cj.phase == "failed" and "checksum" in (cj.reason or ""):
            cj.phase, cj.reason, cj.output_checksum = "succeeded", None, got
        return cj
    cloud._cloud_job = read          # pylint: disable=protected-access
    return cloud


def main():
    with open(sys.argv[1], encoding="utf-8") as fh:
        settings = json.load(fh)
    while settings.get("go") and not os.path.exists(settings["go"]):
        time.sleep(0.02)
    if sys.argv[2:3] == ["commit"]:
        ledger = open_ledger(settings["ledger"])
        print(json.dumps(ledger.commit(sys.argv[3], sys.argv[4], "sha256:" + sys.argv[4], settings["actor"])))
        return
    dispatch_run.build_stager = lambda opts: NullStager()
    build_cloud = dispatch_run.build_cloud
    dispatch_run.build_cloud = lambda opts: reported_checksum(build_cloud(opts))
    out = dispatch_run.run(dict(settings["params"], actor=settings["actor"], ledger=settings["ledger"]))
    print(json.dumps({"busy": out.get("busy"), "results": out["results"],
                      "decisions": [(d["job_id"], d["decision"], d["reason"]) for d in out["decisions"]]},
                     default=str))


if __name__ == "__main__":
    main()
