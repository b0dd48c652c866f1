#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_manifest
short_description: Record what onboarding created on a node, in a per-node JSON manifest
version_added: "0.1.0"
description:
  - Keeps one JSON document per node listing every artefact onboarding created (files,
    units, users, packages, nft tables, labels, taints, API objects...), one section per
    role, plus the node's standalone state before onboarding. Removal reverses exactly
    what the manifest lists.
  - The manifest lives on the control host. The collection's action plugin of the same name
    does the work there, in the playbook's own process, with or without C(delegate_to); run as
    a plain module it reads and writes where it runs. The returned RV(text) is what a copy on
    the node should contain.
  - Written atomically (temporary sibling, then rename), together with a self-contained HTML page
    beside it (C(<node>.html), with the node, its baseline and each section's artefacts) rendered from
    the same document. Recording the same artefacts again leaves both files unchanged, so reruns
    report no change; a missing or stale page is written again and reported as a change.
  - With O(created_only), this module decides what onboarding created - packages, users,
    directories, files and active units the node had before onboarding (the C(pre_onboarding) block) are never
    recorded, so removal never deletes them - and it refuses to run without that block.
  - A manifest file that cannot be read, is not JSON or is not a JSON object always fails
    the task; only a missing file reads as "no manifest yet", and only the baseline step
    (O(pre_onboarding)) or a section without O(created_only) creates one.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  path:
    description: The manifest file, for example C(records/manifests/<node>.json).
    type: path
    required: true
  node:
    description: Node name the manifest belongs to.
    type: str
    required: true
  section:
    description: Section to update, normally the role's name (C(join), C(placement), ...).
    type: str
  artefacts:
    description:
      - Artefacts the section created. Each needs C(kind) and its identifying fields
        C(file)/C(directory)/C(dropin)/C(key) (C(path)), C(unit)/C(user)/C(group)/C(package)
        (C(name)), C(nft_table) (C(family), C(name)), C(label) (C(key)), C(taint) (C(key),
        C(effect)), C(api_object) (C(cluster), C(api_version), C(resource), C(namespace),
        C(name)), C(provider_rule) (C(provider), C(firewall), C(name)). Other fields are kept.
    type: list
    elements: dict
    default: []
  facts:
    description: Extra facts of the section (merged key by key).
    type: dict
    default: {}
  replace:
    description:
      - Make the section's artefacts exactly O(artefacts). By default earlier artefacts are
        kept, so something created once stays listed for removal.
    type: bool
    default: false
  pre_onboarding:
    description: Standalone state before onboarding. Recorded only when none is recorded yet.
    type: dict
  created_only:
    description:
      - Record only what onboarding created. Package (C(name)), user (C(name)), directory and
        file (C(path)) artefacts that the manifest's C(pre_onboarding) block lists as present
        before onboarding, and unit (C(name)) artefacts it lists as active, are left out and
        returned in RV(had).
      - An artefact with C(record_always=true) (a folder onboarding uses whether or not it
        made it) is recorded either way, with C(created) set to whether onboarding made it.
      - Fails, naming the file, when the manifest does not exist or has no C(pre_onboarding)
        block. Run the baseline step first (role C(hybridgpu.fleet.node_join),
        C(tasks_from=baseline)); in check mode that step writes nothing.
      - With O(read), only that check is made, so a role can refuse to start before it
        changes anything.
    type: bool
    default: false
  adopt:
    description:
      - The node's own copy of its manifest (the document onboarding keeps on the node). When
        the manifest on the control host is missing or has no C(pre_onboarding) block, this
        document becomes the manifest, so a node onboarded before under another records folder
        (a new AWX persistent path, a restored control host) keeps its true standalone state and
        everything onboarding recorded, instead of having its onboarded state taken for standalone.
      - Ignored when the control host's manifest already holds the standalone state. Fails when
        the document belongs to another node, has no C(pre_onboarding) block or has malformed
        sections.
      - A mapping, or the copy's text as read from the node (JSON, checked here so that a broken
        copy fails naming the manifest and the node).
    type: raw
  read:
    description:
      - Only read the manifest and return it; nothing is written. A missing manifest
        returns RV(manifest) null (unless O(created_only) is set); an unreadable one fails.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Reports whether the manifest would change without writing it.
  diff_mode:
    support: full
    details: Before and after are the JSON documents.
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Record what the join created
  hybridgpu.fleet.node_manifest:
    path: "{{ hgpu_records_dir }}/manifests/{{ inventory_hostname }}.json"
    node: "{{ inventory_hostname }}"
    section: join
    artefacts:
      - {kind: file, path: /etc/kubernetes/kubelet.conf, mode: "0600"}
      - {kind: package, name: kubelet}
      - {kind: unit, name: kubelet.service, enabled: true}
      - {kind: api_object, cluster: onprem, api_version: v1, resource: secrets,
         namespace: kube-system, name: bootstrap-token-abcdef}
  delegate_to: localhost

- name: Record the agents, leaving out what the node had before onboarding
  hybridgpu.fleet.node_manifest:
    path: "{{ hgpu_records_dir }}/manifests/{{ inventory_hostname }}.json"
    node: "{{ inventory_hostname }}"
    section: agents
    created_only: true
    artefacts:
      - {kind: package, name: prometheus-node-exporter}
      - {kind: directory, path: /var/lib/hybridgpu, record_always: true}
  delegate_to: localhost

- name: Refuse to start when the standalone state is not recorded
  hybridgpu.fleet.node_manifest:
    path: "{{ hgpu_records_dir }}/manifests/{{ inventory_hostname }}.json"
    node: "{{ inventory_hostname }}"
    read: true
    created_only: true
  delegate_to: localhost

- name: Is the standalone state recorded yet?
  hybridgpu.fleet.node_manifest:
    path: "{{ hgpu_records_dir }}/manifests/{{ inventory_hostname }}.json"
    node: "{{ inventory_hostname }}"
    read: true
  delegate_to: localhost
  register: manifest_now
"""

RETURN = r"""
manifest:
  description: The manifest after the run (with O(read), as read; null when there is none).
  returned: always
  type: dict
text:
  description: The manifest as written (JSON text), for the copy on the node; empty when O(read) finds none.
  returned: always
  type: str
baseline_recorded:
  description: Whether the manifest holds the node's standalone state before onboarding (C(pre_onboarding)).
  returned: always
  type: bool
had:
  description: With O(created_only), the artefacts left out because the node had them before onboarding.
  returned: always
  type: list
  elements: dict
"""

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import manifest_task
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.controller_task import run_module


def main():
    run_module(manifest_task.ARGUMENT_SPEC, manifest_task.execute, supports_check_mode=True,
               **manifest_task.SPEC_OPTIONS)


if __name__ == "__main__":
    main()
