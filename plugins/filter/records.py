# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The records folder of a run (docs/records.md).

  {{ hgpu_records_dir | hybridgpu.fleet.records_dir }}                       -> hgpu_records_dir, else $PWD/records
  {{ hgpu_records_dir | hybridgpu.fleet.records_dir('manifests', 'a.json') }} -> <records>/manifests/a.json
"""
from __future__ import (absolute_import, division, print_function)

__metaclass__ = type

import os

from jinja2 import Undefined

from ansible.errors import AnsibleFilterError

try:
    from ansible.template import accept_args_markers
except ImportError:  # ansible-core before 2.19 hands an undefined variable to filters as it is
    def accept_args_markers(fn):
        return fn


@accept_args_markers
def records_dir(value, *parts):
    """``value`` (hgpu_records_dir) when it is set, else ``records`` in the directory
    ansible-playbook was started from ($PWD of the controller); ``parts`` are joined below it."""
    if value is None or isinstance(value, Undefined):
        value = os.environ.get("PWD") or os.getcwd()
        value = value + "/records"
    elif not isinstance(value, str):
        raise AnsibleFilterError("records_dir expects a path (hgpu_records_dir), got %s" % type(value).__name__)
    for part in parts:
        value = "%s/%s" % (value, part)
    return value


class FilterModule(object):
    def filters(self):
        return {"records_dir": records_dir}
