"""Writes deterministic values for a spec's variables (a plain spec's, or an object spec's
variables and slot variables) as a `.safetensors` file (no numpy).

Usage: python3 tests/mpi/values.py SPEC OUT [SALT]

Each checkpoint key gets one full tensor (a sliced key's full shape, read from its slice
spec), element i of key k being a small number of (i, k, SALT): saves with another SALT differ.
Tensors of over a million elements get pseudo-random bytes seeded by (k, SALT) instead (fast;
the kill drills save hundreds of MiB).
"""

import json
import random
import struct
import sys

SIZES = {"f": 4, "d": 8, "e": 2, "i": 4, "q": 8}

FORMATS = {"float32": ("F32", "f"), "float64": ("F64", "d"), "float16": ("F16", "e"),
           "int32": ("I32", "i"), "int64": ("I64", "q")}


def object_key(entry):
    """The checkpoint key of an object spec's variable or slot variable (local names that need
    no escaping)."""
    slot = entry.get("slot")
    if slot is None:
        return "/".join(entry["path"]) + "/.ATTRIBUTES/VARIABLE_VALUE"
    return "%s/.OPTIMIZER_SLOT/%s/%s/.ATTRIBUTES/VARIABLE_VALUE" % (
        "/".join(slot["variable"]), "/".join(slot["optimizer"]), slot["name"])


def main():
    spec_path, out_path = sys.argv[1], sys.argv[2]
    salt = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    spec = json.load(open(spec_path))
    shapes = {}
    for entry in spec.get("objects", []):
        shapes[object_key(entry)] = (entry["dtype"], entry["shape"])
    for var in spec.get("variables", []):
        shape = var["shape"]
        if var.get("slice_spec"):
            shape = [int(dim) for dim in var["slice_spec"].split(" ")[:-1]]
        shapes[var["checkpoint_key"]] = (var["dtype"], shape)
    header, blobs, offset = {}, [], 0
    for number, key in enumerate(sorted(shapes)):
        dtype, shape = shapes[key]
        code, fmt = FORMATS[dtype]
        count = 1
        for dim in shape:
            count *= dim
        if count > 1_000_000:
            blob = random.Random(number * 1000 + salt).randbytes(count * SIZES[fmt])
        else:
            values = [((index * 7 + number * 13 + salt * 31) % 97) - 40 for index in range(count)]
            if fmt in "fde":
                values = [value / 4 for value in values]
            blob = struct.pack("<%d%s" % (count, fmt), *values)
        header[key] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(out_path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


if __name__ == "__main__":
    main()
