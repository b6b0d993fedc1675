"""Interop of name-based restore, Keras 3 optimizer state and non-variable attributes.

* A Keras 3 model with optimizer state: TensorFlow saves `Checkpoint(model=, optimizer=)` of
  o2's Sequential(Dense, BatchNormalization, Dense) + Adam after one step; its object graph
  gives the object spec (every attribute at its first-discovered path, its other edges as
  `also` paths, `save_counter` as the counter); `saveplan save` writes other values under it; TensorFlow restores them into a
  fresh model and unbuilt optimizer, `opt.build(...)`, `assert_consumed()` passes and every
  variable holds the value we wrote.
* Name-based: a fresh TF1 `tf.compat.v1.train.Saver` checkpoint (and o5's) restored with
  `saveplan restore OBJSPEC` (entries' `name` = the TF1 names) gives TensorFlow's values, and
  each `--expect` passes or fails as `NameBasedSaverStatus` does, with TensorFlow's message.
  A plain spec restores TensorFlow's object-based checkpoint through `full_name`, as a TF1
  `Saver` does.
* We read what TensorFlow writes with non-variable attributes (a `_serialize_to_tensors`
  object, a `MutableHashTable`, a `PythonState`, a tf.data iterator's DT_VARIANT state) and
  under MirroredStrategy.

Usage: python tests/interop/test_names.py PATH/TO/saveplan
"""

import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

# MirroredStrategy needs two logical CPUs, configured before anything else runs.
_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    _cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import check, fixtures, main, read_safetensors, run_saveplan  # noqa: E402

OBJ = Path(fixtures()) / "obj"


def object_graph(prefix):
    """The TrackableObjectGraph of a checkpoint."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2
    reader = tf.train.load_checkpoint(prefix)
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    return reader, graph


def first_paths(graph):
    """Each node's first-discovered path from node 0 (breadth-first), as local names."""
    paths = {0: []}
    queue = [0]
    while queue:
        node = queue.pop(0)
        for child in graph.nodes[node].children:
            if child.node_id not in paths:
                paths[child.node_id] = paths[node] + [child.local_name]
                queue.append(child.node_id)
    return paths


def object_spec_of(prefix):
    """The object spec of every variable of TensorFlow's checkpoint at `prefix` (each at its
    first-discovered path, `save_counter` as the counter) and each entry's dtype and shape."""
    reader, graph = object_graph(prefix)
    dtypes = reader.get_variable_to_dtype_map()
    shapes = reader.get_variable_to_shape_map()
    paths = first_paths(graph)
    # Every other edge to a variable, from its parent's first path: the same object again.
    also = {}
    for parent, node in enumerate(graph.nodes):
        for child in node.children:
            path = paths[parent] + [child.local_name]
            if graph.nodes[child.node_id].attributes and path != paths[child.node_id]:
                also.setdefault(child.node_id, []).append(path)
    entries = []
    for node_id, node in enumerate(graph.nodes):
        for attribute in node.attributes:
            assert attribute.name == "VARIABLE_VALUE", attribute
            key = attribute.checkpoint_key
            entry = {"path": paths[node_id], "dtype": dtypes[key].name,
                     "shape": shapes[key], "name": attribute.full_name}
            if node_id in also:
                entry["also"] = also[node_id]
            entries.append(entry)
    return {"objects": entries}


def keras_model():
    import keras
    m = keras.Sequential([keras.Input((3,)),
                          keras.layers.Dense(2, name="dense"),
                          keras.layers.BatchNormalization(name="bn"),
                          keras.layers.Dense(1, name="out")], name="seq")
    return m


