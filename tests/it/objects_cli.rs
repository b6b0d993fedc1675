//! `saveplan inspect --objects [--json]` and latest-checkpoint resolution, run as the built
//! binary on TensorFlow's `obj/` fixtures: one snapshot per input (tree and JSON), errors as
//! one line.

use crate::support::{for_each_case, saveplan, settings};

/// Inputs under `tests/fixtures/tf-2.21/obj/`: prefixes, and directories meaning their latest
/// checkpoint.
const CASES: &[&str] = &[
    "o1_module_tree/write/ckpt",
    "o1_module_tree/save",
    "o1_module_tree/kwarg/ckpt",
    "o2_optimizer/keras",
    "o2_optimizer/v1_adam",
    "o3_checkpoint_manager/b_keep_every_n_hours",
    "o4_restore_semantics/write/ckpt",
    "o5_name_based/object_based/ckpt",
    "o6_options_async/sync/w",
    "o8_mirrored/ckpt",
    "o9_write_graphs/fn/ckpt",
];

/// Inputs whose `--objects` fails, with the error.
const ERROR_CASES: &[&str] = &[
    "o5_name_based/tf1/model",
    "o3_checkpoint_manager/c_interval/ckpt-9",
];

fn run(args: &[&str]) -> (bool, String, String) {
    let output = saveplan(args);
    (
        output.status.success(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

fn snapshot_name(case: &str) -> String {
    format!("inspect_objects@{}", case.replace('/', "__"))
}

#[test]
fn inspect_objects_prints_tree_and_json() {
    for_each_case(CASES.iter().copied(), |case| {
        let path = format!("tests/fixtures/tf-2.21/obj/{case}");
        let (ok, tree, stderr) = run(&["inspect", "--objects", &path]);
        assert!(ok, "{case}: {stderr}");
        let (ok, json, stderr) = run(&["inspect", "--objects", "--json", &path]);
        assert!(ok, "{case}: {stderr}");
        let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
        for node in parsed["nodes"].as_array().unwrap() {
            for field in [
                "children",
                "attributes",
                "slot_variables",
                "has_checkpoint_values",
            ] {
                assert!(node.get(field).is_some(), "{case}: {field} missing");
            }
        }
        settings().bind(|| {
            insta::assert_snapshot!(
                snapshot_name(case),
                format!("## tree\n{tree}\n## json\n{json}")
            );
        });
    });
}

#[test]
fn inspect_objects_errors_are_one_line() {
    for_each_case(ERROR_CASES.iter().copied(), |case| {
        let path = format!("tests/fixtures/tf-2.21/obj/{case}");
        let (ok, _, stderr) = run(&["inspect", "--objects", &path]);
        assert!(!ok, "{case}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        settings().bind(|| insta::assert_snapshot!(snapshot_name(case), stderr));
    });
}

#[test]
fn every_prefix_command_takes_a_directory_or_state_file() {
    let dir = "tests/fixtures/tf-2.21/obj/o3_checkpoint_manager/d_recover";
    let (ok, listing, stderr) = run(&["inspect", dir]);
    assert!(ok, "{stderr}");
    let (_, direct, _) = run(&["inspect", &format!("{dir}/ckpt-4")]);
    assert_eq!(listing, direct);
    let (ok, via_state, _) = run(&["inspect", &format!("{dir}/checkpoint")]);
    assert!(ok);
    assert_eq!(via_state, direct);
    let (ok, verified, stderr) = run(&["verify", dir]);
    assert!(ok, "{stderr}");
    assert!(verified.starts_with("ok: "), "{verified}");
    let (ok, _, stderr) = run(&[
        "inspect",
        "tests/fixtures/tf-2.21/obj/o7_non_variable_attributes",
    ]);
    assert!(!ok);
    assert_eq!(
        stderr,
        "error: tests/fixtures/tf-2.21/obj/o7_non_variable_attributes: no `checkpoint` state file\n"
    );
}
