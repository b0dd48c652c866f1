"""Paths shared by the preflight unit tests."""
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LAB_PREFLIGHT = os.path.join(REPO, "inventories", "lab", "preflight")


@pytest.fixture
def lab_file():
    def _path(name):
        return os.path.join(LAB_PREFLIGHT, name)
    return _path
