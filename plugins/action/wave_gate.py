# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs hybridgpu.fleet.wave_gate with the pinned boundary signers and the AWX user
(plugin_utils/pinned.py); a launcher cannot supply either."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.hybridgpu.fleet.plugins.plugin_utils.pinned import PinnedArgsAction


class ActionModule(PinnedArgsAction):
    pass
