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
import collections
import hashlib
import os
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


def _reusable(have, data):
    """The part's digest when the listed part can stay (same size, and same SHA-256 where the store lists
    one), else None."""
    if not have or have.get("Size") != len(data):
        return None
    digest = hashlib.sha256(data).digest()
    listed = have.get("ChecksumSHA256")
    return digest if listed is None or bare(listed) == b64(digest) else None


def put_multipart(client, pool, window, bucket, key, path, part_size, stop_after=None, sha256=None):
    """Send a file in parts through `pool`, resuming the key's unfinished upload. `sha256`, when the sender
    knows it beforehand (a checksum manifest), goes in the object's metadata.
    Returns {"digest", "sent", "reused", "parts_sent", "parts_reused", "resumed"}; raises StopUpload after
    `stop_after` parts were sent (an injected interruption) or when a part fails."""
    upload_id, have = unfinished_parts(client, bucket, key)
    if upload_id and any(p["Size"] != part_size for n, p in have.items() if n < max(have)):
        client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        upload_id, have = None, {}
    if upload_id is None:
        meta = dict({"part-size": str(part_size)}, **({"sha256": sha256} if sha256 else {}))
        upload_id = client.create_multipart_upload(
            Bucket=bucket, Key=key, ChecksumAlgorithm="SHA256", Metadata=meta)["UploadId"]
    dig = Digest(part_size, overlap=True)
    out = {"sent": 0, "reused": 0, "parts_sent": 0, "parts_reused": 0, "resumed": bool(have)}
    done = []
    futures = []

    def send(number, data):
        digest = hashlib.sha256(data).digest()     # in the stream's own thread, beside the others
        res = client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data,
                                 ChecksumAlgorithm="SHA256", ChecksumSHA256=b64(digest))
        return {"PartNumber": number, "ETag": res["ETag"], "ChecksumSHA256": b64(digest)}, len(data)

    try:
        with open(path, "rb") as fh:
            number = 0
            while True:
                data = fh.read(part_size)
                if not data and number:
                    break
                number += 1
                digest = _reusable(have.get(number), data)
                dig.add_part(data, digest or b"")
                if digest:
                    done.append({"PartNumber": number, "ETag": have[number]["ETag"], "ChecksumSHA256": b64(digest)})
                    out["reused"] += len(data)
                    out["parts_reused"] += 1
                elif stop_after is not None and len(futures) >= stop_after:
                    _drain(futures, done, out)
                    raise StopUpload("interrupted after %d parts of %s" % (len(futures), key),
                                     len(futures), out["sent"])
                else:
                    futures.append(window.submit(pool, send, number, data))
                if len(data) < part_size:
                    break
        _drain(futures, done, out)
    finally:
        dig.close()
    done.sort(key=lambda p: p["PartNumber"])
    for part in done:
        dig.set_part(part["PartNumber"], base64.b64decode(part["ChecksumSHA256"]))
    client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": done})
    out["digest"] = dig
    return out


def _drain(futures, done, out):
    errors = []
    for fut in futures:
        try:
            part, size = fut.result()
        except Exception as exc:  # a failed part stays unsent; the next try sends it
            errors.append(str(exc))
            continue
        done.append(part)
        out["sent"] += size
        out["parts_sent"] += 1
    if errors:
        raise StopUpload("%d part(s) failed: %s" % (len(errors), errors[0][:300]), out["parts_sent"], out["sent"])


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


class InOrder(object):
    """Feeds the chunks of ranges that land in any order into one full-file hash, in file order.
    Each download thread offers its chunks as they arrive; whichever thread finds the next bytes in
    file order ready hashes them, one thread at a time and outside the lock (hashlib releases the GIL),
    so the hash follows the stream instead of running after the last byte. Chunks wait here only
    until the bytes before them are hashed; `hashed_range(start)` is called once a range is all hashed."""

    def __init__(self, dig, size, step, hashed_range=None):
        self.dig = dig
        self.hashed_range = hashed_range
        self.size = size
        self.step = step
        self.lock = threading.Lock()
        self.ready = collections.defaultdict(collections.deque)   # range start: chunks not yet hashed
        self.start = 0          # the range being hashed
        self.done = 0           # its bytes hashed so far
        self.busy = False

    def offer(self, start, chunk):
        with self.lock:
            self.ready[start].append(chunk)
            if self.busy:
                return      # the thread that is hashing takes it
            self.busy = True
        try:
            self._pump()
        except BaseException:
            with self.lock:
                self.busy = False
            raise

    def _pump(self):
        while True:
            with self.lock:
                queue = self.ready.get(self.start)
                if not queue:
                    self.busy = False
                    return
                chunks = list(queue)
                queue.clear()
            for chunk in chunks:
                self.dig.feed(chunk)
                self.done += len(chunk)
            if self.done >= min(self.step, self.size - self.start):
                with self.lock:
                    self.ready.pop(self.start, None)
                    finished = self.start
                    self.start += self.step
                    self.done = 0
                if self.hashed_range is not None:
                    self.hashed_range(finished)

    def hashed(self):
        """Bytes hashed so far (all of them once every range has landed)."""
        return min(self.size, self.start + self.done)


