"""Object-based checkpoints: :func:`load_tree` reads one as nested dicts by object path;
:class:`Checkpoint` and :class:`CheckpointManager` write what ``tf.train.Checkpoint`` and
``tf.train.CheckpointManager`` write for a tree of ``tf.Module``s (dicts) and
``tf.Variable``s (arrays), and restore into such a tree."""

import collections
import json
import os

import numpy as np

from . import _saveplan
from ._convert import to_native
from ._reader import _array, _prefix_of

__all__ = ["Checkpoint", "CheckpointManager", "RestoreStatus", "load_tree"]

VARIABLE_VALUE = "VARIABLE_VALUE"
SLOT_MARK = "/.OPTIMIZER_SLOT/"


def _escape(name):
    return name.replace(".", "..").replace("/", ".S")


def _unescape(name):
    out, i = [], 0
    while i < len(name):
        if name[i] == "." and i + 1 < len(name):
            out.append("/" if name[i + 1] == "S" else ".")
            i += 2
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def load_tree(path, mmap=False):
    """The object-based checkpoint at ``path`` as nested dicts by object path, as
    ``saveplan inspect --objects`` shows it: each object a dict of its children by local
    name, each variable its value (a NumPy array). An object reached by several paths is one
    Python object at each of them (its key uses the first). Other named tensors of an object
    (``py_state``, a custom ``_serialize_to_tensors`` name) are entries of its dict under
    their attribute name. An edge back to an enclosing object (the ``root`` edge of
    ``tf.train.Checkpoint(root=m)``) is left out, so the tree has no cycles. A slot variable
    sits beside its variable under
    ``"<variable>/.OPTIMIZER_SLOT/<optimizer path>/<slot>"``, TensorFlow's key for it.
    ``save_counter`` is an int64 scalar array like any variable. A name-based (TF1)
    checkpoint has no object graph: a ``ValueError``."""
    reader = _saveplan.Reader(_prefix_of(path))
    graph = reader.object_graph()
    nodes, paths = graph["nodes"], graph["paths"]
    keys = set(key for key, _, _ in reader.entries())

    wanted = []
    for node in nodes:
        for _, _, key in node["attributes"]:
            if key in keys:
                wanted.append(key)
            else:
                wanted.extend(k for k in keys if k.startswith(key))
    wanted = sorted(set(wanted))
    values = {
        key: _array(*item, scalars=False)
        for key, item in zip(wanted, reader.read_many(wanted, mmap))
    }

    def attribute_value(key):
        if key in values:
            return values[key]
        return {k[len(key):]: v for k, v in values.items() if k.startswith(key)}

    def is_variable(node):
        names = [name for name, _, _ in node["attributes"]]
        return names == [VARIABLE_VALUE] and not node["children"] and not node["slot_variables"]

    built = {}

    def build(node_id):
        if node_id in built:
            return built[node_id]
        node = nodes[node_id]
        if is_variable(node):
            built[node_id] = attribute_value(node["attributes"][0][2])
            return built[node_id]
        tree = {}
        built[node_id] = tree
        for name, _, key in node["attributes"]:
            tree[name] = attribute_value(key)
        return tree

    def contains(outer, inner):
        """Whether dict `inner` is `outer` or nested in it."""
        stack, visited = [outer], set()
        while stack:
            tree = stack.pop()
            if tree is inner:
                return True
            if id(tree) in visited:
                continue
            visited.add(id(tree))
            stack.extend(value for value in tree.values() if isinstance(value, dict))
        return False

    # Children in breadth-first order, so each object's first-discovered path places it.
    root = build(0)
    queue = collections.deque([0])
    seen = {0}
    while queue:
        node_id = queue.popleft()
        tree = built[node_id]
        for child_id, local_name in nodes[node_id]["children"]:
            if not isinstance(tree, dict):
                break
            child = build(child_id)
            if child_id in seen and isinstance(child, dict) and contains(child, tree):
                continue  # an edge back to an ancestor (`Checkpoint(root=m)`'s `root`)
            tree[local_name] = child
            if child_id not in seen:
                seen.add(child_id)
                queue.append(child_id)
    for optimizer_id, node in enumerate(nodes):
        for variable_id, slot_name, slot_id in node["slot_variables"]:
            variable_path, optimizer_path = paths[variable_id], paths[optimizer_id]
            if not variable_path or optimizer_path is None:
                continue
            parent = root
            for name in variable_path[:-1]:
                parent = parent[name]
            optimizer = "/".join(_escape(name) for name in optimizer_path)
            mark = f"{variable_path[-1]}{SLOT_MARK}{optimizer}/{slot_name}"
            parent[mark] = build(slot_id)
    return root


