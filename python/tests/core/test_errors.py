"""Bad input raises the exception TensorFlow 2.21 raises for it (checked against TensorFlow in
`tests/tf`), with a one-line message, and never crashes the interpreter."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import saveplan
from saveplan import errors


@pytest.fixture
def written(tmp_path):
    prefix = str(tmp_path / "ckpt")
    saveplan.save(prefix, {"a": np.arange(4, dtype=np.float32), "b": np.array([b"x"], dtype=object)})
    return prefix


def one_line(err):
    text = str(err.value)
    assert text and "\n" not in text
    return text


def test_a_missing_prefix_is_not_found(tmp_path):
    with pytest.raises(errors.NotFoundError) as err:
        saveplan.load_checkpoint(str(tmp_path / "nope"))
    assert isinstance(err.value, errors.OpError) and isinstance(err.value, FileNotFoundError)
    assert err.value.error_code == errors.NOT_FOUND
    assert "nope" in one_line(err)


def test_a_directory_without_checkpoints_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="Couldn't find 'checkpoint' file"):
        saveplan.list_variables(str(tmp_path))


def test_a_missing_key_is_not_found(written):
    with pytest.raises(errors.NotFoundError) as err:
        saveplan.load_variable(written, "nokey")
    assert "nokey" in one_line(err)
    with pytest.raises(errors.NotFoundError):
        saveplan.load(written, keys=["a", "nokey"])


def test_a_corrupt_index_is_data_loss(written):
    with open(written + ".index", "r+b") as index:
        data = bytearray(index.read())
        data[5] ^= 0xFF
        index.seek(0)
        index.write(data)
    with pytest.raises(errors.DataLossError) as err:
        saveplan.load_checkpoint(written)
    one_line(err)


def test_a_truncated_index_is_data_loss(written):
    with open(written + ".index", "r+b") as index:
        index.truncate(10)
    with pytest.raises(errors.DataLossError):
        saveplan.list_variables(written)


def test_corrupt_data_is_data_loss_on_read(written):
    data_file = written + ".data-00000-of-00001"
    with open(data_file, "r+b") as data:
        first = data.read(1)
        data.seek(0)
        data.write(bytes([first[0] ^ 0xFF]))
    reader = saveplan.load_checkpoint(written)
    for mmap in (False, True):
        with pytest.raises(errors.DataLossError) as err:
            saveplan.load(written, mmap=mmap)
        assert "checksum" in one_line(err)
    with pytest.raises(errors.DataLossError):
        reader.get_tensor("a")


def test_a_missing_data_file_is_not_found(written):
    os.remove(written + ".data-00000-of-00001")
    with pytest.raises(errors.NotFoundError):
        saveplan.load_variable(written, "a")


def test_a_name_based_checkpoint_has_no_tree(written):
    with pytest.raises(ValueError, match="object graph"):
        saveplan.load_tree(written)


def test_import_saveplan_imports_no_framework_and_numpy_on_first_use():
    code = (
        "import sys, saveplan\n"
        "loaded = [m for m in ('tensorflow', 'torch', 'jax', 'ml_dtypes', 'numpy') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "from saveplan import load, Checkpoint\n"
        "assert 'numpy' in sys.modules and callable(load) and saveplan.Checkpoint is Checkpoint\n"
        "assert 'load_tree' in dir(saveplan)\n"
        "loaded = [m for m in ('tensorflow', 'torch', 'jax', 'ml_dtypes') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_garbage_never_crashes_the_interpreter(tmp_path):
    prefix = str(tmp_path / "junk")
    rng = np.random.default_rng(3)
    for trial in range(30):
        with open(prefix + ".index", "wb") as index:
            index.write(rng.bytes(int(rng.integers(0, 400))))
        with pytest.raises(errors.OpError):
            saveplan.load(prefix)
    shutil.rmtree(tmp_path)
