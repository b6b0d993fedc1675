#!/usr/bin/env bash
# CI for the Python package (called from .ci/run): checks the native module's formatting and
# clippy, builds `./python` with pip as a user's `pip install ./python` does (pip fetches
# maturin), installs the wheel into a clean venv with NumPy, ml_dtypes, pytest and JAX and runs
# the tests that need no TensorFlow (tests/core, and tests/cli, which compares with the
# `saveplan` binary it builds), all but those marked `pytorch`; then, in a venv of its own
# and where the disk has room for PyTorch's CUDA wheels, those (docs/python.md's PyTorch
# recipe, PyTorch loading what the BERT recipe writes); then
# installs the same wheel into the TensorFlow 2.21 venv the interop suite uses (creating it if
# needed) and runs the TensorFlow-judged tests (tests/tf). Fails when any pytest run fails or
# collects nothing.
#
# Environment:
#   SAVEPLAN_TF_VENV  the TensorFlow venv (default: .venv-tf in the repository root)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
tf_venv="${SAVEPLAN_TF_VENV:-$root/.venv-tf}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
pip_quiet=(--quiet --disable-pip-version-check)

step() { printf '\n-- python: %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

# Runs pytest in a venv; any exit status but 0 fails (1 failures, 2 interrupted, 3 internal
# error, 4 usage error, 5 nothing collected).
run_pytest() {
    local venv="$1"
    shift
    local status=0
    (cd "$root/python" && "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@") || status=$?
    if [ "$status" -ne 0 ]; then
        echo "python: pytest $* failed (exit $status)"
        exit "$status"
    fi
}

step "cargo fmt --check and clippy of the native module"
cargo fmt --manifest-path python/Cargo.toml --check
PYO3_PYTHON="${PYO3_PYTHON:-python3}" cargo clippy --manifest-path python/Cargo.toml --all-targets --locked -- -D warnings

step "build the wheel (pip wheel ./python)"
python3 -m venv "$work/venv"
# JAX runs docs/python.md's JAX recipe (tests/core/test_docs_examples.py).
"$work/venv/bin/pip" install "${pip_quiet[@]}" numpy ml_dtypes pytest jax
"$work/venv/bin/pip" wheel "${pip_quiet[@]}" --no-deps --wheel-dir "$work/wheels" ./python
wheel="$(ls "$work"/wheels/saveplan-*.whl)"
echo "$(basename "$wheel")"

step "tests without TensorFlow (clean venv; tests/cli against the saveplan binary)"
"$work/venv/bin/pip" install "${pip_quiet[@]}" "$wheel"
cargo build --locked --quiet --bin saveplan
target_dir="$(cargo metadata --format-version 1 --no-deps | "$work/venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
SAVEPLAN_BIN="$target_dir/debug/saveplan" run_pytest "$work/venv" tests/core tests/cli -m "not pytorch"
rm -rf "$work/venv"

step "the tests that need PyTorch (a venv of their own)"
# PyPI's PyTorch comes with its CUDA libraries: about 8 GB installed, more while pip unpacks.
# On a machine without that much disk the tests marked `pytorch` (docs/python.md's PyTorch
# recipe, the BERT conversion script) are not run, and the log says so.
free_gb="$(df -BG --output=avail "$work" | tail -1 | tr -dc 0-9)"
if [ "$free_gb" -ge 14 ]; then
    python3 -m venv "$work/torch"
    "$work/torch/bin/pip" install "${pip_quiet[@]}" numpy ml_dtypes pytest torch
    "$work/torch/bin/pip" install "${pip_quiet[@]}" "$wheel"
    run_pytest "$work/torch" tests/core -m pytorch
    rm -rf "$work/torch"
else
    echo "python: not run: the tests marked pytorch (PyTorch needs about 14 GB free while it installs; $free_gb GB free)"
fi

step "TensorFlow-judged tests ($tf_venv)"
if ! "$tf_venv/bin/python" -c 'import tensorflow as tf; assert tf.__version__ == "2.21.0"' 2>/dev/null; then
    echo "installing tensorflow-cpu==2.21.0 into $tf_venv"
    python3 -m venv "$tf_venv"
    "$tf_venv/bin/pip" install "${pip_quiet[@]}" tensorflow-cpu==2.21.0
fi
"$tf_venv/bin/pip" install "${pip_quiet[@]}" pytest ml_dtypes
"$tf_venv/bin/pip" install "${pip_quiet[@]}" --force-reinstall --no-deps "$wheel"
TF_CPP_MIN_LOG_LEVEL=2 run_pytest "$tf_venv" tests/tf

step "done"