def _flatten(children):
    """The objects of a tree for the native writer, in ``tf.Module`` order (the checkpoint's
    own children sorted by name, deeper levels in dict order; a dict met a second time is not
    walked again), each
    ``(path, also, slot, dtype, shape, values)``, and where each value sits
    (``(parent dict, name)``)."""
    objects, places, first = [], [], {}
    slots = []

    def add(path, value, parent, name):
        if id(value) in first:
            objects[first[id(value)]][1].append(path)
            return
        dtype, shape, native = to_native("/".join(path), value)
        first[id(value)] = len(objects)
        objects.append((path, [], None, dtype, shape, native))
        places.append((parent, name))

    walked = set()

    def walk(tree, path, sort):
        if id(tree) in walked:
            return  # a dict met again (shared or enclosing): its variables are written once
        walked.add(id(tree))
        names = sorted(tree) if sort else list(tree)
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"object names must be str, not {type(name).__name__}")
            value = tree[name]
            if SLOT_MARK in name:
                slots.append((tree, path, name, value))
            elif isinstance(value, dict):
                walk(value, path + [name], False)
            elif value is None:
                raise ValueError(f"`{'/'.join(path + [name])}`: None is not a value")
            else:
                add(path + [name], value, tree, name)

    walk(children, [], True)
    for tree, path, name, value in slots:
        variable, rest = name.split(SLOT_MARK, 1)
        optimizer, _, slot_name = rest.rpartition("/")
        optimizer_path = [_unescape(part) for part in optimizer.split("/")] if optimizer else []
        dtype, shape, native = to_native(f"{'/'.join(path)}/{name}", value)
        slot = (path + [variable], optimizer_path, slot_name)
        objects.append(([], [], slot, dtype, shape, native))
        places.append((tree, name))
    return objects, places


class RestoreStatus:
    """What :meth:`Checkpoint.restore` returns: TensorFlow's load status (its assertions,
    with TensorFlow's messages) and the restore's report as data."""

    def __init__(self, result):
        self._result = result
        self.report = json.loads(result["report"])
        """``{"prefix", "name_based", "counts": {"matched", "mismatched", "unused",
        "missing"}, "values": [{"path", "attribute", "status", "checkpoint_key", "program",
        "checkpoint"}]}``."""

    @property
    def counts(self):
        """``{"matched": n, "mismatched": n, "unused": n, "missing": n}``."""
        return self.report["counts"]

    def _check(self, method):
        message = self._result[method]
        if message is not None:
            raise AssertionError(message)
        return self

    def assert_consumed(self):
        """Every object matched and every checkpoint value was used, or ``AssertionError``."""
        return self._check("assert_consumed")

    def assert_existing_objects_matched(self):
        """Every object with values matched, or ``AssertionError``."""
        return self._check("assert_existing_objects_matched")

    def assert_nontrivial_match(self):
        """Something besides the root matched, or ``AssertionError``."""
        return self._check("assert_nontrivial_match")

    def expect_partial(self):
        """Nothing to silence here (saveplan logs no warnings); returns the status."""
        return self


