"""`load_tree` on TensorFlow's object-based fixtures: every variable sits at the object path its
key names (what `saveplan inspect --objects` shows), slot variables beside their variable."""

import re

import numpy as np
import pytest

import saveplan
from helpers import FIXTURES, fixture_prefixes

SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
SLOT = "/.OPTIMIZER_SLOT/"


def unescape(name):
    """A local name from its escaped form in a key (`..` is `.`, `.S` is `/`)."""
    return re.sub(r"\.(.)", lambda match: "/" if match.group(1) == "S" else match.group(1), name)


def object_prefixes():
    out = []
    for prefix in fixture_prefixes():
        names = [name for name, _ in saveplan.list_variables(prefix)]
        if "_CHECKPOINTABLE_OBJECT_GRAPH" in names:
            out.append(prefix)
    return out


def test_there_are_object_based_fixtures():
    assert len(object_prefixes()) >= 25


@pytest.mark.parametrize("prefix", object_prefixes(), ids=lambda p: p[len(str(FIXTURES)) + 1:])
def test_every_variable_is_at_its_object_path(prefix):
    tree = saveplan.load_tree(prefix)
    values = saveplan.load(prefix)
    found = 0
    for key, value in values.items():
        if not key.endswith(SUFFIX):
            continue
        path = key[: -len(SUFFIX)]
        if SLOT in path:
            variable, rest = path.split(SLOT, 1)
            parts = [unescape(part) for part in variable.split("/")]
            parent = tree
            for part in parts[:-1]:
                parent = parent[part]
            node = parent[f"{parts[-1]}{SLOT}{rest}"]
        else:
            node = tree
            for part in path.split("/"):
                node = node[unescape(part)]
        assert np.shape(node) == np.shape(value), key
        if isinstance(value, bytes):
            assert node.reshape(()).item() == value
        else:
            assert np.asarray(node).tobytes() == np.asarray(value).tobytes(), key
        found += 1
    assert found > 0


def test_the_module_tree_fixture_by_name():
    tree = saveplan.load_tree(str(FIXTURES / "obj" / "o1_module_tree" / "write" / "ckpt"))
    assert tree["encoder"]["kernel"] is tree["shared"]
    assert tree["alias_a"]["x"] is tree["alias_b"]["x"]
    assert tree["table"]["a/b.c"].dtype == np.float32
    assert set(tree["blocks"]) == {"0", "1"}


def test_the_v1_optimizer_fixture_has_slots_beside_variables():
    tree = saveplan.load_tree(str(FIXTURES / "obj" / "o2_optimizer" / "v1_adam" / "ckpt-1"))
    slots = [name for name in _walk_names(tree) if SLOT in name]
    assert slots, "Adam's m and v slots"
    assert any(name.endswith("/m") for name in slots) and any(name.endswith("/v") for name in slots)


def _walk_names(tree):
    for name, value in tree.items():
        yield name
        if isinstance(value, dict):
            yield from _walk_names(value)
