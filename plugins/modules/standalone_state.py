#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: standalone_state
short_description: Read a node's standalone state in one module run
version_added: "0.2.0"
description:
  - Reads what removal must put back on a node before onboarding changes anything - the active
    services, the full nftables ruleset, the installed version of each package of interest,
    which paths exist, and the local users - and returns it in the shape of a manifest's
    C(pre_onboarding) block (see M(hybridgpu.fleet.node_manifest)).
  - One module run on the node (one SSH round trip with pipelining) instead of one task per
    package and per path.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.attributes.read_only
options:
  packages:
    description:
      - Debian packages whose installed version is recorded (held packages included, and those
        marked for removal but still installed). A package that is not installed, only half
        installed, or only has configuration files left is recorded as V(null).
    type: list
    elements: str
    default: []
  paths:
    description: Paths whose existence is recorded.
    type: list
    elements: path
    default: []
  manifest_copy:
    description:
      - The node's own copy of its manifest. When given, its text is returned in
        RV(manifest_copy) (V(null) when the file does not exist), so a control host that lost
        its records can take the manifest back from the node in the same round trip.
    type: path
requirements:
  - systemd, dpkg and nftables (C(nft)) on the node
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Read the standalone state before onboarding
  hybridgpu.fleet.standalone_state:
    packages: [prometheus-node-exporter, nvidia-driver-535]
    paths: [/etc/hybridgpu, /var/lib/hybridgpu]
  register: standalone

- name: Record it once in the node's manifest
  hybridgpu.fleet.node_manifest:
    path: "{{ hgpu_records_dir }}/manifests/{{ inventory_hostname }}.json"
    node: "{{ inventory_hostname }}"
    pre_onboarding: "{{ standalone.state | combine({'recorded_at': now(utc=true).isoformat()}) }}"
  delegate_to: localhost
"""

RETURN = r"""
state:
  description: The standalone state.
  returned: success
  type: dict
  contains:
    active_units:
      description: Names of the active service units (C(systemctl list-units --type=service --state=active)).
      type: list
      elements: str
      sample: [chrony.service, ssh.service]
    nft_ruleset:
      description: The output of C(nft list ruleset).
      type: str
    packages:
      description: Installed version of each requested package, V(null) when not installed.
      type: dict
      sample: {nvidia-driver-535: 535.216.03-1, prometheus-node-exporter: null}
    paths:
      description: Whether each requested path exists.
      type: dict
      sample: {/etc/hybridgpu: false}
    users:
      description: Local user names, in C(getent passwd) order.
      type: list
      elements: str
manifest_copy:
  description: The text of O(manifest_copy), V(null) when it does not exist or was not asked for.
  returned: success
  type: str
nft_tables:
  description: The tables of the nftables ruleset (not part of RV(state), which keeps the full ruleset).
  returned: success
  type: list
  elements: dict
  sample: [{family: inet, name: hybridgpu}]
"""

import os
import pwd

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import node_state


def read_state(module):
    def run(argv, allowed=(0,)):
        try:
            return cmd.module_run(module, argv, ok=allowed).out
        except cmd.CommandError as err:
            module.fail_json(msg="standalone_state on %s: %s" % (os.uname().nodename, err))

    systemctl = module.get_bin_path("systemctl", required=True)
    nft = module.get_bin_path("nft", required=True)
    ruleset = run([nft, "list", "ruleset"])
    state = {
        "active_units": node_state.active_units(run([systemctl] + node_state.LIST_ACTIVE_UNITS[1:])),
        "nft_ruleset": ruleset,
        "packages": {},
        "paths": dict((path, os.path.lexists(path)) for path in module.params["paths"]),
        "users": [entry.pw_name for entry in pwd.getpwall()],
    }
    wanted = module.params["packages"]
    if wanted:
        dpkg_query = module.get_bin_path("dpkg-query", required=True)
        # rc 1: some package is unknown to dpkg; the others are still listed.
        out = run([dpkg_query, "-W", "-f=" + node_state.DPKG_QUERY_FORMAT] + list(wanted), allowed=(0, 1))
        state["packages"] = node_state.installed_versions(out, wanted)
    tables = [{"family": family, "name": name} for family, name in node_state.nft_tables(ruleset)]
    return state, tables


# A manifest copy larger than this is not a manifest this collection wrote.
MANIFEST_COPY_MAX = 4 * 1024 * 1024


def read_copy(module, path):
    """The text of the node's manifest copy, or None when there is none."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MANIFEST_COPY_MAX + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        module.fail_json(msg="standalone_state on %s: cannot read the manifest copy %s: %s"
                         % (os.uname().nodename, path, exc))
    if len(data) > MANIFEST_COPY_MAX:
        module.fail_json(msg="standalone_state on %s: the manifest copy %s is larger than %d bytes"
                         % (os.uname().nodename, path, MANIFEST_COPY_MAX))
    # Undecodable bytes stay visible as replacement characters: the manifest check names them.
    return data.decode("utf-8", errors="replace")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            packages=dict(type="list", elements="str", default=[]),
            paths=dict(type="list", elements="path", default=[]),
            manifest_copy=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    state, tables = read_state(module)
    copy = read_copy(module, module.params["manifest_copy"]) if module.params["manifest_copy"] else None
    module.exit_json(changed=False, state=state, nft_tables=tables, manifest_copy=copy)


if __name__ == "__main__":
    main()
