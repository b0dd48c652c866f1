# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""hybridgpu.fleet.node_removal_step: one node-side phase of a removal, run only under the change
record this plugin verifies itself, on the control host, at the moment the phase acts
(lifecycle/removal.py, authorise: the pinned signers and boundary, the record, the node as an
approved target, and the manifest snapshot whose digest the record names). What runs on the node
(paths, users, packages, units, tables, commands) is computed here from that snapshot and
checked before it is handed to a module; nothing is taken from the task's variables."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json
import re

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import removal
from ansible_collections.hybridgpu.fleet.plugins.plugin_utils.removal_run import run_args
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.record_options import record_options, pinned_options

ARGUMENT_SPEC = dict(
    phase=dict(type="str", required=True,
               choices=["stop_agent", "credentials", "agents", "firewall", "restore", "api_guard"]),
    node=dict(type="str"),
    playbook=dict(type="str", default="remove.yml"),
    agent_unit=dict(type="str", default="kubelet.service"),
    address=dict(type="str"),
    api_guard_table=dict(type="str", default="hybridgpu_api_guard"),
    api_guard_boot=dict(type="bool", default=True),
)
ARGUMENT_SPEC.update(record_options())
# set by the plugin (removal_run.run_args)
ARGUMENT_SPEC.update(pinned_options())
# A removed file under these is a unit file or drop-in: systemd is reloaded after it.
SYSTEMD_FOLDERS = ("/etc/systemd/", "/lib/systemd/", "/usr/lib/systemd/", "/run/systemd/")
# Where kubeadm keeps the kubelet's client certificate when the manifest names none.
KUBELET_CERT = "/var/lib/kubelet/pki/kubelet-client-current.pem"


class StepFailed(Exception):
    """A module on the node failed; the message names it and its item."""


