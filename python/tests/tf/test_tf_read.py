"""saveplan's drop-ins read what `tf.train.load_checkpoint` reads, bit for bit and type for
type: every fixture, and fresh Keras and `tf.Module` checkpoints."""

import re

import numpy as np
import pytest
import tensorflow as tf

import saveplan
from helpers import FIXTURES, fixture_prefixes


def test_tensorflow_is_2_21():
    assert tf.__version__ == "2.21.0"


def same_value(ours, theirs):
    assert type(ours) is type(theirs), (type(ours), type(theirs))
    if isinstance(theirs, bytes):
        assert ours == theirs
        return
    assert ours.dtype == theirs.dtype
    assert np.shape(ours) == np.shape(theirs)
    if theirs.dtype == object:
        assert list(np.ravel(ours)) == list(np.ravel(theirs))
    else:
        assert np.asarray(ours).tobytes() == np.asarray(theirs).tobytes()


def compare(prefix):
    """Compares every listing, map and tensor; returns the number of tensors compared."""
    try:
        theirs = tf.train.load_checkpoint(prefix)
    except tf.errors.OpError:
        with pytest.raises(saveplan.errors.OpError):
            saveplan.load_checkpoint(prefix)
        return 0
    ours = saveplan.load_checkpoint(prefix)
    assert saveplan.list_variables(prefix) == tf.train.list_variables(prefix)
    assert ours.get_variable_to_shape_map() == theirs.get_variable_to_shape_map()
    their_dtypes = theirs.get_variable_to_dtype_map()
    our_dtypes = ours.get_variable_to_dtype_map()
    assert set(our_dtypes) == set(their_dtypes)
    expected = {}
    for key, dtype in their_dtypes.items():
        assert our_dtypes[key] == dtype
        assert dtype == our_dtypes[key]  # TensorFlow's side converts ours (tf.as_dtype)
        if dtype != tf.variant:
            assert our_dtypes[key] == dtype.as_numpy_dtype
        if dtype == tf.variant:
            # TensorFlow's reader cannot convert variants; saveplan gives each element's
            # serialized bytes.
            with pytest.raises(tf.errors.InternalError):
                theirs.get_tensor(key)
            assert ours.get_tensor(key).dtype == object
            continue
        try:
            expected[key] = theirs.get_tensor(key)
        except ValueError:
            # Stored slices that do not cover the tensor (a part bundle): TensorFlow's
            # `ValueError`, saveplan's `InvalidArgumentError` (a `ValueError`).
            with pytest.raises(saveplan.errors.InvalidArgumentError):
                ours.get_tensor(key)
            continue
        same_value(ours.get_tensor(key), expected[key])
        same_value(saveplan.load_variable(prefix, key), tf.train.load_variable(prefix, key))
    for mmap in (False, True):
        loaded = saveplan.load(prefix, keys=list(expected), mmap=mmap)
        assert list(loaded) == list(expected)
        for key, value in expected.items():
            same_value(loaded[key], value)
    return len(expected)


@pytest.mark.parametrize("prefix", fixture_prefixes(), ids=lambda p: p[len(str(FIXTURES)) + 1:])
def test_every_fixture_reads_as_tensorflow_reads_it(prefix):
    compare(prefix)


def test_the_fixtures_compare_many_tensors():
    assert sum(compare(prefix) for prefix in fixture_prefixes()) > 250


def test_directories_and_latest_checkpoint_agree():
    for state in FIXTURES.rglob("checkpoint"):
        directory = str(state.parent)
        assert saveplan.latest_checkpoint(directory) == tf.train.latest_checkpoint(directory)
        if tf.train.latest_checkpoint(directory):
            assert saveplan.list_variables(directory) == tf.train.list_variables(directory)


def keras_checkpoint(tmp_path):
    tf.keras.utils.set_random_seed(1)
    model = tf.keras.Sequential(
        [
            tf.keras.Input((5,)),
            tf.keras.layers.Dense(4, activation="relu", name="hidden"),
            tf.keras.layers.BatchNormalization(name="norm"),
            tf.keras.layers.Dense(2, name="out"),
        ]
    )
    optimizer = tf.keras.optimizers.Adam(0.01)
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(np.ones((8, 5), np.float32), np.ones((8, 2), np.float32), epochs=1, verbose=0)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    return checkpoint.save(str(tmp_path / "keras" / "ckpt"))


def module_checkpoint(tmp_path):
    class Block(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.random.normal((3, 3)), name="w")
            self.b = tf.Variable(tf.zeros(3, tf.bfloat16), name="b")
            self.tags = tf.Variable([b"alpha", b"beta"])

    root = tf.Module()
    root.blocks = [Block(), Block()]
    root.table = {"x.y": tf.Variable(1.5, dtype=tf.float64), "a/b": tf.Variable([1, 2], dtype=tf.int64)}
    root.shared = root.blocks[0].w
    opt = tf.compat.v1.train.AdamOptimizer(0.1)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(root.blocks[0].w) + tf.reduce_sum(root.blocks[1].w)
    variables = [root.blocks[0].w, root.blocks[1].w]
    opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return tf.train.Checkpoint(root=root, opt=opt).write(str(tmp_path / "module" / "ckpt"))


def test_a_fresh_keras_checkpoint_reads_as_tensorflow_reads_it(tmp_path):
    prefix = keras_checkpoint(tmp_path)
    assert compare(prefix) > 10
    assert compare(str(tmp_path / "keras")) > 10


def test_a_fresh_module_checkpoint_reads_as_tensorflow_reads_it(tmp_path):
    prefix = module_checkpoint(tmp_path)
    assert compare(prefix) > 8


def test_load_tree_places_keras_weights_under_their_layers(tmp_path):
    prefix = keras_checkpoint(tmp_path)
    tree = saveplan.load_tree(prefix)
    reader = tf.train.load_checkpoint(prefix)
    suffix = "/.ATTRIBUTES/VARIABLE_VALUE"
    placed = 0
    for key in reader.get_variable_to_shape_map():
        if not key.endswith(suffix) or "/.OPTIMIZER_SLOT/" in key:
            continue
        node = tree
        for part in key[: -len(suffix)].split("/"):
            node = node[re.sub(r"\.(.)", lambda m: "/" if m.group(1) == "S" else m.group(1), part)]
        np.testing.assert_array_equal(node, reader.get_tensor(key))
        placed += 1
    assert placed >= 10
    assert "model" in tree and "optimizer" in tree


def test_the_drop_in_example_gives_tensorflows_answers(tmp_path):
    prefix = keras_checkpoint(tmp_path)

    def summarize(train):
        # Code written against tf.train, run with `train` = tf.train or saveplan.
        directory = str(tmp_path / "keras")
        latest = train.latest_checkpoint(directory)
        reader = train.load_checkpoint(latest)
        shapes = reader.get_variable_to_shape_map()
        total = 0
        for name, shape in train.list_variables(directory):
            assert shapes[name] == shape
            if reader.get_variable_to_dtype_map()[name] == tf.float32:
                total += float(np.sum(train.load_variable(latest, name)))
        return latest, sorted(shapes), total

    assert summarize(saveplan) == summarize(tf.train)
    assert summarize(saveplan)[0] == prefix
