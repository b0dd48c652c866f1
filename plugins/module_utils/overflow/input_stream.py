# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A job's inputs to a storage host in one SSH session, each byte read once on each side and hashed as it
streams (used by rsync_stager).

The controller runs RECEIVER with the storage host's python3 through SSH (Session), reads what the host
holds, then sends the plan and each file (send_file): each piece read and hashed, then the same pages
given to SSH with sendfile on Linux. A watchdog ends a session in which nothing moved for a
while, or one the overflow drill interrupts on purpose.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

LINUX = sys.platform.startswith("linux")   # sendfile into a pipe, and pipe sizes, are Linux's
PARTIAL = ".partial~"   # an input copy in progress: its name plus a character no checked name holds

# Runs on the storage host as `python3 -c RECEIVER '<request>'` (Python 3.5 or later, standard library only).
# Request: {"dirs": [...], "paths": [dest...], "suffix": ".partial~", "manifest": path}.
# 1. Reports one JSON line: for each dest its sha256 (when the file is there) and the size of its partial
#    copy (dest + suffix, when there is one), and the warm-data manifest's text.
# 2. Reads the plan, its length in 10 digits then its JSON: {"files": [{"dest", "offset", "size", "shared":
#    name or null}]}, then for each file in turn its bytes from `offset` to `size` and the 64 hex digits of
#    the controller's sha256 of the whole file. The bytes go to the partial copy (spliced from the pipe where
#    os.splice exists) and are hashed through a map of the pages just written, 4 MiB at a time (the prefix
#    kept from an interrupted copy is read once for the hash); an equal digest renames the copy to dest,
#    another one removes it. Verified shared datasets go into the manifest, replaced in one rename.
# 3. Reports one JSON line: {"done": [{"dest", "sha256", "ok"}]}, or {"stopped": dest, "missing": n} when
#    the stream ended early (the partial copy stays for a resume) and exits 3.
RECEIVER = r'''
import fcntl, hashlib, json, mmap, os, sys
req = json.loads(sys.argv[1])
out, BUF, GRAIN = sys.stdout, 1 << 20, 4 << 20
splice = getattr(os, "splice", None)
if sys.platform.startswith("linux"):
    try:
        fcntl.fcntl(0, 1031, BUF)
    except OSError:
        pass
def readn(n):
    parts = []
    while n:
        b = os.read(0, n)
        if not b:
            break
        parts.append(b)
        n -= len(b)
    return b"".join(parts)
def hashed(h, fd, start, end):
    base = start - start % mmap.ALLOCATIONGRANULARITY
    m = mmap.mmap(fd, end - base, access=mmap.ACCESS_READ, offset=base)
    v = memoryview(m)
    h.update(v[start - base:])
    v.release()
    m.close()
def digest(path, limit):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while limit > 0:
            b = fh.read(min(BUF, limit))
            if not b:
                break
            h.update(b)
            limit -= len(b)
    return h
for d in req["dirs"]:
    os.makedirs(d, exist_ok=True)
files = {}
for p in req["paths"]:
    s = {}
    if os.path.isfile(p):
        s["sha256"] = digest(p, os.path.getsize(p)).hexdigest()
    if os.path.isfile(p + req["suffix"]):
        s["partial"] = os.path.getsize(p + req["suffix"])
    files[p] = s
try:
    with open(req["manifest"]) as fh:
        manifest = fh.read()
except FileNotFoundError:
    manifest = ""
out.write(json.dumps({"files": files, "manifest": manifest}) + "\n")
out.flush()
head = readn(10)
if len(head) < 10:
    sys.exit(0)
plan = json.loads(readn(int(head)).decode())
done, shared = [], {}
for f in plan["files"]:
    part, off = f["dest"] + req["suffix"], f["offset"]
    if off:
        h = digest(part, off)
        fd = os.open(part, os.O_RDWR)
        os.ftruncate(fd, off)
        os.lseek(fd, off, 0)
    else:
        h = hashlib.sha256()
        fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    pos, left, hashed_to = off, f["size"] - off, off
    try:
        while left:
            if splice:
                n = splice(0, fd, min(BUF, left))
            else:
                b = os.read(0, min(BUF, left))
                n = len(b)
                view = memoryview(b)
                while view:
                    view = view[os.write(fd, view):]
            if not n:
                break
            pos += n
            left -= n
            if pos - hashed_to >= GRAIN or not left:
                hashed(h, fd, hashed_to, pos)
                hashed_to = pos
    finally:
        os.close(fd)
    want = readn(64).decode() if not left else ""
    if len(want) != 64:
        out.write(json.dumps({"stopped": f["dest"], "missing": left}) + "\n")
        sys.exit(3)
    got = h.hexdigest()
    if got == want:
        os.replace(part, f["dest"])
        if f.get("shared"):
            shared[f["shared"]] = got
    else:
        os.unlink(part)
    done.append({"dest": f["dest"], "sha256": got, "ok": got == want})
if shared:
    keep = [ln + "\n" for ln in manifest.splitlines() if ln.split("  ", 1)[-1] not in shared]
    with open(req["manifest"] + ".tmp", "w") as fh:
        fh.write("".join(keep) + "".join("%s  %s\n" % (shared[n], n) for n in sorted(shared)))
    os.replace(req["manifest"] + ".tmp", req["manifest"])
out.write(json.dumps({"done": done}) + "\n")
'''


