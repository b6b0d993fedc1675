#!/usr/bin/env bash
# The main job: an end-to-end run of saveplan on the local filesystem, in ./out/.
# Each step prints what it does; any failure stops the script with a non-zero exit.
# SAVEPLAN_BIN=PATH runs that binary instead of building the release one.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-out}"
mkdir -p "$out"

say() { printf '\n== %s\n' "$*"; }

if [ -n "${SAVEPLAN_BIN:-}" ]; then
    # A binary built already: the docs test (tests/it/docs_examples.rs) runs the script with its own.
    saveplan="$SAVEPLAN_BIN"
else
    say "build the release binary (a first build takes several minutes; cargo shows its progress)"
    cargo build --release --locked --bin saveplan
    target_dir="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
    saveplan="$target_dir/release/saveplan"
    echo "the binary: $saveplan (\`cargo install --path .\` puts saveplan on your PATH)"
fi
fixtures=tests/fixtures/tf-2.21

# The main job: examples/model.json says what to save (an embedding partitioned over two CPUs,
# a dense layer, a step counter), examples/model.safetensors holds the values.
say "compile the model's spec into a MetaGraphDef with a SaverDef, and check it"
rm -rf "$out/model" "$out/model_plan" "$out/model_direct"
"$saveplan" compile examples/model.json -o "$out/model_plan"
"$saveplan" check "$out/model_plan/meta_graph.pb"

say "save the values by running the compiled plan's SaverDef (prefix fed, save tensor fetched)"
"$saveplan" run "$out/model_plan/meta_graph.pb" --save "$out/model/ckpt" --values examples/model.safetensors
ls -l "$out/model"

say "inspect and verify the checkpoint"
"$saveplan" inspect "$out/model/ckpt"
"$saveplan" verify "$out/model/ckpt"

say "restore it through the same plan and compare with the values we saved"
"$saveplan" run "$out/model_plan/meta_graph.pb" --restore "$out/model/ckpt" --out "$out/model_restored.safetensors"
cmp examples/model.safetensors "$out/model_restored.safetensors" && echo "restored values: identical file"

say "the same without a compile step: save and restore trace the spec themselves"
"$saveplan" save examples/model.json --values examples/model.safetensors --prefix "$out/model_direct/ckpt"
cmp "$out/model/ckpt.index" "$out/model_direct/ckpt.index" && echo "same index as the compiled plan's"
"$saveplan" restore examples/model.json --prefix "$out/model/ckpt" --out "$out/model_direct.safetensors"
cmp examples/model.safetensors "$out/model_direct.safetensors" && echo "restored values: identical file"

say "save the inputs of TensorFlow's two-task checkpoint and compare bytes with what TensorFlow wrote"
rm -rf "$out/c3"
"$saveplan" save tests/inputs/run/c3_two_tasks.json --values "$fixtures/ckpt/c3_two_tasks/ckpt" --prefix "$out/c3/ckpt"
for file in ckpt.index ckpt.data-00000-of-00002 ckpt.data-00001-of-00002; do
    cmp "$fixtures/ckpt/c3_two_tasks/$file" "$out/c3/$file" && echo "$file: identical to TensorFlow's"
done

say "run the SaverDef of TensorFlow's MetaGraphDef (g8): save v from examples/v.safetensors, restore it"
rm -rf "$out/g8"
"$saveplan" run "$fixtures/graph/g8_meta_graph/meta_graph.pbtxt" --save "$out/g8/ckpt" --values examples/v.safetensors
"$saveplan" inspect "$out/g8/ckpt" --tensor v
"$saveplan" run "$fixtures/graph/g8_meta_graph/meta_graph.pbtxt" --restore "$out/g8/ckpt" --out "$out/g8_restored.safetensors"
cmp examples/v.safetensors "$out/g8_restored.safetensors" && echo "restored values: identical file"

say "import TensorFlow's two-task save plan and print it as canonical IR text"
"$saveplan" graph show "$fixtures/graph/g3_two_tasks/flat_graph.pbtxt" > "$out/g3_plan.txt"
sed -n '1,20p' "$out/g3_plan.txt"
echo "... ($(wc -l < "$out/g3_plan.txt") lines, full text in $out/g3_plan.txt)"

say "convert TensorFlow's MetaGraphDef to binary and back, and draw it"
"$saveplan" graph convert "$fixtures/graph/g8_meta_graph/meta_graph.pbtxt" "$out/meta_graph.pb"
"$saveplan" graph convert "$out/meta_graph.pb" "$out/meta_graph.pbtxt"
cmp "$fixtures/graph/g8_meta_graph/meta_graph.pbtxt" "$out/meta_graph.pbtxt" && echo "round trip: identical text"
"$saveplan" graph dot "$fixtures/graph/g3_two_tasks/graph.pbtxt" > "$out/g3_plan.dot"
echo "wrote $out/g3_plan.dot ($(wc -l < "$out/g3_plan.dot") lines)"

say "compile the two-task example spec into a MetaGraphDef TensorFlow loads, and check it"
rm -rf "$out/two_tasks" "$out/two_tasks_function"
"$saveplan" compile examples/two_tasks.json -o "$out/two_tasks"
ls "$out/two_tasks"
cat "$out/two_tasks/saver_def.pbtxt"
"$saveplan" check "$out/two_tasks/meta_graph.pb"
"$saveplan" compile examples/two_tasks.json -o "$out/two_tasks_function" --form function --emit pb,pbtxt,txt
"$saveplan" check "$out/two_tasks_function/meta_graph.pbtxt"

say "object-based (tf.train.Checkpoint): write a model + Adam slot tree from an object spec, inspect its object graph, read it back by object"
rm -rf "$out/objects" "$out/objects_again"
"$saveplan" save tests/inputs/objects/o2_v1_adam.json --values "$fixtures/obj/o2_optimizer/v1_adam/ckpt-1" --prefix "$out/objects/ckpt"
"$saveplan" inspect "$out/objects/ckpt" --objects
"$saveplan" restore tests/inputs/objects/o2_v1_adam.json --prefix "$out/objects/ckpt" --read --expect consumed --out "$out/objects_restored.safetensors"
# The object graph travels in the safetensors metadata: back to a checkpoint TF restores by object.
"$saveplan" convert "$out/objects/ckpt" "$out/objects.safetensors"
"$saveplan" convert "$out/objects.safetensors" "$out/objects_again/ckpt"
"$saveplan" restore tests/inputs/objects/o2_v1_adam.json --prefix "$out/objects_again/ckpt" --read --expect consumed --out "$out/objects_restored_again.safetensors"

say "check a broken plan: every problem is reported, and the exit code is 1"
if "$saveplan" check tests/inputs/check/err/many_problems.pbtxt; then
    echo "the broken plan passed the check" >&2
    exit 1
fi

say "done: outputs are in $out/"
ls -l "$out"
