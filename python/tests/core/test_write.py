"""Writing without TensorFlow: `save` round-trips every dtype a checkpoint stores, and
`Checkpoint` writes, saves, restores and reports by object."""

import os

import ml_dtypes
import numpy as np
import pytest

import saveplan

DTYPES = [
    np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64, np.bool_, np.complex64, np.complex128,
    ml_dtypes.bfloat16, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn,
]


def sample(dtype, shape):
    rng = np.random.default_rng(7)
    values = rng.standard_normal(int(np.prod(shape))) * 50
    return values.astype(dtype).reshape(shape)


def test_save_then_load_round_trips_every_dtype(tmp_prefix):
    tensors = {f"t/{np.dtype(d).name}": sample(d, (3, 2)) for d in DTYPES}
    tensors["scalar"] = np.float32(2.5)
    tensors["empty"] = np.zeros((0, 4), np.int32)
    tensors["strings"] = np.array([b"a", b"", b"\x00\xff" * 100], dtype=object)
    tensors["string_scalar"] = b"hello"
    tensors["unicode"] = np.array(["h\u00e9", "x"])
    assert saveplan.save(tmp_prefix, tensors) == tmp_prefix
    loaded = saveplan.load(tmp_prefix)
    assert sorted(loaded) == sorted(tensors)
    for key, value in tensors.items():
        if key == "unicode":
            assert list(loaded[key]) == ["h\u00e9".encode(), b"x"]
            continue
        got = loaded[key]
        if isinstance(value, bytes):
            assert got == value
            continue
        value = np.asarray(value)
        assert got.dtype == value.dtype, key
        assert np.shape(got) == value.shape, key
        assert np.asarray(got).tobytes() == value.tobytes() or list(np.ravel(got)) == list(value.ravel())
    assert saveplan.load_checkpoint(tmp_prefix).get_variable_to_dtype_map()["t/bfloat16"] == ml_dtypes.bfloat16


def test_save_writes_big_endian_and_strided_arrays_as_little_endian_rows(tmp_prefix):
    value = np.arange(12, dtype=">i4").reshape(3, 4)[:, ::2]
    saveplan.save(tmp_prefix, {"x": value})
    got = saveplan.load_variable(tmp_prefix, "x")
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, value)


def test_save_rejects_what_a_checkpoint_cannot_store(tmp_prefix):
    with pytest.raises(ValueError, match="datetime64"):
        saveplan.save(tmp_prefix, {"t": np.zeros(2, "datetime64[s]")})
    with pytest.raises(ValueError, match="Unsupported object type int"):
        saveplan.save(tmp_prefix, {"t": np.array([1, b"a"], dtype=object)})
    with pytest.raises(TypeError):
        saveplan.save(tmp_prefix, {1: np.zeros(2)})
    assert not os.path.exists(tmp_prefix + ".index")


def test_save_into_a_directory_prefix_is_an_invalid_argument(tmp_path):
    with pytest.raises(saveplan.errors.InvalidArgumentError):
        saveplan.save(str(tmp_path), {"a": np.zeros(1)})


def tree():
    return {
        "model": {
            "dense": {"kernel": np.arange(6, dtype=np.float32).reshape(2, 3), "bias": np.zeros(3, np.float32)},
            "step": np.int64(7),
        },
        "extra": np.array([1.0, 2.0]),
    }


def test_checkpoint_write_then_load_tree_gives_the_tree_back(tmp_prefix):
    original = tree()
    path = saveplan.Checkpoint(**original).write(tmp_prefix)
    assert path == tmp_prefix
    names = [name for name, _ in saveplan.list_variables(tmp_prefix)]
    assert names == [
        "_CHECKPOINTABLE_OBJECT_GRAPH",
        "extra/.ATTRIBUTES/VARIABLE_VALUE",
        "model/dense/bias/.ATTRIBUTES/VARIABLE_VALUE",
        "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE",
        "model/step/.ATTRIBUTES/VARIABLE_VALUE",
    ]
    loaded = saveplan.load_tree(tmp_prefix)
    assert sorted(loaded) == ["extra", "model"]
    np.testing.assert_array_equal(loaded["model"]["dense"]["kernel"], original["model"]["dense"]["kernel"])
    np.testing.assert_array_equal(loaded["extra"], original["extra"])
    assert loaded["model"]["step"] == 7 and loaded["model"]["step"].dtype == np.int64


