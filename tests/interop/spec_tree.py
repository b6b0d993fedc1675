"""The object spec the interop scripts share, and its tree in TensorFlow.

`SPEC`: variables by path, a v1 Adam slot variable, escaped names, non-default names and
dtypes. `spec_tree()` builds the equivalent `tf.Module` tree, zero-initialised.
"""

import numpy as np
import tensorflow as tf


def spec_tree(slot=True):
    """The tree of `SPEC` below, zero-initialised: `Checkpoint(**children)`, and its
    variables by checkpoint key; `slot=False` leaves the optimizer and its slot out."""
    model = tf.Module()
    model.dense = tf.Module()
    model.dense.kernel = tf.Variable(np.zeros([3, 4], np.float32), name="kernel")
    model.dense.bias = tf.Variable(np.zeros([4], np.float32))
    model.head = [tf.Variable(np.zeros([2], np.int64))]
    model.table = {"a/b.c": tf.Variable(np.zeros([], np.float64), name="my/var.name")}
    children = {"zmodel": model}
    by_key = {
        "zmodel/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE": model.dense.kernel,
        "zmodel/dense/bias/.ATTRIBUTES/VARIABLE_VALUE": model.dense.bias,
        "zmodel/head/0/.ATTRIBUTES/VARIABLE_VALUE": model.head[0],
        "zmodel/table/a.Sb..c/.ATTRIBUTES/VARIABLE_VALUE": model.table["a/b.c"],
    }
    if slot:
        opt = tf.compat.v1.train.AdamOptimizer()
        opt._get_or_make_slot(model.dense.kernel, tf.zeros([3, 4]), "m", "Adam")
        children["optimizer"] = opt
        by_key["zmodel/dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE"] = (
            opt.get_slot(model.dense.kernel, "m"))
    return children, by_key


SPEC = {"objects": [
    {"path": ["zmodel", "dense", "kernel"], "dtype": "float32", "shape": [3, 4], "name": "kernel"},
    {"path": ["zmodel", "dense", "bias"], "dtype": "float32", "shape": [4]},
    {"path": ["zmodel", "head", "0"], "dtype": "int64", "shape": [2]},
    {"path": ["zmodel", "table", "a/b.c"], "dtype": "float64", "shape": [], "name": "my/var.name"},
    {"slot": {"variable": ["zmodel", "dense", "kernel"], "optimizer": ["optimizer"], "name": "m"},
     "dtype": "float32", "shape": [3, 4], "name": "kernel/Adam"},
]}
