#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: upgrade_record
short_description: Write a driver upgrade record as JSON with a readable page beside it
version_added: "0.1.0"
description:
  - Writes O(path) (JSON) and, beside it, a self-contained HTML page with the same base name
    (C(upgrade-<node>-<change_id>.html)), both rendered from O(record). The page shows the node, the change id and
    who approved, requested and executed it, whether the node validated after the upgrade and why
    not, the drivers before and after and the time out of service first, then every field.
  - Each file is replaced atomically (the page first, then the JSON). Nothing is written when the
    JSON already holds O(record) and the page beside it is the one it renders to.
  - Runs where the records live (the control host, with C(delegate_to)).
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  path:
    description: The JSON file, for example C(<hgpu_records_dir>/upgrades/upgrade-<node>-<change_id>.json). Its folder is created.
    type: path
    required: true
  record:
    description:
      - The upgrade record, as C(playbooks/upgrade_rehearsal.yml) builds it (C(node), C(change_id),
        C(approved_by), C(validation) with C(passed) and C(steps), ...). Every field is kept.
    type: dict
    required: true
attributes:
  check_mode:
    support: full
    details: Reports whether the files would change; writes nothing.
  diff_mode:
    support: full
    details: The JSON text before and after.
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Write the upgrade record
  hybridgpu.fleet.upgrade_record:
    path: "{{ hgpu_records_dir }}/upgrades/upgrade-{{ inventory_hostname }}-{{ change.change_id }}.json"
    record:
      kind: driver_upgrade_rehearsal
      node: "{{ inventory_hostname }}"
      change_id: "{{ change.change_id }}"
      approved_by: "{{ change.approver }}"
      validation:
        passed: true
        steps: []
  delegate_to: localhost
"""

RETURN = r"""
path:
  description: The JSON file.
  returned: always
  type: str
dest:
  description: The JSON file (the name M(ansible.builtin.copy) returns, for tasks that read it).
  returned: always
  type: str
html_path:
  description: The page beside it.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import record_page
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import upgrade_record


def main():
    module = AnsibleModule(argument_spec=dict(
        path=dict(type="path", required=True),
        record=dict(type="dict", required=True),
    ), supports_check_mode=True)
    p = module.params
    try:
        res = upgrade_record.write(p["path"], p["record"], module.check_mode)
    except (OSError, IOError) as exc:
        module.fail_json(msg="cannot write the upgrade record %s: %s" % (p["path"], exc))
    except (TypeError, ValueError) as exc:
        module.fail_json(msg="record: cannot be written as JSON (%s)" % exc)
    result = dict(changed=res["changed"], path=res["path"], dest=res["path"], html_path=res["html_path"])
    if res["changed"] and module._diff:
        result["diff"] = dict(before=record_page.dump(res["before"]) if res["before"] is not None else "",
                              after=record_page.dump(p["record"]), before_header=p["path"], after_header=p["path"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
