#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: pmtu_probe
short_description: Find the effective path MTU with DF pings and detect PMTU black holes
version_added: "0.1.0"
description:
  - Runs on the source host of a path and sends "don't fragment" pings (C(ping -M do -s N)),
    one per step of a binary search between each target's C(min_mtu) and C(max_mtu), to
    find the largest IP packet that gets through (the effective path MTU).
  - A frag-needed answer or the sender's own "message too long, mtu=N" is used as a hint and
    confirmed.
  - Reports a PMTU black hole when small DF pings pass but larger ones vanish without any ICMP
    frag-needed answer, which is what a lowered tunnel MTU with frag-needed blocked looks like.
    Large transfers stall on such a path while small pings still succeed.
  - Recommends the MTU (the effective one) and the TCP MSS (MTU minus 40 for IPv4).
  - Output is parsed by the collection's ping parser, and, with O(tracepath), C(tracepath).
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  targets:
    description:
      - Paths to measure, each with C(id), C(address), optional C(max_mtu) (default 1500),
        C(min_mtu) (default 576) and C(expected_mtu) (an effective MTU below it fails).
    type: list
    elements: dict
    required: true
  timeout:
    description: Seconds to wait for each echo reply.
    type: int
    default: 1
  tracepath:
    description: Also run C(tracepath -n) and report the path MTU it found (needs iputils tracepath).
    type: bool
    default: false
  source_name:
    description: Name of this host in the records (the path table's host name); defaults to the node name.
    type: str
attributes:
  check_mode:
    support: full
    details: Only sends pings; the same in check mode.
  diff_mode:
    support: none
notes:
  - IPv4 only. Each failing step costs up to O(timeout) seconds.
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Measure the tunnel path to an owned node
  hybridgpu.fleet.pmtu_probe:
    targets:
      - {id: tunnel-to-dh2-l40s-01, address: 10.40.2.41, expected_mtu: 1500}
  register: pmtu
"""

RETURN = r"""
probe_results:
  description:
    - Per target id, observed (open when reachable, error when not), verdict (pass, fail),
      effective_mtu, blackhole, frag_needed, local_mtu, recommended_mtu, recommended_mss, steps
      (size and ping verdict of every DF ping), elapsed_ms and evidence.
  returned: success
  type: dict
  sample:
    tunnel-to-dh2-l40s-01:
      effective_mtu: 1380
      blackhole: true
      recommended_mtu: 1380
      recommended_mss: 1340
      verdict: fail
      evidence: "PMTU black hole: 1380-byte DF pings pass, 1500-byte DF pings vanish with no ICMP frag-needed (blocked?); ..."
record_rows:
  description:
    - The results as probe rows (id C(pmtu:<id>), source, destination, observed, verdict,
      elapsed_ms, evidence) for M(hybridgpu.fleet.preflight_record).
  returned: success
  type: list
  elements: dict
host:
  description: Node name of the host the probes ran on.
  returned: success
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd
from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import network
from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import probe_rows


def main():
    module = AnsibleModule(
        argument_spec=dict(
            targets=dict(type="list", elements="dict", required=True),
            timeout=dict(type="int", default=1),
            tracepath=dict(type="bool", default=False),
            source_name=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    host = os.uname()[1]
    if module.get_bin_path("ping") is None:
        module.fail_json(msg="pmtu_probe on %s: ping not found on PATH (install iputils-ping)" % host)
    if module.params["tracepath"] and module.get_bin_path("tracepath") is None:
        module.fail_json(msg="pmtu_probe on %s: tracepath requested but not found (install iputils-tracepath)" % host)

    def run(argv):
        # ping's status is the probe's answer (1: no reply): the probes read it
        return cmd.module_run(module, [module.get_bin_path(argv[0])] + argv[1:], ok=cmd.ANY_STATUS)

    try:
        results = network.run_pmtu_probes(module.params["targets"], run, timeout=module.params["timeout"],
                                          use_tracepath=module.params["tracepath"])
    except network.ProbeError as exc:
        module.fail_json(msg="pmtu_probe on %s: bad input: %s" % (host, exc))
    except cmd.CommandError as exc:
        module.fail_json(msg="pmtu_probe on %s: %s" % (host, exc))
    rows = probe_rows.record_rows("pmtu", module.params["source_name"] or host, results)
    module.exit_json(changed=False, probe_results=results, record_rows=rows, host=host)


if __name__ == "__main__":
    main()
