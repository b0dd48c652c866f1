# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ranged downloads for the S3 stager: each range streams in its own thread, is written in place
and is hashed in file order as it lands (s3_transfer explains the checksums it is checked against)."""
from __future__ import annotations

import collections
import hashlib
import os
import threading

from .s3_transfer import Digest


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
