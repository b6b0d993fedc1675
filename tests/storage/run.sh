#!/usr/bin/env bash
# Object-store suite: saveplan against a real S3 server (moto's, started by the test itself on
# 127.0.0.1). Installs moto[server] and boto3 into a venv if needed, builds the binary, runs
# tests/storage/test_s3.py (which also runs `cargo test --test it storage::` against the
# server) and prints its `N passed, M failed` line.
#
# Environment:
#   SAVEPLAN_STORAGE_VENV  venv to use or create (default: .venv-storage in the repository root)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
venv="${SAVEPLAN_STORAGE_VENV:-$root/.venv-storage}"

if ! "$venv/bin/python" -c 'import moto.server, boto3, flask' 2>/dev/null; then
    echo "installing moto[server] and boto3 into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'moto[server]>=5.1' boto3
fi

cargo build --locked --quiet --bin saveplan
target_dir="$(cargo metadata --format-version 1 --no-deps | "$venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
"$venv/bin/python" tests/storage/test_s3.py "$target_dir/debug/saveplan" --cargo-test
