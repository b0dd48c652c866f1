# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of a module that changes a node only under a signed change record, verified by
its action plugin on the control host at the moment it acts (plugin_utils/pinned.py)."""

from __future__ import annotations


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  record_path:
    description: The change record file on the control host; its signature is C(record_path) with C(.sig) appended.
    type: path
  record_text:
    description: The change record as text, byte for byte as it was signed (AWX).
    type: str
  signature:
    description: The record's armoured signature text (with O(record_text)).
    type: str
  executor:
    description: Person id running the change (outside AWX; under AWX the launching user).
    type: str
notes:
  - The action plugin verifies the record for this node before the module runs (the same check as
    M(hybridgpu.fleet.change_approval)) - the boundary signed by the pinned boundary signers, the
    approver, the playbook, the targets, the window, the executor (the AWX user under AWX) and the
    ledger of change ids - so skipping the play's approval task (C(--start-at-task), C(--skip-tags))
    does not skip it. A run whose extra vars carry trust (the boundary, the records folder, a verified
    change or plan) is refused.
"""

    # The run's targets and the pinned boundary, for modules that change a node the record names.
    TARGETS = r"""
options:
  targets:
    description:
      - Every host of this run; the node must be one, and each must be in the record's targets.
        Default the play's hosts.
    type: list
    elements: str
  boundary:
    description:
      - Set by the action plugin to the pinned access boundary (C(/etc/hybridgpu/boundary.yml), else
        the inventory's C(hgpu_boundary_path)); a task may not set it.
    type: path
"""
