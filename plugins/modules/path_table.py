#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: path_table
short_description: Validate and load the network path table with its derived probes
version_added: "0.1.0"
description:
  - Reads the path table YAML (hosts, groups and paths with source, destination, direction,
    protocol, ports, purpose, expected rule and narrowest source) and validates it; errors
    name the file and the field.
  - Expands every path into probes, each to be run on its real source host. An allowed path also
    yields two negative probes, the neighbouring port from the same source and the same port from
    a listed host outside the narrowest source.
  - When O(results) are given, judges each probe and the connection-direction verdict
    (management traffic starts only from the owned site, no inbound management port open).
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.attributes.read_only
options:
  path:
    description: Path of the path table YAML file.
    type: path
    required: true
  results:
    description:
      - Probe results keyed by probe id, each C({observed, elapsed_ms, evidence}) with
        C(observed) one of V(open), V(closed), V(error).
    type: dict
    default: {}
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Load the inventory's path table and its probes
  hybridgpu.fleet.path_table:
    path: "{{ inventory_dir }}/preflight/paths.yml"
  delegate_to: localhost
  run_once: true
  register: paths

- name: Judge the probe results
  hybridgpu.fleet.path_table:
    path: "{{ inventory_dir }}/preflight/paths.yml"
    results: "{{ probe_results }}"
  delegate_to: localhost
  run_once: true
  register: judged
"""

RETURN = r"""
paths:
  description: The validated paths (ports as [low, high] pairs).
  returned: success
  type: list
  elements: dict
hosts:
  description: Host name to address map from the table.
  returned: success
  type: dict
probes:
  description:
    - Every probe with id, kind (listed, neighbour_port, unlisted_source), source, destination,
      address, protocol, port, expected and verdict (pass, fail, not_run, not_derivable).
  returned: success
  type: list
  elements: dict
connection_direction:
  description: Verdict pass, fail or unverified with reasons.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import path_map
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import schema


def run(params):
    table = path_map.load_path_table(params["path"])
    probes = path_map.evaluate(table.probes(), params.get("results") or {})
    return {
        "paths": table.paths,
        "hosts": table.doc["hosts"],
        "groups": table.doc["groups"],
        "probes": probes,
        "connection_direction": path_map.direction_verdict(table, probes),
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            results=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    try:
        result = run(module.params)
    except schema.SchemaError as exc:
        module.fail_json(msg="invalid path table:\n" + "\n".join(exc.errors), errors=exc.errors)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
