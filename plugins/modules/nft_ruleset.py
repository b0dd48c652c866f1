#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: nft_ruleset
short_description: Own one nftables table on a host, applied atomically with a rollback timer
version_added: "0.1.0"
description:
  - Renders an C(inet) table from declared inbound rules (narrowest sources), an optional
    egress allowlist, and the management sources whose SSH is always let in.
  - Loads it in one C(nft -f) transaction after C(nft -c) has checked it on the host, so the
    table is never half-applied. Other tables on the host are never touched.
  - With O(confirm_timeout), a transient systemd timer restores the previous table unless
    a later run with O(state=confirmed) cancels it. A playbook reconnects over a fresh SSH
    connection in between, so a ruleset that breaks the management path rolls itself back.
  - Refuses, before any change, a ruleset whose management sources do not cover
    O(control_address), the address the control host connects from.
  - The canonical listing of what was applied is kept under O(state_dir), so drift made by
    hand on the host is detected and reported as a change.
  - With O(boot=true) the table is loaded again at every boot, before the network comes up, by a
    systemd unit C(hybridgpu-nft-<table>.service) that loads C(<state_dir>/<table>.boot.nft). The
    boot copy is written once the ruleset is confirmed (at once without O(confirm_timeout)), so a
    ruleset that has not proved the management path never survives a reboot. O(state=absent)
    removes the unit and the boot copy with the table.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
options:
  table:
    description: Name of the C(inet) table the collection owns.
    type: str
    default: hybridgpu
  state:
    description:
      - C(present) applies the ruleset, C(confirmed) cancels a pending rollback timer,
        C(absent) deletes the table and its state files.
    type: str
    choices: [present, confirmed, absent]
    default: present
  management_sources:
    description: Addresses or CIDRs allowed to reach SSH. Required with O(state=present).
    type: list
    elements: str
  ssh_port:
    description: SSH port of the host.
    type: int
    default: 22
  control_address:
    description:
      - Address the control host connects from, for example the first field of
        C(ansible_env.SSH_CLIENT). When set, management sources must cover it.
    type: str
  control_address_from_session:
    description:
      - When O(control_address) is not given, take it from the SSH session the module runs in
        (the first field of C(SSH_CONNECTION), else of C(SSH_CLIENT)), so the caller needs no
        gathered facts. Without an SSH session (a local run, or C(become) with a reset
        environment) no address is checked.
    type: bool
    default: false
  inbound:
    description:
      - Inbound rules. Each has C(name), C(protocol) (C(tcp) or C(udp); C(proto) is another
        name for it), C(ports) (list of ports or C(lo-hi) ranges) and C(sources) (list of CIDRs; C(0.0.0.0/0) is refused).
    type: list
    elements: dict
    default: []
  egress:
    description:
      - Egress allowlist. C(enforce) (bool) turns on an output chain with policy drop;
        C(allow) lists C(name), C(protocol), C(ports) and C(dest) (CIDR or list of CIDRs).
    type: dict
    default: {}
  confirm_timeout:
    description:
      - Seconds after which the previous table is restored unless confirmed. C(0) applies
        without a rollback timer.
    type: int
    default: 0
  state_dir:
    description: Where the applied ruleset, its listing, the boot copy and the rollback file are kept.
    type: path
    default: /var/lib/hybridgpu/nftables
  boot:
    description: Load the confirmed table again at boot (a systemd unit); C(false) keeps it until the next reboot only.
    type: bool
    default: true
  unit_dir:
    description: Where the boot unit is written.
    type: path
    default: /etc/systemd/system
attributes:
  check_mode:
    support: full
    details: Renders and checks the ruleset with C(nft -c) and reports what would change.
  diff_mode:
    support: full
    details: Before is the live table listing, after is the listing once applied (the rendered source in check mode).
requirements:
  - nft (nftables) on the managed host
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Narrow inbound rules, SSH from the control host only, rollback in 90 s unless confirmed
  hybridgpu.fleet.nft_ruleset:
    management_sources: [10.40.0.10/32]
    control_address: "{{ ansible_env.SSH_CLIENT.split()[0] }}"
    inbound:
      - name: node-exporter
        protocol: tcp
        ports: [9100]
        sources: [10.40.0.10/32]
    egress:
      enforce: true
      allow:
        - name: onprem-api
          dest: 10.40.0.10/32
          ports: [6443]
    confirm_timeout: 90