class ActionModule(ActionBase):

    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        self._vars = task_vars
        args = run_args(self, task_vars, on_node=True)
        checked = ArgumentSpecValidator(ARGUMENT_SPEC, mutually_exclusive=[("record_path", "record_text")]).validate(args)
        if checked.error_messages:
            result.update(failed=True, msg="node_removal_step: %s" % checked.error_messages[0])
            return result
        params = checked.validated_parameters
        node = params["node"] or params["task_host"]
        try:
            # the API guard is proven closed on every run, also after the removal finished
            verified, plan, dummy, dummy_state = removal.authorise(params, node, check_mode=bool(self._task.check_mode),
                                                                   allow_finished=params["phase"] == "api_guard")
        except (removal.RemovalError, approval.ApprovalError) as exc:
            result.update(failed=True, msg="%s: %s. Nothing was changed." % (node, exc),
                          problems=getattr(exc, "problems", [str(exc)]))
            return result
        result["change_id"] = verified["change_id"]
        try:
            changed, details, used = getattr(self, "_" + params["phase"])(plan, params)
        except StepFailed as exc:
            result.update(failed=True, msg="%s, phase %s: %s" % (node, params["phase"], exc))
            return result
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)  # pylint: disable=protected-access
        result.update(changed=changed, details=details, plan=used)
        return result

    # -- running modules on the node ---------------------------------------------------------

    def _module(self, name, args, allow_failure=False):
        what = "%s %s" % (name, json.dumps(args, sort_keys=True))
        res = self._execute_module(module_name=name, module_args=dict(args), task_vars=self._vars)
        if res.get("failed") and not allow_failure:
            raise StepFailed("%s failed: %s" % (what, res.get("msg") or res.get("stderr") or "no message"))
        return res

    # -- phases --------------------------------------------------------------------------------

    def _stop_agent(self, plan, params):
        wanted = [params["agent_unit"]] + list(plan["join"].get("units") or [])
        units = [u for i, u in enumerate(wanted) if u in plan["units"] and u not in wanted[:i]]
        changed = False
        for unit in units:
            changed |= bool(self._module("ansible.builtin.systemd_service", {"name": unit, "state": "stopped"}).get("changed"))
        return changed, {"units": units}, {"units": units}

    def _credentials(self, plan, params):
        join = plan["join"]
        changed = False
        residual = join.get("client_certificate") or {}
        reset = join.get("reset_command") or []
        uninstall = join.get("uninstall_command") or []
        if reset:
            cert = self._module("ansible.builtin.command", {"argv": [
                "openssl", "x509", "-noout", "-serial", "-enddate", "-dateopt", "iso_8601", "-in",
                (join.get("client_certificate") or {}).get("path") or KUBELET_CERT]}, allow_failure=True)
            serial = re.search(r"serial=([0-9A-Fa-f]+)", cert.get("stdout") or "")
            not_after = re.search(r"notAfter=(.*)", cert.get("stdout") or "")
            if cert.get("rc") == 0 and serial and not_after:
                residual = {"serial": serial.group(1).lower(), "not_after": not_after.group(1).strip(),
                            "note": "a Kubernetes client certificate cannot be revoked before it expires; "
                                    "its key is removed from the node"}
            changed |= bool(self._module("ansible.builtin.command", {
                "argv": reset, "removes": "/etc/kubernetes/kubelet.conf"}).get("changed"))
        if uninstall:
            args = {"argv": uninstall}
            if uninstall[0].startswith("/"):
                args["removes"] = uninstall[0]
            changed |= bool(self._module("ansible.builtin.command", args).get("changed"))
        keys_changed = False
        for key in plan["keys"]:
            keys_changed |= bool(self._module("ansible.builtin.lineinfile", {
                "path": key["path"], "search_string": " ".join(key["public_key"].split()[:2]),
                "state": "absent"}).get("changed"))
        details = {"join_method": join.get("method") or "none", "uninstall": " ".join(uninstall),
                   "reset": " ".join(reset), "ssh_keys": [k["path"] for k in plan["keys"]],
                   "residual_validity": residual}
        return changed or keys_changed, details, {"join": join, "keys": plan["keys"]}

    def _agents(self, plan, params):
        changed = False
        stopped = []
        for unit in plan["units"]:
            state = self._module("ansible.builtin.command", {"argv": ["systemctl", "show", "-p", "LoadState", "--value", unit]})
            if (state.get("stdout") or "").strip() == "not-found":
                continue
            res = self._module("ansible.builtin.systemd_service", {"name": unit, "state": "stopped", "enabled": False})
            changed |= bool(res.get("changed"))
            stopped.append(unit)
        files_changed = units_changed = False
        for path in plan["files"]:
            gone = bool(self._module("ansible.builtin.file", {"path": path, "state": "absent"}).get("changed"))
            files_changed |= gone
            units_changed |= gone and path.startswith(SYSTEMD_FOLDERS)
        packages_changed = False
        if plan["packages"]:
            packages_changed = bool(self._module("ansible.builtin.apt", {
                "name": plan["packages"], "state": "absent", "purge": True}).get("changed"))
        for user in plan["users"]:
            changed |= bool(self._module("ansible.builtin.user", {"name": user, "state": "absent"}).get("changed"))
        for group in plan["groups"]:
            changed |= bool(self._module("ansible.builtin.group", {"name": group, "state": "absent"}).get("changed"))
        if units_changed or packages_changed:
            self._module("ansible.builtin.systemd_service", {"daemon_reload": True})
        used = dict((k, plan[k]) for k in ("units", "files", "packages", "users", "groups"))
        details = {"units": plan["units"], "stopped": stopped, "packages": plan["packages"], "users": plan["users"],
                   "files": len(plan["files"])}
        return changed or files_changed or packages_changed, details, used

    def _firewall(self, plan, params):
        changed = False
        for table in plan["nft_tables"]:
            changed |= bool(self._module("hybridgpu.fleet.nft_ruleset", {
                "table": table["name"], "state": "absent", "state_dir": table["state_dir"]}).get("changed"))
        providers = []
        for rule in plan["provider_rules"]:
            if rule["provider"] in providers:
                continue
            providers.append(rule["provider"])
            changed |= bool(self._module("hybridgpu.fleet.provider_firewall", {
                "provider": rule["provider"], "state": "absent", "firewall": rule["firewall"]}).get("changed"))
        # directories last: the firewall's state folder lives under them
        for path in plan["directories"]:
            changed |= bool(self._module("ansible.builtin.file", {"path": path, "state": "absent"}).get("changed"))
        details = {"nft_tables": [t["name"] for t in plan["nft_tables"]],
                   "provider_rules": [r.get("name") for r in plan["provider_rules"]]}
        return changed, details, dict((k, plan[k]) for k in ("nft_tables", "provider_rules", "directories"))

    def _api_guard(self, plan, params):
        """Delete the node's address from the API guard on the host this task is delegated to."""
        try:
            address = str(ipaddress.IPv4Address(params["address"] or ""))
        except ValueError:
            raise StepFailed("address %r is not an IPv4 address (the address the node's traffic to the API comes from)"
                             % (params["address"],))
        if not removal.NFT_NAME.match(params["api_guard_table"]):
            raise StepFailed("api_guard_table %r is not a valid nft table name" % (params["api_guard_table"],))
        res = self._module("hybridgpu.fleet.api_guard", {"table": params["api_guard_table"], "state": "absent",
                                                         "members": [address], "boot": params["api_guard_boot"]})
        return bool(res.get("changed")), {"address": address, "table": params["api_guard_table"]}, {}

    def _restore(self, plan, params):
        now = self._module("hybridgpu.fleet.standalone_state", {})
        active = set((now.get("state") or {}).get("active_units") or [])
        have = set((t.get("family"), t.get("name")) for t in now.get("nft_tables") or [])
        started = []
        for unit in plan["restore"]["units"]:
            if unit not in active:
                self._module("ansible.builtin.systemd_service", {"name": unit, "state": "started"})
                started.append(unit)
        loaded = []
        for table in plan["restore"]["nft_tables"]:
            if (table["family"], table["name"]) not in have:
                self._module("ansible.builtin.command", {"argv": ["nft", "-f", "/dev/stdin"], "stdin": table["text"]})
                loaded.append(table["name"])
        details = {"started_units": started, "nft_tables": [t["name"] for t in plan["restore"]["nft_tables"]],
                   "loaded": loaded}
        return bool(started or loaded), details, {"restore": plan["restore"]}
