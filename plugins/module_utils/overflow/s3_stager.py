# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Overflow stager over S3-compatible object storage (boto3), with the rsync stager's interface.

Layout in the bucket, under `prefix`:
    shared/<name>                           datasets kept warm for many jobs
    jobs/<job_id>/inputs/<name>             a job's own inputs
    jobs/<job_id>/<attempt_id>/output/...   what a cloud attempt wrote
    image-cache/<name>                      the cloud pool's image cache (one blob per image)
Every object the stager writes carries S3's SHA-256 checksum (s3_transfer explains the single-PUT and
the composite forms); files larger than `part_size` go in parts that resume after an interruption.
Inputs: [{"name", "path" (file on the control host), "shared": bool}]. An input whose object already
holds the same checksum and size is not sent (a warm shared dataset, or a copy that finished before an
interruption); a shared dataset whose checksum differs is sent again (refreshed). After the copy the
store's checksum of each object must equal the one computed while sending; a mismatch deletes the
object and counts as an interruption.
Outputs come back to `onprem_root/<job_id>/<attempt_id>/`: each object is downloaded in parallel ranges,
written in place and hashed in file order as the bytes stream in (s3_fetch.RangedGet), the objects one after
another through the same streams without a pause between them; what landed must match the checksum the store
holds (and the `sha256` metadata when the writer set it). A mismatch fetches the object once more; a second
mismatch refuses the return as corrupt and removes what landed, so nothing is committed. The result's
checksum is the tree digest of the landed files (rsync_stager.tree_digest's format).
One stream set (a pool of `streams` connections) carries all files of one call; uploads go as one stream
of parts (s3_send), the next file's parts starting while the previous file's last ones are in flight. Throughput is
sustained: bytes sent / wall time of the whole call, checksums included.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

from . import backends
from . import s3_fetch, s3_send, s3_transfer as xfer
from .remote import UnsafeName, check_name

try:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError
    HAS_BOTO3 = True
except ImportError:  # reported by make_client, so the other stagers work without boto3
    HAS_BOTO3 = False
    BotoCoreError = ClientError = OSError

MIB = 1024 * 1024
MIN_PART = 5 * MIB          # S3's smallest part (all but the last)


def make_client(endpoint_url=None, region=None, access_key=None, secret_key=None, session_token=None,
                validate_certs=True, ca_bundle=None, streams=4, timeout=60, addressing_style="auto"):
    """A boto3 S3 client; without keys, boto3's own credential chain (environment, profile, role)."""
    if not HAS_BOTO3:
        raise backends.TransferInterrupted("the S3 stager needs the boto3 Python package on the controller")
    conf = dict(region_name=region, retries={"max_attempts": 5, "mode": "standard"},
                max_pool_connections=max(10, streams + 2), connect_timeout=timeout, read_timeout=timeout,
                s3={"addressing_style": addressing_style})
    try:
        # the stager sends and checks SHA-256 itself: no second checksum per request
        config = Config(request_checksum_calculation="when_required", response_checksum_validation="when_required", **conf)
    except TypeError:
        config = Config(**conf)
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint_url, aws_access_key_id=access_key, aws_secret_access_key=secret_key,
        aws_session_token=session_token, verify=(ca_bundle or True) if validate_certs else False, config=config)


