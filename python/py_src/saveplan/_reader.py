"""Reading checkpoints: TensorFlow's checkpoint utilities (``tf.train.list_variables``,
``load_variable``, ``load_checkpoint``, ``latest_checkpoint``) as drop-ins, and
:func:`load` for a whole checkpoint at once."""

import os

import numpy as np

from . import _saveplan
from ._dtypes import DType, numpy_dtype

__all__ = [
    "CheckpointReader",
    "latest_checkpoint",
    "list_variables",
    "load",
    "load_checkpoint",
    "load_variable",
]


def _prefix_of(ckpt_dir_or_file):
    """The path to open: a directory means its latest checkpoint (``ValueError`` without one,
    as TensorFlow raises); a prefix or a ``checkpoint`` state file is opened as given."""
    path = os.fspath(ckpt_dir_or_file)
    if os.path.isdir(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise ValueError(
                f"Couldn't find 'checkpoint' file or checkpoints in given directory {path}"
            )
        return latest
    return path


def _array(values, dtype_name, shape, scalars=True):
    """The NumPy value of what the native reader returned: the ``uint8`` buffer viewed as the
    tensor's dtype and shape (no copy), or an object array of ``bytes`` for strings (and for
    variants, each element its serialized ``VariantTensorDataProto``). With
    ``scalars``, a 0-d tensor is a NumPy scalar (``bytes`` for a string), as TensorFlow's
    ``get_tensor`` returns it."""
    shape = tuple(shape)
    if isinstance(values, list):  # string (or variant, as opaque bytes) elements
        array = np.empty(len(values), dtype=object)
        array[:] = values
        array = array.reshape(shape)
    else:
        array = values.view(numpy_dtype(dtype_name)).reshape(shape)
    if scalars and shape == ():
        return array[()]
    return array


class CheckpointReader:
    """An open checkpoint, with the methods of TensorFlow's ``CheckpointReader``
    (``tf.train.load_checkpoint``). Threads may share one."""

    def __init__(self, ckpt_dir_or_file):
        self._native = _saveplan.Reader(_prefix_of(ckpt_dir_or_file))

    @property
    def prefix(self):
        """The checkpoint prefix opened."""
        return self._native.prefix

    def get_variable_to_shape_map(self):
        """``{key: shape}`` of every tensor, each shape a list of ints."""
        return {key: list(shape) for key, _, shape in self._native.entries()}

    def get_variable_to_dtype_map(self):
        """``{key: dtype}`` of every tensor, each a :class:`DType` equal to its NumPy dtype."""
        return {key: DType(dtype) for key, dtype, _ in self._native.entries()}

    def has_tensor(self, tensor_str):
        """Whether the checkpoint has tensor ``tensor_str``."""
        return self._native.has(tensor_str)

    def get_tensor(self, tensor_str):
        """Tensor ``tensor_str`` as a writable NumPy array (a NumPy scalar for a 0-d tensor,
        ``bytes`` for a string scalar), as TensorFlow's reader returns it; a
        :class:`~saveplan.errors.NotFoundError` for a key the checkpoint lacks."""
        return _array(*self._native.read(tensor_str, False))


def load_checkpoint(ckpt_dir_or_file):
    """``tf.train.load_checkpoint``: a :class:`CheckpointReader` of a prefix, of a
    directory's latest checkpoint, or of the one a ``checkpoint`` state file names."""
    return CheckpointReader(ckpt_dir_or_file)


def list_variables(ckpt_dir_or_file):
    """``tf.train.list_variables``: ``[(name, shape)]`` of every tensor, sorted by name, the
    object graph (``_CHECKPOINTABLE_OBJECT_GRAPH``) included."""
    reader = load_checkpoint(ckpt_dir_or_file)
    return [(key, list(shape)) for key, _, shape in reader._native.entries()]


def load_variable(ckpt_dir_or_file, name):
    """``tf.train.load_variable``: one tensor's value (a trailing ``:0`` is dropped)."""
    if name.endswith(":0"):
        name = name[:-2]
    return load_checkpoint(ckpt_dir_or_file).get_tensor(name)


def latest_checkpoint(checkpoint_dir, latest_filename=None):
    """``tf.train.latest_checkpoint``: the prefix the directory's ``checkpoint`` file names,
    or ``None`` when there is none."""
    directory = os.fspath(checkpoint_dir)
    if latest_filename not in (None, "checkpoint"):
        state = os.path.join(directory, latest_filename)
        if not os.path.isfile(state):
            return None
        try:
            return _saveplan.resolve_prefix(state)
        except (OSError, ValueError):
            return None
    return _saveplan.latest_checkpoint(directory)


def load(path, keys=None, mmap=False):
    """Every tensor of a checkpoint as ``{key: numpy array}`` (``keys``: only those), read in
    parallel. The keys are those :func:`list_variables` lists, the object graph string
    included; values are as :meth:`CheckpointReader.get_tensor` returns them.

    By default the fixed-width tensors are read into one fresh buffer (its pages populated
    in one call), each array a writable, 64-byte aligned view of its own part: no copy after
    the read, and the buffer lives while any of its arrays does. With ``mmap=True`` they are
    read-only views of the memory-mapped data files instead (no copy at all; the files stay
    mapped while an array lives). Either way every byte's CRC32C is checked.
    """
    reader = _saveplan.Reader(_prefix_of(path))
    if keys is None:
        keys = [key for key, _, _ in reader.entries()]
    else:
        keys = list(keys)
    loaded = reader.read_many(keys, mmap)
    return {key: _array(*item) for key, item in zip(keys, loaded)}
