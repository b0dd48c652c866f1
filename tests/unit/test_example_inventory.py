"""inventories/example is a complete estate a site copies: it loads, every variable it sets is
read by a role, playbook or plugin, its boundary is signed by the signer it pins, and its
preflight inputs and overflow job classes load."""
import ast
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import yaml

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import approval_signing, path_map
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.boundary import load_boundary
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import jobclass

from hgpu_testenv import ROOT

EXAMPLE = os.path.join(ROOT, "inventories", "example")
BIN = os.path.dirname(sys.executable)
MODULE_DOCS = ("DOCUMENTATION", "EXAMPLES", "RETURN")


def _load(path):
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


def set_variables():
    """{variable: where the example sets it}: group_vars, host and group vars in hosts.yml, and
    preflight/settings.yml (loaded as play variables by playbooks/preflight.yml)."""
    found = {}
    for path in sorted(glob.glob(os.path.join(EXAMPLE, "group_vars", "**", "*.yml"), recursive=True)):
        for name in _load(path):
            found.setdefault(name, os.path.relpath(path, ROOT))

    def walk(body):
        body = body or {}
        for name in body.get("vars") or {}:
            found.setdefault(name, "inventories/example/hosts.yml")
        for host in (body.get("hosts") or {}).values():
            for name in host or {}:
                found.setdefault(name, "inventories/example/hosts.yml")
        for child in (body.get("children") or {}).values():
            walk(child)
    walk(_load(os.path.join(EXAMPLE, "hosts.yml"))["all"])
    for name in _load(os.path.join(EXAMPLE, "preflight", "settings.yml")):
        found.setdefault(name, "inventories/example/preflight/settings.yml")
    return found


def _yaml_text(path):
    """The file without comment lines; in a role's defaults/main.yml also without the keys it
    defines (a default that names another variable still reads it)."""
    defaults = path.endswith(os.path.join("defaults", "main.yml"))
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.lstrip().startswith("#"):
                continue
            if defaults:
                line = re.sub(r"^[A-Za-z_][A-Za-z0-9_]*:", ":", line)
            out.append(line)
    return "".join(out)


def _python_strings(path):
    """String constants of the plugin's code, without its docstrings and module documentation."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) in MODULE_DOCS for t in node.targets):
            skip.add(id(node.value))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            skip.add(id(node.body[0].value))
    return "\n".join(n.value for n in ast.walk(tree)
                     if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip)


def product_text():
    """What the collection reads: role tasks, templates, handlers, vars and defaults (outside
    molecule/), playbooks, and the plugins' code."""
    parts = []
    for path in glob.glob(os.path.join(ROOT, "roles", "*", "*", "**", "*"), recursive=True):
        rel = os.path.relpath(path, ROOT).split(os.sep)
        if rel[2] in ("tasks", "templates", "handlers", "vars", "defaults") and os.path.isfile(path):
            parts.append(_yaml_text(path))
    for path in glob.glob(os.path.join(ROOT, "playbooks", "*.yml")):
        parts.append(_yaml_text(path))
    for path in glob.glob(os.path.join(ROOT, "plugins", "**", "*.py"), recursive=True):
        parts.append(_python_strings(path))
    return "\n".join(parts)


def unread(variables, text):
    return sorted(name for name in variables
                  if not name.startswith("ansible_") and not re.search(r"\b%s\b" % re.escape(name), text))


def test_every_variable_the_example_sets_is_read():
    variables = set_variables()
    assert {"hgpu_kubeconfig", "hgpu_boundary_signers", "hgpu_overflow_cloud", "node_group"} <= set(variables)
    missing = unread(variables, product_text())
    assert not missing, "inventories/example sets variables nothing reads:\n" + "\n".join(
        "%s (%s)" % (name, variables[name]) for name in missing)


def test_the_read_check_can_fail():
    text = product_text()
    assert unread({"hgpu_audit_log": "x", "validate_link_window": "y", "ansible_user": "z"}, text) == ["hgpu_audit_log"]
    # A key a role's defaults only defines, and a module's EXAMPLES, are not reads.
    assert "hgpu_audit_log" in open(os.path.join(ROOT, "plugins", "modules", "audit_log.py")).read()


