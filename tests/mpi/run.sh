#!/usr/bin/env bash
# The MPI suite: builds saveplan with the `mpi` feature and runs, under Open MPI's `mpirun`,
# the rendezvous conformance scenarios (examples/mpi_rendezvous.rs) on 1 to 4 ranks.
# Needs `mpirun` and an MPI library with its headers (Debian: openmpi-bin libopenmpi-dev) and
# libclang (bindgen); `.ci/run` installs them. Prints one `N passed, M failed` line.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

# Open MPI refuses to run as root without these; `--oversubscribe` lets 4 ranks share 2 cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun_() { timeout 300 mpirun --oversubscribe "$@"; }

cargo build --locked --quiet --features mpi --example mpi_rendezvous
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
example="$target_dir/debug/examples/mpi_rendezvous"

passed=0
failed=0
check() {
    local name="$1"; shift
    if "$@"; then passed=$((passed + 1)); echo "ok   $name"; else failed=$((failed + 1)); echo "FAIL $name"; fi
}

scenarios_on() {
    local out
    out="$(mpirun_ -n "$1" "$example" 2>&1)" && grep -q "scenarios passed on $1 task" <<<"$out" \
        || { echo "$out"; return 1; }
}
for n in 1 2 3 4; do
    check "rendezvous scenarios on $n rank(s)" scenarios_on "$n"
done

# A rank that fails makes every rank say so in one line and exit 1; a rank killed outright
# makes mpirun end the others. Either way everything is gone within 30 s.
drill() {
    local mode="$1" rank="$2" out status start elapsed
    start=$(date +%s)
    out="$(timeout 60 mpirun --quiet --oversubscribe -n 3 "$example" "$mode" "$rank" 2>&1)" && status=0 || status=$?
    elapsed=$(( $(date +%s) - start ))
    [ "$status" -ne 0 ] && [ "$elapsed" -le 30 ] || { echo "exit $status after ${elapsed}s: $out"; return 1; }
    if [ "$mode" = --fail ]; then
        [ "$(grep -o "error: task $rank failed: planned failure" <<<"$out" | wc -l)" -eq 3 ] \
            || { echo "expected one line per rank naming task $rank: $out"; return 1; }
    fi
}
for rank in 0 1 2; do
    check "rank $rank fails: every rank names it and exits" drill --fail "$rank"
    check "rank $rank is killed: every rank is gone within 30 s" drill --kill "$rank"
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
