"""saveplan: read and write TensorFlow checkpoints with NumPy, without TensorFlow.

TensorFlow's checkpoint utilities as drop-ins (replace ``tf.train`` with ``saveplan``):
:func:`list_variables`, :func:`load_variable`, :func:`load_checkpoint` (a
:class:`CheckpointReader`) and :func:`latest_checkpoint`. Whole checkpoints:
:func:`load` and :func:`save`. Object-based checkpoints: :func:`load_tree`,
:class:`Checkpoint`, :class:`CheckpointManager`. Errors: :mod:`saveplan.errors`.

Importing saveplan imports NumPy only (``ml_dtypes`` when a bfloat16 tensor is read).
"""

from . import errors
from ._dtypes import DType
from ._objects import Checkpoint, CheckpointManager, RestoreStatus, load_tree
from ._reader import (
    CheckpointReader,
    latest_checkpoint,
    list_variables,
    load,
    load_checkpoint,
    load_variable,
)
from ._save import save

__all__ = [
    "Checkpoint",
    "CheckpointManager",
    "CheckpointReader",
    "DType",
    "RestoreStatus",
    "errors",
    "latest_checkpoint",
    "list_variables",
    "load",
    "load_checkpoint",
    "load_tree",
    "load_variable",
    "save",
]
