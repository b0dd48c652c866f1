# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bring a node's loaded NVIDIA kernel module to the installed driver after a package change.

After ``apt-get install`` of a new driver the old module stays loaded: NVML (nvidia-smi, the
device plugin, DCGM) then fails with "Driver/library version mismatch", or reports the old
version. The new module takes over either by an unload and a load, possible only when no
process holds a ``/dev/nvidia*`` file open (the GPU daemons are stopped for it first), or by a
reboot. This module finds the processes that hold the devices, so the caller knows which
of the two it must do and why."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import os

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.cmd import ANY_STATUS

MISMATCH = "Driver/library version mismatch"


class ReloadError(Exception):
    """The reload was tried and left the node without the expected module."""


def loaded_version(run):
    """(version or None, message): the driver version NVML reports, i.e. the loaded module's.
    ``None`` with nvidia-smi's message when it cannot answer (no module, version mismatch)."""
    rc, out, err = run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], ok=ANY_STATUS)
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    if rc == 0 and lines:
        return lines[0], ""
    return None, " ".join((out + " " + err).split())[:300] or "nvidia-smi exited %s" % rc


def matches(version, expected):
    """Whether ``version`` is ``expected`` or in its branch (``550`` matches ``550.163.01``)."""
    if not version:
        return False
    if not expected:
        return True
    return version == expected or version.startswith(expected.rstrip(".") + ".")


def _unit_of(proc, pid):
    """The systemd unit a process runs in (from its cgroup), or ''."""
    try:
        with open(os.path.join(proc, pid, "cgroup")) as fh:
            text = fh.read()
    except (IOError, OSError):
        return ""
    for line in text.splitlines():
        path = line.rsplit(":", 1)[-1]
        for part in reversed(path.split("/")):
            if part.endswith((".service", ".scope")):
                return part
    return ""


def holders(device_glob="/dev/nvidia*", proc="/proc", own_pid=None):
    """Processes with a file matching ``device_glob`` open: [{pid, command, unit, files}]."""
    own_pid = os.getpid() if own_pid is None else own_pid
    found = []
    try:
        pids = sorted((p for p in os.listdir(proc) if p.isdigit()), key=int)
    except OSError:
        return found
    for pid in pids:
        if int(pid) == own_pid:
            continue
        fd_dir = os.path.join(proc, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        files = set()
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if fnmatch.fnmatchcase(target, device_glob):
                files.add(target)
        if not files:
            continue
        try:
            with open(os.path.join(proc, pid, "comm")) as fh:
                command = fh.read().strip()
        except (IOError, OSError):
            command = ""
        found.append({"pid": int(pid), "command": command, "unit": _unit_of(proc, pid), "files": sorted(files)})
    return found


def blocking(found, stop_units):
    """The holders that stopping ``stop_units`` would not release."""
    return [h for h in found if h["unit"] not in stop_units]


def describe(found):
    return ", ".join("pid %d %s%s" % (h["pid"], h["command"] or "?", " (%s)" % h["unit"] if h["unit"] else "")
                     for h in found)


def active_units(run, units):
    """Those of ``units`` that systemd runs now."""
    out = []
    for unit in units:
        rc = run(["systemctl", "is-active", "--quiet", unit], ok=ANY_STATUS)[0]
        if rc == 0:
            out.append(unit)
    return out


def reload_module(run, unload, load, stop, expected):
    """Stop the ``stop`` units, unload the ``unload`` modules, load the ``load`` ones and start
    the units again. Returns (reloaded, message): False with modprobe's message when the kernel
    refused the unload (nothing else was changed then but the units, which are started again).
    Raises ReloadError when the modules were replaced but nvidia-smi does not report ``expected``."""
    for unit in stop:
        run(["systemctl", "stop", unit])
    try:
        rc, out, err = run(["modprobe", "-r"] + list(unload), ok=ANY_STATUS)
        if rc != 0:
            return False, " ".join((err or out).split()) or "modprobe -r exited %s" % rc
        for name in load:
            run(["modprobe", name])
    finally:
        for unit in stop:
            run(["systemctl", "start", unit], ok=ANY_STATUS)
    version, message = loaded_version(run)
    if not matches(version, expected):
        raise ReloadError("after the reload nvidia-smi reports %s, expected %s" % (version or message, expected))
    return True, "module %s loaded" % version
