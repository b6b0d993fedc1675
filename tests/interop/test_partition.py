"""Interop of `saveplan compile SPEC --partition`: TensorFlow takes each partition as a graph.

For every case of tests/fixtures/part/ (the specs TensorFlow's own partition graphs were
recorded for), `saveplan compile --partition --emit pb,pbtxt` writes one GraphDef per task for
the save run and the restore run. TensorFlow 2.21 parses each `.pb` and `.pbtxt` (the same
message), imports it into a fresh graph with `tf.compat.v1.import_graph_def` (every op
registered, every attr of the right type, every input there), and every `_Send`/`_HostSend`
has exactly one `_Recv`/`_HostRecv` of the same `tensor_name` in the partition of its
`recv_device`'s task, of the same dtype. TensorFlow's own recorded partitions import the
same way (the harness asks no more of ours than of theirs); names that begin with `_` are
prefixed first, since the importer refuses them, TensorFlow's own included.

Usage: python tests/interop/test_partition.py PATH/TO/saveplan
"""

import glob
import os
import re
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402
from google.protobuf import text_format  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import check, main, repo_root, run_saveplan  # noqa: E402

CASES = sorted(glob.glob(os.path.join(repo_root(), "tests", "fixtures", "part", "p*", "case.json")))
SENDS = {"_Send": "_Recv", "_HostSend": "_HostRecv"}


def importable(graph_def):
    """`graph_def` with every node name that begins with `_` prefixed by `x`, in inputs too:
    the Python importer refuses such names (TensorFlow's own partitions hold them as well,
    `_recv_saver_filename_0`), and the rest of what it checks stays as it was."""
    copy = tf.compat.v1.GraphDef()
    copy.CopyFrom(graph_def)

    def fixed(name):
        control = name.startswith("^")
        bare = name[1:] if control else name
        if bare.startswith("_"):
            bare = "x" + bare
        return ("^" if control else "") + bare

    for node in copy.node:
        node.name = fixed(node.name)
        node.input[:] = [fixed(name) for name in node.input]
    return copy


def task_of(device):
    found = re.search(r"/job:(\w+)/replica:(\d+)/task:(\d+)", device)
    return "%s-%s-%s" % found.groups()


def partitions(case, tmp):
    out = os.path.join(tmp, os.path.basename(os.path.dirname(case)))
    run_saveplan("compile", case, "-o", out, "--partition", "--emit", "pb,pbtxt")
    return out


def check_case(case):
    with tempfile.TemporaryDirectory() as tmp:
        out = partitions(case, tmp)
        for run in ("save", "restore"):
            graphs = {}
            for pb in sorted(glob.glob(os.path.join(out, "partitions", run, "*.pb"))):
                with open(pb, "rb") as f:
                    graph_def = tf.compat.v1.GraphDef.FromString(f.read())
                with open(pb + "txt") as f:
                    from_text = text_format.Parse(f.read(), tf.compat.v1.GraphDef())
                assert from_text == graph_def, pb
                with tf.Graph().as_default() as graph:
                    tf.compat.v1.import_graph_def(importable(graph_def), name="")
                assert len(graph.get_operations()) == len(graph_def.node), pb
                graphs[Path(pb).stem] = graph_def
            assert graphs, "%s %s: no partitions" % (case, run)
            recvs = {}
            for stem, graph_def in graphs.items():
                for node in graph_def.node:
                    if node.op in SENDS.values() and not node.attr["client_terminated"].b:
                        key = (stem, node.attr["tensor_name"].s)
                        assert key not in recvs, key
                        recvs[key] = node
            matched = 0
            for stem, graph_def in graphs.items():
                for node in graph_def.node:
                    if node.op not in SENDS:
                        continue
                    assert task_of(node.device) == stem, node.name
                    dst = task_of(node.attr["recv_device"].s.decode())
                    recv = recvs[(dst, node.attr["tensor_name"].s)]
                    assert recv.op == SENDS[node.op], (node.name, recv.name)
                    assert recv.attr["tensor_type"].type == node.attr["T"].type, node.name
                    assert recv.attr["send_device"] == node.attr["send_device"], node.name
                    matched += 1
            assert matched == len(recvs), "%s %s: a receive without its send" % (case, run)


def tensorflow_partitions_import_the_same_way():
    for pbtxt in sorted(glob.glob(os.path.join(os.path.dirname(CASES[0]), "..", "p*", "*", "task*.pbtxt"))):
        with open(pbtxt) as f:
            graph_def = text_format.Parse(f.read(), tf.compat.v1.GraphDef())
        with tf.Graph().as_default() as graph:
            tf.compat.v1.import_graph_def(importable(graph_def), name="")
        assert len(graph.get_operations()) == len(graph_def.node), pbtxt


check(tensorflow_partitions_import_the_same_way)


def register(case):
    def checked():
        check_case(case)
    checked.__name__ = "partitions_of_" + os.path.basename(os.path.dirname(case))
    check(checked)


for _case in CASES:
    register(_case)

if __name__ == "__main__":
    assert len(CASES) >= 6, CASES
    main()
