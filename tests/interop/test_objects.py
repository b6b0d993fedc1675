"""Interop of object-based checkpoints: TensorFlow restores by object what saveplan converts.

o1's `Checkpoint(root=tree).write()` checkpoint goes through `saveplan convert` to
`.safetensors` (object graph in the metadata) and back to a checkpoint; TensorFlow 2.21 then
reads it into a freshly built `tf.Module` tree of the same shape (zero-initialised) with
`tf.train.Checkpoint(root=...).read(...)`, `assert_consumed()` must pass, and every variable
must hold the value TensorFlow originally saved. The same through a directory: saveplan
resolves o1's `save/` folder to `ckpt-2` as `tf.train.latest_checkpoint` does.

`saveplan save OBJSPEC` (an object spec: variables by path, a slot variable, escaped names,
non-default names and dtypes) writes what TensorFlow then restores into the equivalent
`tf.Module` tree and v1 Adam slot with `read()`, `assert_consumed()` passing and every value
equal, and TensorFlow writing that tree gives the same bytes; the values file is a
name-based checkpoint TensorFlow writes with raw `SaveV2`.

`saveplan restore OBJSPEC` restores by object what TensorFlow saves (the spec tree with a v1
Adam slot, `save()`) and writes (the plain tree, `--read`) with `--expect consumed` passing and
every value equal; for a tree with one variable more and one fewer, each `--expect` passes or
fails as TensorFlow's assertion does, with TensorFlow's message.

Usage: python tests/interop/test_objects.py PATH/TO/saveplan
"""

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import check, fixtures, main, read_safetensors, run_saveplan  # noqa: E402
from spec_tree import SPEC, spec_tree  # noqa: E402

O1 = Path(fixtures()) / "obj" / "o1_module_tree"


def zeros(dtype, shape):
    return tf.Variable(np.zeros(shape, dtype))


def o1_tree():
    """o1's tree (its case.json `tree`): same structure, dtypes and shapes, zero values."""
    root = tf.Module()
    root.first = zeros(np.int32, [])
    root.encoder = tf.Module()
    root.encoder.kernel = zeros(np.float32, [2, 2])
    root.encoder.bias = zeros(np.float32, [2])
    block = tf.Module()
    block.kernel = zeros(np.float32, [2, 2])
    block.bias = zeros(np.float32, [2])
    root.blocks = [block, [zeros(np.int64, [2])]]
    root.table = {"zeta": zeros(np.float64, []), "alpha": zeros(np.bool_, [2]),
                  "a/b.c": zeros(np.float32, [1]), ".S": zeros(np.float32, [1]),
                  "nested": {"x": zeros(np.int32, [1])}}
    root.pair = (zeros(np.float32, [1]), zeros(np.float32, [1]))
    root.shared = root.encoder.kernel
    same = zeros(np.float32, [1])
    root.alias_a = tf.Module()
    root.alias_a.x = same
    root.alias_b = tf.Module()
    root.alias_b.x = same
    root.empty = []
    root.novars = tf.Module()
    setattr(root, "dotted.attr", zeros(np.int16, []))
    return root


def round_trip(src, tmp):
    st = os.path.join(tmp, "nested", "o1.safetensors")
    back = os.path.join(tmp, "back", "ckpt")
    run_saveplan("convert", str(src), st)
    run_saveplan("convert", st, back)
    return back


