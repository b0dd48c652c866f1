# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Uploads for the S3 stager: all files of one call go through one stream set, as one stream of parts.

The caller's thread reads each file once, part by part, feeds the full-file SHA-256 as it reads and
hands each part to the streams through a window of `2 x streams` parts (the memory bound). It moves on
to the next file as soon as the last part of one is handed over, so the next file's parts start while
the previous file's last parts are still in flight; the thread that sends a file's last part completes
that file's upload. Files up to `part_size` go in one PUT through the same window (s3_transfer explains
the checksums of both forms; a multipart upload resumes the key's unfinished one).
On a failure the streams take no new part and no upload is completed any more; every multipart upload
the call opened that did not complete is aborted, so no object is left half sent, except the upload of
a file that was interrupted (a drill stop, or a part the store did not take), which keeps its stored
parts for the next try to resume. A drill stop lets the files handed over before it finish.
"""
from __future__ import annotations

import base64
import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from .s3_transfer import Digest, StopUpload, Window, b64, put_single, unfinished_parts, reusable_part


class UploadFailed(StopUpload):
    """A request (or the read of a local file) of one key's upload failed; names the key and the call."""

    def __init__(self, key, exc, call):
        self.key = key
        self.call = getattr(exc, "operation_name", None) or ("read" if isinstance(exc, OSError) else call)
        super(UploadFailed, self).__init__("%s of %s failed: %s" % (self.call, key, str(exc)[:300]))


class _File(object):
    def __init__(self, key, path, sha256):
        self.key, self.path, self.sha256 = key, path, sha256
        self.upload_id = None
        self.have = {}
        self.dig = None
        self.done = []              # completed parts, for complete_multipart_upload
        self.pending = 0            # parts handed over and not yet sent
        self.read_done = False      # every part handed over
        self.completed = False
        self.keep = False           # interrupted: its stored parts stay for the next try
        self.out = {"digest": None, "sent": 0, "reused": 0, "parts_sent": 0, "parts_reused": 0, "resumed": False}