- name: Confirm once a fresh SSH connection got through
  hybridgpu.fleet.nft_ruleset:
    state: confirmed
"""

RETURN = r"""
ruleset:
  description: The nft source that was (or would be) loaded.
  returned: state is present
  type: str
listing:
  description: C(nft list table) of the table after the run, counters and handles blanked.
  returned: state is present and not check mode
  type: str
pending_confirm:
  description: True when a rollback timer is armed and waits for O(state=confirmed).
  returned: always
  type: bool
rollback_unit:
  description: Name of the transient systemd unit that restores the previous table.
  returned: always
  type: str
boot_unit:
  description: Name of the unit that loads the table at boot (absent with O(boot=false)).
  returned: always
  type: str
  sample: hybridgpu-nft-hybridgpu.service
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import files
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import nft


class Firewall(object):
    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.table = self.p["table"]
        self.dir = self.p["state_dir"]
        self.nft = module.get_bin_path("nft", required=True)
        self.unit = "hybridgpu-nft-rollback-%s" % self.table
        self.boot = nft.BootCopy(lambda args: self.run(args, check=False), self.table, self.nft,
                                 self.path("boot.nft"), self.p["unit_dir"])
        self.boot_unit = self.boot.unit

    def path(self, suffix):
        return os.path.join(self.dir, "%s.%s" % (self.table, suffix))

    def run(self, args, data=None, check=True):
        """check=False: the caller reads the exit status (a missing table, an inactive timer)."""
        try:
            return cmd.module_run(self.module, args, data=data, ok=(0,) if check else cmd.ANY_STATUS)
        except cmd.CommandError as err:
            self.module.fail_json(msg=str(err))

    def live(self):
        rc, out, dummy = self.run([self.nft, "list", "table", "inet", self.table], check=False)
        return out if rc == 0 else None

    def read(self, suffix):
        try:
            with open(self.path(suffix)) as fh:
                return fh.read()
        except OSError:
            return None

    def write(self, suffix, text):
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        # mode=None: like atomic_move, a replaced file keeps its mode and owner, a new one gets the umask's
        files.write(self.path(suffix), text, mode=None)

    def timer_active(self):
        rc, dummy, dummy = self.run(["systemctl", "is-active", "--quiet", self.unit + ".timer"], check=False)
        return rc == 0

    def cancel_timer(self):
        self.run(["systemctl", "stop", self.unit + ".timer"], check=False)
        self.run(["systemctl", "reset-failed", self.unit + ".timer", self.unit + ".service"], check=False)

    def boot_current(self, text):
        """Whether the boot copy holds ``text`` and the boot unit is written and enabled."""
        return self.boot.current(text)

    def persist(self, text):
        """Write the boot copy and the boot unit, and enable it. Returns whether anything changed."""
        try:
            return self.boot.write(text)
        except nft.BootError as err:
            self.module.fail_json(msg="Table inet %s: %s" % (self.table, err))

    def unpersist(self, check_mode):
        """Disable and remove the boot unit and the boot copy. Returns whether any existed."""
        try:
            return self.boot.remove(check_mode)
        except nft.BootError as err:
            self.module.fail_json(msg="Table inet %s: %s" % (self.table, err))

    def present(self):
        try:
            keys = ("table", "management_sources", "ssh_port", "inbound", "egress", "control_address")
            spec = dict((k, self.p[k]) for k in keys if self.p[k] is not None)
            text = nft.render(spec)
        except nft.RulesetError as err:
            self.module.fail_json(msg="Refusing the firewall for table inet %s: %s" % (self.table, err))
        # Check the ruleset on this host's kernel before anything changes.
        self.run([self.nft, "-c", "-f", "-"], data=text)
        live = self.live()
        live_canon = nft.canonical_listing(live) if live is not None else None
        changed = (live is None or live_canon != self.read("applied")
                   or nft.digest(text) != (self.read("digest") or "").strip())
        pending = self.timer_active()
        # A table already in place and not waiting for confirmation is proven: it must load at boot.
        boot_stale = self.p["boot"] and not changed and not pending and not self.boot_current(text)
        result = dict(changed=changed or boot_stale, ruleset=text, pending_confirm=pending,
                      rollback_unit=self.unit, boot_unit=self.boot_unit)
        if changed and self.module._diff:
            result["diff"] = dict(before=live_canon or "", after=text,
                                  before_header="nft list table inet %s" % self.table,
                                  after_header="hybridgpu.fleet ruleset")
        if not changed or self.module.check_mode:
            if live is not None and not self.module.check_mode:
                result["listing"] = live_canon
            if boot_stale and not self.module.check_mode:
                self.persist(text)
            return result
        rollback = "table inet %s {}\ndelete table inet %s\n" % (self.table, self.table)
        if live is not None:
            rollback += live
        self.write("rollback.nft", rollback)
        self.write("nft", text)
        self.cancel_timer()
        self.run([self.nft, "-f", self.path("nft")])
        listing = nft.canonical_listing(self.live() or "")
        self.write("applied", listing)
        self.write("digest", nft.digest(text) + "\n")
        if self.p["confirm_timeout"] > 0:
            self.run(["systemd-run", "--unit", self.unit, "--on-active=%ds" % self.p["confirm_timeout"],
                      "--description", "hybridgpu.fleet: restore nft table %s unless confirmed" % self.table,
                      self.nft, "-f", self.path("rollback.nft")])
            result["pending_confirm"] = True
        elif self.p["boot"]:
            self.persist(text)
        result["listing"] = listing
        if self.module._diff:
            result["diff"]["after"] = listing
        return result

    def confirmed(self):
        active = self.timer_active()
        if active and not self.module.check_mode:
            self.cancel_timer()
            # The ruleset proved the management path: from now on it loads at boot.
            applied = self.read("nft")
            if self.p["boot"] and applied is not None:
                self.persist(applied)
        return dict(changed=active, pending_confirm=False, rollback_unit=self.unit, boot_unit=self.boot_unit)

    def absent(self):
        live = self.live()
        state_files = [self.path(s) for s in ("nft", "applied", "digest", "rollback.nft") if os.path.exists(self.path(s))]
        active = self.timer_active()
        booted = self.unpersist(self.module.check_mode)
        changed = live is not None or bool(state_files) or active or booted
        result = dict(changed=changed, pending_confirm=False, rollback_unit=self.unit, boot_unit=self.boot_unit)
        if changed and self.module._diff:
            result["diff"] = dict(before=nft.canonical_listing(live) if live else "", after="")
        if changed and not self.module.check_mode:
            self.cancel_timer()
            if live is not None:
                self.run([self.nft, "delete", "table", "inet", self.table])
            for path in state_files:
                os.unlink(path)
        return result


