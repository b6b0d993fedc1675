"""Interop of `saveplan save`, `restore` and `run` with real TensorFlow.

* `saveplan save` writes the same bytes as TensorFlow's `MultiDeviceSaver` for the same inputs,
  on the interpreter and the JIT (one task on two CPUs; `MaxShardSizePolicy`; two tasks against the committed
  `ckpt/c3_two_tasks` fixture, and against a 2-worker in-process gRPC cluster run in a child
  process), and TensorFlow reads the values back exactly (`tf.train.load_checkpoint`).
* `saveplan restore` reads what TensorFlow wrote.
* `saveplan run` executes MetaGraphDefs TensorFlow exports in this script (a graph with a
  `tf.compat.v1.train.Saver`, and one with `MultiDeviceSaver.to_proto()`): the checkpoints
  it saves are read by TensorFlow, and it restores checkpoints TensorFlow wrote.

Safetensors files are written and read by hand (8-byte little-endian header length, JSON
header, raw bytes): the `safetensors` package is not needed.

Usage: python tests/interop/test_run.py PATH/TO/saveplan
"""

import json
import os
import struct
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

_CPUS = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(_CPUS[0], [tf.config.LogicalDeviceConfiguration()] * 2)

from tensorflow.python.checkpoint import checkpoint_options, functional_saver  # noqa: E402
from tensorflow.python.checkpoint.sharding import sharding_policies  # noqa: E402
from tensorflow.python.training.saving import saveable_object_util  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import check, main, run_saveplan  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "tf-2.21"
CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
CPU1 = "/job:localhost/replica:0/task:0/device:CPU:1"

_ST_DTYPES = {
    np.dtype("float32"): "F32",
    np.dtype("float64"): "F64",
    np.dtype("int32"): "I32",
    np.dtype("int64"): "I64",
    np.dtype("int8"): "I8",
    np.dtype("uint8"): "U8",
    np.dtype("bool"): "BOOL",
}
_NP_DTYPES = {name: dtype for dtype, name in _ST_DTYPES.items()}


