"""What saveplan writes, TensorFlow reads and restores by object (`assert_consumed()`), and an
object-based write is byte-identical to `tf.train.Checkpoint(**children).write`."""

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import saveplan


def to_tf(tree):
    """The `tf.Module` tree of a dict tree: dicts become modules, arrays variables."""
    if isinstance(tree, dict):
        module = tf.Module()
        for name, value in tree.items():
            setattr(module, name, to_tf(value))
        return module
    return tf.Variable(tree)


def sample_tree():
    rng = np.random.default_rng(11)
    return {
        "model": {
            "encoder": {
                "kernel": rng.standard_normal((4, 3)).astype(np.float32),
                "bias": np.zeros(3, np.float32),
            },
            "head": {"w": rng.standard_normal((3, 2)), "steps": np.int64(9)},
            "scale": rng.standard_normal(2).astype(ml_dtypes.bfloat16),
            "flag": np.array([True, False]),
            "names": np.array([b"a", b"bc"], dtype=object),
        },
        "alpha": np.float32(0.5),
        "dotted.name": {"x/y": np.arange(3, dtype=np.int32)},
    }


def children_of(tree):
    return {name: to_tf(value) for name, value in tree.items()}


def files_equal(a, b):
    for suffix in (".index", ".data-00000-of-00001"):
        with open(a + suffix, "rb") as left, open(b + suffix, "rb") as right:
            assert left.read() == right.read(), suffix


def test_write_is_byte_identical_to_tensorflows(tmp_path):
    tree = sample_tree()
    theirs = tf.train.Checkpoint(**children_of(tree)).write(str(tmp_path / "tf" / "ckpt"))
    ours = saveplan.Checkpoint(**tree).write(str(tmp_path / "sp" / "ckpt"))
    files_equal(ours, theirs)


def test_save_is_byte_identical_to_tensorflows(tmp_path):
    tree = sample_tree()
    tf_checkpoint = tf.train.Checkpoint(**children_of(tree))
    our_checkpoint = saveplan.Checkpoint(**tree)
    for _ in range(2):
        theirs = tf_checkpoint.save(str(tmp_path / "tf" / "ckpt"))
        ours = our_checkpoint.save(str(tmp_path / "sp" / "ckpt"))
        assert ours.rsplit("/", 1)[1] == theirs.rsplit("/", 1)[1]
        files_equal(ours, theirs)


def test_tensorflow_restores_what_saveplan_wrote(tmp_path):
    tree = sample_tree()
    prefix = saveplan.Checkpoint(**tree).save(str(tmp_path / "ckpt"))
    zeros = {
        "model": {
            "encoder": {"kernel": np.zeros((4, 3), np.float32), "bias": np.ones(3, np.float32)},
            "head": {"w": np.zeros((3, 2)), "steps": np.int64(0)},
            "scale": np.zeros(2, ml_dtypes.bfloat16),
            "flag": np.array([False, False]),
            "names": np.array([b"", b""], dtype=object),
        },
        "alpha": np.float32(0),
        "dotted.name": {"x/y": np.zeros(3, np.int32)},
    }
    fresh = children_of(zeros)
    checkpoint = tf.train.Checkpoint(**fresh)
    checkpoint.restore(prefix).assert_consumed()
    assert int(checkpoint.save_counter.numpy()) == 1
    np.testing.assert_array_equal(fresh["model"].encoder.kernel.numpy(), tree["model"]["encoder"]["kernel"])
    assert fresh["model"].scale.numpy().tobytes() == tree["model"]["scale"].tobytes()
    assert list(fresh["model"].names.numpy()) == [b"a", b"bc"]
    assert fresh["alpha"].numpy() == np.float32(0.5)


def test_saveplan_restores_what_tensorflow_wrote_and_reports_it(tmp_path):
    tree = sample_tree()
    prefix = tf.train.Checkpoint(**children_of(tree)).save(str(tmp_path / "ckpt"))
    target = {
        "model": {"encoder": {"kernel": np.zeros((4, 3), np.float32), "bias": np.ones(3, np.float32)}},
        "alpha": np.float32(0),
    }
    checkpoint = saveplan.Checkpoint(**target)
    status = checkpoint.restore(prefix)
    status.assert_existing_objects_matched()
    with pytest.raises(AssertionError):
        status.assert_consumed()
    # The three values and save_counter.
    assert status.counts["matched"] == 4 and status.counts["missing"] == 0
    assert status.counts["unused"] > 0
    np.testing.assert_array_equal(target["model"]["encoder"]["kernel"], tree["model"]["encoder"]["kernel"])
    assert checkpoint.save_counter == 1


