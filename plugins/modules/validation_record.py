#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: validation_record
short_description: Write a node's validation record, or the wave record linking them
version_added: "0.1.0"
description:
  - I(kind=node) writes C(<folder>/validate-<node>.json) with every step verdict of one node, and
    beside it the self-contained page C(validate-<node>.html) (verdict and reasons first, then each step).
  - I(kind=wave) reads the per-node records of I(nodes) from I(folder) and writes C(wave.json)
    and a self-contained C(wave.html) that links the nodes' pages.
  - I(kind=baseline) writes a node group's NCCL baseline (the C(baseline) verdict of
    M(hybridgpu.fleet.validation_check)) as C(<folder>/<node_group>.json) with its page C(<node_group>.html).
  - Files are replaced atomically (page first, then JSON) and left alone when only the C(run) block
    would change and the page beside the JSON is the one it renders to.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  kind:
    description: Which record.
    type: str
    choices: [node, wave, baseline]
    required: true
  folder:
    description: Records folder of the wave.
    type: path
    required: true
  node:
    description: Node name (I(kind=node)).
    type: str
  side:
    description: C(owned) or C(cloud) (I(kind=node)).
    type: str
  node_group:
    description: Node group (I(kind=node) and I(kind=baseline)).
    type: str
  baseline:
    description: The baseline verdict of M(hybridgpu.fleet.validation_check) (I(kind=baseline)).
    type: dict
  steps:
    description: Step verdicts (the C(verdict) of M(hybridgpu.fleet.validation_check)) (I(kind=node)).
    type: list
    elements: dict
  wave:
    description: Wave name (I(kind=wave)).
    type: str
  group:
    description: Inventory group of the wave (I(kind=wave)).
    type: str
  nodes:
    description: Nodes whose records the wave links (I(kind=wave)).
    type: list
    elements: str
  stages:
    description: C({preflight|onboard|validate - {status, detail}}) (I(kind=wave)).
    type: dict
  run:
    description: Run facts (times, who) kept out of the change check.
    type: dict
  fail_on_failed:
    description: Fail after writing when the record's verdict is negative.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Reports whether a file would change; writes nothing.
  diff_mode:
    support: none
    details: Records are reports; the change flag says whether they differ.
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Record this node's verdicts
  hybridgpu.fleet.validation_record:
    kind: node
    folder: "{{ hgpu_records_dir }}/validation/wave1"
    node: "{{ inventory_hostname }}"
    side: owned
    node_group: ng_a100_535
    steps: "{{ validate_verdicts }}"
  delegate_to: localhost
"""

RETURN = r"""
path:
  description: File (kind=node and kind=baseline) or folder (kind=wave) written.
  returned: always
  type: str
passed:
  description: The record's verdict.
  returned: always
  type: bool
record:
  description: The record.
  returned: always
  type: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate import validation, wave_record


def main():
    module = AnsibleModule(argument_spec=dict(
        kind=dict(type="str", choices=["node", "wave", "baseline"], required=True),
        folder=dict(type="path", required=True),
        node=dict(type="str"), side=dict(type="str"), node_group=dict(type="str"), baseline=dict(type="dict"),
        steps=dict(type="list", elements="dict"),
        wave=dict(type="str"), group=dict(type="str"),
        nodes=dict(type="list", elements="str"), stages=dict(type="dict"),
        run=dict(type="dict"), fail_on_failed=dict(type="bool", default=False),
    ), supports_check_mode=True,
        required_if=[("kind", "node", ("node", "steps")), ("kind", "wave", ("wave", "nodes")),
                     ("kind", "baseline", ("node_group", "baseline"))])
    p = module.params
    run = dict(p["run"] or {})
    run.setdefault("written_at", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    try:
        if p["kind"] == "baseline":
            rec = dict(p["baseline"], node_group=p["node_group"])
            rec.setdefault("passed", True)
            res = wave_record.write_baseline(p["folder"], p["node_group"], p["baseline"], module.check_mode)
        elif p["kind"] == "node":
            rec = validation.node_record(p["node"], p["side"], p["node_group"], p["steps"], run)
            res = wave_record.write_node_record(p["folder"], rec, module.check_mode)
        else:
            nodes_recs = wave_record.load_node_records(p["folder"], p["nodes"])
            missing = sorted(set(p["nodes"]) - set(r["node"] for r in nodes_recs))
            stages = dict(p["stages"] or {})
            if missing:
                stages["validate"] = {"status": "failed",
                                      "detail": "no validation record for %s" % ", ".join(missing)}
            rec = wave_record.build_wave_record(p["wave"], p["group"], nodes_recs, stages, run)
            res = wave_record.write_wave_record(p["folder"], rec, nodes_recs, module.check_mode)
    except (OSError, IOError) as exc:
        module.fail_json(msg="cannot write the %s record under %s: %s" % (p["kind"], p["folder"], exc))
    except (KeyError, ValueError) as exc:
        module.fail_json(msg="bad %s record input: %s" % (p["kind"], exc))
    if p["fail_on_failed"] and not rec["passed"]:
        module.fail_json(msg="%s record %s: failed (%s)" % (
            p["kind"], res["path"], ", ".join(rec.get("failed_steps") or rec.get("failed_stages") or
                                              [n["node"] for n in rec.get("nodes", []) if not n["passed"]])),
            path=res["path"], passed=False, record=rec)
    module.exit_json(changed=res["changed"], path=res["path"], passed=rec["passed"], record=rec)


if __name__ == "__main__":
    main()
