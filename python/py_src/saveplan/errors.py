"""The exceptions saveplan raises, named as TensorFlow's ``tf.errors`` are.

Each is an :class:`OpError` with ``message`` and ``error_code`` like TensorFlow's, and also
the builtin exception a Python user would catch: :class:`NotFoundError` is a
``FileNotFoundError``, :class:`InvalidArgumentError` a ``ValueError``,
:class:`PermissionDeniedError` a ``PermissionError``. Messages are one line.
"""

__all__ = [
    "OpError",
    "NotFoundError",
    "InvalidArgumentError",
    "DataLossError",
    "PermissionDeniedError",
    "UnknownError",
    "OK",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "NOT_FOUND",
    "PERMISSION_DENIED",
    "DATA_LOSS",
]

# TensorFlow's error codes (tensorflow/core/protobuf/error_codes.proto).
OK = 0
UNKNOWN = 2
INVALID_ARGUMENT = 3
NOT_FOUND = 5
PERMISSION_DENIED = 7
DATA_LOSS = 15


class OpError(Exception):
    """The base class of saveplan's errors, as ``tf.errors.OpError`` is TensorFlow's."""

    error_code = UNKNOWN

    def __init__(self, message, node_def=None, op=None, error_code=None):
        super().__init__(message)
        self._message = message
        self.node_def = node_def
        self.op = op
        if error_code is not None:
            self.error_code = error_code

    @property
    def message(self):
        """The error message."""
        return self._message

    def __str__(self):
        return self._message


class NotFoundError(OpError, FileNotFoundError):
    """A file, directory or tensor that does not exist (``tf.errors.NotFoundError``)."""

    error_code = NOT_FOUND

    def __init__(self, message, node_def=None, op=None, error_code=None):
        OpError.__init__(self, message, node_def, op, error_code)


class InvalidArgumentError(OpError, ValueError):
    """A bad argument (``tf.errors.InvalidArgumentError``)."""

    error_code = INVALID_ARGUMENT


class DataLossError(OpError):
    """Damaged or truncated checkpoint files (``tf.errors.DataLossError``)."""

    error_code = DATA_LOSS


class PermissionDeniedError(OpError, PermissionError):
    """The file system refused (``tf.errors.PermissionDeniedError``)."""

    error_code = PERMISSION_DENIED

    def __init__(self, message, node_def=None, op=None, error_code=None):
        OpError.__init__(self, message, node_def, op, error_code)


class UnknownError(OpError):
    """Any other failure (``tf.errors.UnknownError``)."""

    error_code = UNKNOWN
