# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What may go into a command run on another host: names that are checked, arguments that are quoted,
and SSH options that check the host key.

Job IDs, input names, dataset names and image names become parts of remote paths (under the storage
root and the on-prem results folder) and arguments of remote commands, and users choose them (a Slurm
job name is `sbatch -J`). A name is accepted only when it matches NAME_PATTERN and holds no `..`:
a letter or digit first (no leading `-`, `.` or `/`), then at most 127 letters, digits, `.`, `_` or `-`.
No `/`, no whitespace, no newline, no shell character. Anything else is refused before a command runs.
"""
from __future__ import annotations

import re
import shlex

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
_NAME = re.compile(NAME_PATTERN)


class UnsafeName(ValueError):
    """A name that may not go into a remote path or command. `field` and `value` name it."""

    def __init__(self, field, value):
        super(UnsafeName, self).__init__(
            "%s %r is refused: it must match %s and hold no '..' (nothing was run)" % (field, value, NAME_PATTERN))
        self.field = field
        self.value = value


def is_safe(value):
    return isinstance(value, str) and _NAME.fullmatch(value) is not None and ".." not in value


def check_name(field, value):
    """The value itself when it is safe; UnsafeName naming the field and the value otherwise."""
    if not is_safe(value):
        raise UnsafeName(field, value)
    return value


def command(*args):
    """One shell command line from separate arguments, each quoted."""
    return " ".join(shlex.quote(str(a)) for a in args)


def ssh_options(known_hosts=None):
    """SSH options for the collection's own connections: the host key is always checked, against
    `known_hosts` when given (a file in OpenSSH known_hosts format), else against the user's files."""
    opts = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"]
    if known_hosts:
        opts += ["-o", "UserKnownHostsFile=%s" % known_hosts]
    return opts + ["-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5"]