def restore_and_compare(original, prefix, extra=None):
    """`read()` for a `write()` checkpoint; `restore()` (which creates `save_counter`) for a
    `save()` one, given `extra` keyword arguments."""
    root = o1_tree()
    kwargs = dict(extra or {})
    ckpt = tf.train.Checkpoint(root=root, **kwargs)
    status = ckpt.restore(prefix) if kwargs else ckpt.read(prefix)
    status.assert_consumed()
    reader = tf.train.load_checkpoint(original)
    keys = {k for k in reader.get_variable_to_shape_map() if k != "_CHECKPOINTABLE_OBJECT_GRAPH"}
    by_key = {
        "first/.ATTRIBUTES/VARIABLE_VALUE": root.first,
        "shared/.ATTRIBUTES/VARIABLE_VALUE": root.shared,
        "dotted..attr/.ATTRIBUTES/VARIABLE_VALUE": getattr(root, "dotted.attr"),
        "encoder/bias/.ATTRIBUTES/VARIABLE_VALUE": root.encoder.bias,
        "table/zeta/.ATTRIBUTES/VARIABLE_VALUE": root.table["zeta"],
        "table/alpha/.ATTRIBUTES/VARIABLE_VALUE": root.table["alpha"],
        "table/a.Sb..c/.ATTRIBUTES/VARIABLE_VALUE": root.table["a/b.c"],
        "table/..S/.ATTRIBUTES/VARIABLE_VALUE": root.table[".S"],
        "pair/0/.ATTRIBUTES/VARIABLE_VALUE": root.pair[0],
        "pair/1/.ATTRIBUTES/VARIABLE_VALUE": root.pair[1],
        "alias_a/x/.ATTRIBUTES/VARIABLE_VALUE": root.alias_a.x,
        "blocks/0/kernel/.ATTRIBUTES/VARIABLE_VALUE": root.blocks[0].kernel,
        "blocks/0/bias/.ATTRIBUTES/VARIABLE_VALUE": root.blocks[0].bias,
        "blocks/1/0/.ATTRIBUTES/VARIABLE_VALUE": root.blocks[1][0],
        "table/nested/x/.ATTRIBUTES/VARIABLE_VALUE": root.table["nested"]["x"],
    }
    for name, var in kwargs.items():
        by_key["%s/.ATTRIBUTES/VARIABLE_VALUE" % name] = var
    if kwargs:
        by_key["save_counter/.ATTRIBUTES/VARIABLE_VALUE"] = ckpt.save_counter
    assert keys == set(by_key), sorted(keys ^ set(by_key))
    for key, var in by_key.items():
        expected = reader.get_tensor(key)
        assert np.array_equal(var.numpy(), expected), (key, var.numpy(), expected)
        assert var.numpy().any(), "%s restored all zeros" % key


@check
def tf_restores_converted_o1_by_object():
    with tempfile.TemporaryDirectory() as tmp:
        src = O1 / "write" / "ckpt"
        restore_and_compare(str(src), round_trip(src, tmp))


@check
def tf_restores_converted_latest_o1_by_object():
    with tempfile.TemporaryDirectory() as tmp:
        # `save/` is a directory: saveplan converts its latest checkpoint, ckpt-2.
        back = round_trip(O1 / "save", tmp)
        extra = zeros(np.float32, [2])
        restore_and_compare(str(O1 / "save" / "ckpt-2"), back, {"extra": extra})


@check
def tf_restores_object_spec_save():
    import json
    rng = np.random.default_rng(7)
    values = {
        "zmodel/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE": rng.normal(size=[3, 4]).astype(np.float32),
        "zmodel/dense/bias/.ATTRIBUTES/VARIABLE_VALUE": np.array([1, 2, 3, 4], np.float32),
        "zmodel/head/0/.ATTRIBUTES/VARIABLE_VALUE": np.array([5, -6], np.int64),
        "zmodel/table/a.Sb..c/.ATTRIBUTES/VARIABLE_VALUE": np.array(2.5, np.float64),
        "zmodel/dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE":
            rng.normal(size=[3, 4]).astype(np.float32) + 10,
    }
    with tempfile.TemporaryDirectory() as tmp:
        spec = os.path.join(tmp, "spec.json")
        with open(spec, "w") as f:
            json.dump(SPEC, f)
        vals = os.path.join(tmp, "values")
        keys = sorted(values)
        tf.raw_ops.SaveV2(prefix=vals, tensor_names=keys, shape_and_slices=[""] * len(keys),
                          tensors=[tf.constant(values[k]) for k in keys])
        out = os.path.join(tmp, "out", "ckpt")
        run_saveplan("save", spec, "--values", vals, "--prefix", out)
        children, by_key = spec_tree()
        status = tf.train.Checkpoint(**children).read(out)
        status.assert_consumed()
        reader = tf.train.load_checkpoint(out)
        stored = set(reader.get_variable_to_shape_map()) - {"_CHECKPOINTABLE_OBJECT_GRAPH"}
        assert stored == set(values), sorted(stored ^ set(values))
        for key, var in by_key.items():
            assert np.array_equal(var.numpy(), values[key]), (key, var.numpy(), values[key])
        # TensorFlow writing the same tree and values gives the same bytes.
        theirs = os.path.join(tmp, "tf", "ckpt")
        tf.train.Checkpoint(**children).write(theirs)
        for suffix in (".index", ".data-00000-of-00001"):
            with open(out + suffix, "rb") as a, open(theirs + suffix, "rb") as b:
                assert a.read() == b.read(), "%s differs from TensorFlow's" % suffix


