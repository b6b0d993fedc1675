"""Interop of `saveplan spec`: the spec of a fresh TensorFlow checkpoint makes `saveplan save`
write its files again, byte for byte, and TensorFlow restores the result.

TensorFlow 2.21 writes three kinds of checkpoint: a Keras 3 `Sequential` with an `Adam`
optimizer after one training step (`tf.train.Checkpoint(model=, optimizer=).save()`), a
`tf.Module` tree with a variable shared by two paths, a list and a dict (`write()` and
`save()`), and a TF1 `tf.compat.v1.train.Saver` checkpoint with a partitioned variable. For
each, `saveplan spec P > spec.json` and `saveplan save spec.json --values P --prefix Q` write
`Q.index` and `Q.data-00000-of-00001` equal to `P`'s; TensorFlow restores `Q` into a fresh copy
of the original objects with `assert_consumed()` passing (the TF1 one with a `Saver`), every
value equal to the saved one.

Usage: python tests/interop/test_spec.py PATH/TO/saveplan
"""

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import check, main, run_saveplan  # noqa: E402


def respec(prefix, tmp, *flags):
    """`spec` then `save --values prefix`; returns the new prefix after comparing the files."""
    spec = os.path.join(tmp, "spec.json")
    with open(spec, "w") as f:
        f.write(run_saveplan("spec", prefix, *flags).stdout)
    out = os.path.join(tmp, "respec", "ckpt")
    run_saveplan("save", spec, "--values", prefix, "--prefix", out)
    for suffix in (".index", ".data-00000-of-00001"):
        with open(prefix + suffix, "rb") as a, open(out + suffix, "rb") as b:
            assert a.read() == b.read(), suffix
    assert sorted(p.name for p in Path(out).parent.iterdir()) == [
        "ckpt.data-00000-of-00001", "ckpt.index"]
    return out


def keras_model():
    import keras  # pylint: disable=g-import-not-at-top
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="hidden"),
                              keras.layers.Dense(1, name="out")], name="seq")
    return model, keras.optimizers.Adam(learning_rate=0.01)


@check
def keras_checkpoint_respecs_byte_identically():
    with tempfile.TemporaryDirectory() as tmp:
        model, opt = keras_model()
        model.compile(optimizer=opt, loss="mse")
        x = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
        model.train_on_batch(x, np.ones((4, 1), np.float32))
        prefix = tf.train.Checkpoint(model=model, optimizer=opt).save(os.path.join(tmp, "ckpt"))
        out = respec(prefix, tmp)
        model2, opt2 = keras_model()
        status = tf.train.Checkpoint(model=model2, optimizer=opt2).restore(out)
        opt2.build(model2.trainable_variables)
        status.assert_consumed()
        for a, b in zip(model.weights + opt.variables, model2.weights + opt2.variables):
            assert np.array_equal(np.asarray(a), np.asarray(b)), a.path


def module_tree(seed):
    rng = np.random.default_rng(seed)

    def var(shape, dtype=np.float32, name=None):
        return tf.Variable(rng.standard_normal(shape).astype(dtype), name=name)

    root = tf.Module()
    root.encoder = tf.Module()
    root.encoder.kernel = var([3, 2], name="kernel")
    root.layers = [tf.Module(), var([2], np.float64)]
    root.layers[0].w = var([4])
    root.table = {"b": var([1]), "a/x.y": var([2, 2], np.int32), "empty": []}
    root.shared = root.encoder.kernel
    root.layers[0].also = root.table["b"]
    root.nothing = tf.Module()
    return root


def variables(root):
    return sorted(((v.name, v) for v in root.trainable_variables), key=lambda p: p[0])


@check
def module_tree_write_and_save_respec_byte_identically():
    for kind in ("write", "save"):
        with tempfile.TemporaryDirectory() as tmp:
            tree = module_tree(1)
            ckpt = tf.train.Checkpoint(model=tree)
            path = os.path.join(tmp, "ckpt")
            prefix = ckpt.write(path) if kind == "write" else ckpt.save(path)
            out = respec(prefix, tmp)
            fresh = module_tree(2)
            restored = tf.train.Checkpoint(model=fresh)
            status = restored.read(out) if kind == "write" else restored.restore(out)
            status.assert_consumed()
            for a, b in zip(tree.trainable_variables, fresh.trainable_variables):
                assert np.array_equal(a.numpy(), b.numpy()), (kind, a.name)


@check
def tf1_saver_checkpoint_with_a_partitioned_variable_respecs_byte_identically():
    with tempfile.TemporaryDirectory() as tmp:
        def build():
            part = tf.compat.v1.get_variable(
                "part", shape=[5, 3], dtype=tf.float32,
                partitioner=tf.compat.v1.fixed_size_partitioner(2),
                initializer=tf.compat.v1.random_normal_initializer())
            step = tf.compat.v1.get_variable("step", shape=[], dtype=tf.int64,
                                             initializer=tf.compat.v1.constant_initializer(7))
            return part, step
        graph = tf.Graph()
        with graph.as_default():
            part, step = build()
            saver = tf.compat.v1.train.Saver()
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                prefix = saver.save(sess, os.path.join(tmp, "model"), write_meta_graph=False)
                saved = sess.run([tf.convert_to_tensor(part), step])
        text = run_saveplan("spec", prefix).stdout
        assert '"slice_spec":"5 3 0,3:0,3"' in text and '"slice_spec":"5 3 3,2:0,3"' in text, text
        out = respec(prefix, tmp)
        graph = tf.Graph()
        with graph.as_default():
            part, step = build()
            saver = tf.compat.v1.train.Saver()
            with tf.compat.v1.Session() as sess:
                saver.restore(sess, out)
                restored = sess.run([tf.convert_to_tensor(part), step])
        assert np.array_equal(saved[0], restored[0]) and saved[1] == restored[1] == 7


main()
