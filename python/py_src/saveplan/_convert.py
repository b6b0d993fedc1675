"""Python values to what the native writer takes: a checkpoint dtype name, a shape and the
values (a ``uint8`` view of little-endian contiguous element bytes, or a list of ``bytes``)."""

import numpy as np

from ._dtypes import tf_name

__all__ = ["to_native"]


def _bytes_of(item, key):
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, (bytearray, memoryview, np.bytes_)):
        return bytes(item)
    raise ValueError(
        f"`{key}`: Failed to convert a NumPy array to a Tensor "
        f"(Unsupported object type {type(item).__name__})"
    )


def to_native(key, value):
    """``(dtype name, shape, values)`` of ``value`` (an array or anything ``np.asarray``
    takes). Strings are ``bytes`` (``str`` is encoded as UTF-8); a dtype a checkpoint cannot
    store is a ``ValueError``."""
    if isinstance(value, (bytes, str)):
        return "string", [], [_bytes_of(value, key)]
    array = np.asarray(value)
    try:
        name = tf_name(array.dtype)
    except ValueError as err:
        raise ValueError(f"`{key}`: {err}") from None
    shape = [int(dim) for dim in array.shape]
    if name == "string":
        return name, shape, [_bytes_of(item, key) for item in array.reshape(-1).tolist()]
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    array = np.ascontiguousarray(array)
    return name, shape, array.reshape(-1).view(np.uint8)
