"""TensorFlow's own multi-task save writes the bytes saveplan writes, and TensorFlow's cluster
restores what saveplan wrote.

For every case of tests/fixtures/part/ whose variables are whole (all but p3, whose sliced
variable the reference set recorded without the code that made it): TensorFlow 2.21 builds the
case's graph-mode variables on their tasks with the values tests/mpi/values.py writes, saves
them with a `MultiDeviceSaver` on an in-process cluster (one `tf.distribute.Server` per task
of `/job:worker`, the session on task 0), and `saveplan save SPEC --values V --prefix P`
(every task in one process; tests/mpi/run.sh shows `mpirun -n N ... --cluster mpi` writes the
same files) must leave the same files, byte for byte. Then the cluster zeroes its variables,
restores saveplan's checkpoint and reads back every value.

Usage: python tests/interop/test_cluster.py PATH/TO/saveplan
"""

import glob
import importlib.util
import json
import os
import re
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.checkpoint import checkpoint_options  # noqa: E402
from tensorflow.python.checkpoint import functional_saver  # noqa: E402
from tensorflow.python.training.saving import saveable_object_util  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (  # noqa: E402
    check, free_ports, main, read_safetensors, repo_root, run_saveplan)

tf.compat.v1.disable_eager_execution()

CASES = [case for case in sorted(glob.glob(os.path.join(
    repo_root(), "tests", "fixtures", "part", "p*", "case.json"))) if "p3_" not in case]

_spec = importlib.util.spec_from_file_location(
    "values", os.path.join(repo_root(), "tests", "mpi", "values.py"))
values_py = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(values_py)


def n_tasks(case):
    devices = [var["device"] for var in case["variables"]]
    devices.append((case.get("options") or {}).get("experimental_io_device") or "")
    found = [int(m.group(1)) for m in (re.search(r"/task:(\d+)", d) for d in devices) if m]
    return max(found) + 1


def check_case(case_path):
    case = json.load(open(case_path))
    io_device = (case.get("options") or {}).get("experimental_io_device")
    with tempfile.TemporaryDirectory() as tmp:
        values_path = os.path.join(tmp, "values.safetensors")
        saved_argv, sys.argv = sys.argv, ["values.py", case_path, values_path, "3"]
        try:
            values_py.main()
        finally:
            sys.argv = saved_argv
        values = read_safetensors(values_path)

        graph = tf.Graph()
        with graph.as_default():
            saveables, variables = [], {}
            for entry in case["variables"]:
                with tf.device(entry["device"]):
                    made = tf.Variable(values[entry["checkpoint_key"]],
                                       name=entry["checkpoint_key"])
                variables[entry["checkpoint_key"]] = made
                saveables.extend(
                    saveable_object_util.saveable_objects_for_op(made, entry["checkpoint_key"]))
            saver = functional_saver.MultiDeviceSaver.from_saveables(saveables)
            options = checkpoint_options.CheckpointOptions(experimental_io_device=io_device)
            prefix = tf.compat.v1.placeholder(tf.string, [], name="saver_filename")
            save = saver.save(prefix, options=options)
            restore = list(saver.restore(prefix, options=options).values())
            init = tf.compat.v1.global_variables_initializer()
            zero = [var.assign(tf.zeros_like(var)) for var in variables.values()]

        ports = free_ports(n_tasks(case))
        cluster = tf.train.ClusterSpec({"worker": ["localhost:%d" % port for port in ports]})
        servers = [tf.distribute.Server(cluster, job_name="worker", task_index=index)
                   for index in range(len(ports))]
        theirs, ours = os.path.join(tmp, "tf"), os.path.join(tmp, "ours")
        os.makedirs(theirs)
        run_saveplan("save", case_path, "--values", values_path, "--prefix", ours + "/ckpt")
        with tf.compat.v1.Session(servers[0].target, graph=graph) as sess:
            sess.run(init)
            sess.run(save, {prefix: theirs + "/ckpt"})
            names = sorted(os.listdir(theirs))
            assert names == sorted(os.listdir(ours)), (names, sorted(os.listdir(ours)))
            for name in names:
                with open(os.path.join(theirs, name), "rb") as a, \
                        open(os.path.join(ours, name), "rb") as b:
                    assert a.read() == b.read(), "%s: %s differs" % (case_path, name)
            sess.run(zero)
            sess.run(restore, {prefix: ours + "/ckpt"})
            for key, var in variables.items():
                got = sess.run(var)
                assert np.array_equal(got, values[key]), (case_path, key, got, values[key])


def register(case_path):
    def checked():
        check_case(case_path)
    checked.__name__ = "tensorflow_cluster_writes_our_bytes_" + Path(case_path).parent.name
    check(checked)


for _case in CASES:
    register(_case)

if __name__ == "__main__":
    assert len(CASES) >= 5, CASES
    main()