def write_safetensors(path, tensors):
    """Writes {name: np.ndarray} as a .safetensors file."""
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
        header[name] = {
            "dtype": _ST_DTYPES[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    """Reads a .safetensors file into {name: np.ndarray}."""
    data = Path(path).read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    body = data[8 + length :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype = _NP_DTYPES[info["dtype"]]
        out[name] = np.frombuffer(body[start:end], dtype=dtype).reshape(info["shape"])
    return out


def write_spec(path, variables, options=None):
    """Writes a spec file: variables as (key, dtype name, shape, device[, slice_spec, name])."""
    entries = []
    for key, dtype, shape, device, *rest in variables:
        entry = {"checkpoint_key": key, "dtype": dtype, "shape": list(shape), "device": device}
        if rest:
            entry["slice_spec"], entry["name"] = rest[0], rest[1]
            entry["read"], entry["trackable"] = "saveable", key
        entries.append(entry)
    Path(path).write_text(json.dumps({"variables": entries, "options": options}))


def tf_save(prefix, variables, options=None):
    """Saves eager variables [(key, tf.Variable)] with MultiDeviceSaver, as TF's tests do."""
    saveables = []
    for key, var in variables:
        saveables += saveable_object_util.saveable_objects_for_op(var, key)
    saver = functional_saver.MultiDeviceSaver.from_saveables(saveables)
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    saver.save(tf.constant(prefix), options=options)


def same_files(ours_dir, theirs_dir):
    """Asserts two folders hold the same file names with the same bytes."""
    ours, theirs = sorted(os.listdir(ours_dir)), sorted(os.listdir(theirs_dir))
    assert ours == theirs, (ours, theirs)
    for name in ours:
        a = Path(ours_dir, name).read_bytes()
        b = Path(theirs_dir, name).read_bytes()
        assert a == b, "%s differs (%d vs %d bytes)" % (name, len(a), len(b))


def tf_values(prefix):
    """Every tensor of a checkpoint, read by TensorFlow."""
    reader = tf.train.load_checkpoint(prefix)
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()}


def assert_values(got, expected):
    assert sorted(got) == sorted(expected), (sorted(got), sorted(expected))
    for key, value in expected.items():
        assert got[key].dtype == value.dtype, (key, got[key].dtype, value.dtype)
        assert np.array_equal(got[key], value), (key, got[key], value)


def save_against_tf(variables, values, options_json=None, options=None):
    """Runs `saveplan save` and TF's MultiDeviceSaver on the same inputs; compares bytes and
    has TF read ours back."""
    with tempfile.TemporaryDirectory() as tmp:
        spec, values_file = Path(tmp, "spec.json"), Path(tmp, "values.safetensors")
        write_spec(spec, variables, options_json)
        write_safetensors(values_file, values)
        ours = os.path.join(tmp, "ours", "ckpt")
        run_saveplan("save", str(spec), "--values", str(values_file), "--prefix", ours)
        tf_vars = []
        for key, _, _, device, *_ in variables:
            with tf.device(device):
                tf_vars.append((key, tf.Variable(values[key])))
        theirs = os.path.join(tmp, "theirs", "ckpt")
        tf_save(theirs, tf_vars, options)
        same_files(os.path.dirname(ours), os.path.dirname(theirs))
        assert_values(tf_values(ours), values)
        jit = os.path.join(tmp, "jit", "ckpt")
        run_saveplan("save", str(spec), "--values", str(values_file), "--prefix", jit, "--backend", "jit")
        same_files(os.path.dirname(jit), os.path.dirname(theirs))
        out = Path(tmp, "restored.safetensors")
        run_saveplan("restore", str(spec), "--prefix", theirs, "--out", str(out))
        assert_values(read_safetensors(out), values)


@check
def one_task_two_cpus_matches_tf():
    rng = np.random.default_rng(1)
    variables = [
        ("w", "float32", [5, 3], CPU0),
        ("step", "int64", [], CPU1),
        ("mask", "bool", [4], CPU1),
        ("bias", "float64", [2], CPU0),
    ]
    values = {
        "w": rng.standard_normal((5, 3)).astype(np.float32),
        "step": np.array(42, dtype=np.int64),
        "mask": np.array([True, False, True, True]),
        "bias": np.array([0.5, -1.25]),
    }
    save_against_tf(variables, values)


@check
def max_shard_size_matches_tf():
    variables = [("big", "float32", [10, 8], CPU0), ("small", "int32", [3], CPU0)]
    values = {
        "big": (np.arange(80, dtype=np.float32) * 0.5).reshape(10, 8),
        "small": np.array([7, 8, 9], dtype=np.int32),
    }
    options_json = {"experimental_sharding_callback": "MaxShardSizePolicy", "max_shard_size": 100}
    policy = sharding_policies.MaxShardSizePolicy(max_shard_size=100)
    options = checkpoint_options.CheckpointOptions(experimental_sharding_callback=policy)
    save_against_tf(variables, values, options_json, options)


@check
def two_tasks_match_committed_fixture():
    # Two tasks need a cluster; the committed fixture was written by a 2-worker local cluster.
    case = FIXTURES / "ckpt" / "c3_two_tasks"
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp, "spec.json")
        spec.write_text((case / "case.json").read_text())
        ours = os.path.join(tmp, "ckpt")
        run_saveplan("save", str(spec), "--values", str(case / "ckpt"), "--prefix", ours)
        same_files(_only_ckpt(tmp), _only_ckpt(case))
        assert_values(tf_values(ours), tf_values(str(case / "ckpt")))


TWO_TASK_VALUES = {
    "a": np.array([1.5, -2.5, 3.25], dtype=np.float32),
    "z": np.array([10, -20], dtype=np.int64),
    "b": np.array([[4, 5], [6, 7]], dtype=np.int32),
    "m": np.array([0.125], dtype=np.float64),
}
TWO_TASK_DEVICES = {"a": 0, "z": 0, "b": 1, "m": 1}


def cluster_save(prefix):
    """Child process: saves TWO_TASK_VALUES on a 2-worker local gRPC cluster (as the c3 fixture
    was made) with MultiDeviceSaver."""
    import socket

    def free_port():
        with socket.socket() as sock:
            sock.bind(("localhost", 0))
            return sock.getsockname()[1]

    cluster = tf.train.ClusterSpec({"worker": ["localhost:%d" % free_port() for _ in range(2)]})
    servers = [tf.distribute.Server(cluster, job_name="worker", task_index=i) for i in range(2)]
    tf.config.experimental_connect_to_cluster(cluster)
    variables = []
    for key, value in TWO_TASK_VALUES.items():
        with tf.device("/job:worker/replica:0/task:%d/device:CPU:0" % TWO_TASK_DEVICES[key]):
            variables.append((key, tf.Variable(value)))
    tf_save(prefix, variables)
    del servers


@check
def two_tasks_match_tf_local_cluster():
    import subprocess

    with tempfile.TemporaryDirectory() as tmp:
        theirs = os.path.join(tmp, "theirs", "ckpt")
        subprocess.run([sys.executable, __file__, "--cluster-save", theirs], check=True)
        variables = [
            (key, str(value.dtype), list(value.shape),
             "/job:worker/replica:0/task:%d/device:CPU:0" % TWO_TASK_DEVICES[key])
            for key, value in TWO_TASK_VALUES.items()
        ]
        spec, values_file = Path(tmp, "spec.json"), Path(tmp, "values.safetensors")
        write_spec(spec, variables)
        write_safetensors(values_file, TWO_TASK_VALUES)
        ours = os.path.join(tmp, "ours", "ckpt")
        run_saveplan("save", str(spec), "--values", str(values_file), "--prefix", ours)
        assert len(os.listdir(os.path.dirname(ours))) == 3, os.listdir(os.path.dirname(ours))
        same_files(os.path.dirname(ours), os.path.dirname(theirs))
        assert_values(tf_values(ours), TWO_TASK_VALUES)


def _only_ckpt(folder):
    """A temporary copy of the ckpt.* files of `folder` (for comparing folder contents)."""
    out = tempfile.mkdtemp()
    for name in os.listdir(folder):
        if name.startswith("ckpt."):
            Path(out, name).write_bytes(Path(folder, name).read_bytes())
    return out


@check
def partitioned_variable_reads_back_whole_in_tf():
    variables = [
        ("part", "float32", [2, 3], CPU0, "4 3 0,2:0,3", "part_0"),
        ("part", "float32", [2, 3], CPU1, "4 3 2,2:0,3", "part_1"),
        ("w", "int32", [2], CPU0),
    ]
    values = {
        "part": np.arange(12, dtype=np.float32).reshape(4, 3) - 5.5,
        "w": np.array([3, -3], dtype=np.int32),
    }
    with tempfile.TemporaryDirectory() as tmp:
        spec, values_file = Path(tmp, "spec.json"), Path(tmp, "values.safetensors")
        write_spec(spec, variables)
        write_safetensors(values_file, values)
        prefix = os.path.join(tmp, "ckpt")
        run_saveplan("save", str(spec), "--values", str(values_file), "--prefix", prefix)
        assert_values(tf_values(prefix), values)
        out = Path(tmp, "restored.safetensors")
        run_saveplan("restore", str(spec), "--prefix", prefix, "--out", str(out))
        assert_values(read_safetensors(out), values)


def _v1_saver_graph(values, sharded, use_resource=True):
    """A tf.Graph with resource variables (TF1 ref variables, `VariableV2`, when not
    `use_resource`) and a tf.compat.v1.train.Saver; returns
    (graph, saver, assign ops, placeholders)."""
    graph = tf.Graph()
    with graph.as_default():
        variables = {}
        for i, (key, value) in enumerate(values.items()):
            with tf.device(CPU0 if i % 2 == 0 else CPU1):
                variables[key] = tf.compat.v1.get_variable(
                    key, initializer=tf.zeros_like(value), use_resource=use_resource
                )
        saver = tf.compat.v1.train.Saver(variables, sharded=sharded)
        placeholders = {key: tf.compat.v1.placeholder(v.dtype, v.shape) for key, v in variables.items()}
        assigns = [variables[key].assign(placeholders[key]) for key in variables]
    return graph, saver, assigns, placeholders, variables


@check
def run_v1_saver_meta_graph():
    _run_v1_saver_meta_graph(use_resource=True)


@check
def run_v1_saver_meta_graph_ref_variables():
    """TF1 ref variables (`VariableV2`, `Assign`): our save restores in TF's Saver, TF's save
    restores in ours."""
    _run_v1_saver_meta_graph(use_resource=False)


def _run_v1_saver_meta_graph(use_resource):
    values = {
        "kernel": np.arange(6, dtype=np.float32).reshape(2, 3),
        "count": np.array([5, 6, 7], dtype=np.int64),
    }
    for sharded in (False, True):
        graph, saver, assigns, placeholders, variables = _v1_saver_graph(values, sharded, use_resource)
        if not use_resource:
            ops = {op.type for op in graph.get_operations()}
            assert "VariableV2" in ops and "VarHandleOp" not in ops, ops
        with tempfile.TemporaryDirectory() as tmp:
            meta = os.path.join(tmp, "model.meta.pb")
            with graph.as_default():
                tf.compat.v1.train.export_meta_graph(filename=meta, saver_def=saver.as_saver_def())
            values_file = Path(tmp, "values.safetensors")
            write_safetensors(values_file, values)
            ours = os.path.join(tmp, "ours", "ckpt")
            run_saveplan("run", meta, "--save", ours, "--values", str(values_file))
            assert_values(tf_values(ours), values)
            # TensorFlow restores our checkpoint with its own Saver, and saves one we restore.
            theirs = os.path.join(tmp, "theirs", "ckpt")
            with tf.compat.v1.Session(graph=graph) as session:
                saver.restore(session, ours)
                got = {key: session.run(var) for key, var in variables.items()}
                assert_values(got, values)
                doubled = {key: value * 2 for key, value in values.items()}
                session.run(assigns, {placeholders[k]: v for k, v in doubled.items()})
                os.makedirs(os.path.dirname(theirs))
                saver.save(session, theirs, write_meta_graph=False, write_state=False)
            out = Path(tmp, "restored.safetensors")
            run_saveplan("run", meta, "--restore", theirs, "--out", str(out))
            assert_values(read_safetensors(out), doubled)


@check
def run_multi_device_saver_to_proto_meta_graph():
    values = {
        "a": np.array([1.5, 2.5], dtype=np.float32),
        "c": np.array([[1, 2], [3, 4]], dtype=np.int32),
    }
    graph = tf.Graph()
    with graph.as_default():
        tf_vars = []
        for (key, value), device in zip(values.items(), (CPU0, CPU1)):
            with tf.device(device):
                var = tf.Variable(tf.zeros_like(value), name=key)
            tf_vars.append((key, var))
        saveables = []
        for key, var in tf_vars:
            saveables += saveable_object_util.saveable_objects_for_op(var, key)
        saver = functional_saver.MultiDeviceSaver.from_saveables(saveables)
        saver_def = saver.to_proto()
    with tempfile.TemporaryDirectory() as tmp:
        meta = os.path.join(tmp, "model.meta.pbtxt")
        with graph.as_default():
            tf.compat.v1.train.export_meta_graph(filename=meta, saver_def=saver_def, as_text=True)
        values_file = Path(tmp, "values.safetensors")
        write_safetensors(values_file, values)
        ours = os.path.join(tmp, "ours", "ckpt")
        run_saveplan("run", meta, "--save", ours, "--values", str(values_file))
        assert_values(tf_values(ours), values)
        # The same keys saved by TensorFlow (eagerly) come back through our run of the graph.
        theirs = os.path.join(tmp, "theirs", "ckpt")
        eager_vars = []
        for (key, value), device in zip(values.items(), (CPU0, CPU1)):
            with tf.device(device):
                eager_vars.append((key, tf.Variable(value + 1)))
        tf_save(theirs, eager_vars)
        out = Path(tmp, "restored.safetensors")
        run_saveplan("run", meta, "--restore", theirs, "--out", str(out))
        assert_values(read_safetensors(out), {key: value + 1 for key, value in values.items()})


if __name__ == "__main__":
    if sys.argv[1:2] == ["--cluster-save"]:
        cluster_save(sys.argv[2])
    else:
        main()
