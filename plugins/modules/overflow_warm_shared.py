#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Keep shared datasets warm in cloud storage: send what is missing or changed, keep what matches."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: overflow_warm_shared
short_description: Keep shared datasets warm in overflow cloud storage
description:
  - Puts datasets that many moved jobs read into the cloud storage of the overflow path ahead of time
    (C(shared/<name>)), so that each moved job carries only its own inputs.
  - A dataset whose stored SHA-256 matches the on-prem file is kept and nothing is sent; one that is
    absent is sent; one whose checksum differs is sent again (refreshed) and verified after the copy.
  - The same storage settings (I(storage)) as M(hybridgpu.fleet.overflow_dispatch) (rsync/SSH or an
    S3-compatible bucket); C(onprem_root) is not used here. Run it on a schedule (an AWX schedule of C(playbooks/overflow_warm_shared.yml)).
version_added: "0.1.0"
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.overflow_storage
options:
  datasets:
    description:
      - The shared datasets, each C(name) (the name moved jobs use, C([A-Za-z0-9][A-Za-z0-9._-]{0,127})
        without C(..)) and C(path) (the file on the controller).
    type: list
    elements: dict
    required: true
attributes:
  check_mode:
    support: full
    details: In check mode the stored checksums are read and compared; nothing is sent.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Keep the tokenizer and the eval set warm in the cloud bucket
  hybridgpu.fleet.overflow_warm_shared:
    storage:
      kind: s3
      endpoint_url: https://s3.cloud.example.net
      region: region-1
      bucket: overflow-staging
      prefix: site-a
      access_key: "{{ vault_overflow_s3_key }}"
      secret_key: "{{ vault_overflow_s3_secret }}"
    datasets:
      - {name: tokenizer.tar, path: /srv/datasets/tokenizer.tar}
      - {name: evalset.tar, path: /srv/datasets/evalset.tar}
  register: warm
"""

RETURN = r"""
datasets:
  description:
    - One entry per dataset, with C(outcome) C(warm) (kept, nothing sent), C(sent) (was absent), C(refreshed)
      (changed, sent again); in check mode C(warm), C(would_send) or C(would_refresh).
    - C(sha256) of the file, C(bytes_sent), C(seconds) and C(throughput_Bps) (sustained, checksums included).
  returned: always
  type: list
  elements: dict
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.remote import UnsafeName, check_name
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.stagers import STORAGE_OPTIONS, StorageError, build

CHECK_OUTCOME = {"warm": "warm", "absent": "would_send", "stale": "would_refresh"}


def check_datasets(datasets):
    """The first problem with the datasets list, naming the entry and the field; None when it is fine."""
    for i, d in enumerate(datasets):
        if not isinstance(d, dict) or set(d) - {"name", "path"}:
            return "datasets[%d] must be a dict with name and path only" % i
        try:
            check_name("datasets[%d].name" % i, d.get("name"))
        except UnsafeName as exc:
            return str(exc)
        if not d.get("path") or not os.path.isfile(d["path"]):
            return "datasets[%d].path %r is not a file on the controller" % (i, d.get("path"))
    return None


def warm(stager, datasets, check_mode):
    if check_mode:
        state = stager.warm_state(datasets)
        return [{"name": d["name"], "outcome": CHECK_OUTCOME[state[d["name"]]], "bytes_sent": 0} for d in datasets]
    out = []
    for d in datasets:
        got = stager.warm_shared(d["name"], d["path"])
        if got["bytes_sent"] == 0:
            outcome = "warm"
        elif d["name"] in got.get("refreshed_shared", []):
            outcome = "refreshed"
        else:
            outcome = "sent"
        out.append({"name": d["name"], "outcome": outcome, "sha256": (got.get("sha256") or {}).get(d["name"]),
                    "bytes_sent": got["bytes_sent"], "seconds": got["seconds"], "throughput_Bps": got["throughput_Bps"]})
    return out


def main():
    module = AnsibleModule(argument_spec=dict(
        storage=dict(type="dict", required=True, no_log=False, options=STORAGE_OPTIONS),
        datasets=dict(type="list", elements="dict", required=True),
    ), supports_check_mode=True)
    datasets = module.params["datasets"]
    problem = check_datasets(datasets)
    if problem:
        module.fail_json(msg=problem)
    opts = dict((k, v) for k, v in module.params["storage"].items() if v is not None)
    opts.setdefault("onprem_root", tempfile.gettempdir())    # nothing comes back here
    try:
        result = warm(build(opts), datasets, module.check_mode)
    except StorageError as exc:
        module.fail_json(msg=str(exc))
    except backends.TransferInterrupted as exc:
        module.fail_json(msg="warming the shared datasets failed: %s" % exc)
    changed = any(r["outcome"] not in ("warm",) for r in result)
    module.exit_json(changed=changed, datasets=result)


if __name__ == "__main__":
    main()
