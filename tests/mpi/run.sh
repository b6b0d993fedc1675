#!/usr/bin/env bash
# SAVEPLAN_KILL_ROUNDS: how many kill -9 rounds (default 6).
# The MPI suite: builds saveplan with the `mpi` feature, runs the feature's unit tests, then,
# under Open MPI's `mpirun`, the rendezvous conformance scenarios (examples/mpi_rendezvous.rs) on 1 to 4 ranks, a value
# over 1 GiB (MPI messages in parts) and what an idle rendezvous costs on 2, then
# `saveplan save|restore|run --cluster mpi` of every partition case of tests/fixtures/part/
# (one rank per task: the same files and the same --out as one process), of object specs
# (tests/mpi/objects*.json: the same files, report, --out and --expect outcome), `restore --out`
# written in place by the ranks (tests/mpi/mixed3.json, big3.json), where a rank cannot reach
# the file (gathered instead) and on a full disk, a wrong number of ranks, one rank failing,
# ranks killed at random times during a save, and examples/cluster_saves (a framework's
# session) on 3 ranks against one process.
# Needs `mpirun` and an MPI library with its headers (Debian: openmpi-bin libopenmpi-dev) and
# libclang (bindgen); `.ci/run` installs them. Prints one `N passed, M failed` line.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

# Open MPI refuses to run as root without these; `--oversubscribe` lets 4 ranks share 2 cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun_() { timeout 300 mpirun --oversubscribe "$@"; }

cargo build --locked --quiet --features mpi --example mpi_rendezvous --example cluster_saves --bin saveplan
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
example="$target_dir/debug/examples/mpi_rendezvous"
saves_example="$target_dir/debug/examples/cluster_saves"
bin="$target_dir/debug/saveplan"
work="$(mktemp -d)"
all_work="$work"
trap 'rm -rf "$all_work"' EXIT

passed=0
failed=0
# Each scenario works in a folder of its own under $work, removed when it ends: the drills write
# hundreds of MiB, and CI's disk may be small.
check() {
    local name="$1" top="$work"; shift
    work="$(mktemp -d -p "$top")"
    if "$@"; then passed=$((passed + 1)); echo "ok   $name"; else failed=$((failed + 1)); echo "FAIL $name"; fi
    rm -rf "$work"
    work="$top"
}

# The `mpi` feature's unit tests (no MPI started: the run's side of the MPI rendezvous, with
# the test playing its progress thread, and how the progress thread stopping fails every waiter).
unit_tests() {
    local out
    out="$(timeout 900 cargo test --locked --quiet --features mpi --lib exec::rendezvous::mpi 2>&1)" \
        && grep -qE "test result: ok\. [1-9][0-9]* passed" <<<"$out" || { echo "$out"; return 1; }
}
check "the mpi feature's unit tests (the rendezvous without MPI)" unit_tests

scenarios_on() {
    local out
    out="$(mpirun_ -n "$1" "$example" 2>&1)" && grep -q "scenarios passed on $1 task" <<<"$out" \
        || { echo "$out"; return 1; }
}
for n in 1 2 3 4; do
    check "rendezvous scenarios on $n rank(s)" scenarios_on "$n"
done
# A value past MPI's largest message (1 GiB and 5 bytes): split into parts and joined again.
big_value() {
    local out
    out="$(mpirun_ -n 2 "$example" --big 2>&1)" && grep -q "big value: 1073741829 bytes there and back" <<<"$out" \
        || { echo "$out"; return 1; }
}
check "a value over 1 GiB crosses MPI in parts, byte for byte" big_value
# An idle rendezvous sleeps: over 2 s with nothing to do, each rank's MPI progress thread wakes
# a few hundred times a second at most (it once looked at MPI every 100 µs: about 5,000 context
# switches and 0.15 s of CPU a second, each rank, for as long as the rendezvous lived).
idle_cost() {
    local out
    out="$(mpirun_ -n 2 "$example" --idle 2>&1)" || { echo "$out"; return 1; }
    awk '/^idle: task [0-9]+: / { seen++; if ($4 + 0 >= 60 || $9 + 0 >= 1000) bad++ }
         END { exit !(seen == 2 && !bad) }' <<<"$out" || { echo "$out"; return 1; }
}
check "an idle rendezvous costs under 60 ms of CPU and 1,000 context switches a second" idle_cost

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