def test_the_example_loads_with_ansible_inventory():
    res = subprocess.run([os.path.join(BIN, "ansible-inventory"), "-i", os.path.join(EXAMPLE, "hosts.yml"), "--list"],
                         capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
                         env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg")))
    assert res.returncode == 0 and "WARNING" not in res.stderr, res.stderr
    inv = json.loads(res.stdout)
    owned_groups = inv["owned"]["children"]
    cloud_groups = inv["cloud"]["children"]
    assert len(owned_groups) == 2 and len(cloud_groups) == 1, (owned_groups, cloud_groups)
    owned = {h for g in owned_groups for h in inv[g]["hosts"]}
    waves = [g for g in inv if re.match(r"^wave\d+$", g)]
    assert waves and all(set(inv[w]["hosts"]) <= owned for w in waves)
    hostvars = inv["_meta"]["hostvars"]
    for group in owned_groups + cloud_groups:
        for host in inv[group]["hosts"]:
            assert hostvars[host]["node_group"] == group and hostvars[host]["matrix_row"], host
            assert hostvars[host]["hgpu_role"] == ("owned" if host in owned else "cloud"), host


def test_the_boundary_is_signed_by_the_pinned_signer():
    signers = _load(os.path.join(EXAMPLE, "group_vars", "all.yml"))["hgpu_boundary_signers"]
    path = os.path.join(EXAMPLE, "preflight", "boundary.yml")
    signed_at = load_boundary(path).doc["signature"]["signed_at"]
    boundary = approval_signing.verify_boundary(path, signers, now=signed_at + datetime.timedelta(days=1))
    assert boundary.doc["security_owner"] == "sec-owner"
    # Every owned host of the example is covered, and every approver has a signing key.
    inv = _load(os.path.join(EXAMPLE, "hosts.yml"))["all"]["children"]["owned"]["children"]
    owned = sorted(h for g in inv.values() for h in g["hosts"])
    assert sorted(boundary.doc["applies_to"]["nodes"]) == owned
    keys = {p["id"]: p["ssh_keys"] for p in boundary.doc["people"]}
    approvers = {a for right in boundary.doc["change_rights"].values() for a in right["approvers"]}
    assert approvers and all(keys[a] for a in approvers)


def test_preflight_and_overflow_inputs_load():
    folder = os.path.join(EXAMPLE, "preflight")
    table = path_map.load_path_table(os.path.join(folder, "paths.yml"))
    assert table is not None
    hosts = _load(os.path.join(folder, "paths.yml"))["hosts"]
    inv = _load(os.path.join(EXAMPLE, "hosts.yml"))["all"]["children"]
    listed = sorted(h for side in ("owned", "cloud") for g in inv[side]["children"].values() for h in g["hosts"])
    assert sorted(h for h in hosts if h != "control") == listed
    classes = jobclass.load(os.path.join(EXAMPLE, "overflow", "job_classes.yml"))
    assert classes
    gv = _load(os.path.join(EXAMPLE, "group_vars", "all.yml"))
    assert gv["hgpu_overflow_job_classes"] == "{{ hgpu_site_dir | default(inventory_dir) }}/overflow/job_classes.yml"
    assert set(gv["hgpu_overflow_total_gpus"]) >= {c["gpu_type"] for c in classes.values() if c["data_may_leave_site"]}


def _site_paths(inventory, cwd):
    """The site paths a play sees with this inventory: the example's hgpu_boundary_path and
    hgpu_overflow_job_classes, and the defaults of roles that read the site folder."""
    play = os.path.join(cwd, "paths.yml")
    with open(play, "w", encoding="utf-8") as fh:
        yaml.safe_dump([{"hosts": "dh1-a100-01", "gather_facts": False, "tasks": [
            {"ansible.builtin.include_vars": os.path.join(ROOT, "roles", role, "defaults", "main.yml")}
            for role in ("onboard", "preflight")] + [
            {"ansible.builtin.debug": {"msg": "{{ [hgpu_boundary_path, hgpu_overflow_job_classes, onboard_path_table,"
                                              " onboard_boundary, preflight_inputs_dir] | to_json }}"}}]}], fh)
    res = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", inventory, play], capture_output=True,
                         text=True, cwd=cwd, check=False,
                         env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
                                  ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1"))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = json.loads(res.stdout[res.stdout.index("{"):])
    return json.loads(out["plays"][0]["tasks"][-1]["hosts"]["dh1-a100-01"]["msg"])


def test_site_paths_follow_hgpu_site_dir_in_an_inventory_synced_as_awx_syncs_it(tmp_path):
    """AWX syncs the inventory source with `ansible-inventory --list --export` and runs the job
    with that JSON written as a script in the job's own folder, plus the AWX inventory's own
    variables (awx/controller.yml). The site paths must name the project's checkout, not the
    job's folder; from the command line they name the inventory's folder."""
    project = tmp_path / "project" / "inventories" / "example"
    shutil.copytree(EXAMPLE, project)
    site = str(project)
    for path in _site_paths(str(project / "hosts.yml"), str(tmp_path)):
        assert path.startswith(site + "/"), path
    res = subprocess.run([os.path.join(BIN, "ansible-inventory"), "-i", str(project / "hosts.yml"), "--list",
                          "--export"], capture_output=True, text=True, check=True, cwd=str(tmp_path),
                         env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg")))
    synced = json.loads(res.stdout)
    loader = type("AwxLoader", (yaml.SafeLoader,), {})
    loader.add_multi_constructor("!", lambda ld, suffix, node: ld.construct_scalar(node))
    with open(os.path.join(ROOT, "awx", "controller.yml"), encoding="utf-8") as fh:
        awx_vars = yaml.load(fh, Loader=loader)["awx_inventory"]["variables"]  # nosec: a safe loader
    assert awx_vars["hgpu_site_dir"] == "/runner/project/inventories/example"
    synced.setdefault("all", {}).setdefault("vars", {}).update(hgpu_site_dir=site)
    job = tmp_path / "job" / "inventory"
    job.mkdir(parents=True)
    script = job / "hosts"
    script.write_text("#!/bin/sh\ncat <<'EOF'\n%s\nEOF\n" % json.dumps(synced), encoding="utf-8")
    script.chmod(0o755)
    paths = _site_paths(str(script), str(tmp_path))
    assert [p[len(site):] for p in paths] == [
        "/preflight/boundary.yml", "/overflow/job_classes.yml", "/preflight/paths.yml",
        "/preflight/boundary.yml", "/preflight"], paths
