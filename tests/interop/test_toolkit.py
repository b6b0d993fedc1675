"""Interop of the user toolkit, judged by TensorFlow 2.21.

`saveplan diff` of two checkpoints TensorFlow wrote (one variable changed, one added) reports
what `tf.train.load_checkpoint` reads: the same keys, the changed one with the number of
elements and the largest absolute difference NumPy computes, exit 1; and exit 0 for a
checkpoint against itself.

`saveplan convert --skip-strings` of an object-based checkpoint holding a string variable,
converted back, is read by `tf.train.Checkpoint.read` without `NotFoundError` (the object
graph written names only the values written), the numeric variable restored.

`saveplan inspect --tensor` by a variable's full name, by its object path (either path of a
shared variable) or by its key reads the value TensorFlow's reader holds; a full name two
variables share is an error naming both.

Usage: python tests/interop/test_toolkit.py PATH/TO/saveplan
"""

import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import check, main, run_saveplan  # noqa: E402


def module(w, b, extra=None):
    m = tf.Module()
    m.w = tf.Variable(np.asarray(w, np.float32))
    m.b = tf.Variable(np.asarray(b, np.int64))
    if extra is not None:
        m.extra = tf.Variable(np.asarray(extra, np.float64))
    return m


@check
def diff_agrees_with_tensorflows_reader():
    with tempfile.TemporaryDirectory() as tmp:
        a = tf.train.Checkpoint(net=module([1.0, 2.0, 3.0], [4, 5])).write(os.path.join(tmp, "a", "ckpt"))
        b = tf.train.Checkpoint(net=module([1.0, 2.5, -1.0], [4, 5], [7.0])).write(
            os.path.join(tmp, "b", "ckpt"))
        proc = run_saveplan("diff", a, b, "--json", expect_ok=False)
        assert proc.returncode == 1, (proc.returncode, proc.stderr)
        found = json.loads(proc.stdout)
        ra, rb = tf.train.load_checkpoint(a), tf.train.load_checkpoint(b)
        keys_a, keys_b = set(ra.get_variable_to_shape_map()), set(rb.get_variable_to_shape_map())
        assert found["only_in_a"] == sorted(keys_a - keys_b), found
        assert found["only_in_b"] == sorted(keys_b - keys_a), found
        different = {d["key"]: d for d in found["different"]}
        for key in keys_a & keys_b:
            va, vb = ra.get_tensor(key), rb.get_tensor(key)
            if isinstance(va, bytes) or va.dtype == object:
                same = np.array_equal(va, vb)
            else:
                same = va.shape == vb.shape and np.array_equal(va, vb)
            if same:
                assert key in found["same"], (key, found)
                continue
            entry = different[key]
            if key == "_CHECKPOINTABLE_OBJECT_GRAPH":
                continue
            assert entry["elements_differing"] == int(np.sum(va != vb)), (key, entry)
            assert entry["max_abs_diff"] == float(np.max(np.abs(va.astype(np.float64) - vb))), entry
        assert "net/w/.ATTRIBUTES/VARIABLE_VALUE" in different, found
        proc = run_saveplan("diff", a, a, expect_ok=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr


@check
def convert_skip_strings_writes_a_graph_tensorflow_reads():
    with tempfile.TemporaryDirectory() as tmp:
        m = tf.Module()
        m.w = tf.Variable(np.asarray([1.5, -2.0], np.float32))
        m.names = tf.Variable(np.asarray([b"a", b"bc"], object), dtype=tf.string)
        prefix = tf.train.Checkpoint(net=m).write(os.path.join(tmp, "src", "ckpt"))
        st = os.path.join(tmp, "values.safetensors")
        back = os.path.join(tmp, "back", "ckpt")
        run_saveplan("convert", prefix, st, "--skip-strings")
        run_saveplan("convert", st, back)
        fresh = tf.Module()
        fresh.w = tf.Variable(np.zeros([2], np.float32))
        fresh.names = tf.Variable(np.asarray([b"", b""], object), dtype=tf.string)
        tf.train.Checkpoint(net=fresh).read(back).expect_partial()
        assert np.array_equal(fresh.w.numpy(), m.w.numpy()), fresh.w.numpy()
        assert list(fresh.names.numpy()) == [b"", b""], fresh.names.numpy()


@check
def name_lookup_reads_what_tensorflow_holds():
    """`inspect --tensor` by full name, by object path (along a shared variable's second
    path too) and by key gives the value TensorFlow saved; an ambiguous full name fails."""
    with tempfile.TemporaryDirectory() as tmp:
        m = tf.Module()
        m.dense = tf.Module()
        m.dense.kernel = tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="dense/kernel")
        m.other = tf.Module()
        m.other.k = m.dense.kernel  # a second path to the same variable
        m.a = tf.Variable(np.float32(1.0), name="same")
        m.b = tf.Variable(np.float32(2.0), name="same")
        prefix = tf.train.Checkpoint(net=m).write(os.path.join(tmp, "ckpt"))
        reader = tf.train.load_checkpoint(prefix)
        kernel_key = "net/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE"
        expected = reader.get_tensor(kernel_key)
        for name in ["dense/kernel", "net/dense/kernel", "net/other/k", kernel_key]:
            proc = run_saveplan("inspect", prefix, "--tensor", name, "--json")
            found = json.loads(proc.stdout)
            assert found["key"] == kernel_key, (name, found["key"])
            assert np.array_equal(np.asarray(found["values"], np.float32).reshape(found["shape"]),
                                  expected), (name, found)
        proc = run_saveplan("inspect", prefix, "--tensor", "same", expect_ok=False)
        assert proc.returncode == 1 and "`same` names 2 values" in proc.stderr, proc.stderr


main()
