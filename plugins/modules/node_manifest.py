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
  - Runs where the manifest lives (normally the control host, with C(delegate_to)). The
    returned RV(text) is what a copy on the node should contain.
  - Written atomically (temporary sibling, then rename). Recording the same artefacts
    again leaves the file unchanged, so reruns report no change.
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
    path: "{{ hgpu_lab_records_dir }}/manifests/{{ inventory_hostname }}.json"
    node: "{{ inventory_hostname }}"
    section: join
    artefacts:
      - {kind: file, path: /etc/hybridgpu/node-agent/kubeconfig, mode: "0600"}
      - {kind: package, name: hybridgpu-node-agent}
      - {kind: unit, name: hybridgpu-node-agent.service, enabled: true}
      - {kind: api_object, cluster: onprem, api_version: v1, resource: secrets,
         namespace: kube-system, name: node-dh1-a100-01-token}
  delegate_to: localhost
"""

RETURN = r"""
manifest:
  description: The manifest after the run.
  returned: always
  type: dict
text:
  description: The manifest as written (JSON text), for the copy on the node.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import manifest


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            node=dict(type="str", required=True),
            section=dict(type="str"),
            artefacts=dict(type="list", elements="dict", default=[]),
            facts=dict(type="dict", default={}),
            replace=dict(type="bool", default=False),
            pre_onboarding=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        before = manifest.load(p["path"])
        after = manifest.merge(before, p["node"], p["section"], p["artefacts"], p["facts"],
                               p["pre_onboarding"], p["replace"])
    except manifest.ManifestError as err:
        module.fail_json(msg="Manifest %s for node %s: %s" % (p["path"], p["node"], err))
    text = manifest.dumps(after)
    changed = before is None or manifest.dumps(before) != text
    if changed and not module.check_mode:
        try:
            manifest.write(p["path"], after)
        except OSError as err:
            module.fail_json(msg="Cannot write manifest %s: %s" % (p["path"], err))
    result = dict(changed=changed, manifest=after, text=text)
    if changed and module._diff:
        result["diff"] = dict(before=manifest.dumps(before) if before else "", after=text,
                              before_header=p["path"], after_header=p["path"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
