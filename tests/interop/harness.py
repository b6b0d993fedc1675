"""Tiny test harness shared by the interop scripts (no pytest needed).

Each script registers checks with @check, then calls main(). Every check runs even if an
earlier one failed; the last line printed is `N passed, M failed`, and the exit code is
non-zero when anything failed or nothing ran.
"""
import os
import subprocess
import sys
import traceback

_CHECKS = []


def check(fn):
    """Registers a check function taking no arguments."""
    _CHECKS.append(fn)
    return fn


def saveplan_bin():
    """Path of the saveplan binary, given as the script's first argument."""
    if len(sys.argv) < 2:
        sys.exit("usage: %s SAVEPLAN_BINARY" % sys.argv[0])
    return os.path.abspath(sys.argv[1])


def repo_root():
    """The repository root (two levels above this file)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fixtures():
    """The TensorFlow 2.21 reference fixtures folder."""
    return os.path.join(repo_root(), "tests", "fixtures", "tf-2.21")


def run_saveplan(*args, expect_ok=True):
    """Runs the saveplan binary; returns the CompletedProcess. Raises on unexpected status."""
    proc = subprocess.run([saveplan_bin(), *args], capture_output=True, text=True)
    if expect_ok and proc.returncode != 0:
        raise AssertionError("saveplan %s failed (%d): %s" % (" ".join(args), proc.returncode, proc.stderr))
    return proc


def read_safetensors(path):
    """`{key: np.ndarray}` of a `.safetensors` file (the format by hand: u64 header size,
    JSON header, data)."""
    import json
    import struct

    import numpy as np
    with open(path, "rb") as f:
        raw = f.read()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + size])
    dtypes = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32,
              "BOOL": np.bool_, "I16": np.int16, "F16": np.float16}
    out = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        start, end = info["data_offsets"]
        data = raw[8 + size + start:8 + size + end]
        out[key] = np.frombuffer(data, dtypes[info["dtype"]]).reshape(info["shape"])
    return out


def free_ports(n):
    """`n` TCP ports of localhost that were free a moment ago (for in-process clusters)."""
    import socket

    socks = [socket.socket() for _ in range(n)]
    for sock in socks:
        sock.bind(("localhost", 0))
    ports = [sock.getsockname()[1] for sock in socks]
    for sock in socks:
        sock.close()
    return ports


def main():
    saveplan_bin()
    passed = failed = 0
    for fn in _CHECKS:
        try:
            fn()
        except Exception:  # noqa: BLE001 - a failed check of any kind is reported, not fatal
            failed += 1
            print("FAIL %s" % fn.__name__)
            traceback.print_exc(file=sys.stdout)
        else:
            passed += 1
            print("ok   %s" % fn.__name__)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed or not passed else 0)
