"""Interop of `saveplan compile` with real TensorFlow.

For each spec, TensorFlow imports the MetaGraphDef saveplan writes
(`tf.compat.v1.train.import_meta_graph` into a fresh `tf.Graph`, with `clear_devices=True` so
that plans for tasks a local session does not have, such as `/job:worker/task:1`, run on the
local CPU; the session allows soft placement for devices such as `CPU:1` inside function
bodies, and function-body nodes on other jobs get their devices cleared like the graph's), initializes the variables from the `variables` collection, gives them distinct
values, runs the SaverDef's save tensor with a fed prefix in a `tf.compat.v1.Session`, and
checks that the checkpoint has one data file per shard of the plan and that
`tf.train.load_checkpoint` reads those values back. Then TensorFlow writes a
checkpoint of other values with its own `SaveV2`, runs the SaverDef's restore op with that
prefix fed, and checks that the variables took the values. Both the flat and the function
form are imported.

Usage: python tests/interop/test_plans.py PATH/TO/saveplan
Prints one line per check and `N passed, M failed` (see harness.py); exits non-zero on any
failure.
"""

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from google.protobuf import text_format  # noqa: E402
from tensorflow.core.protobuf import meta_graph_pb2, saver_pb2  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import check, main, run_saveplan  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TRACE_INPUTS = REPO / "tests" / "inputs" / "trace"

# (name, spec file): one task, two CPUs of one task, two tasks, io device, sliced,
# max shard size, and the example of docs/cli.md.
SPECS = [
    ("one_task", TRACE_INPUTS / "g1_single_cpu.json"),
    ("two_cpus", TRACE_INPUTS / "g2_two_cpus.json"),
    ("two_tasks", TRACE_INPUTS / "g3_two_tasks.json"),
    ("io_device", TRACE_INPUTS / "g4_io_device.json"),
    ("sliced", TRACE_INPUTS / "g5_sliced.json"),
    ("max_shard_size", TRACE_INPUTS / "g6_max_shard_size.json"),
    ("example_two_tasks", REPO / "examples" / "two_tasks.json"),
]
# `to_proto()` takes no options, so the function form is compiled for specs without them.
FUNCTION_SPECS = ["one_task", "two_cpus", "two_tasks", "sliced", "example_two_tasks"]


def compile_spec(spec, form, out):
    run_saveplan("compile", str(spec), "-o", str(out), "--form", form, "--emit", "all")
    for name in ["meta_graph.pb", "meta_graph.pbtxt", "saver_def.pbtxt", "plan.txt", "plan.dot"]:
        assert (out / name).is_file(), name
    meta = meta_graph_pb2.MetaGraphDef()
    meta.ParseFromString((out / "meta_graph.pb").read_bytes())
    from_text = meta_graph_pb2.MetaGraphDef()
    text_format.Parse((out / "meta_graph.pbtxt").read_text(), from_text)
    assert meta == from_text, "meta_graph.pb and meta_graph.pbtxt differ"
    saver_def = saver_pb2.SaverDef()
    text_format.Parse((out / "saver_def.pbtxt").read_text(), saver_def)
    assert saver_def == meta.saver_def, "saver_def.pbtxt differs from the MetaGraphDef's"
    return meta


def values_for(shape, dtype, seed):
    """Distinct values of a dtype, different for each seed."""
    size = int(np.prod(shape)) if shape else 1
    data = np.arange(size, dtype=np.float64) + 1 + 100 * seed
    return data.reshape(shape).astype(dtype.as_numpy_dtype)


def slice_of(full, variable):
    """The part of a full checkpoint tensor a (possibly partitioned) variable holds."""
    info = variable._save_slice_info  # noqa: SLF001 - TF's only handle on a partition's place
    if info is None:
        return full
    index = tuple(slice(o, o + n) for o, n in zip(info.var_offset, info.var_shape))
    return full[index]


def key_of(variable):
    info = variable._save_slice_info  # noqa: SLF001
    return info.full_name if info is not None else variable.op.name


def full_shape_of(variable):
    info = variable._save_slice_info  # noqa: SLF001
    return list(info.full_shape) if info is not None else variable.shape.as_list()


