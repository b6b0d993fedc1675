"""Interop of `saveplan compile OBJSPEC`: TensorFlow runs the object-based plan it emits.

`saveplan compile` of an object spec (variables by path, a v1 Adam slot, escaped names,
non-default names and dtypes) writes `meta_graph.pb`, `object_graph.pb` and
`entry_points.json`. TensorFlow 2.21 imports the MetaGraphDef with
`tf.compat.v1.train.import_meta_graph`, runs `init`, assigns each variable a value, feeds the
prefix and the object graph and fetches the save tensor: the checkpoint it writes restores by
object into the equivalent `tf.Module` tree with `assert_consumed()` passing and every value
equal. The other way, the restore ops with the read prefix fed load a checkpoint TensorFlow
writes for that tree, every variable holding TensorFlow's value.

Usage: python tests/interop/test_compile_objects.py PATH/TO/saveplan
"""

import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import check, main, run_saveplan  # noqa: E402
from spec_tree import SPEC, spec_tree  # noqa: E402


def value_of(key, variable, seed):
    """A distinct value per key, of the variable's dtype and shape."""
    shape = variable.shape.as_list()
    count = int(np.prod(shape)) if shape else 1
    base = seed + sum(map(ord, key)) % 97
    return np.arange(base, base + count).reshape(shape).astype(variable.dtype.as_numpy_dtype)


def compile_spec(tmp):
    spec = os.path.join(tmp, "spec.json")
    with open(spec, "w") as f:
        json.dump(SPEC, f)
    out = os.path.join(tmp, "out")
    run_saveplan("compile", spec, "-o", out)
    with open(os.path.join(out, "entry_points.json")) as f:
        entry = json.load(f)
    return out, entry


def session_of(out):
    """A TF1 session on the imported MetaGraphDef, and its graph."""
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.train.import_meta_graph(os.path.join(out, "meta_graph.pb"))
    return tf.compat.v1.Session(graph=graph), graph


@check
def tf_runs_the_compiled_write_and_restores_by_object():
    _, variables = spec_tree()
    expected = {key: value_of(key, var, 1) for key, var in variables.items()}
    with tempfile.TemporaryDirectory() as tmp:
        out, entry = compile_spec(tmp)
        sess, graph = session_of(out)
        with graph.as_default():
            sess.run(entry["init"])
            assert len(tf.compat.v1.global_variables()) == len(SPEC["objects"])
            for key, name in entry["variables"].items():
                handle = graph.get_tensor_by_name(name + ":0")
                sess.run(tf.raw_ops.AssignVariableOp(resource=handle, value=expected[key]))
        with open(os.path.join(out, entry["write"]["object_graph_file"]), "rb") as f:
            object_graph = f.read()
        prefix = os.path.join(tmp, "ckpt")
        returned = sess.run(entry["write"]["save_tensor"], feed_dict={
            entry["write"]["prefix_tensor"]: prefix,
            entry["write"]["object_graph_tensor"]: object_graph,
        })
        assert returned.decode() == prefix, returned
        children, fresh = spec_tree()
        tf.train.Checkpoint(**children).read(prefix).assert_consumed()
        for key, var in fresh.items():
            np.testing.assert_array_equal(var.numpy(), expected[key], err_msg=key)


@check
def tf_checkpoint_restores_through_the_compiled_restore_ops():
    children, variables = spec_tree()
    expected = {key: value_of(key, var, 5) for key, var in variables.items()}
    for key, var in variables.items():
        var.assign(expected[key])
    with tempfile.TemporaryDirectory() as tmp:
        prefix = tf.train.Checkpoint(**children).write(os.path.join(tmp, "theirs"))
        out, entry = compile_spec(tmp)
        sess, graph = session_of(out)
        sess.run(entry["init"])
        sess.run(entry["read"]["restore_ops"],
                 feed_dict={entry["read"]["prefix_tensor"]: prefix})
        for key, name in entry["variables"].items():
            value = sess.run(name + "/Read/ReadVariableOp:0")
            np.testing.assert_array_equal(value, expected[key], err_msg=key)


@check
def tf_exports_the_same_meta_graph_in_graph_mode():
    """TensorFlow's own `export_meta_graph` after a graph-mode `write` and `read` of the tree
    (without the slot: slot creation differs in a `tf.Graph`) has the same nodes (its restore
    in key order, not in the order the write saves), the same `variables` collections and no
    `SaverDef`."""
    plain = {"objects": [o for o in SPEC["objects"] if "slot" not in o]}
    with tempfile.TemporaryDirectory() as tmp:
        spec = os.path.join(tmp, "spec.json")
        with open(spec, "w") as f:
            json.dump(plain, f)
        out = os.path.join(tmp, "out")
        run_saveplan("compile", spec, "-o", out)
        ours = tf.compat.v1.MetaGraphDef()
        with open(os.path.join(out, "meta_graph.pb"), "rb") as f:
            ours.ParseFromString(f.read())
        graph = tf.Graph()
        with graph.as_default():
            children, _ = spec_tree(slot=False)
            checkpoint = tf.train.Checkpoint(**children)
            init = tf.compat.v1.global_variables_initializer()
            with tf.compat.v1.Session() as sess, sess.as_default():
                sess.run(init)
                prefix = checkpoint.write(os.path.join(tmp, "ckpt"))
                checkpoint.read(prefix).run_restore_ops()
            theirs = tf.compat.v1.train.export_meta_graph()
        assert not ours.HasField("saver_def") and not theirs.HasField("saver_def")
        assert ours.collection_def == theirs.collection_def, (ours.collection_def,
                                                              theirs.collection_def)
        for node in theirs.graph_def.node:
            # `export_meta_graph` adds the shapes it inferred; the graph itself has none.
            node.ClearField("experimental_debug_info")
            node.attr.pop("_output_shapes", None)
        assert len(ours.graph_def.node) == len(theirs.graph_def.node)
        for mine, tfs in zip(ours.graph_def.node, theirs.graph_def.node):
            assert mine == tfs, (mine, tfs)


main()