class Stopped(Exception):
    pass


class Session(object):
    """One SSH session to the receiver: JSON lines back, the plan and the bytes in. A watchdog kills it when
    nothing moved for `idle` seconds, or after `kill_after` seconds (an interruption the drill injects)."""

    def __init__(self, argv, idle, kill_after=None):
        self.err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err)
        if LINUX:
            try:
                # a larger pipe to SSH: fewer wake-ups per MiB sent
                fcntl.fcntl(self.proc.stdin.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
            except (OSError, ValueError):
                pass
        self.started = self.moved = time.monotonic()
        self.killed = None
        self.idle, self.kill_after = idle, kill_after
        self.done = threading.Event()
        self.watchdog = threading.Thread(target=self._watch)
        self.watchdog.daemon = True
        self.watchdog.start()

    def _watch(self):
        while not self.done.wait(0.1):
            now = time.monotonic()
            if self.kill_after and now - self.started > self.kill_after:
                self.killed = "killed after %.1fs (interruption injected)" % self.kill_after
            elif now - self.moved > self.idle:
                self.killed = "nothing moved for %ds" % self.idle
            else:
                continue
            self.proc.kill()
            return

    def reply(self):
        line = self.proc.stdout.readline()
        self.moved = time.monotonic()
        try:
            msg = json.loads(line.decode()) if line else None
        except ValueError:
            msg = None
        if not isinstance(msg, dict) or "stopped" in msg:
            raise Stopped("the receiver %s" % ("ended early" if not line else "reported %r" % line[:200]))
        return msg

    def send(self, data):
        try:
            self.proc.stdin.write(data)
        except (OSError, ValueError):
            raise Stopped("the receiver stopped reading")
        self.moved = time.monotonic()

    def sendfile(self, fd, offset, count):
        """`count` bytes of the file `fd` from `offset`, from the page cache into the pipe to SSH."""
        try:
            self.proc.stdin.flush()
            out = self.proc.stdin.fileno()
            while count > 0:
                sent = os.sendfile(out, fd, offset, count)
                if not sent:
                    raise Stopped("the local file ended early")
                offset += sent
                count -= sent
                self.moved = time.monotonic()
        except (OSError, ValueError):
            raise Stopped("the receiver stopped reading")

    def close_input(self):
        try:
            self.proc.stdin.close()
        except OSError:
            raise Stopped("the receiver stopped reading")

    def finish(self):
        self.done.set()
        rc = self.proc.wait()
        if rc != 0:
            raise Stopped("the receiver exited with rc %d" % rc)
        self.err.close()

    def abort(self):
        self.done.set()
        if self.proc.poll() is None:
            self.proc.kill()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        self.proc.wait()

    def why(self, exc):
        """What stopped the session: the watchdog's reason, the exit status and the end of stderr."""
        self.err.seek(0)
        tail = self.err.read()[-300:].decode(errors="replace").strip()
        self.err.close()
        return "; ".join(x for x in (self.killed, str(exc), "rc %s" % self.proc.returncode, tail) if x)


def send_file(session, item, rate=None):
    """Send a file from its offset, then the whole file's sha256 (64 hex digits). Each piece is read and
    hashed, then the same pages go from the page cache to SSH (sendfile on Linux), so the file is read from
    disk once. A file that shrinks while it is sent is a short read here, never a fault in a map. With
    `rate` (bytes a second) the send is held to it."""
    try:
        return _send_file(session, item, rate)
    except OSError as exc:  # the local file: gone, unreadable
        raise Stopped("local file %s: %s" % (item["path"], exc))


def _send_file(session, item, rate):
    h = hashlib.sha256() if not item["offset"] else None
    step = 64 * 1024 if rate else 4 << 20
    buf = bytearray(step)
    t0 = time.monotonic()
    with open(item["path"], "rb") as fh:
        offset = item["offset"]
        fh.seek(offset)
        while offset < item["size"]:
            n = fh.readinto(memoryview(buf)[:min(step, item["size"] - offset)])
            if not n:
                raise Stopped("local file %s is shorter than it was (%d of %d bytes)" % (item["path"], offset, item["size"]))
            with memoryview(buf)[:n] as chunk:
                if h:
                    h.update(chunk)
                if LINUX:
                    session.sendfile(fh.fileno(), offset, n)
                else:
                    session.send(chunk)
            offset += n
            if rate:
                ahead = (offset - item["offset"]) / float(rate) - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
    digest = h.hexdigest() if h else item["sha256"]
    session.send(digest.encode())
    return digest
