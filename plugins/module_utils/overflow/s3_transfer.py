# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Streaming transfers for the S3 stager: every byte is read once on each side and hashed as it passes.

Checksums are S3's SHA-256 checksums (ChecksumAlgorithm SHA256):
- an object sent in one PUT carries the SHA-256 of its bytes (and `sha256` in its metadata);
- an object sent in parts carries the SHA-256 of each part, and the store keeps the composite:
  SHA-256 over the concatenated part digests (shown as `<base64>-<parts>` by most stores). The part
  size is kept in the object's metadata (`part-size`) so a reader can recompute the composite.
The sender computes the full-file SHA-256 and the part digests in the one read that sends the bytes; the
receiver computes both in the one read that writes them. A reader compares what it computed with what
the store holds, never with what the sender claims.
Interrupted part uploads resume: the parts the store lists for the key's unfinished upload are not sent
again (they are read and hashed so the composite covers them); a stale part is caught by the composite
check after completion, which removes the object for a clean resend.
"""
from __future__ import annotations

import base64
import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor


class StopUpload(Exception):
    """An upload stopped part way (an injected interruption or a failed part)."""

    def __init__(self, message, parts_done=0, bytes_done=0):
        super(StopUpload, self).__init__(message)
        self.parts_done = parts_done
        self.bytes_done = bytes_done


def b64(digest):
    return base64.b64encode(digest).decode("ascii")


def composite(digests):
    """The stored checksum of a multipart object, without the `-<parts>` suffix."""
    return b64(hashlib.sha256(b"".join(digests)).digest())


def bare(checksum):
    """A stored checksum without the `-<parts>` suffix that some stores append."""
    return (checksum or "").split("-", 1)[0] or None


class Digest(object):
    """Full-file SHA-256 and the part digests of a byte stream cut into parts of `part_size`.
    With `overlap`, the full-file hash runs in its own thread, beside the reads or writes of the next part."""

    def __init__(self, part_size, overlap=False):
        self.part_size = part_size
        self.full = hashlib.sha256()
        self.parts = []
        self.size = 0
        self._hasher = ThreadPoolExecutor(1) if overlap else None
        self._pending = None

    def feed(self, data):
        self.size += len(data)
        if self._hasher is None:
            self.full.update(data)
            return
        if self._pending is not None:
            self._pending.result()
        self._pending = self._hasher.submit(self.full.update, data)

    def close(self):
        if self._hasher is not None:
            if self._pending is not None:
                self._pending.result()
            self._hasher.shutdown()
            self._hasher = self._pending = None

    def add_part(self, data, digest=None):
        """Adds a part; its digest is computed here unless given (b"" keeps its place for set_part)."""
        self.feed(data)
        if digest is None:
            digest = hashlib.sha256(data).digest()
        self.parts.append(digest)
        return digest

    def set_part(self, number, digest):
        self.parts[number - 1] = digest

    def hexdigest(self):
        self.close()
        return self.full.hexdigest()

    def stored_form(self):
        """What the store keeps for these bytes: one PUT (part_size 0) or the composite of the parts."""
        if not self.part_size:
            self.close()
            return b64(self.full.digest())
        return composite(self.parts)


def local_digest(path, part_size, bufsize=1 << 20):
    """Digest of a local file in one read (part_size 0: a single PUT object)."""
    dig = Digest(part_size, overlap=True)
    step = part_size or bufsize
    try:
        with open(path, "rb") as fh:
            while True:
                data = fh.read(step)
                if not data:
                    break
                if part_size:
                    dig.add_part(data)
                else:
                    dig.feed(data)
    finally:
        dig.close()
    return dig


class Window(object):
    """Bounds the parts in flight in one job's stream set (memory: `depth` parts)."""

    def __init__(self, depth):
        self.sem = threading.BoundedSemaphore(depth)

    def submit(self, pool, fn, *args):
        self.sem.acquire()
        fut = pool.submit(fn, *args)
        fut.add_done_callback(lambda dummy: self.sem.release())
        return fut


def unfinished_parts(client, bucket, key):
    """(upload_id, {part number: {"Size", "ETag", "ChecksumSHA256"?}}) of the newest unfinished upload of
    `key`, or (None, {}). Older unfinished uploads of the same key are aborted."""
    uploads = []
    kwargs = {"Bucket": bucket, "Prefix": key}
    while True:
        page = client.list_multipart_uploads(**kwargs)
        uploads += [u for u in page.get("Uploads") or [] if u.get("Key") == key]
        if not page.get("IsTruncated"):
            break
        kwargs.update(KeyMarker=page.get("NextKeyMarker"), UploadIdMarker=page.get("NextUploadIdMarker"))
    if not uploads:
        return None, {}
    uploads.sort(key=lambda u: u.get("Initiated") or 0)
    for old in uploads[:-1]:
        client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=old["UploadId"])
    upload_id = uploads[-1]["UploadId"]
    parts = {}
    kwargs = {"Bucket": bucket, "Key": key, "UploadId": upload_id}
    while True:
        page = client.list_parts(**kwargs)
        for p in page.get("Parts") or []:
            parts[p["PartNumber"]] = p
        if not page.get("IsTruncated"):
            break
        kwargs["PartNumberMarker"] = page.get("NextPartNumberMarker")
    return upload_id, parts


def reusable_part(have, data):
    """The part's digest when the listed part can stay (same size, and same SHA-256 where the store lists
    one), else None."""
    if not have or have.get("Size") != len(data):
        return None
    digest = hashlib.sha256(data).digest()
    listed = have.get("ChecksumSHA256")
    return digest if listed is None or bare(listed) == b64(digest) else None


def put_single(client, bucket, key, path):
    """Send a small file in one PUT with its SHA-256 (checked by the store) and `sha256` metadata."""
    with open(path, "rb") as fh:
        data = fh.read()
    dig = Digest(0)
    dig.feed(data)
    client.put_object(Bucket=bucket, Key=key, Body=data, ChecksumAlgorithm="SHA256",
                      ChecksumSHA256=b64(dig.full.digest()),
                      Metadata={"sha256": dig.hexdigest(), "part-size": "0"})
    return {"digest": dig, "sent": len(data), "reused": 0, "parts_sent": 1, "parts_reused": 0, "resumed": False}