# --- saveplan itself under mpirun -------------------------------------------------------------

# The tasks of each partition case: those its ops name (p6's cluster has 4 tasks, of which 3
# run something; p5's ops that name no task run on the first task named, task 1, so it has 2).
declare -A TASKS=([p1_two_tasks]=2 [p2_three_tasks_io_device]=3 [p3_sliced_across_tasks]=3
                  [p4_four_tasks]=4 [p5_default_device]=2 [p6_four_tasks_io_device]=3)

# One rank per task writes the same files as one process, and restores (rank 0 gathering every
# task's values) the same --out; the graph `compile` makes runs the same way (`run`).
cluster_case() {
    local case="$1" n="${TASKS[$1]}" spec="tests/fixtures/part/$1/case.json" dir="$work/$1"
    mkdir -p "$dir"
    python3 tests/mpi/values.py "$spec" "$dir/values.safetensors" 1
    "$bin" save "$spec" --values "$dir/values.safetensors" --prefix "$dir/one/ckpt"
    mpirun_ --quiet -n "$n" "$bin" save "$spec" --values "$dir/values.safetensors" \
        --prefix "$dir/many/ckpt" --cluster mpi
    diff -r "$dir/one" "$dir/many" || { echo "$case: the files differ"; return 1; }
    "$bin" restore "$spec" --prefix "$dir/one/ckpt" --out "$dir/one.safetensors"
    mpirun_ --quiet -n "$n" "$bin" restore "$spec" --prefix "$dir/many/ckpt" \
        --out "$dir/many.safetensors" --cluster mpi
    cmp "$dir/one.safetensors" "$dir/many.safetensors" || { echo "$case: --out differs"; return 1; }
    "$bin" diff "$dir/values.safetensors" "$dir/many.safetensors" >/dev/null \
        || { echo "$case: the values restored are not the values saved"; return 1; }
    "$bin" compile "$spec" --output "$dir/graph" --emit pb >/dev/null
    mpirun_ --quiet -n "$n" "$bin" run "$dir/graph/meta_graph.pb" --save "$dir/run/ckpt" \
        --values "$dir/values.safetensors" --cluster mpi
    diff -r "$dir/one" "$dir/run" || { echo "$case: run --save wrote other files"; return 1; }
}
for case in "${!TASKS[@]}"; do
    check "$case: save and restore on ${TASKS[$case]} ranks = one process" cluster_case "$case"
done

# `restore --out X.safetensors` on a folder every rank reaches: each rank writes the tensors of
# 64 KiB or more it holds whole in place, task 0 gathers the rest (small ones, and large ones
# sliced across tasks); the file is the one process's, byte for byte.
# A temporary file that a killed rank 0 left for the same --out (its process gone) is deleted.
in_place() {
    local spec="tests/mpi/$1.json" n="$2" dir="$work" name="${3:-many}.safetensors" dead
    # The temporary name keeps the name as text (a byte that is not UTF-8 becomes U+FFFD).
    local stale="${4:-${name:0:100}}"
    python3 tests/mpi/values.py "$spec" "$dir/values.safetensors" 1 || return 1
    "$bin" save "$spec" --values "$dir/values.safetensors" --prefix "$dir/ckpt" || return 1
    "$bin" restore "$spec" --prefix "$dir/ckpt" --out "$dir/one.safetensors" || return 1
    dead="$(sh -c 'echo $$')"
    echo stale >"$dir/.$stale.tmp$dead-1"
    mpirun_ --quiet -n "$n" "$bin" restore "$spec" --prefix "$dir/ckpt" \
        --out "$dir/$name" --cluster mpi || { echo "the restore failed"; return 1; }
    cmp "$dir/one.safetensors" "$dir/$name" || { echo "--out differs"; return 1; }
    [ "$(stat -c %a "$dir/$name")" = "$(stat -c %a "$dir/one.safetensors")" ] \
        || { echo "the modes differ"; return 1; }
    [ "$(ls -A "$dir" | grep -c '^\.')" -eq 0 ] || { echo "leftovers: $(ls -A "$dir")"; return 1; }
}
check "mixed3: restore --out in place on 3 ranks = one process" in_place mixed3 3
check "big3: restore --out in place on 3 ranks = one process" in_place big3 3
check "a 252-byte --out name: in place on 3 ranks = one process" in_place mixed3 3 "$(printf 'n%.0s' {1..240})"
check "an --out name that is not UTF-8: in place on 3 ranks = one process" \
    in_place mixed3 3 "$(printf 'caf\xe9')" "$(printf 'caf\xef\xbf\xbd.safetensors')"

