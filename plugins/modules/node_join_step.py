#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

# Documentation only: the action plugin of the same name (plugins/action/node_join_step.py) runs
# the task. It declares supports_check_mode (_supports_check_mode = True) and hands the task's
# check mode to the module it runs on the node.

DOCUMENTATION = r"""
module: node_join_step
short_description: Run the node-side step of a node's join method, whichever method its group uses
version_added: "0.4.0"
description:
  - Runs one module on the node - M(hybridgpu.fleet.kubeadm_node) with the options of O(kubeadm)
    when O(method=kubeadm), M(hybridgpu.fleet.node_join_command) with the options of O(command)
    when O(method=command) - and returns that module's result.
  - One task serves every join method, so a wave whose nodes use different methods runs this step
    on all of them at once. Two tasks, one per method, would run one after the other.
  - The options of the method not chosen are ignored, and are not checked.
  - This is an action plugin. The chosen module checks its own options and runs as it would
    in its own task, with the task's check mode. A secret that the command join is given
    (the C(secret) option of M(hybridgpu.fleet.node_join_command)) is masked by that module in
    its result.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  method:
    description: The node group's join method.
    type: str
    required: true
    choices: [kubeadm, command]
  kubeadm:
    description: Options of M(hybridgpu.fleet.kubeadm_node), used when O(method=kubeadm).
    type: dict
    default: {}
  command:
    description: Options of M(hybridgpu.fleet.node_join_command), used when O(method=command).
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    details: The chosen module runs in check mode, and reports what it would do.
  diff_mode:
    support: none
    details: The chosen module's result is returned as it is.
seealso:
  - module: hybridgpu.fleet.kubeadm_node
  - module: hybridgpu.fleet.node_join_command
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Read the kubeadm join state, or run the vendor's installer unless the node has joined
  hybridgpu.fleet.node_join_step:
    method: "{{ node_join_method }}"
    kubeadm:
      packages: [kubeadm, kubelet]
      kubelet_unit: kubelet.service
    command:
      packages: [acme-node-agent]
      install_packages: true
      installer: [/usr/bin/acme-node, activate]
      secret: "{{ vault_acme_activation_token }}"
      secret_env: ACME_TOKEN
      units: [acme-node-agent.service]
      uninstall: [/usr/bin/acme-node, deactivate]
  register: join_step
"""

RETURN = r"""
module:
  description: The module that ran.
  returned: always
  type: str
  sample: hybridgpu.fleet.kubeadm_node
joined:
  description: Whether the node has joined (M(hybridgpu.fleet.kubeadm_node)); the other returns of that module come with it.
  returned: with O(method=kubeadm)
  type: bool
ran:
  description: Whether the installer ran (M(hybridgpu.fleet.node_join_command)); the other returns of that module come with it.
  returned: with O(method=command)
  type: bool
"""
