"""saveplan: read and write TensorFlow checkpoints with NumPy, without TensorFlow.

TensorFlow's checkpoint utilities as drop-ins (replace ``tf.train`` with ``saveplan``):
:func:`list_variables`, :func:`load_variable`, :func:`load_checkpoint` (a
:class:`CheckpointReader`) and :func:`latest_checkpoint`. Whole checkpoints:
:func:`load` and :func:`save`. Object-based checkpoints: :func:`load_tree`,
:class:`Checkpoint`, :class:`CheckpointManager`. Errors: :mod:`saveplan.errors`.

Importing saveplan imports nothing heavy: NumPy when the API is first used, ``ml_dtypes``
when a bfloat16 or float8 tensor is read or written; never TensorFlow, PyTorch or JAX.
"""

import importlib

from . import errors

# The API loads on first use (PEP 562), so `import saveplan` costs almost nothing and a
# program that never reads a checkpoint never imports NumPy.
_API = {
    "Checkpoint": "_objects",
    "CheckpointManager": "_objects",
    "RestoreStatus": "_objects",
    "load_tree": "_objects",
    "CheckpointReader": "_reader",
    "latest_checkpoint": "_reader",
    "list_variables": "_reader",
    "load": "_reader",
    "load_checkpoint": "_reader",
    "load_variable": "_reader",
    "DType": "_dtypes",
    "save": "_save",
}

__all__ = sorted([*_API, "errors"])


def __getattr__(name):
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'saveplan' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