# Task 0 fails after the others wrote their part (here its rename: --out ends in a slash):
# every rank exits non-zero, each line printed says why, and no file is left.
task0_fails_last() {
    local spec=tests/mpi/mixed3.json dir="$work" out status=0
    python3 tests/mpi/values.py "$spec" "$dir/values.safetensors" 1 || return 1
    "$bin" save "$spec" --values "$dir/values.safetensors" --prefix "$dir/ckpt" || return 1
    mkdir -p "$dir/out"
    out="$(mpirun_ --quiet -n 3 sh -c '"$@"; echo "rank $OMPI_COMM_WORLD_RANK exit $?"' sh \
        "$bin" restore "$spec" --prefix "$dir/ckpt" --out "$dir/out/x.safetensors/" --cluster mpi 2>&1)" \
        || status=$?
    [ "$(grep -c "^rank [0-2] exit 1$" <<<"$out")" -eq 3 ] || { echo "not every rank failed: $out"; return 1; }
    grep -q "^error: $dir/out/x.safetensors/: cannot write: not a directory$" <<<"$out" \
        || { echo "task 0's line is missing: $out"; return 1; }
    if grep -v '^rank [0-2] exit ' <<<"$out" | grep -v '^error: ' | grep -q .; then
        echo "a line that is not an error: $out"; return 1
    fi
    [ -z "$(ls -A "$dir/out")" ] || { echo "leftovers: $(ls -A "$dir/out")"; return 1; }
}
check "restore --out in place, task 0 fails last: every rank exits 1, nothing left" task0_fails_last

# Where a rank cannot reach task 0's file (here rank 1 sees a folder of its own over --out's,
# as another host would), every rank falls back to gathering to task 0: the same file.
not_shared() {
    local spec=tests/mpi/mixed3.json dir="$work" out
    mkdir -p "$dir/out"
    python3 tests/mpi/values.py "$spec" "$dir/values.safetensors" 1 || return 1
    "$bin" save "$spec" --values "$dir/values.safetensors" --prefix "$dir/ckpt" || return 1
    "$bin" restore "$spec" --prefix "$dir/ckpt" --out "$dir/one.safetensors" || return 1
    local args=(restore "$spec" --prefix "$dir/ckpt" --out "$dir/out/many.safetensors" --cluster mpi)
    out="$(mpirun_ --quiet -n 1 "$bin" "${args[@]}" \
        : -n 1 unshare -m sh -c 'mount -t tmpfs none "$0" && exec "$@"' "$dir/out" "$bin" "${args[@]}" \
        : -n 1 "$bin" "${args[@]}" 2>&1)" || { echo "the restore failed: $out"; return 1; }
    cmp "$dir/one.safetensors" "$dir/out/many.safetensors" || { echo "--out differs"; return 1; }
    [ "$(ls -A "$dir/out")" = "many.safetensors" ] || { echo "leftovers: $(ls -A "$dir/out")"; return 1; }
}
# A rank whose writes fail (the disk fills: --out on a 100 MiB tmpfs, big3's is 192 MiB) fails
# every rank in one line each, deletes the temporary file and leaves the old --out as it was.
in_place_fails() {
    local spec=tests/mpi/big3.json dir="$work" out
    mkdir -p "$dir/out"
    python3 tests/mpi/values.py "$spec" "$dir/values.safetensors" 1 || return 1
    "$bin" save "$spec" --values "$dir/values.safetensors" --prefix "$dir/ckpt" || return 1
    # In a mount namespace of its own: the tmpfs, the restore, and what it left there.
    local inner='mount -t tmpfs -o size=100M none "$1" && echo old >"$1/many.safetensors" || exit 99
        d="$1"; shift; status=0; timeout 300 mpirun --oversubscribe --quiet "$@" || status=$?
        echo "exit $status"; echo "files: $(ls -A "$d")"; echo "content: $(cat "$d/many.safetensors")"'
    out="$(unshare -m sh -c "$inner" sh "$dir/out" -n 3 "$bin" restore "$spec" --prefix "$dir/ckpt" \
        --out "$dir/out/many.safetensors" --cluster mpi 2>&1)"
    grep -qx "exit [1-9][0-9]*" <<<"$out" || { echo "the restore did not fail: $out"; return 1; }
    grep -qx "files: many.safetensors" <<<"$out" && grep -qx "content: old" <<<"$out" \
        || { echo "--out changed or a temporary file is left: $out"; return 1; }
    grep -q "^error: .*$dir/out/many.safetensors: cannot write: no storage space" <<<"$out" \
        || { echo "no line says why: $out"; return 1; }
    if grep -v '^error: ' <<<"$out" | grep -v '^exit \|^files: \|^content: ' | grep -q .; then
        echo "a line that is not an error: $out"; return 1
    fi
}
# (Both need a mount namespace of their own: root, as CI runs this suite.)
if unshare -m true 2>/dev/null; then
    check "restore --out where rank 1 cannot reach the file: gathered, the same file" not_shared
    check "restore --out in place when the disk fills: every rank fails, no temporary left" in_place_fails
