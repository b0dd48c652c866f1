"""The shape of plugins/module_utils: capability folders, and shared code that depends on no capability.

`common/` (Kubernetes access, module base, command runner, file writes, documents) and `parsers/`
(tool-output parsers) are used by every capability, so they import only from each other. A
capability folder may import from `common/`, `parsers/` and itself.
"""
import ast
import os

import pytest

from hgpu_testenv import ROOT

MODULE_UTILS = os.path.join(ROOT, "plugins", "module_utils")
PACKAGE = "ansible_collections.hybridgpu.fleet.plugins.module_utils"
SHARED = {"common", "parsers"}
CAPABILITIES = {"preflight", "onboard", "validate", "lifecycle", "overflow"}


def _python_files(folder):
    for dirpath, _dirs, files in os.walk(folder):
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(dirpath, name)


def imported_folders(path):
    """The module_utils folders a file imports from (absolute and relative imports)."""
    own = os.path.relpath(os.path.dirname(path), MODULE_UTILS).split(os.sep)
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), filename=path)
    folders = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = own[:len(own) - (node.level - 1)]
                parts = base + (node.module.split(".") if node.module else [node.names[0].name])
            elif node.module and node.module.startswith(PACKAGE + "."):
                parts = node.module[len(PACKAGE) + 1:].split(".")
            elif node.module == PACKAGE:
                parts = [alias.name for alias in node.names][:1]
            else:
                continue
            if parts and parts[0]:
                folders.add(parts[0])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    folders.add(alias.name[len(PACKAGE) + 1:].split(".")[0])
    return folders


def test_every_util_sits_in_a_capability_or_shared_folder():
    loose = [name for name in os.listdir(MODULE_UTILS)
             if name.endswith(".py") and name != "__init__.py"]
    assert not loose, "module_utils files outside a folder: %s" % loose
    folders = {name for name in os.listdir(MODULE_UTILS)
               if os.path.isdir(os.path.join(MODULE_UTILS, name)) and name != "__pycache__"}
    assert folders == SHARED | CAPABILITIES


@pytest.mark.parametrize("folder", sorted(SHARED))
def test_shared_code_imports_no_capability(folder):
    offenders = {}
    for path in _python_files(os.path.join(MODULE_UTILS, folder)):
        wrong = imported_folders(path) - SHARED
        if wrong:
            offenders[os.path.relpath(path, ROOT)] = sorted(wrong)
    assert not offenders, "shared code imports capability code: %s" % offenders


def test_capabilities_import_no_other_capability():
    offenders = {}
    for capability in sorted(CAPABILITIES):
        for path in _python_files(os.path.join(MODULE_UTILS, capability)):
            wrong = imported_folders(path) - SHARED - {capability}
            if wrong:
                offenders[os.path.relpath(path, ROOT)] = sorted(wrong)
    assert not offenders, "capability code imports another capability: %s" % offenders


def test_direction_check_sees_both_import_forms(tmp_path, monkeypatch):
    """The checker itself: an absolute and a relative import of a capability are both seen."""
    fake = tmp_path / "module_utils"
    (fake / "common").mkdir(parents=True)
    absolute = fake / "common" / "a.py"
    absolute.write_text("from %s.overflow import protocol\n" % PACKAGE)
    relative = fake / "common" / "b.py"
    relative.write_text("from ..lifecycle import drain\nfrom . import schema\n")
    monkeypatch.setattr(__import__(__name__), "MODULE_UTILS", str(fake))
    assert imported_folders(str(absolute)) == {"overflow"}
    assert imported_folders(str(relative)) == {"lifecycle", "common"}


MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 80


def test_module_utils_files_stay_short():
    long_files = {}
    for path in _python_files(MODULE_UTILS):
        with open(path, encoding="utf-8") as handle:
            count = sum(1 for _line in handle)
        if count > MAX_FILE_LINES:
            long_files[os.path.relpath(path, ROOT)] = count
    assert not long_files, "module_utils files over %d lines: %s" % (MAX_FILE_LINES, long_files)


def test_plugin_functions_stay_short():
    long_functions = {}
    for path in _python_files(os.path.join(ROOT, "plugins")):
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=path)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions["%s:%s" % (os.path.relpath(path, ROOT), node.name)] = length
    assert not long_functions, "functions over %d lines: %s" % (MAX_FUNCTION_LINES, long_functions)