class Batch(object):
    """One call's uploads: send() takes (key, path, stop_after, sha256) items and returns a result per item,
    in order: {"digest", "sent", "reused", "parts_sent", "parts_reused", "resumed"}. `stop_after` (a drill
    fault): the file stops after that many parts were sent (0 for a single PUT: before it is sent).
    `sha256`, when the sender knows it beforehand, goes in a multipart object's metadata. Raises
    UploadFailed, or StopUpload for a drill stop; `outs` holds what each file had sent by then."""

    def __init__(self, client, bucket, part_size, streams):
        self.client, self.bucket, self.part_size, self.streams = client, bucket, part_size, streams
        self.window = Window(2 * streams)
        self.lock = threading.Lock()
        self.files = []
        self.error = None           # the first failure; the streams take nothing new once it is set
        self.pool = None

    @property
    def outs(self):
        return [f.out for f in self.files]

    def send(self, items):
        stop = None
        with ThreadPoolExecutor(self.streams) as pool:
            self.pool = pool
            try:
                for key, path, stop_after, sha256 in items:
                    if self.error is not None:
                        break
                    self._start(_File(key, path, sha256), stop_after)
            except UploadFailed as exc:
                self._failed(exc)
            except StopUpload as exc:
                stop = exc          # what was handed over before it finishes
            except BaseException as exc:
                self._failed(exc)
        # the pool has ended: every part and completion handed to it has run
        if self.error is not None:
            self._abort_open()
        stop = self.error if self.error is not None else stop
        if isinstance(stop, StopUpload):    # what the store keeps for the next try
            kept = [f for f in self.files if f.keep and not f.completed]
            stop.parts_done = sum(f.out["parts_sent"] for f in kept)
            stop.bytes_done = sum(f.out["sent"] for f in kept)
        if stop is not None:
            raise stop
        return self.outs

    def _failed(self, exc, interrupted=None):
        with self.lock:
            if self.error is None:
                self.error = exc
            if interrupted is not None:
                interrupted.keep = True

    def _start(self, f, stop_after):
        self.files.append(f)
        try:
            size = os.path.getsize(f.path)
        except OSError as exc:
            raise UploadFailed(f.key, exc, "read")
        if size <= self.part_size:
            if stop_after == 0:
                raise StopUpload("interrupted before %s was sent" % f.key)
            self.window.submit(self.pool, self._single, f)
            return
        self._open(f)
        f.dig = f.out["digest"] = Digest(self.part_size, overlap=True)
        try:
            self._read(f, stop_after)
        except OSError as exc:
            raise UploadFailed(f.key, exc, "read")
        finally:
            f.dig.close()
        with self.lock:
            f.read_done = True
            last = f.pending == 0
        if last:
            self.pool.submit(self._complete, f)

    def _open(self, f):
        """Resumes the key's unfinished upload (parts of the same size) or starts one."""
        call = "CreateMultipartUpload"
        try:
            f.upload_id, f.have = unfinished_parts(self.client, self.bucket, f.key)
            have = f.have
            if f.upload_id and any(p["Size"] != self.part_size for n, p in have.items() if n < max(have)):
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=f.key, UploadId=f.upload_id)
                f.upload_id, f.have = None, {}
            if f.upload_id is None:
                meta = dict({"part-size": str(self.part_size)}, **({"sha256": f.sha256} if f.sha256 else {}))
                f.upload_id = self.client.create_multipart_upload(
                    Bucket=self.bucket, Key=f.key, ChecksumAlgorithm="SHA256", Metadata=meta)["UploadId"]
        except Exception as exc:
            raise UploadFailed(f.key, exc, call)
        f.out["resumed"] = bool(f.have)

    def _read(self, f, stop_after):
        """Reads the file once, hashing it, and hands the parts the store does not hold to the streams."""
        handed = 0
        with open(f.path, "rb") as fh:
            number = 0
            while self.error is None:
                data = fh.read(self.part_size)
                if not data and number:
                    break
                number += 1
                digest = reusable_part(f.have.get(number), data)
                f.dig.add_part(data, digest or b"")
                if digest:
                    with self.lock:
                        f.done.append({"PartNumber": number, "ETag": f.have[number]["ETag"],
                                       "ChecksumSHA256": b64(digest)})
                        f.out["reused"] += len(data)
                        f.out["parts_reused"] += 1
                elif stop_after is not None and handed >= stop_after:
                    f.keep = True
                    raise StopUpload("interrupted after %d parts of %s" % (handed, f.key))
                else:
                    with self.lock:
                        f.pending += 1
                    handed += 1
                    self.window.submit(self.pool, self._part, f, number, data)
                if len(data) < self.part_size:
                    break

    def _part(self, f, number, data):
        if self.error is not None:
            return          # a failure elsewhere: this part stays unsent
        digest = hashlib.sha256(data).digest()      # in the stream's own thread, beside the others
        try:
            res = self.client.upload_part(Bucket=self.bucket, Key=f.key, UploadId=f.upload_id, PartNumber=number,
                                          Body=data, ChecksumAlgorithm="SHA256", ChecksumSHA256=b64(digest))
        except Exception as exc:    # the parts the store took stay; the next try sends the rest
            self._failed(UploadFailed(f.key, exc, "UploadPart"), interrupted=f)
            return
        with self.lock:
            f.done.append({"PartNumber": number, "ETag": res["ETag"], "ChecksumSHA256": b64(digest)})
            f.out["sent"] += len(data)
            f.out["parts_sent"] += 1
            f.pending -= 1
            last = f.read_done and f.pending == 0
        if last:
            self._complete(f)

    def _complete(self, f):
        if self.error is not None:
            return
        f.done.sort(key=lambda p: p["PartNumber"])
        for part in f.done:
            f.dig.set_part(part["PartNumber"], base64.b64decode(part["ChecksumSHA256"]))
        try:
            self.client.complete_multipart_upload(Bucket=self.bucket, Key=f.key, UploadId=f.upload_id,
                                                  MultipartUpload={"Parts": f.done})
        except Exception as exc:
            self._failed(UploadFailed(f.key, exc, "CompleteMultipartUpload"))
            return
        f.completed = True

    def _single(self, f):
        if self.error is not None:
            return
        try:
            got = put_single(self.client, self.bucket, f.key, f.path)
        except Exception as exc:
            self._failed(UploadFailed(f.key, exc, "PutObject"))
            return
        f.out.update(got)
        f.completed = True

    def _abort_open(self):
        for f in self.files:
            if f.upload_id is None or f.completed or (f.keep and f.done):
                continue
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=f.key, UploadId=f.upload_id)
            except Exception:  # the failure that stopped the call is the one raised
                pass
