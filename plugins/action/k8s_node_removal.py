# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs hybridgpu.fleet.k8s_node_removal on the control host, in the playbook's process
(plugin_utils/controller.py)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.hybridgpu.fleet.plugins.modules import k8s_node_removal
from ansible_collections.hybridgpu.fleet.plugins.plugin_utils.controller import K8sAction


class ActionModule(K8sAction):
    module = k8s_node_removal
