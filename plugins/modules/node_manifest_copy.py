#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_manifest_copy
short_description: Keep the node's own copy of its manifest, in one round trip
version_added: "0.1.0"
description:
  - Writes the JSON text that M(hybridgpu.fleet.node_manifest) returned (its RV(hybridgpu.fleet.node_manifest#module:text))
    to a file on the node, making its folder when missing. Removal falls back on this copy when the control
    host has lost the manifest.
  - One module run does what a C(file) task for the folder and a C(copy) task for the content would do in
    two to four SSH round trips, which counts on a wave of hundreds of nodes.
  - Written atomically (temporary sibling, then rename); an unchanged copy is left alone and reported unchanged.
  - The content must be a JSON object naming the node (C(node)); anything else fails before the node is touched.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  path:
    description: The copy on the node. Its folder is made with mode C(0750) when missing.
    type: path
    default: /var/lib/hybridgpu/manifest.json
  content:
    description: The manifest's JSON text.
    type: str
    required: true
  node:
    description: The node the manifest must belong to (its C(node) field); unchecked when omitted.
    type: str
  mode:
    description: The file's mode.
    type: str
    default: "0640"
attributes:
  check_mode:
    support: full
    details: Reports whether the copy would change and writes nothing.
  diff_mode:
    support: full
    details: The copy's text before and after.
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Record the labels and taints in the manifest
  hybridgpu.fleet.node_manifest:
    path: "records/manifests/{{ inventory_hostname }}.json"
    node: "{{ inventory_hostname }}"
    section: placement
    artefacts: "{{ placement_artefacts }}"
  delegate_to: localhost
  register: placement_record

- name: Keep a copy of the manifest on the node
  hybridgpu.fleet.node_manifest_copy:
    content: "{{ placement_record.text }}"
    node: "{{ inventory_hostname }}"
"""

RETURN = r"""
path:
  description: The copy on the node.
  returned: always
  type: str
  sample: /var/lib/hybridgpu/manifest.json
made_folder:
  description: Whether the copy's folder was made (or would be, in check mode).
  returned: always
  type: bool
  sample: false
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import files


def check_content(module, text, node):
    try:
        doc = json.loads(text)
    except ValueError as exc:
        module.fail_json(msg="content is not JSON (%s); give the manifest module's `text` return value" % exc)
    if not isinstance(doc, dict):
        module.fail_json(msg="content is a JSON %s, not the manifest's JSON object" % type(doc).__name__)
    if node is not None and doc.get("node") != node:
        module.fail_json(msg="content is the manifest of node %r, not of %r" % (doc.get("node"), node))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/var/lib/hybridgpu/manifest.json"),
            content=dict(type="str", required=True),
            node=dict(type="str"),
            mode=dict(type="str", default="0640"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path, text = p["path"], p["content"]
    try:
        mode = int(p["mode"], 8)
    except ValueError:
        module.fail_json(msg="mode %r is not an octal file mode such as 0640" % p["mode"])
    if not 0 <= mode <= 0o7777:
        module.fail_json(msg="mode %r is not a file mode (0000 to 7777)" % p["mode"])
    check_content(module, text, p["node"])

    folder = os.path.dirname(path)
    made_folder = bool(folder) and not os.path.isdir(folder)
    try:
        before = None if made_folder else files.read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        module.fail_json(msg="cannot read the manifest copy %s: %s" % (path, exc))
    mode_wrong = before is not None and (os.stat(path).st_mode & 0o7777) != mode
    changed = made_folder or before != text or mode_wrong
    result = dict(changed=changed, path=path, made_folder=made_folder)
    if module._diff and changed:
        result["diff"] = dict(before=before or "", after=text, before_header=path, after_header=path)
    if changed and not module.check_mode:
        if made_folder:
            try:
                os.makedirs(folder, mode=0o750, exist_ok=True)
            except OSError as exc:
                module.fail_json(msg="cannot make the folder %s for the manifest copy: %s" % (folder, exc))
        try:
            if before != text or made_folder:
                files.write(path, text, mode)
            else:
                os.chmod(path, mode)
        except OSError as exc:
            module.fail_json(msg="cannot write the manifest copy %s: %s" % (path, exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
