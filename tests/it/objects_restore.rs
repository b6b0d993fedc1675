//! Restoring by object ([`saveplan::checkpoint::Checkpoint::restore`] / `read`, FORMATS.md
//! 13.10–13.11) against TensorFlow's `obj/o4_restore_semantics` scenarios: the same trees
//! restore the same values, and the load-status assertions pass or fail with TensorFlow's
//! exact messages (`expected.json`).

use std::collections::BTreeMap;

use saveplan::checkpoint::{
    Checkpoint, CheckpointError, Object, ObjectError, ObjectSpec, RestoreKind, ValueStatus,
    build_object_graph,
};
use saveplan::exec::HostTensor;
use saveplan_ir::DType;
use serde_json::Value;

use crate::support::objects::assert_status_checks;
use crate::support::{fixture, fixture_json, for_each_case, manifest_path, saveplan, settings};

const O4: &str = "obj/o4_restore_semantics";

fn prefix(name: &str) -> String {
    fixture(&format!("{O4}/{name}"))
        .to_string_lossy()
        .into_owned()
}

fn scenario(name: &str) -> Value {
    fixture_json(&format!("{O4}/expected.json"))["scenarios"][name].clone()
}

fn f32s(values: &[f32]) -> HostTensor {
    let shape = if values.len() == 1 {
        vec![]
    } else {
        vec![values.len() as u64]
    };
    HostTensor::from_f32s(shape, values).unwrap()
}

fn i64s(shape: Vec<u64>, values: &[i64]) -> HostTensor {
    let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    HostTensor::from_bytes(DType::Int64, shape, bytes).unwrap()
}

/// A `Checkpoint(model=…)` of variables by path (from the checkpoint) with initial values.
fn tree(variables: &[(&[&str], HostTensor)]) -> Checkpoint {
    let entries: Vec<Value> = variables
        .iter()
        .map(|(path, value)| {
            serde_json::json!({
                "path": path,
                "dtype": value.dtype().to_string(),
                "shape": value.shape(),
            })
        })
        .collect();
    let spec = ObjectSpec::parse(&serde_json::json!({ "objects": entries }).to_string()).unwrap();
    let (_, keys) = spec.object_graph().unwrap();
    let values = keys
        .into_iter()
        .zip(variables.iter().map(|(_, value)| value.clone()))
        .collect();
    spec.checkpoint(values).unwrap()
}

/// `_zero_tree`: model.a.w f32[2], model.a.b f32, model.c i64, model.lst[0] f32[3], zeros.
fn zero_tree() -> Checkpoint {
    tree(&[
        (&["model", "a", "w"], f32s(&[0.0, 0.0])),
        (&["model", "a", "b"], f32s(&[0.0])),
        (&["model", "c"], i64s(vec![], &[0])),
        (&["model", "lst", "0"], f32s(&[0.0, 0.0, 0.0])),
    ])
}

fn value(checkpoint: &Checkpoint, key: &str) -> HostTensor {
    checkpoint.values()[&format!("model/{key}/.ATTRIBUTES/VARIABLE_VALUE")].clone()
}

#[test]
fn s01_same_structure_restores_everything() {
    let mut checkpoint = zero_tree();
    let status = checkpoint.restore(Some(&prefix("base/ckpt-1"))).unwrap();
    assert_status_checks(&status, &scenario("s01_same_structure")["status"], "s01");
    assert_eq!(value(&checkpoint, "a/w"), f32s(&[1.0, 2.0]));
    assert_eq!(value(&checkpoint, "a/b"), f32s(&[3.0]));
    assert_eq!(value(&checkpoint, "c"), i64s(vec![], &[4]));
    assert_eq!(value(&checkpoint, "lst/0"), f32s(&[5.0, 6.0, 7.0]));
    assert_eq!(checkpoint.save_counter(), Some(1));
    assert!(status.warnings().is_empty());
}

