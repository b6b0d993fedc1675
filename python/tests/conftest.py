"""pytest setup: the tests import `helpers` from this directory."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture
def tmp_prefix(tmp_path):
    """A fresh checkpoint prefix in a temporary directory."""
    return str(tmp_path / "ckpt")
