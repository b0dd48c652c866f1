"""Shared pytest setup: make `ansible_collections.hybridgpu.fleet` importable from the checkout."""
from hgpu_testenv import COLLECTIONS, REAL_OUTPUTS, ROOT  # noqa: F401  pylint: disable=unused-import
