"""Checkpoint dtypes as NumPy sees them.

:class:`DType` is what ``get_variable_to_dtype_map`` returns: it carries TensorFlow's name
(``float32``, ``bfloat16``, ``string``) and compares equal to the NumPy dtype TensorFlow maps
it to (``DType("float32") == np.float32``), to its name and to a TensorFlow ``tf.DType``.
``bfloat16`` and the float8 types need ``ml_dtypes``, imported only when such a tensor is
read or written.
"""

import numpy as np

__all__ = ["DType", "numpy_dtype", "tf_name"]

_PLAIN = {
    "float16": np.float16,
    "float32": np.float32,
    "float64": np.float64,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "bool": np.bool_,
    "complex64": np.complex64,
    "complex128": np.complex128,
    "string": np.object_,
    "variant": np.object_,
}

# Quantized types are structured dtypes of one field, as TensorFlow's `as_numpy_dtype` has them.
_QUANTIZED = {
    "qint8": np.int8,
    "quint8": np.uint8,
    "qint16": np.int16,
    "quint16": np.uint16,
    "qint32": np.int32,
}

_ML_DTYPES = (
    "bfloat16",
    "float8_e5m2",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e4m3b11fnuz",
    "float8_e5m2fnuz",
)


def numpy_dtype(name):
    """The NumPy dtype of the checkpoint dtype called ``name`` (TensorFlow's name)."""
    if name in _PLAIN:
        return np.dtype(_PLAIN[name])
    if name in _QUANTIZED:
        return np.dtype([(name, _QUANTIZED[name])])
    if name in _ML_DTYPES:
        try:
            import ml_dtypes
        except ImportError as err:
            raise ImportError(
                f"reading or writing {name} tensors needs ml_dtypes: pip install ml_dtypes"
            ) from err
        return np.dtype(getattr(ml_dtypes, name))
    raise TypeError(f"saveplan cannot convert checkpoint dtype {name} to NumPy")


def tf_name(dtype):
    """TensorFlow's name of the NumPy dtype ``dtype`` (``string`` for bytes, str and object
    arrays); a ``ValueError`` for one a checkpoint cannot store, as TensorFlow raises."""
    dtype = np.dtype(dtype)
    if dtype.kind in "OSU":
        return "string"
    if dtype.names is not None and len(dtype.names) == 1 and dtype.names[0] in _QUANTIZED:
        return dtype.names[0]
    name = dtype.name
    if name in _PLAIN and name != "string":
        return name
    if name in _ML_DTYPES:
        return name
    raise ValueError(
        f"Failed to convert a NumPy array to a Tensor (unsupported dtype {dtype}): "
        "a TensorFlow checkpoint cannot store it"
    )


class DType:
    """A checkpoint tensor's dtype: TensorFlow's name, equal to the matching NumPy dtype."""

    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    @property
    def name(self):
        """TensorFlow's name (``float32``, ``bfloat16``, ``string``)."""
        return self._name

    @property
    def as_numpy_dtype(self):
        """The NumPy type (``np.float32``), as ``tf.DType.as_numpy_dtype`` gives it."""
        return numpy_dtype(self._name).type

    @property
    def is_floating(self):
        """Whether this is a floating-point type."""
        return self._name.startswith(("float", "bfloat"))

    @property
    def is_integer(self):
        """Whether this is a (non-quantized) integer type."""
        return self._name.startswith(("int", "uint"))

    @property
    def size(self):
        """Bytes per element (1 for string, as ``tf.string.size``)."""
        if self._name == "string":
            return 1
        return numpy_dtype(self._name).itemsize

    def __eq__(self, other):
        if isinstance(other, DType):
            return other._name == self._name
        if other is None:
            return False
        other_name = getattr(other, "name", None)
        if type(other).__module__.startswith("tensorflow") and isinstance(other_name, str):
            return other_name == self._name
        if isinstance(other, str) and other == self._name:
            return True
        try:
            return numpy_dtype(self._name) == np.dtype(other)
        except (TypeError, ImportError):
            return False

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self._name)

    def __repr__(self):
        return f"saveplan.{self._name}"
