#!/usr/bin/env bash
# Object-store suite on Azure: saveplan against azurite's blob server (the npm package
# `azurite`, started by the test itself on 127.0.0.1, in memory), reached through
# object_store's standard variables (AZURE_STORAGE_USE_EMULATOR=true, AZURITE_BLOB_STORAGE_URL).
# Installs azurite with npm into a folder if needed, builds the binary, runs
# tests/storage/test_azure.py (which also runs `cargo test --test it storage::` against the
# server) and prints its `N passed, M failed` line.
#
# Environment:
#   SAVEPLAN_AZURITE_DIR  folder of the npm install (default: .azurite in the repository root)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
dir="${SAVEPLAN_AZURITE_DIR:-$root/.azurite}"
azurite="$dir/node_modules/.bin/azurite-blob"

if ! [ -x "$azurite" ]; then
    echo "installing azurite into $dir"
    mkdir -p "$dir"
    npm install --prefix "$dir" --no-audit --no-fund --silent azurite@3.37.0
fi

cargo build --locked --quiet --bin saveplan
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
python3 tests/storage/test_azure.py "$target_dir/debug/saveplan" "$azurite" --cargo-test
