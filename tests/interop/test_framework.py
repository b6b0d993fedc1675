"""Interop of a framework's own types (`saveplan::checkpoint::Saveable`): the example crate
`examples/framework/` saves its model struct (two dense layers in a list and a named int64
step) with `save_object`; TensorFlow 2.21 reads that checkpoint into the equivalent
`tf.Module` tree with `tf.train.Checkpoint(layers=[...], step=...).read()`, `assert_consumed()`
passing and every value the struct's, and TensorFlow writing that tree gives the same bytes.

Usage: python tests/interop/test_framework.py PATH/TO/saveplan (the example is built into
the same target directory)
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import check, main, repo_root, saveplan_bin  # noqa: E402


def example_bin():
    """Builds the example crate into the saveplan binary's target directory."""
    target = Path(saveplan_bin()).parent.parent
    manifest = Path(repo_root()) / "examples" / "framework" / "Cargo.toml"
    subprocess.run(["cargo", "build", "--quiet", "--manifest-path", str(manifest),
                    "--target-dir", str(target)], check=True)
    return target / "debug" / "framework-example"


def dense(inputs, outputs, fill):
    """The example's `Dense::new`: kernel `fill * i` row-major, bias `fill`."""
    layer = tf.Module()
    layer.kernel = tf.Variable(
        (fill * np.arange(inputs * outputs)).reshape(inputs, outputs).astype(np.float32))
    layer.bias = tf.Variable(np.full([outputs], fill, np.float32))
    return layer


def tree(fill, step):
    """The example's `Model`: the keyword arguments of its `tf.train.Checkpoint`."""
    return {"layers": [dense(4, 3, fill), dense(3, 1, fill)],
            "step": tf.Variable(np.int64(step), name="step")}


@check
def tf_reads_the_framework_struct_by_object():
    binary = example_bin()
    with tempfile.TemporaryDirectory() as tmp:
        ours = os.path.join(tmp, "rust", "ckpt")
        subprocess.run([str(binary), ours], check=True, capture_output=True)
        fresh = tree(0.0, 0)
        tf.train.Checkpoint(**fresh).read(ours).assert_consumed()
        trained = tree(0.5, 1000)
        for got, want in zip(fresh["layers"], trained["layers"]):
            assert np.array_equal(got.kernel.numpy(), want.kernel.numpy())
            assert np.array_equal(got.bias.numpy(), want.bias.numpy())
        assert fresh["step"].numpy() == 1000
        theirs = tf.train.Checkpoint(**trained).write(os.path.join(tmp, "tf", "ckpt"))
        for suffix in (".index", ".data-00000-of-00001"):
            with open(ours + suffix, "rb") as a, open(theirs + suffix, "rb") as b:
                assert a.read() == b.read(), "%s differs from TensorFlow's" % suffix


main()
