"""saveplan against a real S3 server: moto's, started here on 127.0.0.1 (no network beyond the
loopback). Usage: python tests/storage/test_s3.py SAVEPLAN_BINARY [--cargo-test].

Checks the CLI on s3:// as it works locally (save byte-identical to the local save, inspect,
verify, restore, convert both ways, object specs with `--expect consumed`, a directory and a
`checkpoint` state file as prefixes), killed saves (kill -9 at random times: the previous
checkpoint stays whole, no partial checkpoint is visible, the next save cleans up), two
concurrent writers (one wins, the other fails in one line), a recovery whose journal cannot be
read (it fails in one line and deletes nothing), a lookup of one tensor fetching
that tensor's bytes alone (ranged GETs) where a restore streams the object, and failures in one line within
seconds (bad credentials, a missing bucket, an unreachable endpoint), and the console example of
docs/object-stores.md as printed (its own moto server on port 5000). With --cargo-test it also
runs the Rust suite `cargo test --test it storage::` with SAVEPLAN_TEST_S3 set. The last line
is `N passed, M failed`.
"""
import json
import logging
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback

import boto3
from moto.server import ThreadedMotoServer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from docs_blocks import console_block, matches  # noqa: E402
BIN = os.path.abspath(sys.argv[1])
BUCKET = "bkt"
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def s3_env(port, **extra):
    env = dict(os.environ)
    env.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_REGION="us-east-1",
        AWS_ENDPOINT_URL="http://127.0.0.1:%d" % port,
        AWS_ALLOW_HTTP="true",
    )
    env.update(extra)
    return env


def run(*args, env=None, ok=True, timeout=120):
    proc = subprocess.run([BIN, *args], capture_output=True, text=True, env=env or ENV, timeout=timeout)
    if ok and proc.returncode != 0:
        raise AssertionError("saveplan %s failed (%d): %s" % (" ".join(args), proc.returncode, proc.stderr))
    return proc


def one_line_error(proc):
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def objects(prefix=""):
    got = {}
    for page in S3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for obj in page.get("Contents", []):
            got[obj["Key"]] = S3.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read()
    return got


def write_safetensors(path, tensors):
    """`tensors`: {name: (dtype, shape, bytes)}."""
    header, data = {}, b""
    for name, (dtype, shape, raw) in sorted(tensors.items()):
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text + data)


def big_spec(tmp, n, rows, fill):
    """A spec of `n` float variables of [rows, 256] and a values file of them filled with
    `fill`."""
    spec = {"variables": [{"checkpoint_key": "v%03d" % i, "dtype": "float32", "shape": [rows, 256]} for i in range(n)]}
    spec_path = os.path.join(tmp, "big.json")
    with open(spec_path, "w") as out:
        json.dump(spec, out)
    values = os.path.join(tmp, "big-%d.safetensors" % fill)
    raw = struct.pack("<f", float(fill)) * (rows * 256)
    write_safetensors(values, {"v%03d" % i: ("F32", [rows, 256], raw) for i in range(n)})
    return spec_path, values


MODEL = os.path.join(ROOT, "examples", "model.json")
VALUES = os.path.join(ROOT, "examples", "model.safetensors")


@check
def save_is_byte_identical_to_the_local_save_and_leaves_no_parts():
    local = os.path.join(TMP, "local", "ckpt")
    run("save", MODEL, "--values", VALUES, "--prefix", local)
    run("save", MODEL, "--values", VALUES, "--prefix", "s3://%s/run/ckpt" % BUCKET)
    got = objects("run/")
    assert sorted(got) == ["run/ckpt.data-00000-of-00001", "run/ckpt.index"], sorted(got)
    for key, body in got.items():
        with open(os.path.join(TMP, "local", key.split("/")[-1]), "rb") as f:
            assert f.read() == body, key
    # Saving again (an overwrite) gives the same objects and nothing more.
    run("save", MODEL, "--values", VALUES, "--prefix", "s3://%s/run/ckpt" % BUCKET)
    assert objects("run/") == got


