"""saveplan against an Azure blob server: azurite's, started here on 127.0.0.1 (no network
beyond the loopback), reached through object_store's standard variables
(AZURE_STORAGE_USE_EMULATOR=true, AZURITE_BLOB_STORAGE_URL). Usage:
python tests/storage/test_azure.py SAVEPLAN_BINARY AZURITE_BLOB_BINARY [--cargo-test].

Checks the CLI on az:// as it works locally (save, inspect, verify and restore give what the
local save gives; an overwrite), two concurrent writers (one wins, the other fails in one
line), a missing container failing in one line within seconds; with --cargo-test it also runs
the Rust suite `cargo test --test it storage::` with SAVEPLAN_TEST_AZ set. The last line is
`N passed, M failed`.
"""
import base64
import email.utils
import hashlib
import hmac
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.abspath(sys.argv[1])
AZURITE = sys.argv[2]
CONTAINER = "ckpts"
ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key (public: every emulator has it).
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
MODEL = os.path.join(ROOT, "examples", "model.json")
VALUES = os.path.join(ROOT, "examples", "model.safetensors")
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def create_container(port, name):
    """PUT ?restype=container, signed with the account key (Shared Key)."""
    date = email.utils.formatdate(usegmt=True)
    version = "2021-08-06"
    path = "/%s/%s" % (ACCOUNT, name)
    to_sign = "\n".join(["PUT"] + [""] * 11 + [
        "x-ms-date:%s" % date,
        "x-ms-version:%s" % version,
        "/%s%s" % (ACCOUNT, path),
    ]) + "\nrestype:container"
    mac = hmac.new(base64.b64decode(KEY), to_sign.encode(), hashlib.sha256).digest()
    request = urllib.request.Request("http://127.0.0.1:%d%s?restype=container" % (port, path), method="PUT",
                                     headers={"x-ms-date": date, "x-ms-version": version,
                                              "Authorization": "SharedKey %s:%s" % (ACCOUNT, base64.b64encode(mac).decode())})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201, response.status


def run(*args, env=None, ok=True, timeout=120):
    proc = subprocess.run([BIN, *args], capture_output=True, text=True, env=env or ENV, timeout=timeout)
    if ok and proc.returncode != 0:
        raise AssertionError("saveplan %s failed (%d): %s" % (" ".join(args), proc.returncode, proc.stderr))
    return proc


@check
def save_inspect_verify_restore_work_as_locally():
    url = "az://%s/run/ckpt" % CONTAINER
    local = os.path.join(TMP, "local", "ckpt")
    run("save", MODEL, "--values", VALUES, "--prefix", local)
    run("save", MODEL, "--values", VALUES, "--prefix", url)
    assert run("inspect", url).stdout == run("inspect", local).stdout
    assert "all checksums match" in run("verify", url).stdout
    out_az, out_local = os.path.join(TMP, "r-az.safetensors"), os.path.join(TMP, "r-local.safetensors")
    run("restore", MODEL, "--prefix", url, "--out", out_az)
    run("restore", MODEL, "--prefix", local, "--out", out_local)
    assert open(out_az, "rb").read() == open(out_local, "rb").read()
    # An overwrite (backups, journal, commit) and the index read back byte for byte.
    run("save", MODEL, "--values", VALUES, "--prefix", url)
    run("convert", url, os.path.join(TMP, "az.safetensors"))
    run("convert", local, os.path.join(TMP, "local.safetensors"))
    assert open(os.path.join(TMP, "az.safetensors"), "rb").read() == open(os.path.join(TMP, "local.safetensors"), "rb").read()


@check
def two_concurrent_writers_one_wins_the_other_fails_in_one_line():
    url = "az://%s/race/ckpt" % CONTAINER
    wins = losses = 0
    for _ in range(3):
        procs = [subprocess.Popen([BIN, "save", MODEL, "--values", VALUES, "--prefix", url], env=ENV,
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
    RESULTS.append("two concurrent writers, 3 rounds: %d saves won, %d failed in one line" % (wins, losses))


@check
def a_missing_container_fails_in_one_line_within_seconds():
    t0 = time.time()
    proc = run("save", MODEL, "--values", VALUES, "--prefix", "az://no-such-container/x/ckpt", ok=False, timeout=60)
    took = time.time() - t0
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "no-such-container" in lines[0] and "no such container" in lines[0] and took < 15, (took, lines)
    RESULTS.append("missing container: %.2f s: %s" % (took, lines[0]))


@check
def the_rust_suite_runs_against_azure():
    if "--cargo-test" not in sys.argv:
        return
    env = dict(ENV, SAVEPLAN_TEST_AZ="az://%s/it" % CONTAINER)
    proc = subprocess.run(["cargo", "test", "--locked", "--test", "it", "storage::"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    RESULTS.append("cargo test --test it storage:: against azurite: " + proc.stdout.strip().splitlines()[-1])


def main():
    global ENV, TMP, RESULTS
    RESULTS = []
    port = free_port()
    server = subprocess.Popen([AZURITE, "--inMemoryPersistence", "--blobHost", "127.0.0.1", "--blobPort", str(port),
                               "--silent"], cwd=tempfile.gettempdir(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    TMP = tempfile.mkdtemp()
    passed = failed = 0
    try:
        for _ in range(150):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        create_container(port, CONTAINER)
        ENV = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_"))}
        ENV.update(AZURE_STORAGE_USE_EMULATOR="true", AZURITE_BLOB_STORAGE_URL="http://127.0.0.1:%d" % port)
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
        os.killpg(server.pid, 9)
        server.wait()
        shutil.rmtree(TMP, ignore_errors=True)
    for line in RESULTS:
        print("  " + line)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed or not passed else 0)


if __name__ == "__main__":
    main()
