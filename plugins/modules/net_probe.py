#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: net_probe
short_description: Probe TCP, UDP and ICMP reachability from the host the module runs on
version_added: "0.1.0"
description:
  - Runs on the real source host of a path (not the control host) and tries every probe in one
    module run, so all probes from one host cost one SSH round trip.
  - TCP is V(open) when the handshake completes, V(closed) when it is refused (RST, ICMP
    unreachable, administratively prohibited) or gets no answer within O(timeout) (dropped).
  - UDP is V(open) when a datagram comes back, V(closed) on ICMP port unreachable, and
    V(error) on silence, because UDP cannot tell a filtered port from a service that does not
    answer the payload.
  - ICMP sends echo requests with C(ping) (parsed by the collection's ping parser) and is
    V(open) when a reply comes back.
  - Probes run at once (up to 16), so blocked ports cost one O(timeout), not one each; the UDP
    and ICMP probes to one address run one after another, as their verdicts depend on ICMP
    that the address rate-limits.
  - Results are keyed by probe id in the shape M(hybridgpu.fleet.path_table) takes as C(results).
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  probes:
    description:
      - Probes to run, each with C(id), C(protocol) (V(tcp), V(udp), V(icmp)), C(address) and, for
        tcp/udp, C(port). Optional C(payload) (text) for UDP. The probes of
        M(hybridgpu.fleet.path_table) can be passed as they are.
    type: list
    elements: dict
    required: true
  timeout:
    description: Seconds to wait for a connection or reply, per probe.
    type: float
    default: 2.0
  icmp_count:
    description: Echo requests per ICMP probe.
    type: int
    default: 2
attributes:
  check_mode:
    support: full
    details: Only sends probe traffic; the same in check mode.
  diff_mode:
    support: none
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Probe the paths that start on this node
  hybridgpu.fleet.net_probe:
    probes:
      - {id: "owned-agent-to-api:allow:control", protocol: tcp, address: 10.40.0.10, port: 6443}
      - {id: "owned-agent-to-api:neighbour_port:control", protocol: tcp, address: 10.40.0.10, port: 6444}
      - {id: "mgmt-ping", protocol: icmp, address: 10.40.0.10}
  register: probed
"""

RETURN = r"""
probe_results:
  description: Per probe id, observed (open, closed, error), elapsed_ms, evidence, protocol, address and port.
  returned: success
  type: dict
  sample:
    "owned-agent-to-api:allow:control":
      observed: open
      elapsed_ms: 0.412
      evidence: tcp 10.40.0.10:7443 handshake completed from 10.40.2.41:51234
host:
  description: Node name of the host the probes ran on.
  returned: success
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd
from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import network


def main():
    module = AnsibleModule(
        argument_spec=dict(
            probes=dict(type="list", elements="dict", required=True),
            timeout=dict(type="float", default=2.0),
            icmp_count=dict(type="int", default=2),
        ),
        supports_check_mode=True,
    )
    host = os.uname()[1]

    def run(argv):
        path = module.get_bin_path(argv[0])
        if path is None:
            return 127, "", "%s not found on PATH of %s" % (argv[0], host)
        return cmd.module_run(module, [path] + argv[1:], ok=cmd.ANY_STATUS)  # the probes read the exit status

    try:
        results = network.run_net_probes(module.params["probes"], run=run, timeout=module.params["timeout"],
                                         icmp_count=module.params["icmp_count"])
    except network.ProbeError as exc:
        module.fail_json(msg="net_probe on %s: bad input: %s" % (host, exc))
    except cmd.CommandError as exc:
        module.fail_json(msg="net_probe on %s: %s" % (host, exc))
    module.exit_json(changed=False, probe_results=results, host=host)


if __name__ == "__main__":
    main()