def random_spec_values(children, by_key):
    rng = np.random.default_rng(11)
    for var in by_key.values():
        value = rng.normal(size=var.shape.as_list()) * 10
        var.assign(value.astype(var.dtype.as_numpy_dtype))
    return {key: var.numpy() for key, var in by_key.items()}


def restore_by_object(spec, prefix, out, *flags):
    import json
    with open(os.path.join(os.path.dirname(out), "spec.json"), "w") as f:
        json.dump(spec, f)
    return run_saveplan("restore", os.path.join(os.path.dirname(out), "spec.json"),
                        "--prefix", prefix, "--out", out, *flags, expect_ok=False)


@check
def saveplan_restores_tf_trees_by_object():
    """TF saves the spec tree (with a v1 Adam slot) and writes it without the optimizer;
    `saveplan restore OBJSPEC --expect consumed` restores both with the same values."""
    plain = {"objects": [o for o in SPEC["objects"] if "slot" not in o]}
    with tempfile.TemporaryDirectory() as tmp:
        children, by_key = spec_tree()
        values = random_spec_values(children, by_key)
        saved = tf.train.Checkpoint(**children).save(os.path.join(tmp, "tf", "ckpt"))
        written = tf.train.Checkpoint(zmodel=children["zmodel"]).write(
            os.path.join(tmp, "plain", "ckpt"))
        for spec, prefix, flags, expected in [
                (SPEC, os.path.join(tmp, "tf"), [], values),
                (plain, written, ["--read"],
                 {k: v for k, v in values.items() if "OPTIMIZER_SLOT" not in k})]:
            out = os.path.join(tmp, "out.safetensors")
            result = restore_by_object(spec, prefix, out, "--expect", "consumed", *flags)
            assert result.returncode == 0, result.stderr
            got = read_safetensors(out)
            counter = got.pop("save_counter/.ATTRIBUTES/VARIABLE_VALUE", None)
            assert (counter is None) == bool(flags), counter
            assert set(got) == set(expected), sorted(set(got) ^ set(expected))
            for key, value in expected.items():
                assert np.array_equal(got[key], value), (key, got[key], value)
        assert saved.endswith("ckpt-1")


@check
def a_mismatched_tree_fails_as_in_tf():
    """The tree with one more variable and one fewer: `assert_consumed` and
    `assert_existing_objects_matched` fail in TF and in saveplan with the same message,
    `assert_nontrivial_match` passes in both."""
    with tempfile.TemporaryDirectory() as tmp:
        children, by_key = spec_tree()
        random_spec_values(children, by_key)
        prefix = tf.train.Checkpoint(**children).write(os.path.join(tmp, "tf", "ckpt"))
        spec = {"objects": [o for o in SPEC["objects"] if o.get("path") != ["zmodel", "head", "0"]]
                + [{"path": ["zmodel", "extra"], "dtype": "float32", "shape": []}]}
        fresh, _ = spec_tree()
        del fresh["zmodel"].head
        fresh["zmodel"].extra = tf.Variable(np.zeros([], np.float32))
        status = tf.train.Checkpoint(**fresh).read(prefix)
        for flag, method in [("consumed", status.assert_consumed),
                             ("existing", status.assert_existing_objects_matched),
                             ("nontrivial", status.assert_nontrivial_match)]:
            try:
                method()
                tf_message = None
            except AssertionError as err:
                tf_message = " ".join(line.strip() for line in str(err).splitlines()
                                      if line.strip())
            out = os.path.join(tmp, "out.safetensors")
            result = restore_by_object(spec, prefix, out, "--read", "--expect", flag)
            if tf_message is None:
                assert result.returncode == 0, (flag, result.stderr)
            else:
                assert result.returncode == 1, (flag, result.stderr)
                ours = result.stderr.strip().split(" failed: ", 1)[1]
                assert ours == tf_message, (flag, ours, tf_message)
        status.expect_partial()


main()