else
    echo "skip: restore --out on an unshared folder and on a full disk (unshare -m is not permitted here)"
fi

# A number of ranks other than the plan's tasks: every rank says so, nothing is written.
wrong_size() {
    local spec=tests/fixtures/part/p3_sliced_across_tasks/case.json out status=0
    python3 tests/mpi/values.py "$spec" "$work/p3.safetensors"
    out="$(mpirun_ --quiet -n 2 "$bin" save "$spec" --values "$work/p3.safetensors" \
        --prefix "$work/size/ckpt" --cluster mpi 2>&1)" || status=$?
    [ "$status" -ne 0 ] && grep -q "the cluster has 2 process(es) but the plan has 3 task(s)" <<<"$out" \
        && [ ! -e "$work/size/ckpt.index" ] || { echo "exit $status: $out"; return 1; }
}
check "2 ranks for a 3-task plan: one clear error, nothing written" wrong_size

# Object specs (tests/mpi/objects{2,3}.json: variables on 2 and 3 tasks of /job:localhost, the
# object graph and save_counter on task 0): `save OBJSPEC --cluster mpi` writes the single
# process's files, `restore OBJSPEC --cluster mpi` prints its report (rank 0 alone) and writes its
# --out; `--expect consumed` passes where it passes in one process, and where it fails (objects2
# holds no save_counter, which restore creates) every rank fails with the one process's line.
object_case() {
    local name="$1" n="$2" spec="tests/mpi/$1.json" dir="$work/$1" status=0 out line expect
    mkdir -p "$dir"
    # (`check` runs this where `set -e` does not apply: each step says when it fails.)
    python3 tests/mpi/values.py "$spec" "$dir/values.safetensors" 1 || return 1
    "$bin" save "$spec" --values "$dir/values.safetensors" --prefix "$dir/one/ckpt" || return 1
    mpirun_ --quiet -n "$n" "$bin" save "$spec" --values "$dir/values.safetensors" \
        --prefix "$dir/many/ckpt" --cluster mpi || { echo "$name: save failed"; return 1; }
    diff -r "$dir/one" "$dir/many" || { echo "$name: the files differ"; return 1; }
    "$bin" restore "$spec" --prefix "$dir/one/ckpt" --out "$dir/one.safetensors" --read \
        --expect consumed >"$dir/one.txt" || return 1
    mpirun_ --quiet -n "$n" "$bin" restore "$spec" --prefix "$dir/many/ckpt" \
        --out "$dir/many.safetensors" --read --expect consumed --cluster mpi >"$dir/many.txt" \
        || { echo "$name: restore --read failed"; return 1; }
    cmp "$dir/one.safetensors" "$dir/many.safetensors" || { echo "$name: --out differs"; return 1; }
    diff <(sed "s|$dir/one/|P/|" "$dir/one.txt") <(sed "s|$dir/many/|P/|" "$dir/many.txt") \
        || { echo "$name: the report differs"; return 1; }
    "$bin" diff "$dir/values.safetensors" "$dir/many.safetensors" >/dev/null \
        || { echo "$name: the values restored are not the values saved"; return 1; }
    # restore (not --read) with --expect consumed: decided alike in one process and in many.
    "$bin" restore "$spec" --prefix "$dir/one/ckpt" --out "$dir/one2.safetensors" \
        --expect consumed >/dev/null 2>"$dir/one.err" || status=$?
    line="$(cat "$dir/one.err")"; expect=$status; status=0
    out="$(mpirun_ --quiet -n "$n" "$bin" restore "$spec" --prefix "$dir/many/ckpt" \
        --out "$dir/many2.safetensors" --expect consumed --cluster mpi 2>&1 >/dev/null)" || status=$?
    cmp "$dir/one2.safetensors" "$dir/many2.safetensors" || { echo "$name: restore --out differs"; return 1; }
    if [ "$expect" -eq 0 ]; then
        [ "$status" -eq 0 ] && [ -z "$out" ] || { echo "$name: exit $status: $out"; return 1; }
    else
        [ "$status" -ne 0 ] && [ "$(grep -cxF "$line" <<<"$out")" -eq "$n" ] && ! grep -vxF "$line" <<<"$out" \
            || { echo "$name: expected every rank to say: $line; exit $status: $out"; return 1; }
    fi
}
check "objects3 (object spec): save and restore on 3 ranks = one process" object_case objects3 3
check "objects2 (object spec): save and restore on 2 ranks = one process, --expect fails alike" \
    object_case objects2 2