#[test]
fn s02_s03_subset_fails_consumed_and_warns_unless_partial() {
    let mut checkpoint = tree(&[(&["model", "a", "w"], f32s(&[0.0, 0.0]))]);
    let status = checkpoint.restore(Some(&prefix("base/ckpt-1"))).unwrap();
    let expected = scenario("s02_subset");
    assert_status_checks(&status, &expected["status"], "s02");
    assert_eq!(value(&checkpoint, "a/w"), f32s(&[1.0, 2.0]));
    let warnings: Vec<&str> = expected["warnings_logged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(status.warnings(), warnings);
    let status = status.expect_partial();
    assert_status_checks(
        &status,
        &scenario("s03_subset_expect_partial")["status"],
        "s03",
    );
    assert!(status.warnings().is_empty());
}

#[test]
fn s04_superset_and_s05_disjoint_fail_existing_objects_matched() {
    let mut checkpoint = tree(&[
        (&["model", "a", "w"], f32s(&[0.0, 0.0])),
        (&["model", "a", "b"], f32s(&[0.0])),
        (&["model", "c"], i64s(vec![], &[0])),
        (&["model", "lst", "0"], f32s(&[0.0, 0.0, 0.0])),
        (&["model", "extra"], f32s(&[-1.0])),
    ]);
    let status = checkpoint.restore(Some(&prefix("base/ckpt-1"))).unwrap();
    assert_status_checks(&status, &scenario("s04_superset")["status"], "s04");
    assert_eq!(value(&checkpoint, "c"), i64s(vec![], &[4]));
    assert_eq!(value(&checkpoint, "extra"), f32s(&[-1.0]));

    let mut checkpoint = tree(&[(&["model", "zzz"], f32s(&[0.0]))]);
    let status = checkpoint.restore(Some(&prefix("base/ckpt-1"))).unwrap();
    assert_status_checks(&status, &scenario("s05_disjoint")["status"], "s05");
}

#[test]
fn s06_empty_checkpoint_matches_its_save_counter() {
    let mut checkpoint = tree(&[]);
    let status = checkpoint.restore(Some(&prefix("base/ckpt-1"))).unwrap();
    assert_status_checks(
        &status,
        &scenario("s06_empty_checkpoint_object")["status"],
        "s06",
    );
    assert_eq!(checkpoint.save_counter(), Some(1));
}

#[test]
fn s10_s11_mismatches_are_errors_and_change_nothing() {
    let mut checkpoint = tree(&[(&["model", "c"], HostTensor::int32_scalar(0))]);
    let err = checkpoint
        .restore(Some(&prefix("base/ckpt-1")))
        .unwrap_err();
    assert!(
        matches!(
            err,
            CheckpointError::Object(ObjectError::RestoreDType { .. })
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "`(root).model.c`: tensor_name = model/c/.ATTRIBUTES/VARIABLE_VALUE; expected dtype int32 does not equal original dtype int64"
    );
    let tf = scenario("s10_dtype_mismatch")["restore"]["message"].clone();
    assert!(tf.as_str().unwrap().contains(
        "tensor_name = model/c/.ATTRIBUTES/VARIABLE_VALUE; expected dtype int32 does not equal original dtype int64"
    ));
    assert_eq!(checkpoint.save_counter(), None);

    let mut checkpoint = tree(&[(&["model", "c"], i64s(vec![2], &[0, 0]))]);
    let err = checkpoint
        .restore(Some(&prefix("base/ckpt-1")))
        .unwrap_err();
    assert!(
        matches!(
            err,
            CheckpointError::Object(ObjectError::RestoreShape { .. })
        ),
        "{err:?}"
    );
    let tf = scenario("s11_shape_mismatch")["restore"]["message"].clone();
    assert!(
        tf.as_str()
            .unwrap()
            .to_lowercase()
            .contains(&err.to_string().split(": ").nth(1).unwrap().to_owned()),
        "{err} vs {tf}"
    );
    assert_eq!(checkpoint.save_counter(), None);
    assert_eq!(value(&checkpoint, "c"), i64s(vec![2], &[0, 0]));
}

#[test]
fn s13_read_and_restore_differ_by_save_counter() {
    let expected = scenario("s13_read_vs_restore");
    for (label, name, kind) in [
        ("restore_of_save", "base/ckpt-1", RestoreKind::Restore),
        ("read_of_save", "base/ckpt-1", RestoreKind::Read),
        ("restore_of_write", "write/ckpt", RestoreKind::Restore),
        ("read_of_write", "write/ckpt", RestoreKind::Read),
    ] {
        let mut checkpoint = zero_tree();
        let status = match kind {
            RestoreKind::Restore => checkpoint.restore(Some(&prefix(name))),
            RestoreKind::Read => checkpoint.read(&prefix(name)),
        }
        .unwrap();
        assert_status_checks(&status, &expected[label]["status"], label);
        assert_eq!(
            checkpoint.save_counter().is_some(),
            expected[label]["save_counter_created"] == true,
            "{label}"
        );
    }
}

#[test]
fn s14_restore_none_is_initialization_only() {
    let mut checkpoint = zero_tree();
    let status = checkpoint.restore(None).unwrap();
    assert!(status.is_initialization_only());
    assert_status_checks(&status, &scenario("s14_restore_none")["status"], "s14");
    assert_eq!(checkpoint.save_counter(), None);
}

#[test]
fn s15_missing_prefix_is_not_found() {
    let mut checkpoint = zero_tree();
    let err = checkpoint.restore(Some(&prefix("base/ckpt"))).unwrap_err();
    assert!(matches!(err, CheckpointError::NotFound { .. }), "{err:?}");
    assert!(err.to_string().contains("the '-1' in 'path/to/ckpt-1'"));
}

#[test]
fn s16_a_node_shared_in_the_checkpoint_restores_the_first_object_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir
        .path()
        .join("shared/ckpt")
        .to_string_lossy()
        .into_owned();
    let v = Object::variable("Variable");
    let root = Object::new().child("model", &Object::new().child("x", &v).child("y", &v));
    let graph = build_object_graph(&root).unwrap();
    let key = graph.nodes()[2].attributes[0].checkpoint_key.clone();
    Checkpoint::new(graph, BTreeMap::from([(key, f32s(&[5.0]))]))
        .unwrap()
        .write(&path)
        .unwrap();
    let mut checkpoint = tree(&[
        (&["model", "x"], f32s(&[0.0])),
        (&["model", "y"], f32s(&[0.0])),
    ]);
    let status = checkpoint.read(&path).unwrap();
    let expected = scenario("s16_shared_in_ckpt_distinct_in_python");
    assert_status_checks(&status, &expected["status"], "s16");
    assert_eq!(value(&checkpoint, "x"), f32s(&[5.0]));
    assert_eq!(value(&checkpoint, "y"), f32s(&[0.0]));
}

/// `Checkpoint(root=r)` of `_zero_tree`'s module: the root is the module, with a `root` self
/// edge.
fn zero_tree_as_root() -> Checkpoint {
    let [w, b, c, l0] = std::array::from_fn(|_| Object::variable("Variable"));
    let root = Object::new()
        .child("a", &Object::new().child("w", &w).child("b", &b))
        .child("c", &c)
        .child("lst", &Object::new().child("0", &l0))
        .child_self("root");
    let graph = build_object_graph(&root).unwrap();
    let keys: Vec<(String, HostTensor)> = [
        ("a/w", f32s(&[0.0, 0.0])),
        ("a/b", f32s(&[0.0])),
        ("c", i64s(vec![], &[0])),
        ("lst/0", f32s(&[0.0, 0.0, 0.0])),
    ]
    .into_iter()
    .map(|(path, value)| (format!("{path}/.ATTRIBUTES/VARIABLE_VALUE"), value))
    .collect();
    Checkpoint::new(graph, keys.into_iter().collect()).unwrap()
}

#[test]
fn s17_root_and_keyword_layouts_do_not_match() {
    let expected = scenario("s17_root_vs_kwarg");
    let mut checkpoint = zero_tree_as_root();
    let status = checkpoint.read(&prefix("write/ckpt")).unwrap();
    assert_status_checks(
        &status,
        &expected["write_model_read_root"]["status"],
        "write_model_read_root",
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rootw/ckpt").to_string_lossy().into_owned();
    let mut written = zero_tree_as_root();
    for (key, value) in [
        ("a/w", f32s(&[1.0, 2.0])),
        ("a/b", f32s(&[3.0])),
        ("c", i64s(vec![], &[4])),
        ("lst/0", f32s(&[5.0, 6.0, 7.0])),
    ] {
        written
            .set_value(&format!("{key}/.ATTRIBUTES/VARIABLE_VALUE"), value)
            .unwrap();
    }
    written.write(&path).unwrap();
    let mut checkpoint = zero_tree();
    let status = checkpoint.read(&path).unwrap();
    assert_status_checks(
        &status,
        &expected["write_root_read_model"]["status"],
        "write_root_read_model",
    );
    assert_eq!(value(&checkpoint, "a/w"), f32s(&[0.0, 0.0]));
    let mut checkpoint = zero_tree_as_root();
    let status = checkpoint.read(&path).unwrap();
    assert_status_checks(
        &status,
        &expected["write_root_read_root"]["status"],
        "write_root_read_root",
    );
    assert_eq!(
        checkpoint.values()["lst/0/.ATTRIBUTES/VARIABLE_VALUE"],
        f32s(&[5.0, 6.0, 7.0])
    );
}

#[test]
fn s18_two_restores_apply_in_order() {
    let expected = scenario("s18_restore_twice");
    let mut checkpoint = zero_tree();
    let first = checkpoint.restore(Some(&prefix("base/ckpt-1"))).unwrap();
    let second = checkpoint.restore(Some(&prefix("base/ckpt-2"))).unwrap();
    assert_status_checks(&first, &expected["status_of_first_restore"], "first");
    assert_status_checks(&second, &expected["status_of_second_restore"], "second");
    assert_eq!(value(&checkpoint, "a/w"), f32s(&[10.0, 20.0]));
    assert_eq!(value(&checkpoint, "c"), i64s(vec![], &[40]));
    assert_eq!(checkpoint.save_counter(), Some(2));
}

#[test]
fn the_report_lists_every_value_once() {
    let checkpoint = tree(&[
        (&["model", "a", "w"], f32s(&[0.0, 0.0])),
        (&["model", "c"], i64s(vec![2], &[0, 0])),
        (&["model", "extra"], f32s(&[-1.0])),
    ]);
    let matched = checkpoint
        .match_checkpoint(&prefix("base/ckpt-1"), RestoreKind::Read)
        .unwrap();
    let report = matched.report();
    let by_status = |status| {
        report
            .values
            .iter()
            .filter(|v| v.status == status)
            .map(|v| v.path.join("."))
            .collect::<Vec<_>>()
    };
    assert_eq!(by_status(ValueStatus::Matched), ["model.a.w"]);
    assert_eq!(by_status(ValueStatus::Mismatched), ["model.c"]);
    assert_eq!(
        by_status(ValueStatus::Unused),
        ["model.a.b", "model.lst.0", "save_counter"]
    );
    assert_eq!(by_status(ValueStatus::Missing), ["model.extra"]);
    assert_eq!(report.counts.matched + report.counts.mismatched, 2);
}

/// `saveplan restore OBJSPEC` inputs under `tests/inputs/objects/restore/`, each with the
/// fixture checkpoint it restores.
const CLI_CASES: &[(&str, &str)] = &[
    ("o4_same", "o4_restore_semantics/base/ckpt-1"),
    ("o4_mixed", "o4_restore_semantics/base/ckpt-1"),
    ("o4_mismatch", "o4_restore_semantics/base/ckpt-1"),
    ("o2_v1_adam", "o2_optimizer/v1_adam"),
    ("o2_v1_adam_partial", "o2_optimizer/v1_adam"),
    ("o6_sync", "o6_options_async/sync/w"),
    // Name-based: a TF1 `Saver` checkpoint without an object graph.
    ("o5_names_match", "o5_name_based/tf1/model"),
    ("o5_names_differ", "o5_name_based/tf1/model"),
    // Non-variable attributes: named tensors, a prefix-keyed table, a variant.
    ("o7_attributes", "o7_non_variable_attributes/ckpt"),
];

fn run_cli(args: &[&str]) -> (i32, String, String) {
    let output = saveplan(args);
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn every_restore_input_has_a_case() {
    let mut inputs: Vec<String> = std::fs::read_dir(manifest_path("tests/inputs/objects/restore"))
        .unwrap()
        .map(|entry| {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".json").unwrap().to_owned()
        })
        .collect();
    inputs.sort();
    let mut cases: Vec<&str> = CLI_CASES.iter().map(|(input, _)| *input).collect();
    cases.sort_unstable();
    assert_eq!(inputs, cases);
}

/// Per input: the report (tree and JSON) and, per `--expect`, the exit code and message.
#[test]
fn cli_restore_by_object_reports_and_expects() {
    for_each_case(CLI_CASES.iter().map(|(input, _)| *input), |input| {
        let prefix = CLI_CASES.iter().find(|(i, _)| *i == input).unwrap().1;
        let spec = format!("tests/inputs/objects/restore/{input}.json");
        let prefix = format!("tests/fixtures/tf-2.21/obj/{prefix}");
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.safetensors");
        let out = out.to_str().unwrap();
        let args = ["restore", &spec, "--prefix", &prefix, "--out", out];
        let (code, tree, stderr) = run_cli(&args);
        let (_, json, _) = run_cli(&[&args[..], &["--json"]].concat());
        let report: Value = serde_json::from_str(&json).unwrap();
        let mismatched = report["counts"]["mismatched"].as_u64().unwrap();
        assert_eq!(code, i32::from(mismatched > 0), "{input}: {stderr}");
        let mut text = format!("## report (exit {code})\n{tree}{stderr}\n## json\n{json}\n");
        for expect in ["consumed", "existing", "nontrivial"] {
            let (code, _, stderr) = run_cli(&[&args[..], &["--expect", expect]].concat());
            // Notes (`saveplan: …`) aside, an error is one line.
            let errors = stderr
                .lines()
                .filter(|line| !line.starts_with("saveplan: "));
            assert!(errors.count() <= 1, "{input}: {stderr}");
            text.push_str(&format!("## --expect {expect}: exit {code}\n{stderr}"));
        }
        settings().bind(|| {
            insta::assert_snapshot!(format!("restore_objects@{input}"), text);
        });
    });
}

#[test]
fn cli_restore_writes_the_restored_values_and_read_skips_the_counter() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    let out = out.to_str().unwrap();
    let spec = "tests/inputs/objects/restore/o4_mixed.json";
    let base = "tests/fixtures/tf-2.21/obj/o4_restore_semantics/base";
    // A directory: its latest checkpoint, ckpt-2.
    let (code, _, stderr) = run_cli(&["restore", spec, "--prefix", base, "--out", out]);
    assert_eq!(code, 0, "{stderr}");
    let bytes = std::fs::read(out).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names = tensors.names();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "model/a/w/.ATTRIBUTES/VARIABLE_VALUE",
            "model/lst/0/.ATTRIBUTES/VARIABLE_VALUE",
            "save_counter/.ATTRIBUTES/VARIABLE_VALUE",
        ]
    );
    let w = tensors
        .tensor("model/a/w/.ATTRIBUTES/VARIABLE_VALUE")
        .unwrap();
    let w: Vec<f32> = w
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(w, [10.0, 20.0]);
    let counter = tensors
        .tensor("save_counter/.ATTRIBUTES/VARIABLE_VALUE")
        .unwrap();
    assert_eq!(counter.data(), 2i64.to_le_bytes());

    let spec = "tests/inputs/objects/restore/o4_same.json";
    let args = ["restore", spec, "--prefix", base, "--out", out, "--read"];
    let (code, _, stderr) = run_cli(&[&args[..], &["--expect", "consumed"]].concat());
    assert_eq!(code, 1);
    assert_eq!(
        stderr,
        "error: assert_consumed failed: Unresolved object in checkpoint (root).save_counter: attributes { name: \"VARIABLE_VALUE\" full_name: \"save_counter\" checkpoint_key: \"save_counter/.ATTRIBUTES/VARIABLE_VALUE\" } has_checkpoint_values { value: true }\n"
    );
    let (code, _, stderr) = run_cli(&[&args[..], &["--expect", "existing"]].concat());
    assert_eq!(code, 0, "{stderr}");
    let bytes = std::fs::read(out).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(tensors.len(), 4);
}