@check
def inspect_verify_restore_and_convert_work_as_locally():
    url = "s3://%s/run/ckpt" % BUCKET
    local = os.path.join(TMP, "local", "ckpt")
    assert run("inspect", url).stdout == run("inspect", local).stdout
    assert run("inspect", url, "--tensor", "embedding").stdout == run("inspect", local, "--tensor", "embedding").stdout
    assert "all checksums match" in run("verify", url).stdout
    out_s3, out_local = os.path.join(TMP, "r-s3.safetensors"), os.path.join(TMP, "r-local.safetensors")
    run("restore", MODEL, "--prefix", url, "--out", out_s3)
    run("restore", MODEL, "--prefix", local, "--out", out_local)
    assert open(out_s3, "rb").read() == open(out_local, "rb").read()
    # convert both ways, and s3 to s3.
    run("convert", url, "s3://%s/conv/model.safetensors" % BUCKET)
    run("convert", "s3://%s/conv/model.safetensors" % BUCKET, "s3://%s/conv/ckpt" % BUCKET)
    run("convert", local, os.path.join(TMP, "conv.safetensors"))
    assert objects("conv/model.safetensors")["conv/model.safetensors"] == open(os.path.join(TMP, "conv.safetensors"), "rb").read()
    assert "all checksums match" in run("verify", "s3://%s/conv/ckpt" % BUCKET).stdout
    run("restore", MODEL, "--prefix", url, "--out", "s3://%s/out/r.safetensors" % BUCKET)
    assert objects("out/")["out/r.safetensors"] == open(out_local, "rb").read()
    # --values from the store.
    run("save", MODEL, "--values", "s3://%s/conv/model.safetensors" % BUCKET, "--prefix", "s3://%s/run2/ckpt" % BUCKET)
    assert objects("run2/")["run2/ckpt.index"] == objects("run/")["run/ckpt.index"]


@check
def a_directory_and_a_state_file_resolve_to_the_latest_checkpoint():
    S3.put_object(Bucket=BUCKET, Key="run/checkpoint",
                  Body=b'model_checkpoint_path: "ckpt"\nall_model_checkpoint_paths: "ckpt"\n')
    for prefix in ["s3://%s/run" % BUCKET, "s3://%s/run/" % BUCKET, "s3://%s/run/checkpoint" % BUCKET]:
        assert "all checksums match" in run("verify", prefix).stdout, prefix


@check
def object_specs_save_and_restore_with_expect_consumed():
    base = os.path.join(ROOT, "tests", "fixtures", "tf-2.21", "obj", "o4_restore_semantics", "base")
    spec = os.path.join(TMP, "objspec.json")
    with open(spec, "w") as out:
        out.write(run("spec", base).stdout)
    url = "s3://%s/obj/ckpt" % BUCKET
    run("save", spec, "--values", base, "--prefix", url)
    local = os.path.join(TMP, "obj", "ckpt")
    run("save", spec, "--values", base, "--prefix", local)
    got = objects("obj/")
    for key, body in got.items():
        assert open(os.path.join(TMP, "obj", key.split("/")[-1]), "rb").read() == body, key
    run("restore", spec, "--prefix", url, "--out", os.path.join(TMP, "obj.safetensors"), "--expect", "consumed")