def clear_remote_function_devices(meta):
    """Clears the devices of function-body nodes placed on tasks of other jobs.

    `import_meta_graph(clear_devices=True)` clears only the graph's nodes, and soft placement
    does not move a function-body node off a job the process does not have, so a two-task
    function form runs locally only with its bodies' devices cleared the same way.
    """
    for function in meta.graph_def.library.function:
        for node in function.node_def:
            if node.device.startswith("/job:") and not node.device.startswith("/job:localhost"):
                node.device = ""


def count_shards(meta):
    """The number of ShardedFilename ops of the plan (graph and function bodies)."""
    nodes = list(meta.graph_def.node)
    for function in meta.graph_def.library.function:
        nodes.extend(function.node_def)
    return sum(1 for node in nodes if node.op == "ShardedFilename")


def save_and_restore(meta, work):
    """Imports `meta`, saves through its SaverDef, checks the checkpoint, restores another."""
    saver_def = meta.saver_def
    clear_remote_function_devices(meta)
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.train.import_meta_graph(meta, clear_devices=True)
        variables = tf.compat.v1.global_variables()
        assert variables, "the variables collection is empty"
        held = {}
        # clear_devices only clears the graph's nodes; function bodies keep their devices, and
        # soft placement lets those on tasks this process does not have run on its CPU.
        config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
        with tf.compat.v1.Session(graph=graph, config=config) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for seed, variable in enumerate(variables):
                value = values_for(variable.shape.as_list(), variable.dtype.base_dtype, seed)
                session.run(variable.assign(value))
                held[variable.name] = value
            (work / "saved").mkdir()
            prefix = str(work / "saved" / "ckpt")
            result = session.run(
                saver_def.save_tensor_name, {saver_def.filename_tensor_name: prefix}
            )
            assert result.decode() == prefix, result
            data_files = sorted(p.name for p in (work / "saved").glob("ckpt.data-*"))
            n_shards = count_shards(meta)
            assert data_files == [
                "ckpt.data-%05d-of-%05d" % (i, n_shards) for i in range(n_shards)
            ], data_files
            reader = tf.train.load_checkpoint(prefix)
            for variable in variables:
                saved = reader.get_tensor(key_of(variable))
                np.testing.assert_array_equal(slice_of(saved, variable), held[variable.name])

            # A checkpoint TensorFlow writes itself, with other values, restored by our op.
            written = {}
            for seed, variable in enumerate(variables):
                key = key_of(variable)
                if key not in written:
                    written[key] = values_for(
                        full_shape_of(variable), variable.dtype.base_dtype, seed + 50
                    )
            (work / "theirs").mkdir()
            other = str(work / "theirs" / "ckpt")
            keys = sorted(written)
            tf_save(other, keys, [written[k] for k in keys])
            session.run(saver_def.restore_op_name, {saver_def.filename_tensor_name: other})
            for variable in variables:
                expected = slice_of(written[key_of(variable)], variable)
                np.testing.assert_array_equal(session.run(variable), expected)


def tf_save(prefix, keys, values):
    """Writes a checkpoint with TensorFlow's own SaveV2, in a graph of its own."""
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        op = tf.raw_ops.SaveV2(
            prefix=prefix,
            tensor_names=keys,
            shape_and_slices=[""] * len(keys),
            tensors=[tf.constant(v) for v in values],
        )
        session.run(op)


def make_check(name, spec, form):
    def run():
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            meta = compile_spec(spec, form, work / "out")
            save_and_restore(meta, work)

    run.__name__ = "%s_%s" % (form, name)
    return check(run)


for _name, _spec in SPECS:
    make_check(_name, _spec, "flat")
for _name, _spec in SPECS:
    if _name in FUNCTION_SPECS:
        make_check(_name, _spec, "function")


@check
def check_accepts_compiled_plans():
    """`saveplan check` reports no problem on every compiled MetaGraphDef."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in SPECS:
            out = Path(tmp) / name
            run_saveplan("compile", str(spec), "-o", str(out))
            proc = run_saveplan("check", str(out / "meta_graph.pb"))
            assert proc.stdout.strip().endswith(": ok"), proc.stdout


if __name__ == "__main__":
    main()
