"""`load_tree` names what `saveplan inspect --objects` names: on every object-based fixture,
the tree's leaves are exactly the variables, named tensors and slot variables the CLI prints,
at the same object paths (aliases included). Needs the CLI: `SAVEPLAN_BIN` names it."""

import os
import re
import subprocess

import numpy as np
import pytest

import saveplan
from helpers import FIXTURES, fixture_prefixes

BIN = os.environ["SAVEPLAN_BIN"]
OBJECT = re.compile(r"^( *)(\S.*?) \[node (\d+)\](, also reached as .*?)?(, no values)?$")
SLOT = re.compile(r"^( *)slot (\S+) of (\S+) \[node (\d+)\]$")
ALIAS = re.compile(r"^( *)(\S+): see (\S+) \[node (\d+)\]$")
ATTRIBUTE = re.compile(r"^( *)([^:\s]+): (?:(\S+) )?(DT_\w+) \[[\d,]*\]$")


def unescape(name):
    return re.sub(r"\.(.)", lambda match: "/" if match.group(1) == "S" else match.group(1), name)


def split(path):
    return () if path == "(root)" else tuple(unescape(part) for part in path.split("/"))


def cli_leaves(prefix):
    """The leaves `inspect --objects` shows: `{path: kind}`."""
    text = subprocess.run(
        [BIN, "inspect", prefix, "--objects"], check=True, capture_output=True, text=True
    ).stdout
    objects = {}  # path -> (attribute lines, has children)
    aliases = []
    slots = []
    stack = []  # (indent, path) of the enclosing objects
    in_slot = False
    for line in text.splitlines():
        if line.startswith("unreachable"):
            break
        indent = len(line) - len(line.lstrip(" "))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if match := SLOT.match(line):
            variable = stack[-1][1]
            slots.append((variable, match.group(3), match.group(2)))
            in_slot = True
            continue
        if match := ALIAS.match(line):
            objects[stack[-1][1]][1] = True
            alias, target = split(match.group(2)), split(match.group(3))
            if alias[: len(target)] != target:  # load_tree leaves out edges to an ancestor
                aliases.append((alias, target))
            continue
        if match := OBJECT.match(line):
            path = split(match.group(2))
            if stack:
                objects[stack[-1][1]][1] = True
            objects[path] = [[], False]
            stack.append((indent, path))
            in_slot = False
            continue
        if match := ATTRIBUTE.match(line):
            if in_slot:
                continue
            objects[stack[-1][1]][0].append((match.group(2), match.group(3)))
            continue
        raise AssertionError(f"unparsed line: {line!r}")
    leaves = set()
    for path, (attributes, has_children) in objects.items():
        names = [name for name, _ in attributes]
        if names == ["VARIABLE_VALUE"] and not has_children:
            leaves.add(path)
            continue
        for name, key in attributes:
            if key is None:
                leaves.add(path + (name,))
            else:
                suffix = key.split("/.ATTRIBUTES/" + name, 1)[1]
                leaves.add(path + (name, suffix))
    for _ in range(len(aliases) + 1):
        for alias, target in aliases:
            leaves |= {alias + leaf[len(target):] for leaf in list(leaves) if leaf[: len(target)] == target}
    for variable, optimizer, slot in slots:
        leaves.add(variable[:-1] + (f"{variable[-1]}/.OPTIMIZER_SLOT/{optimizer}/{slot}",))
    return leaves


def tree_leaves(tree, path=()):
    out = set()
    for name, value in tree.items():
        if isinstance(value, dict):
            out |= tree_leaves(value, path + (name,))
        else:
            assert isinstance(value, np.ndarray)
            out.add(path + (name,))
    return out


def object_prefixes():
    return [
        prefix
        for prefix in fixture_prefixes()
        if "_CHECKPOINTABLE_OBJECT_GRAPH" in dict(saveplan.list_variables(prefix))
    ]


@pytest.mark.parametrize("prefix", object_prefixes(), ids=lambda p: p[len(str(FIXTURES)) + 1:])
def test_load_tree_names_what_inspect_objects_names(prefix):
    expected = cli_leaves(prefix)
    assert expected
    assert tree_leaves(saveplan.load_tree(prefix)) == expected
