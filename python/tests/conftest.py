"""pytest setup: the tests import `helpers` from this directory."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "pytorch: needs PyTorch, whose PyPI wheels bring gigabytes of CUDA libraries "
        "(python/ci.sh runs these in a venv of their own)")


@pytest.fixture
def tmp_prefix(tmp_path):
    """A fresh checkpoint prefix in a temporary directory."""
    return str(tmp_path / "ckpt")
