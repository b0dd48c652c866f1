# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Overflow stager over SSH to a cloud storage host: inputs through a receiver on the host, outputs and images with rsync.

Layout on the storage host, under `remote_root`:
    shared/<name>                           datasets kept warm for many jobs
    shared/MANIFEST.sha256                  sha256sum lines of the warm datasets
    jobs/<job_id>/inputs/<name>             a job's own inputs
    jobs/<job_id>/<attempt_id>/output/...   what a cloud attempt wrote
    image-cache/<name>                      the cloud pool's image cache (one blob per image)
Images: {"name", "path" (the on-prem blob, e.g. an OCI tarball), "digest": "sha256:<hex>" (optional,
checked against the on-prem file)}. One SSH call reads the cached blob's sha256; equal to the on-prem
digest -> "cached", nothing sent; absent or different -> "cold_pull": rsync --checksum, the cached
digest is read again and must match (else the cached copy is removed and the pull fails).
Inputs: [{"name", "path" (file on the control host), "shared": bool}]. A job's inputs go in one SSH
session to a receiver run with the storage host's python3 (input_stream.RECEIVER):
- The storage host first reports the checksums of the copies it holds and the sizes of partial ones;
  the controller reads a file first only when there is a copy to compare with (a warm shared dataset
  is not sent) or to resume. Every other file is hashed while it is read for sending.
- The storage host hashes the bytes as it writes them to `<dest>.partial~` and renames the copy to its
  name only when its sha256 equals the controller's, so a job never sees a half-written input. An
  interrupted copy stays partial and the next staging sends the rest (the kept prefix is read once on
  the storage host for the hash); a mismatch removes the copy and counts as an interruption.
- Each side reads the bytes once: no second pass over what was sent. Verified shared datasets go into
  shared/MANIFEST.sha256, which the receiver replaces in one rename.
- Throughput is sustained: bytes sent / wall time of the whole staging (checksums included).
Outputs come back to a fresh `onprem_root/<job_id>/<attempt_id>/` with a plain rsync (no --checksum
pass that reads every file on the storage host before sending it), and their checksum (tree_digest)
is computed in one read over what landed on-prem, never taken from the sender.
Job IDs, attempt IDs, input and image names are checked with remote.check_name before any command
runs (a refusal is a TransferInterrupted or ReturnFailed naming the field and the value); every value
in a remote command is quoted on its own. SSH checks the host key, against `known_hosts` when given.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from . import backends
from . import input_stream as stream
from .remote import UnsafeName, check_name, command, ssh_options