def data_gets(call):
    """The (path, HTTP status) of every GET of a data object moto answers while `call` runs,
    from its request log (206 a ranged GET, 200 a whole object's)."""
    seen = []

    class Collect(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    log = logging.getLogger("werkzeug")
    kept = (log.handlers[:], log.level, log.propagate)
    log.handlers, log.propagate = [Collect()], False
    log.setLevel(logging.INFO)
    try:
        call()
    finally:
        log.handlers, level, log.propagate = kept
        log.setLevel(level)
    gets = []
    for line in seen:
        line = re.sub(r"\x1b\[[0-9;]*m", "", line)
        found = re.search(r'"GET (/\S+) HTTP/[0-9.]+" (\d+)', line)
        if found and ".data-" in found.group(1):
            gets.append((found.group(1), int(found.group(2))))
    return gets


@check
def a_lookup_fetches_its_tensor_alone_and_a_restore_reads_ahead():
    """`inspect --tensor` of one tensor of a 32 MiB checkpoint sends only ranged GETs of its data
    object (never the whole object); a restore, which reads everything in order, streams it."""
    spec, values = big_spec(TMP, 8, 4096, 3)  # 8 x 4 MiB in one data object
    url = "s3://%s/lookup/ckpt" % BUCKET
    run("save", spec, "--values", values, "--prefix", url)
    lookup = data_gets(lambda: run("inspect", url, "--tensor", "v005"))
    assert lookup and all(status == 206 for _, status in lookup), lookup
    out = os.path.join(TMP, "lookup.safetensors")
    restore = data_gets(lambda: run("restore", spec, "--prefix", url, "--out", out))
    assert any(status == 200 for _, status in restore), restore


@check
def killed_saves_never_leave_a_partial_checkpoint():
    spec, v1 = big_spec(TMP, 8, 4096, 1)  # 8 x 4 MiB
    _, v2 = big_spec(TMP, 8, 4096, 2)
    url = "s3://%s/kill/ckpt" % BUCKET
    t0 = time.time()
    run("save", spec, "--values", v1, "--prefix", url)
    full = time.time() - t0
    shown = {v: None for v in (v1, v2)}
    current = v1
    shown[v1] = run("inspect", url, "--tensor", "v007").stdout
    random.seed(32)
    outcomes = {"old": 0, "new": 0}
    started = time.time()
    for attempt in range(10):
        other = v2 if current == v1 else v1
        proc = subprocess.Popen([BIN, "save", spec, "--values", other, "--prefix", url],
                                env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(random.uniform(0, full * 1.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # No partial checkpoint: the index there, whole, with every data object it needs.
        verified = run("verify", url)
        assert "all checksums match" in verified.stdout, verified.stdout
        keys = set(objects("kill/"))
        assert "kill/ckpt.index" in keys, keys
        which = run("inspect", url, "--tensor", "v007").stdout
        if shown[other] is None and which != shown[current]:
            shown[other] = which
        assert which in (shown[current], shown[other]), which
        if which == shown[current]:
            outcomes["old"] += 1
        else:
            outcomes["new"] += 1
            current = other
    # The next save cleans up: only the checkpoint's own objects stay.
    run("save", spec, "--values", v1, "--prefix", url)
    keys = sorted(objects("kill/"))
    assert keys == ["kill/ckpt.data-00000-of-00001", "kill/ckpt.index"], keys
    RESULTS.append("kill -9 during a 32 MiB save (full save %.2f s): 10 kills, %d left the old checkpoint, %d the new; %.1f s in all"
                   % (full, outcomes["old"], outcomes["new"], time.time() - started))


@check
def a_journal_that_cannot_be_read_stops_the_recovery():
    """A save killed while replacing a checkpoint (journal put, new data over the old names)
    leaves the old checkpoint in its backups alone. When the journal's GET fails (here a proxy
    answers 403 to it), recovery fails in one line and deletes nothing; once the journal reads,
    it rolls the old checkpoint back."""
    import http.client
    import http.server
    import threading
    spec, v1 = big_spec(TMP, 2, 64, 5)
    url = "s3://%s/journal/ckpt" % BUCKET
    run("save", spec, "--values", v1, "--prefix", url)
    before = run("inspect", url, "--tensor", "v001").stdout
    base = "journal/ckpt"
    lines = ["saveplan object journal 1"]
    for key in (base + ".data-00000-of-00001", base + ".index"):
        S3.copy_object(Bucket=BUCKET, Key=key + ".old-1-2-3", CopySource={"Bucket": BUCKET, "Key": key})
        lines.append("s3://%s/%s\ts3://%s/%s.old-1-2-3" % (BUCKET, key, BUCKET, key))
    S3.put_object(Bucket=BUCKET, Key=base + ".merging", Body=("\n".join(lines) + "\n").encode())
    S3.put_object(Bucket=BUCKET, Key=base + ".data-00000-of-00001", Body=b"new data, cut short")
    killed = objects("journal/")
    target = int(ENV["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])

    class Proxy(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def forward(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if self.command == "GET" and self.path.split("?")[0].endswith(".merging"):
                denied = b"<Error><Code>AccessDenied</Code><Message>denied</Message></Error>"
                self.send_response(403)
                self.send_header("Content-Length", str(len(denied)))
                self.end_headers()
                self.wfile.write(denied)
                return
            conn = http.client.HTTPConnection("127.0.0.1", target)
            conn.request(self.command, self.path, body=body, headers=dict(self.headers.items()))
            answer = conn.getresponse()
            data = answer.read()
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = forward

    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        denied = run("recover", url, env=s3_env(proxy.server_address[1]), ok=False)
    finally:
        proxy.shutdown()
    line = one_line_error(denied)
    assert "journal/ckpt.merging: read" in line, line
    assert objects("journal/") == killed, sorted(objects("journal/"))
    recovered = run("recover", url)
    assert "rolled back" in recovered.stdout, recovered.stdout
    assert run("inspect", url, "--tensor", "v001").stdout == before
    assert sorted(objects("journal/")) == [base + ".data-00000-of-00001", base + ".index"]


@check
def two_concurrent_writers_one_wins_the_other_fails_in_one_line():
    spec, v1 = big_spec(TMP, 8, 4096, 1)
    url = "s3://%s/race/ckpt" % BUCKET
    wins = losses = 0
    for _ in range(3):
        procs = [subprocess.Popen([BIN, "save", spec, "--values", v1, "--prefix", url], env=ENV,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        results = [(p.wait(), p.stderr.read()) for p in procs]
        assert any(code == 0 for code, _ in results), results
        for code, err in results:
            if code == 0:
                wins += 1
            else:
                losses += 1
                lines = err.strip().splitlines()
                assert code == 1 and len(lines) == 1 and "another save is writing" in lines[0], err
        assert "all checksums match" in run("verify", url).stdout
    assert losses > 0, "the writers never overlapped"
    RESULTS.append("two concurrent writers, 3 rounds: %d saves won, %d failed in one line" % (wins, losses))


def repeated_word(line):
    """The first word said twice in a row in `line` (`read: read:`), ignoring punctuation."""
    words = [w.strip(".,:;()`'\"").lower() for w in line.split()]
    words = [w for w in words if w]
    for a, b in zip(words, words[1:]):
        if a == b:
            return a
    return None


def timed_failure(args, env):
    t0 = time.time()
    line = one_line_error(run(*args, env=env, ok=False, timeout=60))
    took = time.time() - t0
    assert took < 15, (took, line)
    # The object and the operation are named once (the store layer says only the reason).
    assert repeated_word(line) is None, line
    return line, took


@check
def failures_are_one_line_within_seconds():
    save = ["save", MODEL, "--values", VALUES, "--prefix"]
    line, took = timed_failure(save + ["s3://no-such-bucket/x/ckpt"], ENV)
    assert "no-such-bucket" in line, line
    RESULTS.append("missing bucket: %.2f s: %s" % (took, line))
    line, took = timed_failure(save + ["s3://%s/x/ckpt" % BUCKET], s3_env(free_port()))
    RESULTS.append("unreachable endpoint: %.2f s: %s" % (took, line))
    assert repeated_word("x: read: read: denied") == "read"
    line, took = timed_failure(["inspect", "s3://%s/run/ckpt" % BUCKET], s3_env(AUTH_PORT))
    assert "access denied" in line and line.count("s3://") == 1, line
    assert "s3://%s/run/ckpt.index: read: access denied" % BUCKET in line, line
    RESULTS.append("bad credentials: %.2f s: %s" % (took, line))


DOCS_PAGE = "docs/object-stores.md"


@check
def the_console_example_of_the_object_stores_page_runs_as_printed():
    """docs/object-stores.md's moto example, its commands verbatim in one shell (its exports
    and its background server carry from one command to the next), in a folder holding
    `examples/`, with `saveplan` the binary under test and this venv's python, pip and
    moto_server on the PATH; each command's output is what the page prints."""
    steps = console_block(os.path.join(ROOT, DOCS_PAGE), "run by tests/storage/test_s3.py")
    assert len(steps) >= 8, steps
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", 5000))
        except OSError:
            raise AssertionError("port 5000, the page's, is taken: the example cannot run")
    folder = tempfile.mkdtemp(dir=TMP)
    os.symlink(os.path.join(ROOT, "examples"), os.path.join(folder, "examples"))
    os.mkdir(os.path.join(folder, "bin"))
    os.symlink(BIN, os.path.join(folder, "bin", "saveplan"))
    script = ["exec 2>&1"]
    for index, (command, _) in enumerate(steps):
        script.append("echo '@@step %d@@'" % index)
        script.append(command)
        script.append("rc=$?; if [ $rc -ne 0 ]; then echo \"@@exit $rc@@\"; exit 1; fi")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PATH"] = os.pathsep.join([os.path.join(folder, "bin"), os.path.dirname(sys.executable), env.get("PATH", "")])
    proc = subprocess.Popen(["bash", "-c", "\n".join(script)], cwd=folder, env=env, stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=180)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    printed = out.split("\n")
    if printed and printed[-1] == "":
        printed.pop()
    starts = [i for i, line in enumerate(printed) if line.startswith("@@step ")]
    assert proc.returncode == 0 and len(starts) == len(steps), out
    for index, (command, expected) in enumerate(steps):
        end = starts[index + 1] if index + 1 < len(steps) else len(printed)
        got = printed[starts[index] + 1:end]
        assert matches(expected, got), "$ %s\nprinted %r, the page says %r" % (command, got, expected)
    restored = os.path.join(folder, "restored.safetensors")
    assert os.path.getsize(restored) > 0, restored
    RESULTS.append("%s: the moto example ran as printed (%d commands)" % (DOCS_PAGE, len(steps)))


@check
def the_rust_suite_runs_against_s3():
    if "--cargo-test" not in sys.argv:
        return
    env = dict(ENV, SAVEPLAN_TEST_S3="s3://%s/it" % BUCKET)
    proc = subprocess.run(["cargo", "test", "--locked", "--test", "it", "storage::"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    tail = "\n".join(proc.stdout.strip().splitlines()[-3:])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    RESULTS.append("cargo test --test it storage:: against s3: " + tail.splitlines()[-1])


def main():
    global ENV, S3, TMP, AUTH_PORT, RESULTS
    RESULTS = []
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    # A second server that checks credentials (moto's IAM: none but those it made are valid).
    AUTH_PORT = free_port()
    auth = subprocess.Popen([sys.executable, "-c",
                             "import sys; from moto.server import main; main(sys.argv[1:])",
                             "-H", "127.0.0.1", "-p", str(AUTH_PORT)],
                            env=dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="0"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ENV = s3_env(port)
    os.environ.update({k: v for k, v in ENV.items() if k.startswith("AWS_")})
    S3 = boto3.client("s3", endpoint_url=ENV["AWS_ENDPOINT_URL"], region_name="us-east-1")
    S3.create_bucket(Bucket=BUCKET)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", AUTH_PORT), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    TMP = tempfile.mkdtemp()
    passed = failed = 0
    try:
        for fn in CHECKS:
            try:
                fn()
                passed += 1
                print("ok   %s" % fn.__name__, flush=True)
            except Exception:
                failed += 1
                print("FAIL %s" % fn.__name__, flush=True)
                traceback.print_exc()
    finally:
        server.stop()
        auth.kill()
        auth.wait()
        shutil.rmtree(TMP, ignore_errors=True)
    for line in RESULTS:
        print("  " + line)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed or not passed else 0)


if __name__ == "__main__":
    main()
