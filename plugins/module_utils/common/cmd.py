# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a command: an argument list (never a shell string) under LANG=C, so the parsers read
the output they were written for, with the exit status always checked.

Two front ends with the same environment and the same errors:

- ``run(argv, ...)`` through ``subprocess``, for code that runs without an AnsibleModule;
- ``module_run(module, argv, ...)`` through ``AnsibleModule.run_command``, for modules.

Both return ``Result(rc, out, err)`` (text; a tuple, so ``rc, out, err = ...`` works) when
the exit status is in ``ok`` (default only 0), and raise ``CommandError`` otherwise, when
the command cannot be started, or when it runs past ``timeout`` seconds. A caller that reads
the status itself (a probe for which a non-zero exit is an answer) says so with
``ok=ANY_STATUS``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import os
import shlex
import subprocess

ENV = {"LANG": "C", "LC_ALL": "C"}

# apt-get as the collection runs it: no prompts, and a changed configuration file on the node
# is kept (the package's default is taken only where the node has none).
APT_GET = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-y", "-q",
           "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold"]

# stderr lines an error message keeps (the end, where tools say what went wrong)
TAIL_LINES = 20

# coreutils timeout(1): 124 when the command ran out of time, 137 when it had to be killed
TIMEOUT_CODES = (124, 137)

Result = collections.namedtuple("Result", ["rc", "out", "err"])


class _AnyStatus(object):
    """Every exit status; for callers that read ``rc`` themselves."""

    def __contains__(self, rc):
        return True

    def __repr__(self):
        return "ANY_STATUS"


ANY_STATUS = _AnyStatus()


def command_text(argv):
    """The argument list as one shell-quoted line, for messages."""
    return " ".join(shlex.quote(str(arg)) for arg in argv)


def _tail(text, lines=TAIL_LINES):
    return "\n".join((text or "").strip().splitlines()[-lines:])


class CommandError(RuntimeError):
    """A command failed: exited with a status not in ``ok``, could not start, or timed out.

    ``argv``, ``rc`` (None unless it exited), ``out`` and ``err`` (whole), ``timeout``
    (seconds, set when it ran out of time) and ``reason`` (why it could not start)."""

    def __init__(self, argv, rc=None, out="", err="", timeout=None, reason=None):
        self.argv = list(argv)
        self.rc = rc
        self.out = out or ""
        self.err = err or ""
        self.timeout = timeout
        self.reason = reason
        if timeout is not None:
            msg = "%s did not finish within %s s" % (command_text(self.argv), timeout)
        elif reason is not None:
            msg = "%s could not be run: %s" % (command_text(self.argv), reason)
        else:
            msg = "%s failed (rc=%s)" % (command_text(self.argv), rc)
            detail = _tail(self.err) or _tail(self.out)
            if detail:
                msg += ": " + detail
        super(CommandError, self).__init__(msg)


def _text(value):
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def _check(argv, rc, out, err, ok):
    if rc not in ok:
        raise CommandError(argv, rc, out, err)
    return Result(rc, out, err)


def run(argv, data=None, timeout=None, ok=(0,)):
    """Run ``argv`` with ``subprocess``; ``data`` (text or bytes) goes to its stdin."""
    argv = list(argv)
    if isinstance(data, str):
        data = data.encode("utf-8")
    env = dict(os.environ, **ENV)
    try:
        proc = subprocess.run(argv, input=data, capture_output=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        raise CommandError(argv, out=_text(exc.stdout), err=_text(exc.stderr), timeout=timeout)
    except OSError as exc:
        raise CommandError(argv, reason=exc.strerror or str(exc))
    return _check(argv, proc.returncode, _text(proc.stdout), _text(proc.stderr), ok)


def module_run(module, argv, data=None, timeout=None, ok=(0,)):
    """Run ``argv`` with ``module.run_command``; ``data`` goes to its stdin unchanged.

    A ``timeout`` runs the command under coreutils timeout(1) on the managed host."""
    argv = list(argv)
    full = argv
    if timeout is not None:
        full = [module.get_bin_path("timeout", required=True), "--kill-after=5", str(timeout)] + argv
    try:
        rc, out, err = module.run_command(full, data=data, binary_data=data is not None,
                                          environ_update=dict(ENV), handle_exceptions=False)
    except OSError as exc:
        raise CommandError(argv, reason=exc.strerror or str(exc))
    if timeout is not None and rc in TIMEOUT_CODES:
        raise CommandError(argv, out=out, err=err, timeout=timeout)
    return _check(argv, rc, out, err, ok)