/// The graph and initial values of a `Checkpoint(model=…)` of variables by path.
fn spec_objects(
    variables: &[(&[&str], HostTensor)],
) -> (
    saveplan::checkpoint::ObjectGraph,
    BTreeMap<String, HostTensor>,
) {
    let checkpoint = tree(variables);
    (checkpoint.graph().clone(), checkpoint.values().clone())
}

/// `Checkpoint(model=tf.Module())`, optionally with an empty list `model.lst`.
fn empty_model(with_list: bool) -> Checkpoint {
    let mut model = Object::new();
    if with_list {
        model = model.child("lst", &Object::new());
    }
    let graph = build_object_graph(&Object::new().child("model", &model)).unwrap();
    Checkpoint::new(graph, BTreeMap::new()).unwrap()
}

#[test]
fn s07_s08_values_arrive_when_objects_are_attached() {
    let expected = scenario("s07_restore_on_create");
    let steps = &expected["steps"];
    let mut checkpoint = empty_model(false);
    let status = checkpoint.restore(Some(&prefix("base/ckpt-1"))).unwrap();
    assert_status_checks(&status, &steps["after_restore"]["status"], "after_restore");
    assert_eq!(checkpoint.save_counter(), Some(1));

    let w: &[&str] = &["model", "a", "w"];
    let (graph, values) = spec_objects(&[(w, f32s(&[0.0, 0.0]))]);
    let restored = checkpoint.attach(graph, values).unwrap();
    assert_eq!(restored, ["model/a/w/.ATTRIBUTES/VARIABLE_VALUE"]);
    assert_eq!(value(&checkpoint, "a/w"), f32s(&[1.0, 2.0]));

    let (graph, values) = spec_objects(&[
        (w, f32s(&[0.0, 0.0])),
        (&["model", "a", "b"], f32s(&[0.0])),
        (&["model", "c"], i64s(vec![], &[0])),
        (&["model", "lst", "0"], f32s(&[0.0, 0.0, 0.0])),
    ]);
    // `w` keeps its value: only new objects are restored.
    checkpoint
        .set_value("model/a/w/.ATTRIBUTES/VARIABLE_VALUE", f32s(&[7.0, 7.0]))
        .unwrap();
    let values = values
        .into_iter()
        .filter(|(key, _)| !key.contains("/a/w/"))
        .collect();
    let restored = checkpoint.attach(graph, values).unwrap();
    assert_eq!(restored.len(), 3);
    assert_eq!(value(&checkpoint, "a/w"), f32s(&[7.0, 7.0]));
    assert_eq!(value(&checkpoint, "a/b"), f32s(&[3.0]));
    assert_eq!(value(&checkpoint, "c"), i64s(vec![], &[4]));
    assert_eq!(value(&checkpoint, "lst/0"), f32s(&[5.0, 6.0, 7.0]));

    let mut checkpoint = empty_model(true);
    checkpoint.restore(Some(&prefix("base/ckpt-1"))).unwrap();
    let (graph, values) = spec_objects(&[(&["model", "lst", "0"], f32s(&[0.0, 0.0, 0.0]))]);
    checkpoint.attach(graph, values).unwrap();
    let lst0 = &scenario("s08_restore_on_list_append")["lst0_after_append"];
    assert_eq!(lst0, &serde_json::json!([5.0, 6.0, 7.0]));
    assert_eq!(value(&checkpoint, "lst/0"), f32s(&[5.0, 6.0, 7.0]));
}

