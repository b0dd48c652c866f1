# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Change-managed node removal driven by the onboarding manifest.

- plan(): what each removal phase undoes, computed from the manifest only, so removal
  touches exactly what onboarding added.
- RemovalState: a per-node, per-change JSON state file on the control host listing which
  phases are done; an interrupted removal reports it and a rerun resumes after the last
  finished phase (kubespray #8806).
- what of the plan is still on a node, and whether the node works standalone: node_checks.py.
- authorise(): what every step that acts runs first, at the moment it acts: the signed change
  record verified against the pinned signers for this node, and the plan computed from the
  manifest snapshot whose digest the record names (never from a plan or state the task hands it).
- the API calls (delete the Node only when cordoned, revoke the node token Secret, prove a
  revoked token gets 401, strip managed labels/taints): removal_api.py.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import os
import re

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import manifest as mf, nft
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle import removal_page
from ansible_collections.hybridgpu.fleet.plugins.module_utils.lifecycle.removal_page import STEPS


class RemovalError(ValueError):
    """Bad removal input or state; the message names the node, file and field."""


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- plan --------------------------------------------------------------------------------

def _api_list(art, node):
    """The plan's list an API object of the manifest goes to."""
    if art["resource"] == "secrets":
        return "bootstrap_tokens" if art["name"].startswith("bootstrap-token-") else "secrets"
    lists = {"nodes": "nodes", "certificatesigningrequests": "csrs"}
    if art["resource"] not in lists:
        raise RemovalError("manifest of %s, section %s: removal does not know how to delete "
                           "%s %s" % (node, art["section"], art["resource"], art["name"]))
    return lists[art["resource"]]


def plan(doc):
    """What each phase removes or restores, from a manifest document."""
    if not doc or not doc.get("node"):
        raise RemovalError("the manifest is empty or names no node")
    node = doc["node"]
    pre = doc.get("pre_onboarding") or {}
    if not pre:
        raise RemovalError("manifest of %s has no pre_onboarding block: the standalone state "
                           "was never recorded, so removal cannot restore it" % node)
    pre_pkgs = pre.get("packages") or {}
    pre_users = set(pre.get("users") or [])
    arts = mf.artefacts(doc)
    out = {
        "node": node,
        "nodes": [], "secrets": [], "bootstrap_tokens": [], "csrs": [], "keys": [], "units": [], "files": [], "packages": [],
        "users": [], "groups": [], "directories": [], "nft_tables": [], "provider_rules": [],
        "labels": [], "taints": [],
        "restore": {"packages": sorted(p for p, v in pre_pkgs.items() if v),
                    "units": sorted(pre.get("active_units") or []),
                    "nft_tables": []},
        "server": None, "cluster": None, "join": {},
    }
    for sec in (doc.get("sections") or {}).values():
        facts = sec.get("facts") or {}
        if facts.get("server") and not out["server"]:
            out["server"], out["cluster"] = facts["server"], facts.get("cluster")
        if facts.get("method"):
            out["join"] = {"method": facts["method"], "reset_command": facts.get("reset_command") or [],
                           "client_certificate": facts.get("client_certificate") or {},
                           "uninstall_command": facts.get("uninstall_command") or [],
                           "units": sorted(facts.get("units") or [])}
            if facts["method"] == "command" and not out["join"]["uninstall_command"]:
                raise RemovalError("manifest of %s: the command join records no uninstall_command, so "
                                   "removal cannot reverse it" % node)
    for art in arts:
        kind = art["kind"]
        if kind == "api_object":
            out[_api_list(art, node)].append(
                {"cluster": art["cluster"], "namespace": art.get("namespace") or "", "name": art["name"]})
        elif kind == "key":
            out["keys"].append({k: art.get(k) for k in ("path", "public_key", "private_key", "user")})
        elif kind == "unit":
            out["units"].append(art["name"])
        elif kind in ("file", "dropin"):
            out["files"].append(art["path"])
        elif kind == "package":
            # listed only when onboarding installed it; kept if the node had it before
            if not pre_pkgs.get(art["name"]):
                out["packages"].append(art["name"])
        elif kind == "user":
            if art["name"] not in pre_users:
                out["users"].append(art["name"])
        elif kind == "group":
            out["groups"].append(art["name"])
        elif kind == "directory":
            if art.get("created", True) is not False and not (pre.get("paths") or {}).get(art["path"]):
                out["directories"].append(art["path"])
        elif kind == "nft_table":
            out["nft_tables"].append({"family": art["family"], "name": art["name"],
                                      "state_dir": art.get("state_dir") or "/var/lib/hybridgpu/nftables"})
        elif kind == "provider_rule":
            out["provider_rules"].append(dict((k, v) for k, v in art.items() if k != "section"))
        elif kind == "label":
            out["labels"].append(art["key"])
        elif kind == "taint":
            out["taints"].append({"key": art["key"], "effect": art["effect"]})
    for key in ("units", "files", "packages", "users", "groups", "labels"):
        out[key] = sorted(set(out[key]))
    # deepest first, so a parent is removed after its children
    out["directories"] = sorted(set(out["directories"]), key=lambda p: (-p.count("/"), p))
    # tables the node had before onboarding: restored when missing afterwards
    ours = set((t["family"], t["name"]) for t in out["nft_tables"])
    for (family, name), text in sorted(nft.tables_in(pre.get("nft_ruleset")).items()):
        out["restore"]["nft_tables"].append({"family": family, "name": name, "text": text,
                                             "replaced_by_onboarding": (family, name) in ours})
    # the units onboarding added are not part of the standalone stack
    out["restore"]["units"] = [u for u in out["restore"]["units"] if u not in out["units"]]
    return out


# -- state file --------------------------------------------------------------------------

def _safe(name):
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", name or ""):
        raise RemovalError("%r cannot be used in a file name (letters, digits, . _ -)" % (name,))
    return name


class RemovalState(object):
    """<root>/<node>/<change_id>.json: manifest snapshot + phases done."""

    def __init__(self, root, node, change_id):
        self.root = root
        self.node = _safe(node)
        self.change_id = _safe(change_id)
        self.folder = os.path.join(root, self.node)
        self.path = os.path.join(self.folder, self.change_id + ".json")
        self.token_file = os.path.join(self.folder, self.change_id + ".revoked-token")
        self.doc = None

    def load(self):
        try:
            with open(self.path, encoding="utf-8") as fh:
                self.doc = json.load(fh)
        except FileNotFoundError:
            self.doc = None
        except ValueError as err:
            raise RemovalError("removal state %s is not valid JSON (%s)" % (self.path, err))
        return self.doc

    def others_unfinished(self):
        """Other changes whose removal of this node started and did not finish."""
        out = []
        if not os.path.isdir(self.folder):
            return out
        for name in sorted(os.listdir(self.folder)):
            if not name.endswith(".json") or name == self.change_id + ".json" or ".manifest" in name:
                continue
            try:
                with open(os.path.join(self.folder, name), encoding="utf-8") as fh:
                    doc = json.load(fh)
            except (OSError, ValueError):
                continue
            if not doc.get("finished_at"):
                out.append({"change_id": doc.get("change_id"), "done": done_steps(doc)})
        return out

    def start(self, manifest_doc, approval=None, check_mode=False):
        """Create the state (snapshotting the manifest) or resume it. Returns changed."""
        if self.load() is not None:
            return removal_page.refresh(self.path, self.doc, check_mode)
        if manifest_doc is None:
            raise RemovalError("no onboarding manifest for %s and no removal state %s: nothing "
                               "records what onboarding added, so nothing is removed" % (self.node, self.path))
        if manifest_doc.get("node") != self.node:
            raise RemovalError("the manifest belongs to %r, not %r" % (manifest_doc.get("node"), self.node))
        plan(manifest_doc)  # refuse a manifest removal cannot honour before any change
        self.doc = {"schema_version": 1, "node": self.node, "change_id": self.change_id,
                    "started_at": utcnow(), "finished_at": None, "steps": {},
                    "approval": approval or {}, "manifest": copy.deepcopy(manifest_doc)}
        if not check_mode:
            removal_page.write(self.path, self.doc, mode=0o640)
        return True

    def mark(self, step, details=None, check_mode=False):
        if step not in STEPS:
            raise RemovalError("step %r is not one of %s" % (step, ", ".join(STEPS)))
        if self.doc is None and self.load() is None:
            if check_mode:
                return True
            raise RemovalError("no removal state %s; start the removal first" % self.path)
        if step in self.doc["steps"]:
            return removal_page.refresh(self.path, self.doc, check_mode)
        self.doc["steps"][step] = {"done_at": utcnow(), "details": details or {}}
        if step == "verify":
            self.doc["finished_at"] = self.doc["steps"][step]["done_at"]
        if not check_mode:
            removal_page.write(self.path, self.doc, mode=0o640)
        return True

    def report(self):
        doc = self.doc or self.load()
        if doc is None:
            return {"path": self.path, "exists": False, "done": [], "pending": list(STEPS), "finished": False}
        return {"path": self.path, "exists": True, "change_id": doc["change_id"], "done": done_steps(doc),
                "pending": [s for s in STEPS if s not in doc["steps"]],
                "finished": bool(doc.get("finished_at")), "started_at": doc.get("started_at"),
                "finished_at": doc.get("finished_at")}


def done_steps(doc):
    return [s for s in STEPS if s in (doc.get("steps") or {})]


def summary(report):
    return "removal %s of %s: done [%s]; pending [%s]; state %s" % (
        report.get("change_id", "?"), os.path.basename(os.path.dirname(report["path"])),
        ", ".join(report["done"]) or "none", ", ".join(report["pending"]) or "none", report["path"])


# -- what the acting code verifies -------------------------------------------------------------

def manifest_digest(doc):
    """SHA-256 (hex) of a manifest document in canonical JSON (keys sorted, no spaces): what a
    remove record names in ``manifests`` (bin/hgpu-sign-change manifest-digest)."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def check_manifest(approval, node, doc, where):
    """Refuse a manifest the signed record does not name by its digest for ``node``."""
    want = (approval.get("manifests") or {}).get(node)
    if not want:
        raise RemovalError("change %s names no manifest digest for %s (manifests.%s): the approver signs the "
                           "SHA-256 of the onboarding manifest a removal undoes (bin/hgpu-sign-change "
                           "manifest-digest); nothing was changed" % (approval.get("change_id"), node, node))
    have = manifest_digest(doc)
    if have != want:
        raise RemovalError("the manifest in %s (SHA-256 %s) is not the one change %s approved for %s (%s); "
                           "nothing was changed" % (where, have, approval.get("change_id"), node, want))


def check_target(approval, node, host, targets):
    """``node`` must be the host the task runs for, one of the run's targets and one of the
    record's approved targets."""
    problems = []
    if node != host:
        problems.append("the node %s is not the host this task runs for (%s)" % (node, host))
    if node not in (targets or []):
        problems.append("%s is not one of the run's targets [%s]" % (node, ", ".join(targets or [])))
    if node not in (approval.get("approved_targets") or []):
        problems.append("%s is not a target of change %s" % (node, approval.get("change_id")))
    if problems:
        raise RemovalError("refused: %s; nothing was changed" % "; ".join(problems))


def authorise(params, node, now=None, check_mode=False, allow_finished=False):
    """Verify, at the moment of acting, that a removal of ``node`` is approved, and return
    (verified approval, plan, state document, RemovalState).

    ``params`` carries the record (record_path | record_text and signature), the executor, the
    playbook and what the action plugin set from pinned sources: boundary, boundary_signers,
    ledger_dir, awx_user, targets (the run's hosts) and task_host (the host the task runs for). The
    record is verified against the pinned signers (approval.gate: boundary, signature, action
    remove, playbook, targets, executor, open window, and the ledger claim, where the same run
    again resumes); ``node`` must be the task's host and an approved target; the removal state
    <records>/removals/<node>/<change_id>.json (records: the folder of the pinned ledger) must
    exist, be for this node and change and unfinished (unless ``allow_finished``: a step that
    only proves again what the removal did), and its manifest snapshot must be the
    one whose digest the record names. The plan is computed from that snapshot and validated;
    nothing in the state but the snapshot is trusted. Raises RemovalError or ApprovalError."""
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval as ap
    if not params.get("ledger_dir"):
        raise RemovalError("refused: no pinned records folder (ledger_dir, set by the action plugin); this step "
                           "acts only under a change record it verifies itself; nothing was changed")
    records = os.path.dirname(os.path.abspath(params["ledger_dir"]))
    gate = dict(params, action="remove", playbook=params.get("playbook") or "remove.yml",
                targets=list(params.get("targets") or []), ledger_dir=None if check_mode else params["ledger_dir"])
    verified = ap.gate(gate, now=now)
    check_target(verified, node, params.get("task_host"), gate["targets"])
    state = RemovalState(os.path.join(records, "removals"), node, verified["change_id"])
    doc = state.load()
    if doc is None:
        raise RemovalError("refused: no removal state %s; start the removal (node_removal_state action=start) "
                           "first; nothing was changed" % state.path)
    problems = []
    if doc.get("node") != node or doc.get("change_id") != verified["change_id"]:
        problems.append("the state is for %s under %s, not %s under %s"
                        % (doc.get("node"), doc.get("change_id"), node, verified["change_id"]))
    if doc.get("finished_at") and not allow_finished:
        problems.append("the removal %s finished at %s" % (verified["change_id"], doc["finished_at"]))
    if problems:
        raise RemovalError("refused: %s (state %s); nothing was changed" % ("; ".join(problems), state.path))
    snapshot = doc.get("manifest")
    if not isinstance(snapshot, dict):
        raise RemovalError("refused: the removal state %s holds no manifest snapshot; nothing was changed" % state.path)
    check_manifest(verified, node, snapshot, state.path)
    out = plan(snapshot)
    if out["node"] != node:
        raise RemovalError("refused: the manifest belongs to %r, not %r; nothing was changed" % (out["node"], node))
    validate(out)
    return verified, out, doc, state


# Names a plan may carry to a node: each goes to a module as a single argument, never to a shell.
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
PACKAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]{0,127}(:[a-z0-9]+)?$")
UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\@-]{1,200}\.(service|socket|timer|target|path|mount|automount|swap|device|slice|scope)$")
NFT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
NFT_FAMILIES = ("ip", "ip6", "inet", "arp", "bridge", "netdev")
KEY_TEXT = re.compile(r"^(ssh|ecdsa|sk)-[A-Za-z0-9@.-]+ [A-Za-z0-9+/=]+( .*)?$")
PROVIDERS = ("aws", "nft")


