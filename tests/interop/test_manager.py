"""Interop of CheckpointManager: saveplan's manager and TensorFlow's, same saves, same files.

The `checkpoint_manager` example drives saveplan's `CheckpointManager` over
`tf.train.Checkpoint(v=v)` with a clock it is given; here TensorFlow 2.21's
`tf.train.CheckpointManager` runs the same sequence with its module clock
(`checkpoint_management.time`) replaced by a fake one, as the o3 fixture was made. After each
session (a manager created, saves, maybe a `restore_or_initialize()` first) both directories
must hold the same files with the same bytes, the `checkpoint` file included, and the manager
must return the same paths: retention with `max_to_keep` and `keep_checkpoint_every_n_hours`,
a second manager taking over the directory (re-saving a recovered path), a third restoring the
latest checkpoint, with synchronous and asynchronous writes.

Then TensorFlow reads a directory saveplan's manager wrote: `tf.train.latest_checkpoint`,
`CheckpointManager(...).restore_or_initialize()` into a fresh object (the value and
`save_counter` of the last save) and `restore(...).assert_consumed()`.

Usage: python tests/interop/test_manager.py PATH/TO/saveplan
"""

import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.checkpoint import checkpoint_management as cm  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import check, main, repo_root  # noqa: E402

T0 = 1700000000.0


@functools.lru_cache(maxsize=None)
def driver():
    """Builds the `checkpoint_manager` example and returns its path."""
    subprocess.run(["cargo", "build", "--locked", "--quiet", "--example", "checkpoint_manager"],
                   cwd=repo_root(), check=True)
    meta = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"],
                          cwd=repo_root(), check=True, capture_output=True, text=True)
    target = json.loads(meta.stdout)["target_directory"]
    return os.path.join(target, "debug", "examples", "checkpoint_manager")


class FakeClock:
    """Stands in for the `time` module of checkpoint_management."""

    def __init__(self):
        self.t = 0.0

    def time(self):
        return self.t


def ours(directory, max_to_keep, saves, keep_hours=None, restore_at=None, asynchronous=False):
    """One session of saveplan's manager; the lines it printed, paths relative."""
    args = [driver(), directory, "none" if max_to_keep is None else str(max_to_keep)]
    if keep_hours is not None:
        args += ["--keep-hours", repr(keep_hours)]
    if restore_at is not None:
        args += ["--restore", repr(restore_at)]
    if asynchronous:
        args.append("--async")
    args += ["%r:%r" % (t, v) for t, v in saves]
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError("checkpoint_manager failed: %s" % proc.stderr)
    return proc.stdout.replace(directory + os.sep, "").splitlines()


def theirs(directory, max_to_keep, saves, keep_hours=None, restore_at=None):
    """The same session with TensorFlow's manager and a fake clock."""
    clock = FakeClock()
    real = cm.time
    cm.time = clock
    try:
        v = tf.Variable(np.array([0.0], np.float32))
        ckpt = tf.train.Checkpoint(v=v)
        clock.t = restore_at if restore_at is not None else saves[0][0]
        mgr = tf.train.CheckpointManager(ckpt, directory, max_to_keep=max_to_keep,
                                         keep_checkpoint_every_n_hours=keep_hours)
        lines = []
        if restore_at is not None:
            path = mgr.restore_or_initialize()
            lines.append("initialized" if path is None else "restored " + path)
        for t, value in saves:
            clock.t = t
            v.assign([value])
            lines.append(mgr.save())
        return [line.replace(directory + os.sep, "") for line in lines]
    finally:
        cm.time = real


def listing(directory):
    return {name: Path(directory, name).read_bytes() for name in sorted(os.listdir(directory))}


def assert_same(ours_dir, theirs_dir, ours_lines, theirs_lines):
    assert ours_lines == theirs_lines, (ours_lines, theirs_lines)
    a, b = listing(ours_dir), listing(theirs_dir)
    assert sorted(a) == sorted(b), (sorted(a), sorted(b))
    for name in a:
        assert a[name] == b[name], "%s differs:\n%r\n%r" % (name, a[name], b[name])


SESSIONS = [
    # max_to_keep=2, one kept every hour (o3's b_keep_every_n_hours times)
    dict(max_to_keep=2, keep_hours=1.0,
         saves=[(T0 + dt, float(i + 1)) for i, dt in
                enumerate([0, 1000, 2000, 3000, 4000, 5000, 8000, 9000])]),
    # a second manager takes over, a fresh object: it saves ckpt-1 again
    dict(max_to_keep=1, saves=[(T0 + 9100, 10.0), (T0 + 9200.25, 11.0)]),
    # a third restores the latest (counter 2) and goes on
    dict(max_to_keep=3, restore_at=T0 + 9300, saves=[(T0 + 9400.125, 12.0)]),
    # no limit
    dict(max_to_keep=None, saves=[(T0 + 9500, 13.0), (T0 + 9600, 14.0)]),
]


def compare_sessions(asynchronous):
    with tempfile.TemporaryDirectory() as tmp:
        a, b = os.path.join(tmp, "ours"), os.path.join(tmp, "theirs")
        for session in SESSIONS:
            assert_same(a, b, ours(a, asynchronous=asynchronous, **session), theirs(b, **session))


@check
def same_files_as_tensorflow_sync():
    compare_sessions(False)


@check
def same_files_as_tensorflow_async():
    compare_sessions(True)


@check
def tensorflow_restores_what_our_manager_wrote():
    with tempfile.TemporaryDirectory() as tmp:
        lines = ours(tmp, 2, [(T0, 1.0), (T0 + 10, 2.0), (T0 + 20, 3.5)], asynchronous=True)
        assert lines == ["ckpt-1", "ckpt-2", "ckpt-3"], lines
        latest = tf.train.latest_checkpoint(tmp)
        assert latest == os.path.join(tmp, "ckpt-3"), latest
        state = tf.train.get_checkpoint_state(tmp)
        assert list(state.all_model_checkpoint_timestamps) == [T0 + 10, T0 + 20]
        v = tf.Variable(np.array([0.0], np.float32))
        ckpt = tf.train.Checkpoint(v=v)
        mgr = tf.train.CheckpointManager(ckpt, tmp, max_to_keep=2)
        assert mgr.checkpoints == [os.path.join(tmp, "ckpt-2"), latest], mgr.checkpoints
        assert mgr.restore_or_initialize() == latest
        assert v.numpy().tolist() == [3.5]
        assert int(ckpt.save_counter.numpy()) == 3
        w = tf.Variable(np.array([0.0], np.float32))
        fresh = tf.train.Checkpoint(v=w)
        fresh.restore(latest).assert_consumed()
        assert w.numpy().tolist() == [3.5]
        assert int(fresh.save_counter.numpy()) == 3


if __name__ == "__main__":
    main()
