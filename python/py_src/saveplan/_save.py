"""Writing key-based checkpoints: :func:`save`."""

import os

from . import _saveplan
from ._convert import to_native

__all__ = ["save"]


def save(path, tensors):
    """Writes ``tensors`` (``{key: array}``) as a TensorFlow checkpoint at prefix ``path``
    (``path.index`` and ``path.data-00000-of-00001``), each under its key, in key order, as
    a name-based ``tf.compat.v1.train.Saver`` writes them; ``tf.train.load_checkpoint`` and
    :func:`saveplan.load` read them back. ``bfloat16`` and float8 arrays (``ml_dtypes``) keep
    their dtype; strings are object arrays of ``bytes`` (or ``str``, stored as UTF-8).
    Returns ``path``."""
    prefix = os.fspath(path)
    native = []
    for key in sorted(tensors):
        if not isinstance(key, str):
            raise TypeError(f"checkpoint keys must be str, not {type(key).__name__}")
        dtype, shape, values = to_native(key, tensors[key])
        native.append((key, dtype, shape, values))
    _saveplan.write_bundle(prefix, native)
    return prefix
