"""The collection as a user gets it: docs of every module and role render, and it builds."""
import glob
import importlib
import json
import os
import subprocess
import sys
import tarfile

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
MODULES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py"))
                 if not os.path.basename(p).startswith("_"))
ROLES = sorted(os.path.basename(os.path.dirname(os.path.dirname(p)))
               for p in glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")))


def env(collections_path):
    e = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    e.pop("ANSIBLE_COLLECTIONS_PATHS", None)
    return e


def ansible_doc(args, collections_path):
    res = subprocess.run([os.path.join(BIN, "ansible-doc"), "--json", *args], capture_output=True, text=True,
                         env=env(collections_path), cwd=ROOT, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_there_is_something_to_check():
    assert MODULES and ROLES


def test_every_role_has_argument_specs_and_commented_defaults():
    for role in sorted(os.listdir(os.path.join(ROOT, "roles"))):
        base = os.path.join(ROOT, "roles", role)
        if not os.path.isdir(base) or role.startswith("."):
            continue
        assert os.path.exists(os.path.join(base, "meta", "argument_specs.yml")), role
        defaults = os.path.join(base, "defaults", "main.yml")
        if os.path.exists(defaults):
            text = open(defaults).read()
            assert "#" in text, "%s: defaults/main.yml has no comments" % role


@pytest.fixture(scope="module")
def module_docs():
    return ansible_doc(["hybridgpu.fleet.%s" % m for m in MODULES], os.path.join(ROOT, ".collections"))


@pytest.mark.parametrize("module", MODULES)
def test_module_docs_render(module_docs, module):
    doc = module_docs["hybridgpu.fleet.%s" % module]
    assert doc["doc"]["short_description"]
    assert doc["examples"].strip(), "%s has no EXAMPLES" % module
    assert doc["return"] is not None, "%s has no RETURN" % module
    attrs = doc["doc"].get("attributes") or {}
    for name in ("check_mode", "diff_mode"):
        assert name in attrs, "%s: DOCUMENTATION has no %s attribute" % (module, name)
        assert attrs[name].get("description") and attrs[name].get("support") in ("full", "partial", "none"), \
            "%s: attribute %s lacks a description or support level: %r" % (module, name, attrs[name])
    # Every module here supports check mode (the read-only ones run the same in it).
    assert attrs["check_mode"]["support"] == "full", module
    yaml.safe_load(doc["examples"])


def _filters():
    """Every filter name the collection's filter plugins export."""
    names = []
    for path in glob.glob(os.path.join(ROOT, "plugins", "filter", "*.py")):
        mod = importlib.import_module("ansible_collections.hybridgpu.fleet.plugins.filter." + os.path.basename(path)[:-3])
        names += list(mod.FilterModule().filters())
    return sorted(names)


def test_every_filter_is_documented():
    names = _filters()
    assert names
    docs = ansible_doc(["-t", "filter"] + ["hybridgpu.fleet.%s" % n for n in names], os.path.join(ROOT, ".collections"))
    for name in names:
        doc = docs["hybridgpu.fleet.%s" % name]
        assert doc["doc"]["short_description"] and doc["doc"]["options"]["_input"]["description"], name
        assert doc["examples"].strip() and doc["return"]["_value"]["description"], name


@pytest.mark.parametrize("role", ROLES)
def test_role_argument_specs_render(role):
    doc = ansible_doc(["-t", "role", "hybridgpu.fleet.%s" % role], os.path.join(ROOT, ".collections"))
    entry = doc["hybridgpu.fleet.%s" % role]
    assert "main" in entry["entry_points"]


def test_build_and_install_from_tarball(tmp_path):
    build = tmp_path / "build"
    res = subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(build), ROOT],
                         capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    tarball = glob.glob(str(build / "hybridgpu-fleet-*.tar.gz"))[0]
    with tarfile.open(tarball) as tf:
        names = tf.getnames()
    assert "MANIFEST.json" in names and "plugins/module_utils/common/k8s.py" in names
    for bad in (".lab/", ".venv/", ".collections/", "records/", ".git/"):
        assert not any(n.startswith(bad) for n in names), bad
    dest = tmp_path / "installed"
    res = subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--force", "--offline", "--no-deps",
                          "-p", str(dest), tarball], capture_output=True, text=True, cwd=str(tmp_path), timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    installed = dest / "ansible_collections" / "hybridgpu" / "fleet"
    assert (installed / "MANIFEST.json").exists()
    docs = ansible_doc(["hybridgpu.fleet.%s" % m for m in MODULES], str(dest))
    assert sorted(docs) == sorted("hybridgpu.fleet.%s" % m for m in MODULES)
