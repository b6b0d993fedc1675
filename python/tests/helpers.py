"""Where TensorFlow 2.21's fixture checkpoints are, and the values TensorFlow recorded for them."""

import base64
import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "tf-2.21"


def fixture_prefixes():
    """Every checkpoint prefix among the fixtures (every `*.index` file, minus `.index`)."""
    return sorted(str(index)[: -len(".index")] for index in FIXTURES.rglob("*.index"))


def recorded_values():
    """`[(prefix, key, record)]`: each whole tensor TensorFlow recorded in a `values.json`
    (raw little-endian bytes as `raw_le_b64`, strings as `values_b64`)."""
    out = []
    for values_json in sorted(FIXTURES.rglob("values.json")):
        case = values_json.parent
        for prefix, tensors in json.loads(values_json.read_text()).items():
            for key, record in tensors.items():
                if "slice" in record or "count" in record:
                    continue
                out.append((str(case / prefix), key, record))
    return out


def record_bytes(record):
    """The raw bytes of a recorded fixed-width tensor."""
    return base64.b64decode(record["raw_le_b64"])


def record_strings(record):
    """The elements of a recorded string tensor."""
    return [base64.b64decode(value) for value in record["values_b64"]]