def test_a_loaded_tree_writes_the_same_bytes_again(tmp_path):
    first = str(tmp_path / "a")
    second = str(tmp_path / "b")
    saveplan.Checkpoint(**tree()).write(first)
    saveplan.Checkpoint(**saveplan.load_tree(first)).write(second)
    for suffix in (".index", ".data-00000-of-00001"):
        with open(first + suffix, "rb") as a, open(second + suffix, "rb") as b:
            assert a.read() == b.read()


def test_shared_arrays_are_one_variable(tmp_prefix):
    shared = np.ones(2, np.float32)
    saveplan.Checkpoint(a={"w": shared}, b={"w": shared}).write(tmp_prefix)
    names = [name for name, _ in saveplan.list_variables(tmp_prefix)]
    assert names == ["_CHECKPOINTABLE_OBJECT_GRAPH", "a/w/.ATTRIBUTES/VARIABLE_VALUE"]
    loaded = saveplan.load_tree(tmp_prefix)
    assert loaded["a"]["w"] is loaded["b"]["w"]


def test_save_counts_and_restore_fills_the_tree_in_place(tmp_path):
    values = tree()
    checkpoint = saveplan.Checkpoint(**values)
    first = checkpoint.save(str(tmp_path / "ckpt"))
    assert first.endswith("ckpt-1") and checkpoint.save_counter == 1
    assert saveplan.latest_checkpoint(str(tmp_path)) == first
    kernel = values["model"]["dense"]["kernel"]
    kernel += 100
    second = checkpoint.save(str(tmp_path / "ckpt"))
    assert second.endswith("ckpt-2")
    assert saveplan.load_variable(str(tmp_path), "save_counter/.ATTRIBUTES/VARIABLE_VALUE") == 2

    fresh = tree()
    fresh_kernel = fresh["model"]["dense"]["kernel"]
    target = saveplan.Checkpoint(**fresh)
    status = target.restore(first)
    status.assert_consumed()
    assert status.counts["matched"] == 5 and status.counts["unused"] == 0
    assert target.save_counter == 1
    assert fresh["model"]["dense"]["kernel"] is fresh_kernel
    np.testing.assert_array_equal(fresh_kernel, np.arange(6, dtype=np.float32).reshape(2, 3))
    target.restore(str(tmp_path))
    np.testing.assert_array_equal(fresh_kernel, np.arange(6, dtype=np.float32).reshape(2, 3) + 100)


def test_restore_reports_missing_and_unused_values(tmp_prefix):
    saveplan.Checkpoint(**tree()).write(tmp_prefix)
    partial = {"model": {"dense": {"kernel": np.zeros((2, 3), np.float32)}, "other": np.zeros(1)}}
    status = saveplan.Checkpoint(**partial).restore(tmp_prefix)
    # restore() creates save_counter, which a write() checkpoint lacks, as in TensorFlow.
    assert status.counts == {"matched": 1, "mismatched": 0, "unused": 3, "missing": 2}
    with pytest.raises(AssertionError):
        status.assert_consumed()
    with pytest.raises(AssertionError):
        status.assert_existing_objects_matched()
    status.assert_nontrivial_match()
    statuses = {tuple(value["path"]): value["status"] for value in status.report["values"]}
    assert statuses[("model", "dense", "kernel")] == "matched"
    assert statuses[("model", "other")] == "missing"
    assert statuses[("save_counter",)] == "missing"


def test_restore_of_a_wrong_shape_is_a_value_error(tmp_prefix):
    saveplan.Checkpoint(**tree()).write(tmp_prefix)
    wrong = {"extra": np.zeros(3)}
    with pytest.raises(ValueError, match="incompatible"):
        saveplan.Checkpoint(**wrong).restore(tmp_prefix)


def test_checkpoint_manager_keeps_the_newest(tmp_path):
    values = {"w": np.zeros(2, np.float32)}
    manager = saveplan.CheckpointManager(saveplan.Checkpoint(**values), str(tmp_path), max_to_keep=2)
    paths = [manager.save() for _ in range(3)]
    assert [os.path.basename(p) for p in paths] == ["ckpt-1", "ckpt-2", "ckpt-3"]
    assert manager.checkpoints == paths[1:]
    assert manager.latest_checkpoint == paths[2]
    assert not os.path.exists(paths[0] + ".index")
    assert saveplan.latest_checkpoint(str(tmp_path)) == paths[2]
    with pytest.raises(ValueError):
        saveplan.CheckpointManager(saveplan.Checkpoint(**values), str(tmp_path), max_to_keep=0)
