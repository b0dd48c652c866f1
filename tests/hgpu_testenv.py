"""Paths every test layer shares. Import this (not `conftest`) from test modules:
several conftest.py files exist, and which one `import conftest` finds depends on the run."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = ROOT
COLLECTIONS = os.path.join(ROOT, ".collections")

# `ansible_collections.hybridgpu.fleet` resolves to this checkout through a symlink.
_link = os.path.join(COLLECTIONS, "ansible_collections", "hybridgpu", "fleet")
if not os.path.lexists(_link):
    os.makedirs(os.path.dirname(_link), exist_ok=True)
    os.symlink(os.path.join("..", "..", ".."), _link)
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

# Real tool outputs from public sources, laid beside the checkout as ../shared.
REAL_OUTPUTS = os.environ.get(
    "HGPU_REAL_OUTPUTS",
    os.path.join(os.path.dirname(ROOT), "shared", "testdata", "real-outputs"),
)