# An object spec on the wrong number of ranks: every rank says so, nothing is written or read.
object_wrong_size() {
    local spec=tests/mpi/objects3.json dir="$work/objects-size" out status=0 line
    line="error: the cluster has 2 process(es) but the plan has 3 task(s) (/job:localhost/replica:0/task:0, /job:localhost/replica:0/task:1, /job:localhost/replica:0/task:2): start one process per task"
    mkdir -p "$dir"
    python3 tests/mpi/values.py "$spec" "$dir/values.safetensors" 1 || return 1
    out="$(mpirun_ --quiet -n 2 "$bin" save "$spec" --values "$dir/values.safetensors" \
        --prefix "$dir/new/ckpt" --cluster mpi 2>&1)" || status=$?
    [ "$status" -ne 0 ] && [ "$(grep -cxF "$line" <<<"$out")" -eq 2 ] && [ ! -e "$dir/new" ] \
        || { echo "save: exit $status: $out"; return 1; }
    "$bin" save "$spec" --values "$dir/values.safetensors" --prefix "$dir/ckpt" || return 1
    status=0
    out="$(mpirun_ --quiet -n 2 "$bin" restore "$spec" --prefix "$dir/ckpt" \
        --out "$dir/out.safetensors" --cluster mpi 2>&1)" || status=$?
    [ "$status" -ne 0 ] && [ "$(grep -cxF "$line" <<<"$out")" -eq 2 ] && [ ! -e "$dir/out.safetensors" ] \
        || { echo "restore: exit $status: $out"; return 1; }
}
check "object spec on 2 ranks for 3 tasks: one clear error on every rank, nothing written" object_wrong_size