def session_address(environ):
    """The address the SSH session this process runs in comes from, or None outside one."""
    for var in ("SSH_CONNECTION", "SSH_CLIENT"):
        fields = (environ.get(var) or "").split()
        if fields:
            return fields[0]
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            table=dict(type="str", default="hybridgpu"),
            state=dict(type="str", default="present", choices=["present", "confirmed", "absent"]),
            management_sources=dict(type="list", elements="str"),
            ssh_port=dict(type="int", default=22),
            control_address=dict(type="str"),
            control_address_from_session=dict(type="bool", default=False),
            inbound=dict(type="list", elements="dict", default=[]),
            egress=dict(type="dict", default={}),
            confirm_timeout=dict(type="int", default=0),
            state_dir=dict(type="path", default="/var/lib/hybridgpu/nftables"),
            boot=dict(type="bool", default=True),
            unit_dir=dict(type="path", default="/etc/systemd/system"),
        ),
        required_if=[("state", "present", ["management_sources"])],
        supports_check_mode=True,
    )
    if module.params["control_address"] is None and module.params["control_address_from_session"]:
        module.params["control_address"] = session_address(os.environ)
    fw = Firewall(module)
    state = module.params["state"]
    result = fw.present() if state == "present" else fw.confirmed() if state == "confirmed" else fw.absent()
    module.exit_json(**result)


if __name__ == "__main__":
    main()
