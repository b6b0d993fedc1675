"""saveplan against TensorFlow 2.21 in one run, on a MobileNet-sized checkpoint.

Run with the TensorFlow venv's Python (saveplan installed there too):

    python bench.py [--repeat N] [--dir DIR]

Cases, each in its own subprocess (its peak RSS is the subprocess's): `import saveplan` (which
loads its API, and NumPy, on first use) and `import saveplan` plus that first use vs
`import tensorflow`; reading every tensor (TensorFlow's `load_checkpoint` + `get_tensor` loop
vs `saveplan.load`, and `saveplan.load(mmap=True)`); writing the model's checkpoint
(`tf.train.Checkpoint(model=m).write` vs `saveplan.Checkpoint(**tree).write` of the same
tree). Times are the best of N runs (imports: N subprocesses; the rest: N runs in one
subprocess, files in the page cache). Prints each case, the ratios against the targets
(import >= 20x, read >= 3x, peak RSS <= data + 64 MiB) and the load average.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

CASES = {
    "import_tensorflow": """
import time, resource
t = time.perf_counter()
import tensorflow
times = [time.perf_counter() - t]
""",
    "import_saveplan": """
import time, resource
t = time.perf_counter()
import saveplan
times = [time.perf_counter() - t]
""",
    "import_saveplan_numpy": """
import time, resource
t = time.perf_counter()
import saveplan
saveplan.load  # the API's first use imports NumPy
times = [time.perf_counter() - t]
""",
    "read_tensorflow": """
import time, resource
import tensorflow as tf
times = []
for _ in range(REPEAT):
    t = time.perf_counter()
    reader = tf.train.load_checkpoint(PREFIX)
    values = {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()}
    times.append(time.perf_counter() - t)
    del values, reader
""",
    "read_saveplan": """
import time, resource
import saveplan
load = saveplan.load  # imports the API (and NumPy) before timing, as TensorFlow is imported
times = []
for _ in range(REPEAT):
    t = time.perf_counter()
    values = load(PREFIX)
    times.append(time.perf_counter() - t)
    del values
""",
    "read_saveplan_mmap": """
import time, resource
import saveplan
load = saveplan.load
times = []
for _ in range(REPEAT):
    t = time.perf_counter()
    values = load(PREFIX, mmap=True)
    times.append(time.perf_counter() - t)
    del values
""",
    "write_tensorflow": """
import time, resource
import tensorflow as tf
model = tf.keras.applications.MobileNetV2(weights=None)
checkpoint = tf.train.Checkpoint(model=model)
checkpoint.read(PREFIX).assert_existing_objects_matched()
times = []
for i in range(REPEAT):
    t = time.perf_counter()
    checkpoint.write(OUT + "/tf-%d" % i)
    times.append(time.perf_counter() - t)
""",
    "write_saveplan": """
import time, resource
import saveplan
tree = saveplan.load_tree(PREFIX)
checkpoint = saveplan.Checkpoint(**tree)
times = []
for i in range(REPEAT):
    t = time.perf_counter()
    checkpoint.write(OUT + "/sp-%d" % i)
    times.append(time.perf_counter() - t)
""",
}

FOOTER = """
import json
print("RESULT " + json.dumps({"times": times,
    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(name, prefix, out, repeat):
    code = CASES[name].replace("REPEAT", str(repeat)).replace("PREFIX", repr(prefix))
    code = code.replace("OUT", repr(out)) + FOOTER
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    args = parser.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="saveplan-bench-")
    prefix = os.path.join(work, "mobilenet", "ckpt")
    if not os.path.exists(prefix + ".index"):
        setup = (
            "import tensorflow as tf\n"
            "model = tf.keras.applications.MobileNetV2(weights=None)\n"
            f"tf.train.Checkpoint(model=model).write({prefix!r})\n"
        )
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        subprocess.run([sys.executable, "-c", setup], env=env, check=True)
    data = sum(os.path.getsize(os.path.join(os.path.dirname(prefix), f))
               for f in os.listdir(os.path.dirname(prefix)) if ".data-" in f)
    out = os.path.join(work, "out")
    os.makedirs(out, exist_ok=True)

    load_before = os.getloadavg()
    results = {}
    for name in CASES:
        if name.startswith("import_"):
            runs = [run(name, prefix, out, 1) for _ in range(args.repeat)]
            results[name] = {
                "times": [r["times"][0] for r in runs],
                "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
            }
        else:
            results[name] = run(name, prefix, out, args.repeat)
    load_after = os.getloadavg()

    data_mib = data / 2**20
    print(f"checkpoint: {prefix} ({data_mib:.1f} MiB of tensor data)")
    print(f"{'case':<22}{'best ms':>10}{'median ms':>11}{'peak RSS MiB':>14}")
    best = {}
    for name, result in results.items():
        times = sorted(result["times"])
        best[name] = times[0]
        print(f"{name:<22}{times[0] * 1e3:>10.1f}{times[len(times) // 2] * 1e3:>11.1f}"
              f"{result['peak_rss_mib']:>14.1f}")
    ratios = {
        "import": (best["import_tensorflow"] / best["import_saveplan"], 20),
        "import + NumPy": (best["import_tensorflow"] / best["import_saveplan_numpy"], 20),
        "read": (best["read_tensorflow"] / best["read_saveplan"], 3),
        "read (mmap)": (best["read_tensorflow"] / best["read_saveplan_mmap"], 3),
        "write": (best["write_tensorflow"] / best["write_saveplan"], None),
    }
    for label, (ratio, target) in ratios.items():
        verdict = "" if target is None else (" (target >= %dx: %s)" % (target, "met" if ratio >= target else "MISSED"))
        print(f"{label}: saveplan {ratio:.1f}x faster than TensorFlow{verdict}")
    limit = data_mib + 64
    for name in ("read_saveplan", "read_saveplan_mmap", "write_saveplan"):
        rss = results[name]["peak_rss_mib"]
        print(f"{name} peak RSS {rss:.1f} MiB (target <= data + 64 = {limit:.1f} MiB: "
              f"{'met' if rss <= limit else 'MISSED'})")
    print("load average before %.2f %.2f %.2f, after %.2f %.2f %.2f (%d cores)"
          % (*load_before, *load_after, os.cpu_count()))


if __name__ == "__main__":
    main()
