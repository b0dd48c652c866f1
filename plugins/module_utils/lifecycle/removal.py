# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Change-managed node removal driven by the onboarding manifest.

- plan(): what each removal phase undoes, computed from the manifest only, so removal
  touches exactly what onboarding added.
- RemovalState: a per-node, per-change JSON state file on the control host listing which
  phases are done; an interrupted removal reports it and a rerun resumes after the last
  finished phase (kubespray #8806).
- node_leftovers() / health(): what of the manifest still exists on a node and whether the
  node works standalone (run on the node by node_removal_check).
- api: delete the Node (only when cordoned), revoke the node token Secret, prove a
  revoked token gets 401, strip managed labels/taints.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import pwd
import grp
import re
import subprocess
import tempfile

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import manifest as mf
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import node_state

# Phases in order; "verify" is never skipped on a rerun.
STEPS = ("approval", "drain", "node_delete", "credentials", "agents", "firewall", "placement",
         "restore", "verify")


class RemovalError(ValueError):
    """Bad removal input or state; the message names the node, file and field."""


class NodeReadError(RuntimeError):
    """A tool on the node could not be run: its answer must not read as 'nothing left'."""


def _read(run, argv, allowed=(0,)):
    rc, out, err = run(argv)
    if rc not in allowed:
        raise NodeReadError("%s failed (rc=%s): %s" % (" ".join(argv), rc, (err or out).strip()[:200]))
    return out


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- plan --------------------------------------------------------------------------------

def nft_tables_in(ruleset):
    """{(family, name): text of the table block} parsed from `nft list ruleset` output."""
    tables = {}
    lines = (ruleset or "").splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^table\s+(\S+)\s+(\S+)\s*\{\s*$", lines[i])
        if not m:
            i += 1
            continue
        depth = 0
        block = []
        while i < len(lines):
            block.append(lines[i])
            depth += lines[i].count("{") - lines[i].count("}")
            i += 1
            if depth <= 0:
                break
        tables[(m.group(1), m.group(2))] = "\n".join(block) + "\n"
    return tables


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
        "nodes": [], "secrets": [], "keys": [], "units": [], "files": [], "packages": [],
        "users": [], "groups": [], "directories": [], "nft_tables": [], "provider_rules": [],
        "labels": [], "taints": [],
        "restore": {"packages": sorted(p for p, v in pre_pkgs.items() if v),
                    "units": sorted(pre.get("active_units") or []),
                    "nft_tables": []},
        "server": None, "cluster": None,
    }
    for sec in (doc.get("sections") or {}).values():
        facts = sec.get("facts") or {}
        if facts.get("server") and not out["server"]:
            out["server"], out["cluster"] = facts["server"], facts.get("cluster")
    for art in arts:
        kind = art["kind"]
        if kind == "api_object":
            ref = {"cluster": art["cluster"], "namespace": art.get("namespace") or "", "name": art["name"]}
            if art["resource"] == "nodes":
                out["nodes"].append(ref)
            elif art["resource"] == "secrets":
                out["secrets"].append(ref)
            else:
                raise RemovalError("manifest of %s, section %s: removal does not know how to delete "
                                   "%s %s" % (node, art["section"], art["resource"], art["name"]))
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
    for (family, name), text in sorted(nft_tables_in(pre.get("nft_ruleset")).items()):
        out["restore"]["nft_tables"].append({"family": family, "name": name, "text": text,
                                             "replaced_by_onboarding": (family, name) in ours})
    # the units onboarding added are not part of the standalone stack
    out["restore"]["units"] = [u for u in out["restore"]["units"] if u not in out["units"]]
    return out


# -- state file --------------------------------------------------------------------------

def _write_json(path, doc, mode=0o640):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".removal-", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
            return False
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
            _write_json(self.path, self.doc)
        return True

    def mark(self, step, details=None, check_mode=False):
        if step not in STEPS:
            raise RemovalError("step %r is not one of %s" % (step, ", ".join(STEPS)))
        if self.doc is None and self.load() is None:
            if check_mode:
                return True
            raise RemovalError("no removal state %s; start the removal first" % self.path)
        if step in self.doc["steps"]:
            return False
        self.doc["steps"][step] = {"done_at": utcnow(), "details": details or {}}
        if step == "verify":
            self.doc["finished_at"] = self.doc["steps"][step]["done_at"]
        if not check_mode:
            _write_json(self.path, self.doc)
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


# -- on the node -------------------------------------------------------------------------

def _run(argv):
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return 127, "", str(err)
    return res.returncode, res.stdout, res.stderr


def package_status(names, run=_run):
    """{package: dpkg status abbreviation} in one dpkg-query call ('' when dpkg never heard of it)."""
    if not names:
        return {}
    # rc 1: some name is unknown to dpkg; the others are still listed.
    out = _read(run, ["dpkg-query", "-W", "-f=" + node_state.DPKG_QUERY_FORMAT] + list(names), allowed=(0, 1))
    found = node_state.dpkg_status(out)
    return dict((name, found.get(name, ("", None))[0]) for name in names)


def unit_present(name, run=_run):
    """True when systemd still knows the unit (loaded from a file, or active)."""
    rc, out, dummy = run(["systemctl", "show", "-p", "LoadState", "-p", "ActiveState", "--value", name])
    vals = out.split()
    return rc == 0 and bool(vals) and (vals[0] not in ("not-found",) or (len(vals) > 1 and vals[1] == "active"))


def nft_table_names(run=_run):
    return set(node_state.nft_tables(_read(run, node_state.LIST_NFT_TABLES)))


def _user_exists(name):
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _group_exists(name):
    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def _key_present(key):
    body = " ".join((key.get("public_key") or "").split()[:2])
    if not body:
        return False
    try:
        with open(key["path"], encoding="utf-8") as fh:
            return any(body in line for line in fh)
    except FileNotFoundError:
        return False


def node_leftovers(p, run=_run, exists=os.path.lexists, user_exists=_user_exists,
                   group_exists=_group_exists, key_present=_key_present):
    """Every manifest artefact still on the node, as 'kind name' strings."""
    left = []
    left += ["key %s in %s" % ((k.get("public_key") or "").split()[-1:] or ["?"], k["path"])
             for k in p["keys"] if key_present(k)]
    left += ["unit " + u for u in p["units"] if unit_present(u, run)]
    left += ["file " + f for f in p["files"] if exists(f)]
    packages = package_status(p["packages"], run)
    left += ["package " + n for n in p["packages"] if node_state.present(packages[n])]
    left += ["user " + n for n in p["users"] if user_exists(n)]
    left += ["group " + n for n in p["groups"] if group_exists(n)]
    left += ["directory " + d for d in p["directories"] if exists(d)]
    tables = nft_table_names(run)
    restored = set((t["family"], t["name"]) for t in p["restore"]["nft_tables"])
    left += ["nft_table %s %s" % (t["family"], t["name"]) for t in p["nft_tables"]
             if (t["family"], t["name"]) in tables and (t["family"], t["name"]) not in restored]
    return left


def health(p, run=_run):
    """Standalone health: the units active before onboarding, the packages it had, the
    tables it had, and a working nvidia-smi."""
    problems = []
    rc, out, err = run(node_state.LIST_ACTIVE_UNITS)
    active = set(node_state.active_units(out))
    missing_units = [u for u in p["restore"]["units"] if u not in active]
    if missing_units:
        problems.append("units active before onboarding are not active: " + ", ".join(missing_units))
    # a later approved change (a driver upgrade) may have replaced a package: reported only
    packages = package_status(p["restore"]["packages"], run)
    missing_pkgs = [n for n in p["restore"]["packages"] if not node_state.configured(packages[n])]
    tables = nft_table_names(run)
    missing_tables = ["%s %s" % (t["family"], t["name"]) for t in p["restore"]["nft_tables"]
                      if (t["family"], t["name"]) not in tables]
    if missing_tables:
        problems.append("nft tables of the standalone node are missing: " + ", ".join(missing_tables))
    rc, out, err = run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    gpus = [line.strip() for line in out.splitlines() if line.strip()] if rc == 0 else []
    if not gpus:
        problems.append("nvidia-smi failed (rc=%s): %s" % (rc, (err or out).strip()[:200]))
    return {"ok": not problems, "problems": problems, "gpus": gpus, "missing_units": missing_units,
            "packages_changed_since_onboarding": missing_pkgs}


# -- API ---------------------------------------------------------------------------------

def delete_node(kube, name, check_mode=False):
    """Delete the Node, refusing one that is not cordoned (a drain that did not happen or
    failed leaves it schedulable). Returns changed."""
    node = kube.get_node(name)
    if node is None:
        return False
    if not (node.get("spec") or {}).get("unschedulable"):
        raise RemovalError("Node %s is not cordoned: the drain did not complete, so it is not "
                           "deleted (kubespray #7137)" % name)
    if check_mode:
        return True
    return kube.delete_node(name)


def revoke_secret(kube, namespace, name, token_file, check_mode=False):
    """Keep the token for the refusal check (0600 on the control host), then delete the
    Secret. Returns changed."""
    secret = kube.get_secret(namespace, name)
    if secret is None:
        return False
    if check_mode:
        return True
    token = ((secret.get("data") or {}).get("token")) or ""
    if token:
        import base64
        _write_json(token_file, {"namespace": namespace, "name": name,
                                 "token": base64.b64decode(token).decode("utf-8")}, mode=0o600)
    return kube.delete_secret(namespace, name)


def token_refused(kube_factory, token_file, node):
    """Try the revoked token again. Returns (refused, detail)."""
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
    try:
        with open(token_file, encoding="utf-8") as fh:
            token = json.load(fh)["token"]
    except (OSError, ValueError, KeyError) as err:
        return False, "no revoked token to try at %s (%s)" % (token_file, err)
    kube = kube_factory(token)
    try:
        kube.get_node(node)
    except K8sError as err:
        if err.status == 401:
            return True, "401 Unauthorized"
        if err.status is None:
            return False, "API not reachable: %s" % err
        return False, "API answered %s (the token still authenticates)" % err.status
    return False, "API accepted the revoked token"


def strip_placement(kube, name, labels, taints, check_mode=False):
    """Remove the managed labels and taints when the Node still exists. Returns changed."""
    node = kube.get_node(name)
    if node is None:
        return False
    have = (node.get("metadata") or {}).get("labels") or {}
    drop = [k for k in labels if k in have]
    cur = (node.get("spec") or {}).get("taints") or []
    gone = set((t["key"], t["effect"]) for t in taints)
    keep = [t for t in cur if (t.get("key"), t.get("effect")) not in gone]
    if not drop and len(keep) == len(cur):
        return False
    if not check_mode:
        patch = {"metadata": {"labels": dict((k, None) for k in drop)}}
        if len(keep) != len(cur):
            patch["spec"] = {"taints": keep or None}
        kube.patch_node(name, patch, patch_type="merge")
    return True
