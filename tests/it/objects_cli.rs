//! `saveplan inspect --objects [--json]`, latest-checkpoint resolution and `convert` of
//! object-based checkpoints, run as the built
//! binary on TensorFlow's `obj/` fixtures: one snapshot per input (tree and JSON), errors as
//! one line.

use saveplan::bundle::{BundleReader, BundleWriter, DType};
use saveplan::checkpoint::OBJECT_GRAPH_KEY;

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

/// checkpoint → safetensors (into folders that do not exist yet) → checkpoint gives back
/// TensorFlow's own files byte for byte: same tensors, same object graph, same data order.
#[test]
fn convert_round_trips_object_based_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    for (case, src, prefix_name) in [
        ("o1", "o1_module_tree/write/ckpt", "ckpt"),
        ("o1_save", "o1_module_tree/save", "ckpt-2"),
        ("o2", "o2_optimizer/v1_adam", "ckpt-1"),
    ] {
        let fixture = crate::support::fixture("obj").join(src);
        let st = dir.path().join(case).join("no/sub/x.safetensors");
        let (ok, _, stderr) = run(&["convert", fixture.to_str().unwrap(), st.to_str().unwrap()]);
        assert!(ok, "{case}: {stderr}");
        let (_, metadata) =
            safetensors::SafeTensors::read_metadata(&std::fs::read(&st).unwrap()).unwrap();
        assert!(
            metadata
                .metadata()
                .as_ref()
                .unwrap()
                .contains_key(OBJECT_GRAPH_KEY),
            "{case}"
        );
        let back = dir.path().join(case).join("back").join(prefix_name);
        let (ok, _, stderr) = run(&["convert", st.to_str().unwrap(), back.to_str().unwrap()]);
        assert!(ok, "{case}: {stderr}");
        let original = if fixture.is_dir() {
            fixture.join(prefix_name)
        } else {
            fixture.clone()
        };
        for suffix in [".index", ".data-00000-of-00001"] {
            let read = |prefix: &std::path::Path| {
                std::fs::read(format!("{}{suffix}", prefix.display())).unwrap()
            };
            assert!(read(&original) == read(&back), "{case}: {suffix} differs");
        }
    }
}

#[test]
fn convert_selects_keys_and_skips_strings() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let mut writer = BundleWriter::create(&prefix).unwrap();
    writer
        .add(
            "model/w/.ATTRIBUTES/VARIABLE_VALUE",
            DType::Float,
            &[1],
            &1f32.to_le_bytes(),
        )
        .unwrap();
    writer
        .add_strings("model/name/.ATTRIBUTES/py_state", &[], &[b"x".to_vec()])
        .unwrap();
    writer
        .add("other", DType::Int32, &[], &7i32.to_le_bytes())
        .unwrap();
    writer.finish().unwrap();
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let (ok, _, stderr) = run(&["convert", &path("ckpt"), &path("a.safetensors")]);
    assert!(!ok);
    assert_eq!(
        stderr,
        "error: tensor `model/name/.ATTRIBUTES/py_state` is a string tensor: safetensors cannot hold strings (--skip-strings leaves them out)\n"
    );
    let (ok, _, stderr) = run(&[
        "convert",
        "--skip-strings",
        "--keys",
        "model/*",
        &path("ckpt"),
        &path("a.safetensors"),
    ]);
    assert!(ok, "{stderr}");
    assert_eq!(
        stderr,
        "saveplan: convert: skipped string tensor `model/name/.ATTRIBUTES/py_state`\n"
    );
    let (ok, _, _) = run(&["convert", &path("a.safetensors"), &path("back")]);
    assert!(ok);
    let keys: Vec<String> = BundleReader::open(dir.path().join("back"))
        .unwrap()
        .entries()
        .iter()
        .map(|entry| entry.key.clone())
        .collect();
    assert_eq!(keys, ["model/w/.ATTRIBUTES/VARIABLE_VALUE"]);
}
