# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Atomic writes: a reader sees the old content or the new, never a part, and a failed
write leaves the old content and no temporary file behind.

- ``write(path, data, mode)``: one file, text or bytes. A temporary file in the same
  folder is written, flushed, fsynced and given its mode, then renamed over the target,
  and the folder is fsynced so the rename survives a crash.
- ``write_folder(path, files)``: a whole folder (a rename cannot replace a non-empty
  folder, so the old one is moved aside first and put back if the new one does not land).
- ``move(src, dst)``: a rename within one file system, both folders fsynced.
- ``read_text(path)``: a file's text, or None when it does not exist.
- ``digest(path)``: a file's SHA-256 and mode, or None when it does not exist.
- ``real_folder(path, what)``: refuses a folder that is a symbolic link (or not a folder).
- ``open_nofollow(path, flags, mode)``: ``os.open`` that refuses a symbolic link at ``path``.
- ``read_json_nofollow(path)``: a JSON file's content, refusing a symbolic link.

The temporary file is created exclusively and never through a symbolic link, so a link
planted at its name cannot redirect the write. The folder must exist; callers create it with
the mode they need.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import json
import os
import shutil
import stat
import tempfile
import uuid


NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class LinkError(OSError):
    """A records path is a symbolic link (or not the kind of file expected) and is refused."""


def real_folder(path, what="folder"):
    """Refuse ``path`` when it is a symbolic link or exists and is not a folder (LinkError)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise LinkError(errno.ELOOP, "%s %s is a symbolic link; it must be a real folder" % (what, path))
    if not stat.S_ISDIR(st.st_mode):
        raise LinkError(errno.ENOTDIR, "%s %s is not a folder" % (what, path))


def open_nofollow(path, flags, mode=0o600):
    """``os.open(path, flags | O_NOFOLLOW, mode)``; a symbolic link at ``path`` is a LinkError."""
    try:
        return os.open(path, flags | NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkError(errno.ELOOP, "%s is a symbolic link; it is not followed" % path)
        raise


def read_json_nofollow(path):
    """The JSON content of the regular file ``path`` (not through a symbolic link)."""
    fd = open_nofollow(path, os.O_RDONLY)
    with os.fdopen(fd, "r", encoding="utf-8") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise LinkError(errno.EINVAL, "%s is not a regular file" % path)
        return json.load(handle)


def sync_folder(folder):
    """fsync a folder, so the renames and creations in it are on disk."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _open_temp(folder, name):
    """A new file next to the target, created 0666 less the umask (what open() gives)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    while True:
        # the random part goes last, so a reader listing *.json never picks it up
        tmp = os.path.join(folder, ".%s.%s" % (name, uuid.uuid4().hex[:12]))
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue


def _set_mode(fd, path, mode):
    if mode is not None:
        os.fchmod(fd, mode)
        return
    # like the file it replaces: its mode and, where allowed, its owner (never a link's target's)
    try:
        old = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(old.st_mode):
        return
    os.fchmod(fd, stat.S_IMODE(old.st_mode))
    try:
        os.fchown(fd, old.st_uid, old.st_gid)
    except PermissionError:
        pass


def read_text(path):
    """The file's text (UTF-8), or None when it does not exist; other errors are raised."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def digest(path):
    """{"sha256": hex digest of the bytes, "mode": "0640"} of a regular file, or None when it does
    not exist; other errors (a folder, no permission) are raised."""
    try:
        with open(path, "rb") as handle:
            mode = stat.S_IMODE(os.fstat(handle.fileno()).st_mode)
            sha = hashlib.sha256()
            for block in iter(lambda: handle.read(1 << 20), b""):
                sha.update(block)
    except FileNotFoundError:
        return None
    return {"sha256": sha.hexdigest(), "mode": "%04o" % mode}


def write(path, data, mode=None):
    """Replace ``path`` with ``data`` (text is written as UTF-8).

    ``mode``: the file's permission bits; None keeps those (and the owner) of the file it
    replaces, and gives a new file 0666 less the umask."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = _open_temp(folder, os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as handle:
            fd = None
            handle.write(data)
            handle.flush()
            _set_mode(handle.fileno(), path, mode)
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if fd is not None:
            os.close(fd)
        _remove(tmp)
        raise
    sync_folder(folder)


def write_folder(path, files, mode=0o755):
    """Replace the folder ``path`` with one holding exactly ``files`` ({name: text or bytes}).

    The new folder is filled as a hidden sibling (``.<name>.tmp-*``) and renamed into place;
    an existing folder is first renamed aside (``.<name>.old-*``) and removed once the new one
    is in place, or renamed back when it does not land."""
    base = os.path.dirname(os.path.abspath(path))
    name = os.path.basename(path)
    tmp = tempfile.mkdtemp(prefix=".%s.tmp-" % name, dir=base)
    old = None
    try:
        for file_name, data in files.items():
            write(os.path.join(tmp, file_name), data)
        os.chmod(tmp, mode)
        if os.path.exists(path):
            old = tempfile.mkdtemp(prefix=".%s.old-" % name, dir=base)
            os.rmdir(old)
            os.rename(path, old)
        try:
            os.rename(tmp, path)
        except OSError:
            if old:
                os.rename(old, path)
                old = None
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    sync_folder(base)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def move(src, dst):
    """Rename ``src`` over ``dst`` (same file system) and fsync both folders."""
    os.replace(src, dst)
    dst_folder = os.path.dirname(os.path.abspath(dst))
    src_folder = os.path.dirname(os.path.abspath(src))
    sync_folder(dst_folder)
    if src_folder != dst_folder:
        sync_folder(src_folder)
