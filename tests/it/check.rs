//! `saveplan check` and the analyses behind it: every TensorFlow reference graph
//! (`tests/fixtures/tf-2.21/graph/*/`: `flat_graph.pbtxt`, `graph.pbtxt`, `fn_save.pbtxt`, the
//! g7 traced functions, the g8 MetaGraphDef, the g9 TF1 saver graphs) and every tracer spec
//! input checks clean; every file in `tests/inputs/check/err/` (copies of TensorFlow's graphs
//! with one fault, or several) fails with exit code 1 and one snapshotted line per problem.

use crate::support::{manifest_path, relative, saveplan, settings};

use std::path::{Path, PathBuf};

use saveplan::analysis::{Problem, check_module};
use saveplan::export::{self};
use saveplan_ir::Module;

/// The module a graph file holds.
fn module_of(path: &Path) -> Module {
    export::read_graph_file(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_module()
        .unwrap_or_else(|| panic!("{}: a SaverDef", path.display()))
}

/// Every graph, function and meta graph file TensorFlow wrote for the fixtures.
fn reference_graphs() -> Vec<PathBuf> {
    let root = manifest_path("tests/fixtures/tf-2.21/graph");
    let mut files = Vec::new();
    for case in std::fs::read_dir(&root).unwrap() {
        for file in std::fs::read_dir(case.unwrap().path()).unwrap() {
            let path = file.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_owned();
            if name.ends_with(".pbtxt") && !name.contains("saver_def") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn tensorflow_graphs_check_clean() {
    let files = reference_graphs();
    for required in [
        "g1_single_cpu/flat_graph.pbtxt",
        "g3_two_tasks/graph.pbtxt",
        "g4_io_device/fn_save.pbtxt",
        "g6_max_shard_size/flat_graph.pbtxt",
        "g8_meta_graph/meta_graph.pbtxt",
    ] {
        assert!(files.iter().any(|f| f.ends_with(required)), "{required}");
    }
    assert_eq!(files.len(), 22);
    for path in &files {
        let findings = check_module(&module_of(path));
        let lines: Vec<String> = findings.iter().map(ToString::to_string).collect();
        assert_eq!(lines, Vec::<String>::new(), "{}", path.display());
    }
}

#[test]
fn cli_reports_ok_on_clean_plans() {
    let mut inputs = reference_graphs();
    for spec in std::fs::read_dir(manifest_path("tests/inputs/trace")).unwrap() {
        let path = spec.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "json") {
            inputs.push(path);
        }
    }
    inputs.push(manifest_path("examples/two_tasks.json"));
    for path in inputs {
        let file = relative(&path);
        let output = saveplan(&["check", &file]);
        assert_eq!(output.status.code(), Some(0), "{file}");
        assert_eq!(
            String::from_utf8(output.stdout).unwrap(),
            format!("{file}: ok\n")
        );
        assert!(output.stderr.is_empty(), "{file}");
    }
}

/// Runs `saveplan check` on a bad plan: exit code 1, nothing on stderr, every stdout line
/// names the file. Returns stdout.
fn findings_of(path: &Path) -> String {
    let file = relative(path);
    let output = saveplan(&["check", &file]);
    assert_eq!(output.status.code(), Some(1), "{file}");
    assert!(
        output.stderr.is_empty(),
        "{file}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(!stdout.is_empty(), "{file}");
    for line in stdout.lines() {
        assert!(line.starts_with(&format!("{file}: ")), "{line}");
    }
    stdout
}

#[test]
fn check_errors() {
    settings().bind(|| {
        insta::glob!("..", "inputs/check/err/*.pbtxt", |path| {
            insta::assert_snapshot!(findings_of(path));
        });
    });
}

/// Each single-fault input is reported as the problem it was made for, and only that.
#[test]
fn each_fault_is_found() {
    let kind = |problem: &Problem| match problem {
        Problem::DuplicateKey { .. } => "duplicate_key",
        Problem::OverlappingSlices { .. } => "overlapping_slices",
        Problem::SliceGap { .. } => "gappy_slices",
        Problem::UnmergedShard { .. } => "unmerged_shard",
        Problem::UnorderedMerge { .. } => "merge_without_control",
        Problem::UnknownRestoreKey { .. } => "restore_unknown_key",
        Problem::ForeignDevice { .. } => "foreign_device",
        _ => "other",
    };
    for name in [
        "overlapping_slices",
        "gappy_slices",
        "unmerged_shard",
        "merge_without_control",
        "restore_unknown_key",
        "foreign_device",
    ] {
        let path = manifest_path(&format!("tests/inputs/check/err/{name}.pbtxt"));
        let findings = check_module(&module_of(&path));
        let kinds: Vec<&str> = findings.iter().map(|f| kind(&f.problem)).collect();
        assert_eq!(kinds, vec![name], "{name}");
    }
    // Writing `a` in place of `b` also leaves the restore of `b` without a writer.
    let path = manifest_path("tests/inputs/check/err/duplicate_key.pbtxt");
    let findings = check_module(&module_of(&path));
    let kinds: Vec<&str> = findings.iter().map(|f| kind(&f.problem)).collect();
    assert_eq!(kinds, vec!["duplicate_key", "restore_unknown_key"]);
}

#[test]
fn check_rejects_a_saver_def() {
    let file = "tests/fixtures/tf-2.21/graph/g1_single_cpu/saver_def.pbtxt";
    let output = saveplan(&["check", file]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with(&format!("error: {file}: ")), "{stderr}");
}

/// A binary `.meta` file (the MetaGraphDef `tf.compat.v1.train.Saver` writes, with fields we
/// do not model) is read as a MetaGraphDef: its TF1 saver plan checks clean and shows.
#[test]
fn v1_saver_meta_file_is_read() {
    let file = "tests/fixtures/saveplan/v1_saver_meta/model.meta";
    let output = saveplan(&["check", file]);
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        format!("{file}: ok\n"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let shown = saveplan(&["graph", "show", file]);
    assert!(shown.status.success());
    let text = String::from_utf8(shown.stdout).unwrap();
    assert!(text.contains("VariableV2"), "{text}");
    assert!(text.contains("SaveV2"), "{text}");
}

/// `check` takes object specs too: the spec tree, options, dtypes and shapes, every problem
/// on its own line (exit 1), or `ok` with the counts (exit 0).
#[test]
fn check_takes_object_specs() {
    let good = manifest_path("tests/inputs/objects/restore/o7_attributes.json");
    let output = saveplan(&["check", good.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.ends_with(": ok (7 objects, 7 values)\n"), "{stdout}");

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"objects": [{"path": ["a"], "dtype": "floaty", "shape": [-1]},
                        {"path": ["a", "b"], "dtype": "float32", "shape": [1]}]}"#,
    )
    .unwrap();
    let output = saveplan(&["check", bad.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8(output.stdout).unwrap();
    let problems: Vec<&str> = stdout
        .lines()
        .map(|line| line.split_once(": ").unwrap().1)
        .collect();
    assert_eq!(
        problems,
        [
            "entry 0: unknown dtype `floaty`",
            "entry 0: invalid shape [-1]",
            "entry 1: `(root).a` is already a variable"
        ]
    );
}
