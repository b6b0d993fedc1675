"""Reading without TensorFlow: every tensor TensorFlow 2.21 recorded in the fixtures reads back
bit for bit, through the drop-ins and through `load`."""

import numpy as np
import pytest

import saveplan
from helpers import FIXTURES, fixture_prefixes, record_bytes, record_strings, recorded_values

RECORDED = recorded_values()


def test_the_fixtures_are_there():
    assert len(fixture_prefixes()) > 40
    assert len(RECORDED) > 200


@pytest.mark.parametrize("mmap", [False, True])
def test_load_reads_every_recorded_tensor_bit_exactly(mmap):
    by_prefix = {}
    for prefix, key, record in RECORDED:
        by_prefix.setdefault(prefix, []).append((key, record))
    checked = 0
    for prefix, records in by_prefix.items():
        loaded = saveplan.load(prefix, keys=[key for key, _ in records], mmap=mmap)
        for key, record in records:
            value = loaded[key]
            assert list(np.shape(value)) == record["shape"], (prefix, key)
            if "values_b64" in record:
                expected = record_strings(record)
                got = [value] if isinstance(value, bytes) else list(np.asarray(value).reshape(-1))
                assert got == expected, (prefix, key)
            else:
                assert np.asarray(value).tobytes() == record_bytes(record), (prefix, key)
                assert saveplan.DType(record["dtype"]) == np.asarray(value).dtype
            checked += 1
    assert checked == len(RECORDED)


def test_get_tensor_types_match_tensorflow():
    prefix = str(FIXTURES / "ckpt" / "c7_checkpoint_write" / "ckpt")
    reader = saveplan.load_checkpoint(prefix)
    graph = reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH")
    assert isinstance(graph, bytes) and len(graph) > 0
    step = reader.get_tensor("model/step/.ATTRIBUTES/VARIABLE_VALUE")
    assert isinstance(step, np.int64)
    w = reader.get_tensor("model/net/dense/w/.ATTRIBUTES/VARIABLE_VALUE")
    assert isinstance(w, np.ndarray) and w.shape == (2, 2) and w.dtype == np.float32
    assert w.flags.writeable
    w[0, 0] = 42  # a fresh buffer: writing to it changes nothing on disk
    assert reader.get_tensor("model/net/dense/w/.ATTRIBUTES/VARIABLE_VALUE")[0, 0] != 42


def test_list_variables_and_maps_agree():
    for prefix in fixture_prefixes():
        if "_temp" in prefix:
            continue
        listed = saveplan.list_variables(prefix)
        reader = saveplan.load_checkpoint(prefix)
        shapes = reader.get_variable_to_shape_map()
        dtypes = reader.get_variable_to_dtype_map()
        assert [name for name, _ in listed] == sorted(shapes)
        assert dict(listed) == shapes
        assert set(dtypes) == set(shapes)
        for name in shapes:
            assert reader.has_tensor(name)
        assert not reader.has_tensor("no such tensor")


def test_mmap_arrays_are_read_only_views():
    prefix = str(FIXTURES / "ckpt" / "c1_dtypes" / "ckpt")
    loaded = saveplan.load(prefix, mmap=True)
    arrays = [value for value in loaded.values() if isinstance(value, np.ndarray) and value.dtype != object and value.size]
    assert arrays
    for array in arrays:
        assert not array.flags.writeable
        assert array.base is not None


def test_load_a_subset_and_load_variable():
    prefix = str(FIXTURES / "ckpt" / "c1_dtypes" / "ckpt")
    names = [name for name, _ in saveplan.list_variables(prefix)]
    subset = saveplan.load(prefix, keys=names[:2])
    assert list(subset) == names[:2]
    for name in names[:2]:
        np.testing.assert_array_equal(subset[name], saveplan.load_variable(prefix, name + ":0"))


def test_partitioned_tensors_are_assembled():
    prefix = str(FIXTURES / "ckpt" / "c5_partitioned" / "ckpt")
    for prefix_, key, record in RECORDED:
        if prefix_ == prefix:
            value = saveplan.load_variable(prefix, key)
            assert np.asarray(value).tobytes() == record_bytes(record)
            assert list(np.shape(value)) == record["shape"]


def test_directory_and_state_file_mean_the_latest_checkpoint():
    case = FIXTURES / "ckpt" / "c11_checkpoint_manager"
    latest = saveplan.latest_checkpoint(str(case))
    assert latest is not None and latest.endswith("ckpt-3")
    assert saveplan.list_variables(str(case)) == saveplan.list_variables(latest)
    assert saveplan.list_variables(str(case / "checkpoint")) == saveplan.list_variables(latest)


def test_latest_checkpoint_is_none_without_one(tmp_path):
    assert saveplan.latest_checkpoint(str(tmp_path)) is None
    assert saveplan.latest_checkpoint(str(tmp_path / "missing")) is None


def test_threads_share_a_reader():
    from concurrent.futures import ThreadPoolExecutor

    prefix = str(FIXTURES / "ckpt" / "c1_dtypes" / "ckpt")
    reader = saveplan.load_checkpoint(prefix)
    names = [name for name, _ in saveplan.list_variables(prefix)]
    expected = {name: np.asarray(reader.get_tensor(name)).tobytes() for name in names}
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda name: (name, np.asarray(reader.get_tensor(name)).tobytes()), names * 8))
    assert len(got) == 8 * len(names)
    for name, value in got:
        assert value == expected[name]


def test_mapped_arrays_outlive_their_reader(tmp_prefix):
    import gc

    big = np.arange(1 << 20, dtype=np.float32)
    saveplan.save(tmp_prefix, {"big": big, "small": np.ones(3)})
    view = saveplan.load(tmp_prefix, mmap=True)["big"]
    gc.collect()
    assert not view.flags.writeable
    np.testing.assert_array_equal(view, big)
    copy = saveplan.load(tmp_prefix)["big"]
    assert copy.flags.writeable and copy.flags.c_contiguous
    np.testing.assert_array_equal(copy, big)


def test_loaded_arrays_are_aligned_writable_and_independent(tmp_prefix):
    tensors = {f"t{i}": np.full(i + 1, i, dtype=np.float64) for i in range(20)}
    tensors["bytes"] = np.arange(7, dtype=np.uint8)
    saveplan.save(tmp_prefix, tensors)
    loaded = saveplan.load(tmp_prefix)
    for value in loaded.values():
        assert value.ctypes.data % 64 == 0
        assert value.flags.writeable
    loaded["t3"][:] = -1
    for key, value in tensors.items():
        if key != "t3":
            np.testing.assert_array_equal(loaded[key], value)