def file_sha256(path, bufsize=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(bufsize)
            if not chunk:
                break
            h.update(chunk)
    return h.hexdigest()


def tree_digest(root):
    """sha256 over the sorted `<sha256>  <relative path>` lines of every file under root.
    The cloud job computes the same over its output directory (tests/lab/overflow/ovfjob.py)."""
    lines = []
    for dirpath, dummy, files in os.walk(root):
        for f in files:
            full = os.path.join(dirpath, f)
            lines.append("%s  %s\n" % (file_sha256(full), os.path.relpath(full, root)))
    lines.sort(key=lambda ln: ln.split("  ", 1)[1])
    return "sha256:" + hashlib.sha256("".join(lines).encode()).hexdigest()


def parse_sha256sum(text):
    """{name: hex} from sha256sum output (`<hex>  <name>` or `<hex> *<name>`)."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) == 2 and len(parts[0]) == 64:
            out[parts[1].lstrip("*")] = parts[0]
    return out


class RsyncStager(backends.Stager):
    def __init__(self, host, ssh_key, onprem_root, remote_root="/srv/cloud-storage", user="root",
                 ssh_port=22, timeout=600, image_cache=None, known_hosts=None):
        self.host = host
        self.known_hosts = known_hosts
        self.user = user
        self.ssh_key = ssh_key
        self.ssh_port = ssh_port
        self.remote_root = remote_root.rstrip("/")
        self.onprem_root = onprem_root
        self.timeout = timeout
        self.image_cache = (image_cache or self.remote("image-cache")).rstrip("/")
        # Drill faults (each counts down once used)
        self.interrupt_next = 0         # the next N input copies are killed part way
        self.interrupt_after = 1.5      # seconds before the kill (SSH setup included); the copy is slowed
        self.interrupt_bwlimit = 1024   # KiB/s while an interruption is armed, so the kill lands part way
        self.corrupt_next = 0           # the next N returned outputs land with one flipped byte
        self.fail_return_next = 0       # the next N return copies fail (connection refused)
        self.last = {}
        self.last_image = {}

    # -- transport ------------------------------------------------------------------------------
    def _ssh_base(self, port=None):
        return ["ssh", "-i", self.ssh_key, "-p", str(port or self.ssh_port)] + ssh_options(self.known_hosts)

    def ssh(self, command, check=True):
        res = subprocess.run(self._ssh_base() + ["%s@%s" % (self.user, self.host), command],
                             capture_output=True, text=True, timeout=self.timeout, check=False)
        if check and res.returncode != 0:
            raise backends.TransferInterrupted("ssh %s: %s failed (rc %d): %s" % (
                self.host, command[:80], res.returncode, res.stderr.strip()[-300:]))
        return res

    def _rsync(self, sources, dest, extra=(), port=None):
        """One plain rsync over SSH (images and outputs): (rc, the end of stderr)."""
        ssh = " ".join(shlex.quote(x) for x in self._ssh_base(port))
        cmd = ["rsync", "-a", "--timeout=60", "-e", ssh] + list(extra) + list(sources) + [dest]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout, check=False)
        except subprocess.TimeoutExpired:
            return -9, "no result after %ds" % self.timeout
        return res.returncode, res.stderr.strip()

    def remote(self, *parts):
        return "/".join([self.remote_root] + [p.strip("/") for p in parts if p])

    # -- inputs ---------------------------------------------------------------------------------
    def _dest_of(self, job_id, item):
        if item.get("shared"):
            return self.remote("shared", item["name"])
        return self.remote("jobs", job_id, "inputs", item["name"])

    @staticmethod
    def _names(error, *fields):
        """Refuse (as `error`) any (field, value) whose value may not go into a remote path or command."""
        try:
            for field, value in fields:
                check_name(field, value)
        except UnsafeName as exc:
            raise error(str(exc))

    def stage_inputs(self, job_id, inputs):
        t0 = time.monotonic()
        self._names(backends.TransferInterrupted, ("job ID", job_id),
                    *[("dataset name" if it.get("shared") else "input name", it.get("name")) for it in inputs])
        for it in inputs:
            if not it.get("path") or not os.path.isfile(it["path"]):
                raise backends.TransferInterrupted("input %r of %s: local file %r does not exist" % (
                    it.get("name"), job_id, it.get("path")))
        items = [dict(it, size=os.path.getsize(it["path"]), dest=self._dest_of(job_id, it), offset=0) for it in inputs]
        kill = rate = None
        if self.interrupt_next:
            self.interrupt_next -= 1
            kill, rate = self.interrupt_after, self.interrupt_bwlimit * 1024
        request = {"dirs": [self.remote("shared"), self.remote("jobs", job_id, "inputs")],
                   "paths": [it["dest"] for it in items], "suffix": stream.PARTIAL,
                   "manifest": self.remote("shared", "MANIFEST.sha256")}
        remote_cmd = command("python3", "-I", "-S", "-c", stream.RECEIVER, json.dumps(request))
        session = stream.Session(self._ssh_base() + ["%s@%s" % (self.user, self.host), remote_cmd], self.timeout, kill)
        todo = []
        skipped = 0
        warm = []
        try:
            state = session.reply()
            remote, manifest = state["files"], parse_sha256sum(state["manifest"])
            # the controller reads a file before sending it only where the storage host holds a copy to
            # compare with or to resume; every other file is hashed while it streams
            known = [it for it in items if remote.get(it["dest"])]
            with ThreadPoolExecutor(max(1, min(4, len(known)))) as pool:
                for it, digest in zip(known, pool.map(file_sha256, [it["path"] for it in known])):
                    it["sha256"] = digest
            for it in items:
                there = remote.get(it["dest"]) or {}
                if it.get("sha256") and there.get("sha256") == it["sha256"]:
                    # already there and intact: a warm shared dataset, or a copy finished before an interruption
                    skipped += it["size"]
                    if it.get("shared") and manifest.get(it["name"]) == it["sha256"]:
                        warm.append(it["name"])
                    continue
                # a partial copy as long as the input or longer is damaged, not partial: it is written anew
                partial = there.get("partial", 0)
                it["offset"] = partial if partial < it["size"] else 0
                todo.append(it)
            plan = json.dumps({"files": [{"dest": it["dest"], "offset": it["offset"], "size": it["size"],
                                          "shared": it["name"] if it.get("shared") else None} for it in todo]})
            session.send(b"%010d" % len(plan) + plan.encode())
            for it in todo:
                it["sha256"] = stream.send_file(session, it, rate)
            session.close_input()
            result = session.reply()
            session.finish()
        except stream.Stopped as exc:
            session.abort()
            done = sum(self._partial_sizes(job_id, todo).values()) if todo else 0
            have = sum(it["offset"] for it in todo)
            self.last = self._stats(max(0, done - have), skipped, t0, have > 0, len(items))
            raise backends.TransferInterrupted("input copy of %s for %s to %s stopped: %s" % (
                ", ".join(it["name"] for it in todo) or "the job's inputs", job_id, self.host,
                session.why(exc)), done_bytes=done)
        except BaseException:
            session.abort()     # no SSH session outlives the staging
            raise
        have = sum(it["offset"] for it in todo)
        by_dest = dict((d["dest"], d) for d in result.get("done", []))
        bad = [it for it in todo if not by_dest.get(it["dest"], {}).get("ok")
               or by_dest[it["dest"]]["sha256"] != it["sha256"]]
        if bad:
            raise backends.TransferInterrupted("checksum mismatch after copy of %s; removed for a clean resend" % (
                ", ".join(it["name"] for it in bad)), done_bytes=0)
        self.last = self._stats(sum(it["size"] for it in todo) - have, skipped, t0, have > 0, len(items))
        self.last["warm_shared"] = warm
        return dict(self.last)

    @staticmethod
    def _stats(sent, skipped, t0, resumed, files):
        secs = max(1e-9, time.monotonic() - t0)
        return {"bytes_sent": sent, "bytes_skipped": skipped, "resumed": resumed, "files": files,
                "seconds": round(secs, 4), "throughput_Bps": round(sent / secs, 1)}

    def _partial_sizes(self, job_id, items):
        """{dest: size of its partial copy} for the items that have one."""
        paths = " ".join(shlex.quote(self._dest_of(job_id, it) + stream.PARTIAL) for it in items)
        res = self.ssh("stat -c '%%s %%n' %s 2>/dev/null; true" % paths)
        sizes = {}
        for line in res.stdout.splitlines():
            size, dummy, name = line.partition(" ")
            if size.isdigit() and name.endswith(stream.PARTIAL):
                sizes[name[:-len(stream.PARTIAL)]] = int(size)
        return sizes

    def warm_shared(self, name, path):
        """Put a shared dataset in cloud storage ahead of time: kept when its checksum matches, sent again
        when it does not (a scheduled refresh)."""
        return self.stage_inputs("warm", [{"name": name, "path": path, "shared": True}])

    def warm_state(self, datasets):
        """{name: "warm" | "stale" | "absent"} for [{"name", "path"}], sending nothing."""
        self._names(backends.TransferInterrupted, *[("dataset name", d.get("name")) for d in datasets])
        paths = [self.remote("shared", d["name"]) for d in datasets]
        remote = parse_sha256sum(self.ssh("sha256sum %s 2>/dev/null; true" % command(*paths)).stdout)
        out = {}
        for it, path in zip(datasets, paths):
            have = remote.get(path)
            out[it["name"]] = "absent" if have is None else ("warm" if have == file_sha256(it["path"]) else "stale")
        return out

    # -- images ---------------------------------------------------------------------------------
    def cached_image_path(self, name):
        return "%s/%s" % (self.image_cache, check_name("image name", name.strip("/").replace("/", "_")))

    def _cached_digest(self, name):
        dest = shlex.quote(self.cached_image_path(name))
        res = self.ssh("mkdir -p %s; sha256sum %s 2>/dev/null; true" % (shlex.quote(self.image_cache), dest))
        got = parse_sha256sum(res.stdout)
        return "sha256:" + got[self.cached_image_path(name)] if self.cached_image_path(name) in got else None

    def ensure_image(self, job_id, image):
        name, path = image["name"], image.get("path")
        self._names(backends.TransferInterrupted, ("job ID", job_id), ("image name", name.strip("/").replace("/", "_")))
        if not path or not os.path.isfile(path):
            raise backends.TransferInterrupted("image %s of %s: on-prem copy %r does not exist" % (name, job_id, path))
        onprem = "sha256:" + file_sha256(path)
        if image.get("digest") and image["digest"] != onprem:
            raise backends.TransferInterrupted("image %s: on-prem copy %s has digest %s, the job class declares %s" % (
                name, path, onprem, image["digest"]))
        before = self._cached_digest(name)
        out = {"name": name, "onprem_digest": onprem, "cached_digest": before, "bytes_sent": 0,
               "pull_seconds": 0.0}
        if before == onprem:
            out.update(outcome="cached", verified_digest=before)
            self.last_image = dict(out)
            return out
        t0 = time.monotonic()
        dest = self.cached_image_path(name)
        rc, err = self._rsync([path], "%s@%s:%s" % (self.user, self.host, dest), ["--checksum"])
        if rc != 0:
            raise backends.TransferInterrupted("cold pull of image %s for %s failed (rc %s): %s" % (
                name, job_id, rc, err[-300:]))
        after = self._cached_digest(name)
        secs = round(time.monotonic() - t0, 4)
        if after != onprem:
            self.ssh("rm -f %s" % shlex.quote(dest))
            raise backends.TransferInterrupted("image %s: cached digest %s after the pull, on-prem %s; removed" % (
                name, after, onprem))
        out.update(outcome="cold_pull", verified_digest=after, bytes_sent=os.path.getsize(path), pull_seconds=secs)
        self.last_image = dict(out)
        return out

    def clear_image(self, name):
        """Drop an image from the cloud pool's cache (the next ensure_image is a cold pull)."""
        self.ssh("rm -f %s" % shlex.quote(self.cached_image_path(name)))

    # -- outputs --------------------------------------------------------------------------------
    def output_dir_remote(self, job_id, attempt_id):
        return self.remote("jobs", job_id, attempt_id, "output")

    def fetch_outputs(self, job_id, cloud_job):
        attempt = cloud_job.attempt_id
        self._names(backends.ReturnFailed, ("job ID", job_id), ("attempt ID", attempt))
        dest = os.path.join(self.onprem_root, job_id, attempt)
        shutil.rmtree(dest, ignore_errors=True)
        os.makedirs(dest)
        port = None
        if self.fail_return_next:
            self.fail_return_next -= 1
            port = 1      # nothing listens there: the copy fails like a refused connection
        rc, err = self._rsync(["%s@%s:%s/" % (self.user, self.host, self.output_dir_remote(job_id, attempt))],
                              dest + "/", ["--delete"], port=port)
        if rc != 0:
            raise backends.ReturnFailed("return copy of %s attempt %s failed (rc %s): %s" % (job_id, attempt, rc, err[-300:]))
        if self.corrupt_next:
            self.corrupt_next -= 1
            _flip_one_byte(dest)
        return {"ref": dest, "checksum": tree_digest(dest)}


def _flip_one_byte(root):
    for dirpath, dummy, files in sorted(os.walk(root)):
        for f in sorted(files):
            path = os.path.join(dirpath, f)
            if os.path.getsize(path):
                with open(path, "r+b") as fh:
                    first = fh.read(1)
                    fh.seek(0)
                    fh.write(bytes([first[0] ^ 0xFF]))
                return path
    return None
