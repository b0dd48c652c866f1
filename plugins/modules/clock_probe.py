#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: clock_probe
short_description: Measure a node's clock offset against the control host, with chrony/timesyncd status
version_added: "0.1.0"
description:
  - "Design: the control host runs a small UDP time responder on its site-side address for
    the duration of the check (O(mode=serve), started asynchronously on the control host), and
    every node runs this module with O(mode=probe). The probe does an NTP-style exchange of
    four timestamps (client send t1, server receive t2, server send t3, client receive t4) and
    takes the lowest-delay of O(samples) exchanges: offset = ((t2 - t1) + (t3 - t4)) / 2, round trip
    = (t4 - t1) - (t3 - t2). The offset is therefore compensated for the round trip, and the
    reference is the control host's clock, which also signs certificates and correlates logs."
  - The probe also reads C(chronyc -n tracking) and C(timedatectl show) (parsed by the collection's
    chrony and timedatectl parsers) and reports whether the node's time sync is established.
  - The responder answers only this module's datagrams, binds only the given address, and exits
    when O(expect_clients) nodes said goodbye or after O(serve_seconds).
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  mode:
    description:
      - V(probe) on a node, V(serve) on the control host, V(stop) on the control host to end a
        running responder (a stop datagram is honoured only from the responder's own address).
    type: str
    choices: [probe, serve, stop]
    default: probe
  server:
    description: Address of the responder (the control host's address the nodes reach).
    type: str
    required: true
  port:
    description: UDP port of the responder.
    type: int
    default: 12123
  samples:
    description: Timestamp exchanges per probe; the lowest-delay one is used.
    type: int
    default: 8
  timeout:
    description: Seconds to wait for each answer.
    type: float
    default: 1.0
  max_offset_ms:
    description: Largest accepted absolute offset in milliseconds.
    type: float
    default: 100.0
  require_sync:
    description: Also fail when neither chrony nor timesyncd reports the clock as synchronised.
    type: bool
    default: true
  serve_seconds:
    description: Longest time the responder runs (O(mode=serve)).
    type: int
    default: 120
  expect_clients:
    description: The responder exits once this many probes said goodbye (0 waits for O(serve_seconds)).
    type: int
    default: 0
  source_name:
    description: Name of this host in the records (the path table's host name); defaults to the node name.
    type: str
attributes:
  check_mode:
    support: full
    details: Only exchanges timestamps and reads status; the same in check mode.
  diff_mode:
    support: none
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Start the time responder on the control host
  hybridgpu.fleet.clock_probe:
    mode: serve
    server: 10.40.0.10
    expect_clients: "{{ ansible_play_hosts | length }}"
  delegate_to: localhost
  run_once: true
  async: 180
  poll: 0
  register: clock_server

- name: Measure each node's offset
  hybridgpu.fleet.clock_probe:
    server: 10.40.0.10
    max_offset_ms: 100
  register: clock
"""

RETURN = r"""
clock:
  description:
    - O(mode=probe) only. observed (open when the responder answered, else error), verdict (pass, fail),
      offset_ms (this node minus the control host), rtt_ms, samples, lost, sync (chrony,
      timedatectl, synchronised, sources), elapsed_ms and evidence.
  returned: success
  type: dict
  sample:
    observed: open
    verdict: pass
    offset_ms: 0.021
    rtt_ms: 0.09
    evidence: "offset +0.021 ms (rtt 0.090 ms, best of 8, 0 lost); synchronised=True via chrony"
served:
  description: O(mode=serve) only. requests answered, clients that said goodbye, complete, stopped.
  returned: success
  type: dict
record_rows:
  description:
    - The results as probe rows (id C(clock:<id>), source, destination, observed, verdict,
      elapsed_ms, evidence) for M(hybridgpu.fleet.preflight_record).
  returned: success
  type: list
  elements: dict
host:
  description: Node name of the host the module ran on.
  returned: success
  type: str
"""

import os
import socket
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd
from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import clock
from ansible_collections.hybridgpu.fleet.plugins.module_utils.preflight import probe_rows


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mode=dict(type="str", choices=["probe", "serve", "stop"], default="probe"),
            server=dict(type="str", required=True),
            port=dict(type="int", default=12123),
            samples=dict(type="int", default=8),
            timeout=dict(type="float", default=1.0),
            max_offset_ms=dict(type="float", default=100.0),
            require_sync=dict(type="bool", default=True),
            serve_seconds=dict(type="int", default=120),
            expect_clients=dict(type="int", default=0),
            source_name=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    host = os.uname()[1]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        if params["mode"] == "stop":
            try:
                sock.bind((params["server"], 0))
                sock.sendto(clock.encode_stop(), (params["server"], params["port"]))
            except OSError as exc:
                module.fail_json(msg="clock_probe on %s: cannot send stop to %s:%s: %s"
                                 % (host, params["server"], params["port"], exc))
            module.exit_json(changed=False, host=host)
        if params["mode"] == "serve":
            try:
                sock.bind((params["server"], params["port"]))
            except OSError as exc:
                module.fail_json(msg="clock_probe on %s: cannot bind the time responder to %s:%s: %s"
                                 % (host, params["server"], params["port"], exc))
            served = clock.serve(sock, params["serve_seconds"], params["expect_clients"])
            module.exit_json(changed=False, served=served, host=host)
        start = time.monotonic()
        try:
            samples, lost = clock.query(sock, params["server"], params["port"], params["samples"],
                                        params["timeout"], name=host, nonce_base="%s-%d-" % (host, os.getpid()))
        except OSError as exc:
            samples, lost = [], params["samples"]
            module.warn("clock_probe on %s: %s" % (host, exc))

        def run(argv):
            path = module.get_bin_path(argv[0])
            if path is None:
                return 127, "", ""
            try:
                return cmd.module_run(module, [path] + argv[1:], ok=cmd.ANY_STATUS)  # time_sync_status reads it
            except cmd.CommandError as exc:
                module.fail_json(msg="clock_probe on %s: %s" % (host, exc))

        sync = clock.time_sync_status(run)
        server = "%s:%s" % (params["server"], params["port"])
        result = clock.clock_result(samples, lost, sync, params["max_offset_ms"], params["require_sync"], server)
        result["elapsed_ms"] = round((time.monotonic() - start) * 1000.0, 3)
    finally:
        sock.close()
    name = params["source_name"] or host
    rows = probe_rows.record_rows("clock", name, {name: result}, destination=params["server"])
    module.exit_json(changed=False, clock=result, record_rows=rows, host=host)


if __name__ == "__main__":
    main()