class S3Stager(backends.Stager):
    def __init__(self, bucket, onprem_root, prefix="", part_size=8 * MIB, streams=4, client=None, **client_opts):
        self.bucket = bucket
        self.prefix = (prefix or "").strip("/")
        self.onprem_root = onprem_root
        self.part_size = max(MIN_PART, int(part_size))
        self.streams = max(1, int(streams))
        self.client = client or make_client(streams=self.streams, **client_opts)
        # Drill faults (each counts down once used)
        self.interrupt_next = 0          # the next N input uploads stop part way
        self.interrupt_after_parts = None  # parts sent before the stop (half the file when None)
        self.corrupt_next = 0            # the next N returned objects land with one flipped byte
        self.fail_return_next = 0        # the next N returns fail
        self.last = {}
        self.last_image = {}

    def key(self, *parts):
        return "/".join([p for p in [self.prefix] + [x.strip("/") for x in parts] if p])

    @staticmethod
    def _names(error, *fields):
        try:
            for field, value in fields:
                check_name(field, value)
        except UnsafeName as exc:
            raise error(str(exc))

    def _key_of(self, job_id, item):
        if item.get("shared"):
            return self.key("shared", item["name"])
        return self.key("jobs", job_id, "inputs", item["name"])

    def _stored(self, key):
        """What the store holds for `key`: size, checksum (no `-N`), part size, `sha256` metadata; None if absent."""
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        meta = head.get("Metadata") or {}
        out = {"size": head["ContentLength"], "checksum": xfer.bare(head.get("ChecksumSHA256")),
               "sha256": meta.get("sha256"), "part_size": 0}
        if str(meta.get("part-size", "")).isdigit():
            out["part_size"] = int(meta["part-size"])
        elif out["checksum"]:
            first = self.client.head_object(Bucket=self.bucket, Key=key, PartNumber=1)
            if int(first.get("PartsCount") or 1) > 1:
                out["part_size"] = first["ContentLength"]
        return out

    def _same(self, stored, path, size):
        """The local file's digest when the store already holds the same bytes, else None (one read)."""
        if not stored or stored["size"] != size or not stored["checksum"]:
            return None
        dig = xfer.local_digest(path, stored["part_size"])
        return dig if dig.stored_form() == stored["checksum"] else None

    # -- inputs ---------------------------------------------------------------------------------
    def stage_inputs(self, job_id, inputs):
        t0 = time.monotonic()
        self._names(backends.TransferInterrupted, ("job ID", job_id),
                    *[("dataset name" if it.get("shared") else "input name", it.get("name")) for it in inputs])
        for it in inputs:
            if not it.get("path") or not os.path.isfile(it["path"]):
                raise backends.TransferInterrupted("input %r of %s: local file %r does not exist" % (
                    it.get("name"), job_id, it.get("path")))
        stats = {"bytes_sent": 0, "bytes_skipped": 0, "resumed": False, "files": len(inputs), "parts_sent": 0,
                 "parts_reused": 0, "sha256": {}, "warm_shared": [], "refreshed_shared": [], "streams": self.streams}
        try:
            self._stage(job_id, inputs, stats)
        except xfer.StopUpload as exc:
            self.last = self._finish(stats, t0)
            raise backends.TransferInterrupted("upload for %s stopped: %s" % (job_id, exc), done_bytes=exc.bytes_done)
        except (BotoCoreError, ClientError) as exc:
            self.last = self._finish(stats, t0)
            raise backends.TransferInterrupted("S3 staging for %s failed: %s" % (job_id, exc))
        self.last = self._finish(stats, t0)
        return dict(self.last)

    def _stage(self, job_id, inputs, stats):
        sent = []

        def todo():
            # checked one at a time, as the stream set takes them: the next file's check overlaps the
            # previous file's parts
            for it in inputs:
                key, size = self._key_of(job_id, it), os.path.getsize(it["path"])
                stored = self._stored(key)
                same = self._same(stored, it["path"], size)
                if same is not None:
                    stats["bytes_skipped"] += size
                    stats["sha256"][it["name"]] = same.hexdigest()
                    if it.get("shared"):
                        stats["warm_shared"].append(it["name"])
                    continue
                if it.get("shared") and stored:
                    stats["refreshed_shared"].append(it["name"])
                stop = None
                if self.interrupt_next:
                    self.interrupt_next -= 1
                    stop = self.interrupt_after_parts
                    if stop is None:
                        stop = max(1, -(-size // self.part_size) // 2) if size > self.part_size else 0
                sent.append((it, key))
                yield key, it["path"], stop, None

        batch = s3_send.Batch(self.client, self.bucket, self.part_size, self.streams)
        try:
            batch.send(todo())
        finally:
            for got in batch.outs:
                self._count(stats, got)
        for (it, key), got in zip(sent, batch.outs):
            stats["sha256"][it["name"]] = got["digest"].hexdigest()
        bad = [key for (it, key), got in zip(sent, batch.outs)
               if (self._stored(key) or {}).get("checksum") != got["digest"].stored_form()]
        if bad:
            for key in bad:
                self.client.delete_object(Bucket=self.bucket, Key=key)
            raise backends.TransferInterrupted("checksum mismatch after the copy of %s; removed for a clean resend" % (
                ", ".join(bad)), done_bytes=0)

    @staticmethod
    def _count(stats, got):
        stats["bytes_sent"] += got["sent"]
        stats["bytes_skipped"] += got["reused"]
        stats["parts_sent"] += got["parts_sent"]
        stats["parts_reused"] += got["parts_reused"]
        stats["resumed"] = stats["resumed"] or got["resumed"]

    @staticmethod
    def _finish(stats, t0):
        secs = max(1e-9, time.monotonic() - t0)
        return dict(stats, seconds=round(secs, 4), throughput_Bps=round(stats["bytes_sent"] / secs, 1))

    def warm_shared(self, name, path):
        """Put a shared dataset in cloud storage ahead of time: kept when its checksum matches, sent again
        when it does not (a scheduled refresh)."""
        return self.stage_inputs("warm", [{"name": name, "path": path, "shared": True}])

    def warm_state(self, datasets):
        """{name: "warm" | "stale" | "absent"} for [{"name", "path"}], sending nothing."""
        self._names(backends.TransferInterrupted, *[("dataset name", d.get("name")) for d in datasets])
        out = {}
        for d in datasets:
            stored = self._stored(self.key("shared", d["name"]))
            same = self._same(stored, d["path"], os.path.getsize(d["path"]))
            out[d["name"]] = "absent" if stored is None else ("warm" if same is not None else "stale")
        return out

    # -- images ---------------------------------------------------------------------------------
    def _image_key(self, name):
        return self.key("image-cache", check_name("image name", name.strip("/").replace("/", "_")))

    def ensure_image(self, job_id, image):
        name, path = image["name"], image.get("path")
        self._names(backends.TransferInterrupted, ("job ID", job_id), ("image name", name.strip("/").replace("/", "_")))
        if not path or not os.path.isfile(path):
            raise backends.TransferInterrupted("image %s of %s: on-prem copy %r does not exist" % (name, job_id, path))
        key, size = self._image_key(name), os.path.getsize(path)
        try:
            return self._ensure_image(job_id, image, key, path, size)
        except (BotoCoreError, ClientError, xfer.StopUpload) as exc:
            raise backends.TransferInterrupted("image %s for %s: %s" % (name, job_id, exc))

    def _ensure_image(self, job_id, image, key, path, size):
        stored = self._stored(key)
        dig = xfer.local_digest(path, stored["part_size"] if stored else (self.part_size if size > self.part_size else 0))
        onprem = "sha256:" + dig.hexdigest()
        if image.get("digest") and image["digest"] != onprem:
            raise backends.TransferInterrupted("image %s: on-prem copy %s has digest %s, the job class declares %s" % (
                image["name"], path, onprem, image["digest"]))
        before = None
        if stored:
            before = onprem if stored["checksum"] == dig.stored_form() else "s3:sha256:%s" % stored["checksum"]
        out = {"name": image["name"], "onprem_digest": onprem, "cached_digest": before, "bytes_sent": 0,
               "pull_seconds": 0.0}
        if before == onprem:
            out.update(outcome="cached", verified_digest=before)
            self.last_image = dict(out)
            return out
        t0 = time.monotonic()
        got = s3_send.Batch(self.client, self.bucket, self.part_size, self.streams).send([(key, path, None, None)])[0]
        after = (self._stored(key) or {}).get("checksum")
        if after != got["digest"].stored_form() or got["digest"].hexdigest() != dig.hexdigest():
            self.client.delete_object(Bucket=self.bucket, Key=key)
            raise backends.TransferInterrupted("image %s: cached checksum %s after the pull, sent %s; removed" % (
                image["name"], after, got["digest"].stored_form()))
        out.update(outcome="cold_pull", verified_digest=onprem, bytes_sent=got["sent"],
                   pull_seconds=round(time.monotonic() - t0, 4))
        self.last_image = dict(out)
        return out

    def clear_image(self, name):
        """Drop an image from the cloud pool's cache (the next ensure_image is a cold pull)."""
        self.client.delete_object(Bucket=self.bucket, Key=self._image_key(name))

    # -- outputs --------------------------------------------------------------------------------
    def output_prefix(self, job_id, attempt_id):
        return self.key("jobs", job_id, attempt_id, "output") + "/"

    def upload_tree(self, job_id, attempt_id, root, manifest=None):
        """Send a directory as an attempt's outputs (what the cloud side does; also used by tests).
        manifest: {relative path: sha256 hex} the sender computed, kept in each object's metadata."""
        items = []
        for dirpath, dummy, files in os.walk(root):
            for f in sorted(files):
                full = os.path.join(dirpath, f)
                rel = os.path.relpath(full, root)
                items.append((self.output_prefix(job_id, attempt_id) + rel, full, (manifest or {}).get(rel)))
        s3_send.Batch(self.client, self.bucket, self.part_size, self.streams).send(
            (key, full, None, sha256) for key, full, sha256 in items)
        return [item[0] for item in items]

    def _listing(self, prefix):
        objs = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            objs += [(o["Key"], o["Size"]) for o in page.get("Contents") or []]
        return objs

    def fetch_outputs(self, job_id, cloud_job):
        attempt = cloud_job.attempt_id
        self._names(backends.ReturnFailed, ("job ID", job_id), ("attempt ID", attempt))
        if self.fail_return_next:
            self.fail_return_next -= 1
            raise backends.ReturnFailed("return of %s attempt %s failed (injected)" % (job_id, attempt))
        dest = os.path.join(self.onprem_root, job_id, attempt)
        t0 = time.monotonic()
        try:
            return self._fetch(job_id, attempt, dest, t0)
        except (BotoCoreError, ClientError, OSError) as exc:
            shutil.rmtree(dest, ignore_errors=True)
            raise backends.ReturnFailed("return of %s attempt %s failed: %s" % (job_id, attempt, exc))

    def _fetch(self, job_id, attempt, dest, t0):
        prefix = self.output_prefix(job_id, attempt)
        shutil.rmtree(dest, ignore_errors=True)
        os.makedirs(dest)
        lines, again, total, todo = [], [], 0, []
        with ThreadPoolExecutor(self.streams) as pool:
            window = xfer.Window(2 * self.streams)
            try:
                # every object's ranges go to the one stream set as soon as the window allows, so the
                # streams keep running while the previous object's last bytes are hashed; objects are
                # checked, fetched again or refused in listing order, as one at a time would be
                for key, size in self._listing(prefix):
                    item = self._start_one(job_id, attempt, dest, prefix, key, size, pool, window)
                    todo.append(item)
                    if item["error"] or any(t["get"].failed for t in todo if t["get"]):
                        break       # raised in its turn below
                for item in todo:
                    if item["error"]:
                        raise item["error"]
                    rel, stored = item["rel"], item["stored"]
                    dig = item["get"].finish()
                    item["checked"] = 1
                    if not self._matches(stored, dig):
                        again.append(rel)
                        dig = self._get(item["key"], item["size"], stored, item["target"], item["flips"][1]).start(
                            pool, window).finish()
                        item["checked"] = 2
                        if not self._matches(stored, dig):
                            raise backends.ReturnFailed(
                                "output %s of %s attempt %s is corrupt: stored %s, received sha256 %s (fetched twice); "
                                "nothing kept" % (rel, job_id, attempt, stored["checksum"] or stored["sha256"],
                                                  dig.hexdigest()))
                    lines.append((rel, "%s  %s\n" % (dig.hexdigest(), rel)))
                    total += item["size"]
            except BaseException:
                for item in todo:
                    if item["get"]:
                        item["get"].abort()
                    # drill faults meant for fetches whose bytes were never checked stay for the next return
                    self.corrupt_next += sum(item["flips"][item["checked"]:])
                shutil.rmtree(dest, ignore_errors=True)
                raise
        digest = hashlib.sha256("".join(line for rel, line in sorted(lines)).encode()).hexdigest()
        secs = max(1e-9, time.monotonic() - t0)
        return {"ref": dest, "checksum": "sha256:" + digest, "files": len(lines), "bytes_received": total,
                "fetched_again": again, "seconds": round(secs, 4), "throughput_Bps": round(total / secs, 1)}

    def _start_one(self, job_id, attempt, dest, prefix, key, size, pool, window):
        """Check one listed object and hand its ranges to the streams; a refusal waits in "error"."""
        rel = key[len(prefix):]
        target = os.path.normpath(os.path.join(dest, rel))
        item = {"rel": rel, "key": key, "size": size, "target": target, "stored": None, "get": None,
                "error": None, "flips": [False, False], "checked": 0}
        if not rel or rel.startswith("/") or not target.startswith(dest.rstrip("/") + "/"):
            item["error"] = backends.ReturnFailed("output object %r of %s lies outside the attempt's folder" % (key, job_id))
            return item
        os.makedirs(os.path.dirname(target), exist_ok=True)
        stored = item["stored"] = self._stored(key)
        if not stored or not (stored["checksum"] or stored["sha256"]):
            item["error"] = backends.ReturnFailed("output %s of %s attempt %s has no stored SHA-256; refused" % (
                rel, job_id, attempt))
            return item
        # the flipped-byte drill fault: the object's fetch takes one, and its fetch again the next
        item["flips"] = [self.corrupt_next > 0, self.corrupt_next > 1]
        self.corrupt_next -= sum(item["flips"])
        item["get"] = self._get(key, size, stored, target, item["flips"][0]).start(pool, window)
        return item

    def _get(self, key, size, stored, target, flip=False):
        # the writer's full-file SHA-256, when stored, is checked alone: no part digests to compute
        parts = 0 if stored["sha256"] else stored["part_size"]
        return s3_fetch.RangedGet(self.client, self.bucket, key, size, parts, target, self.part_size, flip_first=flip)

    @staticmethod
    def _matches(stored, dig):
        if stored["sha256"]:
            same = stored["sha256"] == dig.hexdigest()
            # a single-PUT object's own checksum is the same digest: it must agree too
            return same and (stored["part_size"] or not stored["checksum"] or stored["checksum"] == dig.stored_form())
        return stored["checksum"] == dig.stored_form()