class RangedGet(object):
    """One object downloaded in ranges into `dest`, hashed as the bytes stream in.
    start() hands its ranges to the job's stream set (`pool`, shared with the job's other objects so
    that the streams stay busy from one object to the next); finish() waits for them and returns the
    Digest. Each range is read in chunks by its own thread, written in place with pwrite and offered
    to the full-file hash (InOrder). A range holds a place in `window` from its start until its bytes
    are hashed (or the object fails), so at most the window's depth of ranges is in memory even when
    the range in front is slow. part_size > 0: ranges follow the object's parts and each thread also
    hashes its part (for the composite); 0: a single-PUT object or one checked by its `sha256`, in
    ranges of `range_size`. flip_first (a drill fault): the first byte lands flipped, as damage on the
    way would."""

    def __init__(self, client, bucket, key, size, part_size, dest, range_size, flip_first=False, chunk=1 << 20):
        self.client, self.bucket, self.key, self.size = client, bucket, key, size
        self.part_size, self.dest, self.flip_first, self.chunk = part_size, dest, flip_first, chunk
        self.step = part_size or range_size
        self.starts = list(range(0, size, self.step))
        self.dig = Digest(part_size)
        self.dig.parts = [b""] * len(self.starts) if part_size else []
        self.order = InOrder(self.dig, size, self.step, lambda start: self._release(start // self.step))
        self.stop = threading.Event()       # set when a range fails or the object is given up
        self.lock = threading.Lock()
        self.state = {}                     # range index: "held" (in flight or waiting for its hash), "ended", "free"
        self.window = None
        self.tmp = dest + ".part"
        self.fd = None
        self.futures = []

    def start(self, pool, window):
        self.window = window
        self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for index, start in enumerate(self.starts):
                window.sem.acquire()
                with self.lock:
                    self.state[index] = "held"
                if self.stop.is_set():
                    self._release(index)
                    break       # a range failed: finish() raises it
                self.futures.append(pool.submit(self._fetch, index, start))
        except BaseException:
            self.abort()
            raise
        return self

    @property
    def failed(self):
        return self.stop.is_set()

    def finish(self):
        try:
            for fut in self.futures:
                fut.result()
        except BaseException:
            self.abort()
            raise
        self._close()
        if self.order.hashed() != self.size:
            self._give_up()
            raise IOError("%s: %d of %d bytes hashed" % (self.key, self.order.hashed(), self.size))
        os.replace(self.tmp, self.dest)
        return self.dig

    def abort(self):
        """Stops the ranges still running, gives back their places in the window and closes the file
        once no thread writes to it."""
        self._give_up()
        for fut in self.futures:
            fut.cancel()
        for fut in self.futures:
            if not fut.cancelled():
                try:
                    fut.result()
                except Exception:  # the caller raises the first failure
                    pass
        with self.lock:
            held = [index for index, state in self.state.items() if state == "held"]
        for index in held:      # cancelled before they ran
            self._release(index)
        self._close()

    def _release(self, index):
        with self.lock:
            if self.state.get(index) == "free":
                return
            self.state[index] = "free"
        self.window.sem.release()

    def _give_up(self):
        """No range of this object will be hashed any more: the ones that ended give back their places."""
        with self.lock:
            self.stop.set()
            ended = [index for index, state in self.state.items() if state == "ended"]
        for index in ended:
            self._release(index)

    def _ended(self, index):
        with self.lock:
            if self.state.get(index) == "held":
                self.state[index] = "ended"
            given_up = self.stop.is_set()
        if given_up:
            self._release(index)

    def _close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _fetch(self, index, start):
        try:
            if not self.stop.is_set():
                self._get_range(index, start)
        except BaseException:
            self._give_up()
            raise
        finally:
            self._ended(index)

    def _get_range(self, index, start):
        end = min(self.size, start + self.step)
        res = self.client.get_object(Bucket=self.bucket, Key=self.key, Range="bytes=%d-%d" % (start, end - 1))
        body = res["Body"]
        try:
            if res.get("ContentLength", end - start) != end - start:
                raise IOError("range %d-%d of %s came back with %s bytes" % (start, end - 1, self.key, res.get("ContentLength")))
            part = hashlib.sha256() if self.part_size else None
            pos = start
            while pos < end and not self.stop.is_set():
                data = body.read(min(self.chunk, end - pos))
                if not data:
                    raise IOError("range %d-%d of %s ended after %d bytes" % (start, end - 1, self.key, pos - start))
                if self.flip_first and pos == 0:
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                _pwrite_all(self.fd, data, pos)
                if part is not None:
                    part.update(data)
                self.order.offer(start, data)
                pos += len(data)
            if part is not None and pos == end:
                self.dig.set_part(index + 1, part.digest())
        finally:
            body.close()


def _pwrite_all(fd, data, offset):
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written
