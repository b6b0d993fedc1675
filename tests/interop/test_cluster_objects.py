"""Eager TensorFlow writing an object-based checkpoint as the client of a cluster writes the
bytes `saveplan save OBJSPEC` writes, and TensorFlow restores that checkpoint by object.

tests/mpi/objects2.json places variables on task 1 of `/job:localhost` and leaves one unplaced
(task 0, with the object graph). TensorFlow 2.21, eager, connected to an in-process cluster of
`/job:localhost` (this process task 0, a `tf.distribute.Server` for task 1), builds that tree
of `tf.Module`s with the values tests/mpi/values.py writes and runs
`tf.train.Checkpoint(...).write(P)`; `saveplan save objects2.json` (one process; tests/mpi/run.sh
shows `mpirun -n 2 ... --cluster mpi` writes the same files) must leave the same files, byte for
byte. Then fresh variables on the same tasks `read` saveplan's checkpoint, every value consumed,
and hold the values saved. (Eager mode: the graph-mode cluster checks are test_cluster.py's.)

Usage: python tests/interop/test_cluster_objects.py PATH/TO/saveplan
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (  # noqa: E402
    check, free_ports, main, read_safetensors, repo_root, run_saveplan)

SPEC = os.path.join(repo_root(), "tests", "mpi", "objects2.json")
VALUES_PY = os.path.join(repo_root(), "tests", "mpi", "values.py")


def connect(n_tasks):
    """Makes this process task 0 of an in-process `/job:localhost` cluster of `n_tasks`."""
    ports = free_ports(n_tasks)
    cluster = tf.train.ClusterSpec({"localhost": ["localhost:%d" % port for port in ports]})
    servers = [tf.distribute.Server(cluster, job_name="localhost", task_index=index)
               for index in range(1, n_tasks)]
    tf.config.experimental_connect_to_cluster(cluster, job_name="localhost", task_index=0)
    return servers


def build_tree(spec, values):
    """The spec's `tf.Module` tree (paths only), each variable on its device with its value;
    returns the checkpoint's children, sorted by name as `tf.train.Checkpoint` sorts them."""
    root = {}
    for entry in spec["objects"]:
        *parents, leaf = entry["path"]
        node = root
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = entry
    def make(node):
        module = tf.Module()
        for name, child in node.items():
            if "dtype" in child:
                key = "/".join(child["path"]) + "/.ATTRIBUTES/VARIABLE_VALUE"
                with tf.device(child.get("device") or "/job:localhost/replica:0/task:0"):
                    made = tf.Variable(values[key], name=child.get("name", "Variable"))
                setattr(module, name, made)
            else:
                setattr(module, name, make(child))
        return module
    return {name: make(child) for name, child in sorted(root.items())}


def variables_of(children):
    """Every variable of the tree, by checkpoint key."""
    found = {}
    def walk(path, module):
        for name, value in vars(module).items():
            if isinstance(value, tf.Variable):
                found["/".join(path + [name]) + "/.ATTRIBUTES/VARIABLE_VALUE"] = value
            elif isinstance(value, tf.Module):
                walk(path + [name], value)
    for name, module in children.items():
        walk([name], module)
    return found


@check
def tensorflow_cluster_client_writes_our_object_checkpoint_and_reads_it():
    spec = json.load(open(SPEC))
    with tempfile.TemporaryDirectory() as tmp:
        values_path = os.path.join(tmp, "values.safetensors")
        subprocess.run([sys.executable, VALUES_PY, SPEC, values_path, "1"], check=True)
        values = read_safetensors(values_path)
        theirs, ours = os.path.join(tmp, "tf"), os.path.join(tmp, "ours")
        run_saveplan("save", SPEC, "--values", values_path, "--prefix", ours + "/ckpt")
        servers = connect(2)
        assert servers
        tf.train.Checkpoint(**build_tree(spec, values)).write(theirs + "/ckpt")
        names = sorted(os.listdir(theirs))
        assert names == sorted(os.listdir(ours)), (names, sorted(os.listdir(ours)))
        assert len([name for name in names if ".data-" in name]) == 2, names
        for name in names:
            with open(os.path.join(theirs, name), "rb") as a, \
                    open(os.path.join(ours, name), "rb") as b:
                assert a.read() == b.read(), "%s differs" % name

        zeros = {key: np.zeros_like(value) for key, value in values.items()}
        children = build_tree(spec, zeros)
        tf.train.Checkpoint(**children).read(ours + "/ckpt").assert_consumed()
        restored = variables_of(children)
        assert sorted(restored) == sorted(values), (sorted(restored), sorted(values))
        for key, variable in restored.items():
            assert np.array_equal(variable.numpy(), values[key]), (key, variable.numpy())


if __name__ == "__main__":
    main()
