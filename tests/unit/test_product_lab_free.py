"""The product (plugins/, roles/ outside molecule/, playbooks/) knows nothing of the lab: no
hgpu_lab_ variable, lab path, lab network address or lab package name. The lab's values come
from inventories/lab and its generated hosts.yml."""
import os
import re

from hgpu_testenv import ROOT

PRODUCT = ("plugins", "roles", "playbooks")
LAB_PATTERN = re.compile(r"hgpu_lab_|/etc/hybridgpu-lab|10\.213\.77|hybridgpu-lab|lab_nft|hybridgpu-node-agent|vendor-node-conn")

# Files other work still has to clear of lab knowledge. Each hit in them is reported by
# test_files_still_to_clear_hold_hits; empty this list as they are cleared.
STILL_TO_CLEAR = ()


def product_files():
    for top in PRODUCT:
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = sorted(d for d in dirs if d not in ("molecule", "__pycache__"))
            for name in sorted(files):
                if not name.endswith(".pyc"):
                    yield os.path.relpath(os.path.join(folder, name), ROOT)


def hits(relpath):
    with open(os.path.join(ROOT, relpath), encoding="utf-8", errors="replace") as fh:
        return ["%s:%d: %s" % (relpath, n, line.strip()) for n, line in enumerate(fh, 1) if LAB_PATTERN.search(line)]


def test_the_walk_sees_the_product():
    files = list(product_files())
    assert "playbooks/remove.yml" in files and "roles/validate/defaults/main.yml" in files
    assert not [f for f in files if "/molecule/" in f]


def test_no_lab_knowledge_in_the_product():
    found = [h for f in product_files() if f not in STILL_TO_CLEAR for h in hits(f)]
    assert not found, "lab knowledge in the product (its value belongs in inventories/lab):\n" + "\n".join(found)


def test_files_still_to_clear_hold_hits():
    """An entry of STILL_TO_CLEAR that is gone or already clean is taken off the list."""
    stale = [f for f in STILL_TO_CLEAR if not os.path.exists(os.path.join(ROOT, f)) or not hits(f)]
    assert not stale, "remove from STILL_TO_CLEAR (no lab hit left): %s" % ", ".join(stale)
