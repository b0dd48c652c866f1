# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The step the collection wraps around a moved job's own command in the cloud Job.

Runs inside the job's container (python3 standard library only; carry.wrap passes this file's
source with `python3 -c`):

    python3 -c <this file> <config JSON> -- <the job's command and args ...>

1. pulls the staged inputs from cloud storage into the directories the job reads them from
   (config "inputs": [{"dir", "remote"}], rsync over SSH with config "storage");
2. runs the job's command unchanged (config "workdir": created and entered first, when set);
   a non-zero exit ends the step with that code and uploads nothing;
3. copies the declared output paths (config "outputs", relative to the working directory or
   absolute) into one tree, writes MANIFEST.sha256 (`sha256sum` lines of every file), uploads the
   tree to `<root>/jobs/<job>/<attempt>/output/` and prints
   `OVF_OUTPUT sha256:<tree digest> <remote dir>`, the line the cloud backend reads.
The job and attempt IDs come from OVF_JOB_ID and OVF_ATTEMPT_ID, set on the container.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

MANIFEST = "MANIFEST.sha256"
OUTPUT_MARK = "OVF_OUTPUT"


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_files(root):
    out = []
    for dirpath, dummy, files in os.walk(root):
        for f in files:
            full = os.path.join(dirpath, f)
            out.append((os.path.relpath(full, root), full))
    return sorted(out)


def manifest_text(root):
    """sha256sum lines (`<hex>  <relpath>`) of every file under root but the manifest itself."""
    return "".join("%s  %s\n" % (file_sha256(full), rel) for rel, full in tree_files(root) if rel != MANIFEST)


def tree_digest(root):
    """sha256 over the sorted `<sha256>  <relpath>` lines of every file (as rsync_stager.tree_digest)."""
    lines = "".join("%s  %s\n" % (file_sha256(full), rel) for rel, full in tree_files(root))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


def collect(outputs, base, dest):
    """Copy each declared output path (file or directory) into dest, keeping its relative path.
    Returns the declared paths that do not exist."""
    missing = []
    for path in outputs:
        src = path if os.path.isabs(path) else os.path.join(base, path)
        rel = path.lstrip("/") if os.path.isabs(path) else os.path.normpath(path)
        target = os.path.join(dest, rel)
        if os.path.isdir(src):
            shutil.copytree(src, target)
        elif os.path.isfile(src):
            os.makedirs(os.path.dirname(target) or dest, exist_ok=True)
            shutil.copy2(src, target)
        else:
            missing.append(path)
    with open(os.path.join(dest, MANIFEST), "w") as fh:
        fh.write(manifest_text(dest))
    return missing


def _ssh(storage):
    words = ["ssh", "-i", storage["ssh_key"], "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
    # The storage host's key is always checked: against known_hosts (a path in the container) or
    # the host_keys lines the Job carries (written to a file of the run's own).
    known = storage.get("known_hosts") or storage["run_known_hosts"]
    words += ["-o", "UserKnownHostsFile=" + known, "-o", "StrictHostKeyChecking=yes"]
    return words


def _remote(storage):
    return "%s@%s" % (storage.get("user") or "root", storage["host"])


def pull_inputs(cfg):
    storage = cfg["storage"]
    for item in cfg.get("inputs") or []:
        os.makedirs(item["dir"], exist_ok=True)
        src = "%s/%s" % (storage["root"].rstrip("/"), item["remote"].strip("/"))
        if item.get("file"):
            src_arg, dest = "%s:%s" % (_remote(storage), src), item["dir"] + "/"
        else:
            src_arg, dest = "%s:%s/" % (_remote(storage), src), item["dir"] + "/"
        subprocess.run(["rsync", "-a", "-e", " ".join(_ssh(storage)), src_arg, dest], check=True)


def upload(cfg, tree, job_id, attempt_id):
    storage = cfg["storage"]
    dest = "%s/jobs/%s/%s/output" % (storage["root"].rstrip("/"), job_id, attempt_id)
    subprocess.run(_ssh(storage) + [_remote(storage), "mkdir -p '%s'" % dest], check=True)
    subprocess.run(["rsync", "-a", "--checksum", "-e", " ".join(_ssh(storage)), tree + "/",
                    "%s:%s/" % (_remote(storage), dest)], check=True)
    return dest


def main(argv):
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: upload_step <config JSON> -- <command ...>\n")
        return 2
    cfg = json.loads(argv[0])
    fd, cfg["storage"]["run_known_hosts"] = tempfile.mkstemp(prefix="ovf-known-hosts-")
    with os.fdopen(fd, "w") as fh:
        fh.write(cfg["storage"].get("host_keys") or "")
    job_id, attempt_id = os.environ.get("OVF_JOB_ID"), os.environ.get("OVF_ATTEMPT_ID")
    if cfg.get("workdir"):
        os.makedirs(cfg["workdir"], exist_ok=True)
        os.chdir(cfg["workdir"])
    if cfg.get("script"):
        with open(cfg["script"]["path"], "w") as fh:
            fh.write(cfg["script"]["text"])
        os.chmod(cfg["script"]["path"], 0o700)
    pull_inputs(cfg)
    code = subprocess.call(argv[2:])
    if code != 0:
        sys.stderr.write("overflow upload step: the job exited %d; nothing uploaded\n" % code)
        return code
    tree = tempfile.mkdtemp(prefix="ovf-output-")
    missing = collect(cfg.get("outputs") or [], os.getcwd(), tree)
    if missing:
        sys.stderr.write("overflow upload step: declared outputs missing: %s\n" % ", ".join(missing))
        return 3
    dest = upload(cfg, tree, job_id, attempt_id)
    sys.stdout.write("%s %s %s\n" % (OUTPUT_MARK, tree_digest(tree), dest))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