def test_keras_restores_a_tree_saveplan_wrote(tmp_path):
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2, name="dense")])
    prefix = tf.train.Checkpoint(model=model).write(str(tmp_path / "a" / "ckpt"))
    tree = saveplan.load_tree(prefix)
    rewritten = saveplan.Checkpoint(**tree).write(str(tmp_path / "b" / "ckpt"))
    assert saveplan.list_variables(rewritten) == tf.train.list_variables(prefix)
    fresh = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2, name="dense")])
    tf.train.Checkpoint(model=fresh).read(rewritten).assert_existing_objects_matched()
    np.testing.assert_array_equal(fresh.layers[0].kernel.numpy(), model.layers[0].kernel.numpy())


def test_tensorflow_reads_a_key_based_save(tmp_path):
    tensors = {
        "w": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b16": np.array([1.5, -2], ml_dtypes.bfloat16),
        "s": np.array([[b"x", b"yy"]], dtype=object),
        "n": np.int64(3),
        "c": np.array([1 + 2j], np.complex64),
    }
    prefix = saveplan.save(str(tmp_path / "ckpt"), tensors)
    reader = tf.train.load_checkpoint(prefix)
    assert sorted(reader.get_variable_to_shape_map()) == sorted(tensors)
    for key, value in tensors.items():
        got = reader.get_tensor(key)
        assert np.asarray(got).tobytes() == np.asarray(value).tobytes() or list(np.ravel(got)) == list(np.ravel(value))
        assert reader.get_variable_to_dtype_map()[key] == saveplan.load_checkpoint(prefix).get_variable_to_dtype_map()[key]


def test_managers_write_what_tensorflows_write(tmp_path):
    tree = sample_tree()
    ours = saveplan.CheckpointManager(saveplan.Checkpoint(**tree), str(tmp_path / "sp"), max_to_keep=2)
    theirs = tf.train.CheckpointManager(tf.train.Checkpoint(**children_of(tree)), str(tmp_path / "tf"), max_to_keep=2)
    for _ in range(3):
        a, b = ours.save(), theirs.save()
        assert a.rsplit("/", 1)[1] == b.rsplit("/", 1)[1]
        files_equal(a, b)
    assert [p.rsplit("/", 1)[1] for p in ours.checkpoints] == [p.rsplit("/", 1)[1] for p in theirs.checkpoints]
    assert tf.train.latest_checkpoint(str(tmp_path / "sp")) == ours.latest_checkpoint


def test_errors_are_tensorflows_kinds(tmp_path):
    prefix = str(tmp_path / "ckpt")
    saveplan.save(prefix, {"a": np.zeros(2, np.float32)})
    cases = {
        "missing prefix": lambda m: m.load_checkpoint(str(tmp_path / "nope")),
        "missing key": lambda m: m.load_variable(prefix, "nokey"),
        "empty dir": lambda m: m.load_checkpoint(str(tmp_path / "empty")),
    }
    (tmp_path / "empty").mkdir()
    for name, case in cases.items():
        with pytest.raises(Exception) as theirs:
            case(tf.train)
        with pytest.raises(Exception) as ours:
            case(saveplan)
        assert type(ours.value).__name__ == type(theirs.value).__name__, name
        if isinstance(theirs.value, tf.errors.OpError):
            assert ours.value.error_code == theirs.value.error_code, name
    with open(prefix + ".index", "r+b") as index:
        data = bytearray(index.read())
        data[5] ^= 0xFF
        index.seek(0)
        index.write(data)
    with pytest.raises(tf.errors.OpError):
        tf.train.load_checkpoint(prefix)
    with pytest.raises(saveplan.errors.OpError):
        saveplan.load_checkpoint(prefix)
    missing = str(tmp_path / "missing")
    with pytest.raises(tf.errors.NotFoundError):
        tf.train.Checkpoint(a=tf.Variable(1.0)).restore(missing)
    with pytest.raises(saveplan.errors.NotFoundError):
        saveplan.Checkpoint(a=np.float32(1)).restore(missing)
    with pytest.raises(ValueError):
        tf.Variable(np.zeros(2, "datetime64[s]"))
    with pytest.raises(ValueError):
        saveplan.save(str(tmp_path / "x"), {"t": np.zeros(2, "datetime64[s]")})