# One rank of an object spec's save fails (its values are another spec's): every rank exits within
# 30 s, the failing one saying what it found and the others which task failed and why, in one
# line each, and nothing is published at the prefix.
object_rank_fails() {
    local spec=tests/mpi/objects3.json dir="$work/objects-fail" out status=0 start elapsed
    local apps=() values own
    mkdir -p "$dir"
    python3 tests/mpi/values.py "$spec" "$dir/a.safetensors" 1 || return 1
    python3 tests/mpi/values.py tests/mpi/objects2.json "$dir/bad.safetensors" || return 1
    own="$("$bin" save "$spec" --values "$dir/bad.safetensors" --prefix "$dir/one/ckpt" 2>&1)" \
        && { echo "the bad values saved"; return 1; }
    for r in 0 1 2; do
        values="$dir/a.safetensors"; [ "$r" -eq 1 ] && values="$dir/bad.safetensors"
        apps+=(-n 1 "$bin" save "$spec" --values "$values" --prefix "$dir/ckpt" --cluster mpi :)
    done
    start=$(date +%s)
    out="$(timeout 60 mpirun --quiet --oversubscribe "${apps[@]:0:${#apps[@]}-1}" 2>&1)" || status=$?
    elapsed=$(( $(date +%s) - start ))
    [ "$status" -ne 0 ] && [ "$elapsed" -le 30 ] && [ ! -e "$dir/ckpt.index" ] \
        || { echo "exit $status after ${elapsed}s: $out"; return 1; }
    grep -qxF "$own" <<<"$out" || { echo "rank 1 said: $out (alone: $own)"; return 1; }
    if grep -vxF "$own" <<<"$out" | grep -vxF "error: task 1 failed: ${own#error: }" | grep -q .; then
        echo "a line that is not one of the two: $out"; return 1
    fi
}
check "object spec: rank 1 fails, every rank exits in one line, nothing published" object_rank_fails

# One rank fails (its values are another plan's): every rank exits non-zero within 30 s, each saying
# which task failed and why in one line, and the checkpoint already at the prefix stays whole.
rank_fails() {
    local rank="$1" spec=tests/mpi/big3.json dir="$work/fail$1" out status=0 start elapsed
    local apps=() bad
    mkdir -p "$dir"
    python3 tests/mpi/values.py "$spec" "$dir/a.safetensors" 1
    python3 tests/mpi/values.py tests/fixtures/part/p1_two_tasks/case.json "$dir/bad.safetensors"
    "$bin" save "$spec" --values "$dir/a.safetensors" --prefix "$dir/ckpt"
    "$bin" restore "$spec" --prefix "$dir/ckpt" --out "$dir/before.safetensors"
    for r in 0 1 2; do
        bad="$dir/a.safetensors"; [ "$r" -eq "$rank" ] && bad="$dir/bad.safetensors"
        apps+=(-n 1 "$bin" save "$spec" --values "$bad" --prefix "$dir/ckpt" --cluster mpi :)
    done
    start=$(date +%s)
    out="$(timeout 60 mpirun --quiet --oversubscribe "${apps[@]:0:${#apps[@]}-1}" 2>&1)" || status=$?
    elapsed=$(( $(date +%s) - start ))
    [ "$status" -ne 0 ] && [ "$elapsed" -le 30 ] || { echo "exit $status after ${elapsed}s: $out"; return 1; }
    # The failing rank says what it found; the others, which task failed and what it said.
    # (mpirun may end a rank before it prints: each line printed is one of these two.)
    local own="error: $dir/bad.safetensors: value \`a\` is not a checkpoint key of the plan"
    grep -qxF "$own" <<<"$out" || { echo "the failing rank said: $out"; return 1; }
    if grep -vxF "$own" <<<"$out" | grep -v "^error: task $rank failed: $dir/bad.safetensors: value \`a\` is not a checkpoint key of the plan\$" | grep -q .; then
        echo "a line that is not one of the two: $out"; return 1
    fi
    "$bin" restore "$spec" --prefix "$dir/ckpt" --out "$dir/after.safetensors"
    cmp "$dir/before.safetensors" "$dir/after.safetensors" || { echo "the checkpoint changed"; return 1; }
}
for rank in 0 1 2; do
    check "rank $rank fails: every rank exits, the previous checkpoint stays" rank_fails "$rank"
done

# kill -9 of one rank at a random time of a save over an existing checkpoint: mpirun and every
# other rank are gone within 30 s, the checkpoint at the prefix is whole (the old one, or the
# new one if the kill came after the merge), and the next save cleans up and succeeds.
kill_drills() {
    local spec=tests/mpi/big3.json dir="$work/kill" round rank delay pid status start elapsed
    local old=0 new=0 killed=0
    mkdir -p "$dir"
    python3 tests/mpi/values.py "$spec" "$dir/a.safetensors" 1
    python3 tests/mpi/values.py "$spec" "$dir/b.safetensors" 2
    for round in $(seq 1 "${SAVEPLAN_KILL_ROUNDS:-6}"); do
        rm -rf "$dir/ckpt"* "$dir/out"*
        "$bin" save "$spec" --values "$dir/a.safetensors" --prefix "$dir/ckpt"
        rank=$(( round % 3 )); delay="0.$(( 2 + RANDOM % 4 ))$(( RANDOM % 10 ))"
        start=$(date +%s)
        mpirun --quiet --oversubscribe -n 3 "$bin" save "$spec" --values "$dir/b.safetensors" \
            --prefix "$dir/ckpt" --cluster mpi >"$dir/log" 2>&1 &
        local launcher=$!
        sleep "$delay"
        pid=""
        for candidate in $(pgrep -f -- "--prefix $dir/ckpt --cluster mpi" || true); do
            if { tr '\0' '\n' <"/proc/$candidate/environ"; } 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$rank"; then
                pid=$candidate
            fi
        done
        if [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; then killed=$((killed + 1)); fi
        status=0; wait "$launcher" || status=$?
        elapsed=$(( $(date +%s) - start ))
        [ "$elapsed" -le 30 ] || { echo "round $round: ${elapsed}s"; return 1; }
        "$bin" verify "$dir/ckpt" >/dev/null || { echo "round $round: not whole"; cat "$dir/log"; return 1; }
        "$bin" restore "$spec" --prefix "$dir/ckpt" --out "$dir/out.safetensors"
        if "$bin" diff "$dir/a.safetensors" "$dir/out.safetensors" >/dev/null; then old=$((old + 1))
        elif "$bin" diff "$dir/b.safetensors" "$dir/out.safetensors" >/dev/null; then new=$((new + 1))
        else echo "round $round (exit $status): the checkpoint holds neither save"; return 1; fi
        mpirun_ --quiet -n 3 "$bin" save "$spec" --values "$dir/b.safetensors" --prefix "$dir/ckpt" --cluster mpi \
            || { echo "round $round: the next save failed"; return 1; }
        [ "$(ls "$dir" | grep -c '^ckpt')" -eq 4 ] || { echo "round $round: leftovers: $(ls "$dir")"; return 1; }
        "$bin" restore "$spec" --prefix "$dir/ckpt" --out "$dir/out2.safetensors"
        "$bin" diff "$dir/b.safetensors" "$dir/out2.safetensors" >/dev/null || { echo "round $round: next save wrong"; return 1; }
    done
    echo "kill drills: ${SAVEPLAN_KILL_ROUNDS:-6} rounds, a rank killed in $killed (the others had ended), $old kept the old checkpoint, $new had merged the new one"
}
check "kill -9 of a rank during a save: previous checkpoint whole, next save cleans up" kill_drills

# examples/cluster_saves (a framework's session, saving twice), each rank making only the values
# of the variables it saves (asked once the session is bound): the same files as one process.
# A spec it cannot make values for is refused in one line, before any save.
framework_saves() {
    local dir="$work" out
    python3 - "$dir/spec.json" <<'PY' || return 1
import json, sys
variables = [{"checkpoint_key": f"layer_{i:02}/kernel", "dtype": "float32", "shape": [3, i + 1],
              "device": f"/job:worker/replica:0/task:{i % 3}/device:CPU:0"} for i in range(12)]
json.dump({"variables": variables}, open(sys.argv[1], "w"))
PY
    mkdir "$dir/one" "$dir/many"
    "$saves_example" "$dir/spec.json" "$dir/one" --saves 2 >/dev/null || return 1
    mpirun_ --quiet -n 3 "$saves_example" "$dir/spec.json" "$dir/many" --saves 2 --cluster mpi \
        >/dev/null || return 1
    [ -f "$dir/one/ckpt-2.index" ] || { echo "no second checkpoint"; return 1; }
    diff -r "$dir/one" "$dir/many" || { echo "the files differ"; return 1; }
    python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); s["variables"][4]["dtype"] = "int64"; json.dump(s, open(sys.argv[1], "w"))' "$dir/spec.json"
    mkdir "$dir/bad"
    if out="$("$saves_example" "$dir/spec.json" "$dir/bad" --saves 1 2>&1)"; then
        echo "a spec with an int64 variable was saved"; return 1
    fi
    [ "$out" = "error: layer_04/kernel: only float32 variables are made here, not int64" ] \
        || { echo "not the one line expected: $out"; return 1; }
}
check "examples/cluster_saves on 3 ranks, each making its own values = one process" framework_saves

# docs/cluster.md's console example, run as printed (saveplan the binary under test, mpirun
# with --oversubscribe) in a folder holding a copy of examples/.
docs_example() {
    local dir="$work/docs"
    mkdir -p "$dir/bin"
    cp -r examples "$dir/"
    ln -s "$bin" "$dir/bin/saveplan"
    printf '#!/bin/sh\nexec %s --oversubscribe --quiet "$@"\n' "$(command -v mpirun)" >"$dir/bin/mpirun"
    chmod +x "$dir/bin/mpirun"
    (cd "$dir" && PATH="$dir/bin:$PATH" python3 "$root/tests/docs_blocks.py" "$root/docs/cluster.md" \
        "docs-examples: run by tests/mpi/run.sh")
}
check "docs/cluster.md's example runs as printed" docs_example

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