def _path(value, what, problems):
    if not isinstance(value, str) or not value.startswith("/") or value == "/" or "\x00" in value \
            or "\n" in value or os.path.normpath(value) != value or ".." in value.split("/"):
        problems.append("%s %r is not an absolute, normalised path" % (what, value))


def _name(value, pattern, what, problems):
    if not isinstance(value, str) or not pattern.match(value):
        problems.append("%s %r is not a valid name" % (what, value))


def _argv(value, what, problems):
    if not isinstance(value, list) or not all(isinstance(a, str) and a and "\x00" not in a for a in value):
        problems.append("%s %r is not a list of arguments" % (what, value))


def validate(p):
    """Refuse a plan with a path, name or command a node must not be handed (the manifest is
    bound to the signed record, and still every value is checked before it leaves the control
    host). Raises RemovalError naming each bad value."""
    problems = []
    for path in p["files"]:
        _path(path, "file", problems)
    for path in p["directories"]:
        _path(path, "directory", problems)
    for name in p["users"]:
        _name(name, USER_NAME, "user", problems)
    for name in p["groups"]:
        _name(name, USER_NAME, "group", problems)
    for name in p["packages"]:
        _name(name, PACKAGE_NAME, "package", problems)
    for name in list(p["units"]) + list(p["restore"]["units"]) + list(p["join"].get("units") or []):
        _name(name, UNIT_NAME, "unit", problems)
    for table in list(p["nft_tables"]) + list(p["restore"]["nft_tables"]):
        if table.get("family") not in NFT_FAMILIES:
            problems.append("nft table family %r is not one of %s" % (table.get("family"), ", ".join(NFT_FAMILIES)))
        _name(table.get("name"), NFT_NAME, "nft table", problems)
        if "state_dir" in table:
            _path(table["state_dir"], "nft state folder", problems)
    for rule in p["provider_rules"]:
        if rule.get("provider") not in PROVIDERS:
            problems.append("provider %r is not one of %s" % (rule.get("provider"), ", ".join(PROVIDERS)))
        _name(rule.get("firewall"), NFT_NAME, "provider firewall", problems)
    for key in p["keys"]:
        _path(key.get("path"), "authorized_keys file", problems)
        if not isinstance(key.get("public_key"), str) or not KEY_TEXT.match(key["public_key"]):
            problems.append("public key %r is not an OpenSSH public key" % (key.get("public_key"),))
    for field in ("reset_command", "uninstall_command"):
        if p["join"].get(field):
            _argv(p["join"][field], field, problems)
    cert = (p["join"].get("client_certificate") or {}).get("path")
    if cert is not None:
        _path(cert, "client certificate", problems)
    if problems:
        raise RemovalError("the removal plan of %s is refused: %s; nothing was changed" % (p["node"], "; ".join(problems)))
    return p