@check
def tf_restores_a_keras_model_with_adam_state_we_wrote():
    import keras
    rng = np.random.default_rng(3)
    with tempfile.TemporaryDirectory() as tmp:
        model = keras_model()
        opt = keras.optimizers.Adam(learning_rate=0.01)
        model.compile(optimizer=opt, loss="mse")
        model.train_on_batch(rng.normal(size=[4, 3]).astype(np.float32),
                             rng.normal(size=[4, 1]).astype(np.float32))
        theirs = tf.train.Checkpoint(model=model, optimizer=opt).save(
            os.path.join(tmp, "tf", "ckpt"))
        spec = object_spec_of(theirs)
        keys = [e["path"] for e in spec["objects"]]
        assert ["optimizer", "_trainable_variables", "0"] in keys, keys
        assert ["model", "_functional", "_operations", "2", "moving_mean"] in keys, keys
        assert ["save_counter"] in keys, keys
        # New values for every key, of its dtype and shape.
        reader = tf.train.load_checkpoint(theirs)
        values = {}
        for key, shape in reader.get_variable_to_shape_map().items():
            if key == "_CHECKPOINTABLE_OBJECT_GRAPH":
                continue
            dtype = reader.get_variable_to_dtype_map()[key].as_numpy_dtype
            values[key] = (rng.normal(size=shape) * 10).astype(dtype)
        values["save_counter/.ATTRIBUTES/VARIABLE_VALUE"] = np.array(5, np.int64)
        vals = os.path.join(tmp, "values")
        names = sorted(values)
        tf.raw_ops.SaveV2(prefix=vals, tensor_names=names, shape_and_slices=[""] * len(names),
                          tensors=[tf.constant(values[k]) for k in names])
        spec_path = os.path.join(tmp, "spec.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        ours = os.path.join(tmp, "ours", "ckpt")
        run_saveplan("save", spec_path, "--values", vals, "--prefix", ours)

        model2 = keras_model()
        opt2 = keras.optimizers.Adam(learning_rate=0.01)
        ck2 = tf.train.Checkpoint(model=model2, optimizer=opt2)
        status = ck2.restore(ours)
        opt2.build(model2.trainable_variables)
        status.assert_consumed()
        assert int(ck2.save_counter.numpy()) == 5
        # TensorFlow writing what it restored gives back our values under its own keys.
        back = ck2.write(os.path.join(tmp, "back", "ckpt"))
        back_reader = tf.train.load_checkpoint(back)
        stored = set(back_reader.get_variable_to_shape_map()) - {"_CHECKPOINTABLE_OBJECT_GRAPH"}
        assert stored == set(values), sorted(stored ^ set(values))
        for key, value in values.items():
            assert np.array_equal(back_reader.get_tensor(key), value), key
        assert np.array_equal(model2.layers[1].moving_mean.numpy(),
                              values["model/_functional/_operations/2/moving_mean/"
                                     ".ATTRIBUTES/VARIABLE_VALUE"])


def tf1_checkpoint(path):
    """A TF1 `Saver` checkpoint of dense/kernel, dense/bias, global_step (o5's program)."""
    kernel = np.array([[1.5, -2.0], [3.25, 4.0]], np.float32)
    bias = np.array([0.25, -0.75], np.float32)
    g = tf.Graph()
    with g.as_default():
        with tf.compat.v1.variable_scope("dense"):
            tf.compat.v1.get_variable("kernel", initializer=kernel)
            tf.compat.v1.get_variable("bias", initializer=bias)
        gs = tf.compat.v1.train.get_or_create_global_step()
        inc = gs.assign_add(9)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(inc)
            return saver.save(sess, path, write_meta_graph=False), kernel, bias


def one_line(message):
    return " ".join(line.strip() for line in message.splitlines() if line.strip())


def restore_spec(tmp, spec, prefix, *flags):
    path = os.path.join(tmp, "objspec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    out = os.path.join(tmp, "out.safetensors")
    return run_saveplan("restore", path, "--prefix", prefix, "--out", out, *flags,
                        expect_ok=False), out


@check
def we_restore_tf1_checkpoints_by_name_as_tf_does():
    with tempfile.TemporaryDirectory() as tmp:
        fresh, kernel, bias = tf1_checkpoint(os.path.join(tmp, "tf1", "model"))
        for prefix, want in [(fresh, {"kernel": kernel, "bias": bias, "step": 9}),
                             (str(OBJ / "o5_name_based" / "tf1" / "model"),
                              {"kernel": np.array([[1, 2], [3, 4]], np.float32),
                               "bias": np.array([0.5, -0.5], np.float32), "step": 7})]:
            spec = {"objects": [
                {"path": ["model", "kernel"], "dtype": "float32", "shape": [2, 2],
                 "name": "dense/kernel"},
                {"path": ["model", "bias"], "dtype": "float32", "shape": [2],
                 "name": "dense/bias"},
                {"path": ["model", "step"], "dtype": "int64", "shape": [],
                 "name": "global_step"}]}
            result, out = restore_spec(tmp, spec, prefix, "--expect", "consumed")
            assert result.returncode == 0, result.stderr
            got = read_safetensors(out)
            for attr, value in want.items():
                key = "model/%s/.ATTRIBUTES/VARIABLE_VALUE" % attr
                assert np.array_equal(got[key], value), (key, got[key], value)
            # The same in TensorFlow, then a program whose names do not all match.
            m = tf.Module()
            m.kernel = tf.Variable(np.zeros([2, 2], np.float32), name="kernel")
            m.bias = tf.Variable(np.zeros([2], np.float32), name="dense/bias")
            status = tf.train.Checkpoint(model=m).restore(prefix)
            assert type(status).__name__ == "NameBasedSaverStatus"
            assert np.array_equal(m.bias.numpy(), want["bias"])
            spec = {"objects": [
                {"path": ["model", "kernel"], "dtype": "float32", "shape": [2, 2],
                 "name": "kernel"},
                {"path": ["model", "bias"], "dtype": "float32", "shape": [2],
                 "name": "dense/bias"}]}
            for flag, method in [("consumed", status.assert_consumed),
                                 ("existing", status.assert_existing_objects_matched),
                                 ("nontrivial", status.assert_nontrivial_match)]:
                try:
                    method()
                    raise AssertionError("TensorFlow's %s passed" % flag)
                except AssertionError as err:
                    tf_message = one_line(str(err))
                result, _ = restore_spec(tmp, spec, prefix, "--expect", flag)
                assert result.returncode == 1, (flag, result.stderr)
                ours = result.stderr.strip().splitlines()[-1].split(" failed: ", 1)[1]
                assert ours == tf_message, (flag, ours, tf_message)


@check
def a_plain_spec_restores_an_object_based_checkpoint_by_full_name():
    with tempfile.TemporaryDirectory() as tmp:
        m = tf.Module()
        m.kernel = tf.Variable(np.array([[1, 2], [3, 4]], np.float32) * 7, name="dense/kernel")
        m.bias = tf.Variable(np.array([1, -1], np.float32) * 7, name="dense/bias")
        prefix = tf.train.Checkpoint(model=m).write(os.path.join(tmp, "obj", "ckpt"))
        spec = os.path.join(tmp, "spec.json")
        with open(spec, "w") as f:
            json.dump({"variables": [
                {"checkpoint_key": "dense/kernel", "dtype": "float32", "shape": [2, 2]},
                {"checkpoint_key": "dense/bias", "dtype": "float32", "shape": [2]}]}, f)
        out = os.path.join(tmp, "out.safetensors")
        run_saveplan("restore", spec, "--prefix", prefix, "--out", out)
        got = read_safetensors(out)
        # What a TF1 Saver restores from the same checkpoint.
        g = tf.Graph()
        with g.as_default():
            with tf.compat.v1.variable_scope("dense"):
                k = tf.compat.v1.get_variable("kernel", shape=[2, 2])
                b = tf.compat.v1.get_variable("bias", shape=[2])
            saver = tf.compat.v1.train.Saver([k, b])
            with tf.compat.v1.Session(graph=g) as sess:
                saver.restore(sess, prefix)
                tf_kernel, tf_bias = sess.run([k, b])
        assert np.array_equal(got["dense/kernel"], tf_kernel)
        assert np.array_equal(got["dense/bias"], tf_bias)


@check
def we_read_non_variable_attributes_tf_writes():
    class Custom(tf.Module):
        def _serialize_to_tensors(self):
            return {"first": tf.constant([3.0, 4.0]), "second": tf.constant("x")}

        def _restore_from_tensors(self, restored_tensors):
            return tf.no_op()

    class State(tf.train.experimental.PythonState):
        def serialize(self):
            return b"py-state"

        def deserialize(self, string_value):
            pass

    root = tf.Module()
    root.custom = Custom()
    root.table = tf.lookup.experimental.MutableHashTable(tf.string, tf.int64, default_value=-1)
    root.table.insert(tf.constant(["a", "b"]), tf.constant([5, 6], tf.int64))
    root.pystate = State()
    root.it = iter(tf.data.Dataset.range(7))
    next(root.it)
    root.v = tf.Variable(np.array([9.0, 8.0], np.float32))
    with tempfile.TemporaryDirectory() as tmp:
        prefix = tf.train.Checkpoint(root=root).write(os.path.join(tmp, "ckpt"))
        state_shape = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()[
            "it/.ATTRIBUTES/ITERATOR_STATE"]
        spec = {"objects": [
            {"path": ["custom"], "attribute": "first", "dtype": "float32", "shape": [2]},
            {"path": ["custom"], "attribute": "second", "dtype": "string", "shape": []},
            {"path": ["table"], "attribute": "table", "suffix": "-keys", "dtype": "string",
             "shape": [2]},
            {"path": ["table"], "attribute": "table", "suffix": "-values", "dtype": "int64",
             "shape": [2]},
            {"path": ["pystate"], "attribute": "py_state", "dtype": "string", "shape": []},
            {"path": ["it"], "attribute": "ITERATOR", "suffix": "_STATE", "dtype": "variant",
             "shape": state_shape},
            {"path": ["v"], "dtype": "float32", "shape": [2]}]}
        result, out = restore_spec(tmp, spec, prefix, "--read", "--expect", "consumed")
        assert result.returncode == 0, result.stderr
        got = read_safetensors(out)
        reader = tf.train.load_checkpoint(prefix)
        for key in ["custom/.ATTRIBUTES/first", "table/.ATTRIBUTES/table-values",
                    "v/.ATTRIBUTES/VARIABLE_VALUE"]:
            assert np.array_equal(got[key], reader.get_tensor(key)), key
        assert sorted(got[("table/.ATTRIBUTES/table-values")]) == [5, 6]
        listing = run_saveplan("inspect", prefix, "--objects").stdout
        line = "ITERATOR: it/.ATTRIBUTES/ITERATOR_STATE DT_VARIANT [%d]" % state_shape[0]
        assert line in listing, listing
        run_saveplan("verify", prefix)
        # And the fixture TensorFlow wrote with the same kinds of objects.
        run_saveplan("verify", str(OBJ / "o7_non_variable_attributes" / "ckpt"))


@check
def we_read_mirrored_strategy_checkpoints():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        m = tf.Module()
        m.w = tf.Variable(np.array([1.5, -2.5], np.float32))
        m.s = tf.Variable(0.0, synchronization=tf.VariableSynchronization.ON_READ,
                          aggregation=tf.VariableAggregation.SUM)

    @tf.function
    def step():
        ctx = tf.distribute.get_replica_context()
        m.s.assign_add(tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 2.0)
    strategy.run(step)
    spec = {"objects": [{"path": ["model", "w"], "dtype": "float32", "shape": [2]},
                        {"path": ["model", "s"], "dtype": "float32", "shape": []}]}
    with tempfile.TemporaryDirectory() as tmp:
        for prefix in [tf.train.Checkpoint(model=m).write(os.path.join(tmp, "ckpt")),
                       str(OBJ / "o8_mirrored" / "ckpt")]:
            result, out = restore_spec(tmp, spec, prefix, "--read", "--expect", "consumed")
            assert result.returncode == 0, result.stderr
            got = read_safetensors(out)
            m2 = tf.Module()
            m2.w = tf.Variable(np.zeros([2], np.float32))
            m2.s = tf.Variable(0.0)
            tf.train.Checkpoint(model=m2).read(prefix).assert_consumed()
            assert np.array_equal(got["model/w/.ATTRIBUTES/VARIABLE_VALUE"], m2.w.numpy())
            assert np.array_equal(got["model/s/.ATTRIBUTES/VARIABLE_VALUE"], m2.s.numpy())


main()
