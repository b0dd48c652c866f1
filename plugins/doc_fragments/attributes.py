# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the attributes every hybridgpu.fleet module declares mean.

Modules name this fragment and give only C(support) and C(details) per attribute.
"""

from __future__ import annotations


class ModuleDocFragment(object):
    # What check_mode and diff_mode mean; every module extends this.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and report whether it would change something, without changing it.
  diff_mode:
    description: Returns before and after for what changed (or would change in check mode) when run with C(--diff).
"""

    # For modules that only read or compute.
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: The module only reads or computes; it runs the same in check mode.
  diff_mode:
    support: none
    details: The module changes nothing, so there is nothing to diff.
"""

    # For modules that return ansible_facts.
    FACTS = r"""
options: {}
attributes:
  facts:
    description: Returns C(ansible_facts) that later tasks can use.
    support: full
"""
