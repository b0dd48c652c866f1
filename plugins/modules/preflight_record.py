#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: preflight_record
short_description: Write the preflight records folder for one wave, atomically
version_added: "0.1.0"
description:
  - Writes C(<dest>/<wave>/preflight.json) (stable schema, sorted keys; verdicts free of
    timestamps and timings, plus a digest of them) and C(<dest>/<wave>/index.html), a
    self-contained page with the matrix (disagreeing columns highlighted), the path table with
    each probe's result, timing and evidence, the boundary status, and the proposed wave and holds.
  - The folder is built in a temporary sibling and renamed into place; on any error the old
    records stay as they were and nothing half-written is left.
  - Bad input fails before anything is written.
  - When everything but the C(run) block and the probes' measurements (C(elapsed_ms), C(evidence))
    is unchanged nothing is rewritten and C(changed) is false, so a rerun that only measured again
    keeps the first run's records (use O(force) to rewrite them).
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  dest:
    description: Records base folder on the host the module runs on.
    type: path
    required: true
  wave:
    description: Wave name; the folder name under O(dest).
    type: str
    required: true
  matrix:
    description: The C(matrix) result of M(hybridgpu.fleet.compat_matrix).
    type: dict
    required: true
  probes:
    description: The C(probes) result of M(hybridgpu.fleet.path_table) (judged).
    type: list
    elements: dict
    default: []
  connection_direction:
    description: The C(connection_direction) result of M(hybridgpu.fleet.path_table).
    type: dict
  boundary_status:
    description: The C(status) result of M(hybridgpu.fleet.access_boundary).
    type: dict
  cidr_overlaps:
    description: The C(overlaps) result of M(hybridgpu.fleet.cidr_overlap).
    type: list
    elements: dict
    default: []
  run:
    description: Run information (start and end times, controller, playbook); only place for timestamps.
    type: dict
    default: {}
  force:
    description: Rewrite even when nothing but the run block changed.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Reports whether the records would change; writes nothing.
  diff_mode:
    support: none
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Write the wave-1 records
  hybridgpu.fleet.preflight_record:
    dest: "{{ playbook_dir }}/../records"
    wave: wave-1
    matrix: "{{ matrix.matrix }}"
    probes: "{{ judged.probes }}"
    connection_direction: "{{ judged.connection_direction }}"
    boundary_status: "{{ boundary.status }}"
    cidr_overlaps: "{{ overlaps.overlaps }}"
    run:
      started: "{{ ansible_date_time.iso8601 }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
path:
  description: The wave's records folder.
  returned: success
  type: str
files:
  description: The files in it.
  returned: success
  type: list
  elements: str
verdicts:
  description: The verdicts block (equal across reruns with unchanged input).
  returned: success
  type: dict
verdicts_digest:
  description: SHA-256 of the canonical verdicts JSON.
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import records


def run(params, check_mode=False):
    record = records.build_record(params["wave"], params["matrix"], params.get("probes") or [],
                                  params.get("connection_direction"), params.get("boundary_status"),
                                  params.get("cidr_overlaps") or [], params.get("run") or {})
    res = records.write_records(params["dest"], record, force=params.get("force", False), check_mode=check_mode)
    res.update(verdicts=record["verdicts"], verdicts_digest=record["verdicts_digest"])
    return res


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path", required=True),
            wave=dict(type="str", required=True),
            matrix=dict(type="dict", required=True),
            probes=dict(type="list", elements="dict", default=[]),
            connection_direction=dict(type="dict"),
            boundary_status=dict(type="dict"),
            cidr_overlaps=dict(type="list", elements="dict", default=[]),
            run=dict(type="dict", default={}),
            force=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    try:
        result = run(module.params, module.check_mode)
    except records.RecordError as exc:
        module.fail_json(msg="preflight_record: bad input, nothing written: %s" % exc)
    except (IOError, OSError) as exc:
        module.fail_json(msg="preflight_record: could not write %s/%s (old records left intact): %s"
                         % (module.params["dest"], module.params["wave"], exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