#[test]
fn s09_the_newest_pending_restore_wins() {
    let mut checkpoint = empty_model(false);
    checkpoint.restore(Some(&prefix("base/ckpt-1"))).unwrap();
    checkpoint.restore(Some(&prefix("base/ckpt-2"))).unwrap();
    let (graph, values) = spec_objects(&[
        (&["model", "a", "w"], f32s(&[0.0, 0.0])),
        (&["model", "c"], i64s(vec![], &[0])),
    ]);
    checkpoint.attach(graph, values).unwrap();
    let expected = &scenario("s09_two_pending_restores")["values"];
    assert_eq!(expected["c"], 40);
    assert_eq!(value(&checkpoint, "a/w"), f32s(&[10.0, 20.0]));
    assert_eq!(value(&checkpoint, "c"), i64s(vec![], &[40]));
}

#[test]
fn s12_a_deferred_shape_mismatch_fails_the_attach() {
    let mut checkpoint = empty_model(false);
    checkpoint.restore(Some(&prefix("base/ckpt-1"))).unwrap();
    let (graph, values) = spec_objects(&[(&["model", "c"], i64s(vec![3], &[0, 0, 0]))]);
    let err = checkpoint.attach(graph, values).unwrap_err();
    assert!(
        matches!(
            err,
            CheckpointError::Object(ObjectError::RestoreShape { .. })
        ),
        "{err:?}"
    );
    let tf = scenario("s12_deferred_shape_mismatch")["attach"]["message"].clone();
    let ours = err.to_string();
    assert!(
        tf.as_str()
            .unwrap()
            .to_lowercase()
            .contains(ours.split(": ").nth(1).unwrap()),
        "{ours} vs {tf}"
    );
    // Nothing changed: the objects are the old ones.
    assert!(checkpoint.values().is_empty());
    assert_eq!(checkpoint.graph().nodes().len(), 2);
}