class Checkpoint:
    """``tf.train.Checkpoint(**children)`` of a tree: each dict a ``tf.Module`` with those
    attributes, each array (or anything ``np.asarray`` takes) a ``tf.Variable``. It writes
    the bytes TensorFlow writes for that tree and restores into it in place."""

    def __init__(self, **children):
        if "save_counter" in children:
            raise ValueError("`save_counter` is the checkpoint's own counter")
        self._children = children
        self._save_counter = None

    @property
    def children(self):
        """The tree (the keyword arguments)."""
        return self._children

    @property
    def save_counter(self):
        """The number of ``save()`` calls (restored by ``restore``); ``None`` before any."""
        return self._save_counter

    def write(self, file_prefix):
        """``tf.train.Checkpoint.write``: writes the tree at ``file_prefix``; returns it."""
        objects, _ = _flatten(self._children)
        path, _ = _saveplan.write_objects(
            os.fspath(file_prefix), objects, self._save_counter, False
        )
        return path

    def save(self, file_prefix):
        """``tf.train.Checkpoint.save``: counts, writes ``<file_prefix>-<count>`` and updates
        the directory's ``checkpoint`` file; returns the path written."""
        objects, _ = _flatten(self._children)
        path, counter = _saveplan.write_objects(
            os.fspath(file_prefix), objects, self._save_counter, True
        )
        self._save_counter = counter
        return path

    def restore(self, save_path):
        """``tf.train.Checkpoint.restore``: restores every matched value into the tree (into
        the array in place when it is writable and of the same dtype and shape, else by
        replacing it) and ``save_counter``; returns a :class:`RestoreStatus`. ``save_path``
        may be a directory or ``checkpoint`` file (its latest checkpoint)."""
        return self._restore(save_path, False)

    def read(self, save_path):
        """``tf.train.Checkpoint.read``: :meth:`restore` without ``save_counter``."""
        return self._restore(save_path, True)

    def _restore(self, save_path, read):
        prefix = _saveplan.resolve_prefix(os.fspath(save_path))
        objects, places = _flatten(self._children)
        result = _saveplan.restore_objects(prefix, objects, self._save_counter, read)
        for (path, _, slot, dtype, shape, _), (parent, name), value in zip(
            objects, places, result["values"]
        ):
            if value is None:
                continue
            new = _array(value, dtype, shape, scalars=False)
            old = parent[name]
            if (
                isinstance(old, np.ndarray)
                and old.flags.writeable
                and old.dtype == new.dtype
                and old.shape == new.shape
            ):
                np.copyto(old, new)
            else:
                parent[name] = new
        if not read:
            self._save_counter = result["save_counter"]
        return RestoreStatus(result)


class CheckpointManager:
    """``tf.train.CheckpointManager``: saves ``checkpoint`` as ``<directory>/<name>-<N>``,
    keeps the newest ``max_to_keep`` (``None``: all) and the ``checkpoint`` file."""

    def __init__(
        self,
        checkpoint,
        directory,
        max_to_keep,
        keep_checkpoint_every_n_hours=None,
        checkpoint_name="ckpt",
    ):
        self._checkpoint = checkpoint
        self._directory = os.fspath(directory)
        self._native = _saveplan.Manager(
            self._directory, max_to_keep, checkpoint_name, keep_checkpoint_every_n_hours
        )

    @property
    def directory(self):
        """The directory saved into."""
        return self._directory

    @property
    def checkpoint(self):
        """The checkpoint saved."""
        return self._checkpoint

    @property
    def checkpoints(self):
        """The kept checkpoints, oldest first."""
        return self._native.checkpoints()

    @property
    def latest_checkpoint(self):
        """The newest checkpoint, or ``None``."""
        return self._native.latest_checkpoint()

    def save(self, checkpoint_number=None):
        """Saves the checkpoint's tree as the next checkpoint; returns its path."""
        objects, _ = _flatten(self._checkpoint.children)
        path, counter = self._native.save(
            objects, self._checkpoint._save_counter, checkpoint_number
        )
        self._checkpoint._save_counter = counter
        return path

    def restore_or_initialize(self):
        """Restores the latest checkpoint and returns its path, or returns ``None``."""
        latest = self.latest_checkpoint
        if latest is None:
            return None
        self._checkpoint.restore(latest)
        return latest
