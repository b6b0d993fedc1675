//! `saveplan graph show|dot|convert` on TensorFlow's graph fixtures and on bad inputs
//! (`tests/inputs/graph/err/`): one snapshot per input file in `snapshots/`.

use crate::support::{relative, saveplan, settings};

use std::path::Path;

use saveplan::export::{self, ProtoMessage};

fn stdout_of(args: &[&str]) -> String {
    let output = saveplan(args);
    assert!(
        output.status.success(),
        "saveplan {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("output is UTF-8")
}

/// Asserts that the command fails with exit code 1 and exactly one `error: <file>: …` line,
/// and returns that line.
fn error_line(args: &[&str], file: &str) -> String {
    let output = saveplan(args);
    assert_eq!(output.status.code(), Some(1), "saveplan {args:?}");
    assert!(
        output.stdout.is_empty(),
        "saveplan {args:?} printed to stdout"
    );
    let stderr = String::from_utf8(output.stderr).expect("errors are UTF-8");
    let mut lines = stderr.lines();
    let line = lines.next().expect("an error line").to_owned();
    assert_eq!(lines.next(), None, "more than one line: {stderr}");
    assert!(line.starts_with(&format!("error: {file}: ")), "{line}");
    line
}

/// The module a graph file holds.
fn module_of(path: &Path) -> saveplan_ir::Module {
    export::read_graph_file(path)
        .unwrap()
        .into_module()
        .unwrap_or_else(|| panic!("{} holds no graph", path.display()))
}

/// Fixture files that hold a graph or a function (not the SaverDefs).
fn graph_fixtures() -> Vec<std::path::PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tf-2.21/graph");
    let mut files = Vec::new();
    for case in std::fs::read_dir(&root).unwrap() {
        for file in std::fs::read_dir(case.unwrap().path()).unwrap() {
            let path = file.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap();
            if name.ends_with(".pbtxt") && !name.contains("saver_def") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn show_prints_the_canonical_text() {
    let files = graph_fixtures();
    assert_eq!(files.len(), 22);
    for path in files {
        let shown = stdout_of(&["graph", "show", &relative(&path)]);
        assert_eq!(shown, module_of(&path).to_string(), "{}", path.display());
        assert!(shown.contains(" = "), "{shown}");
    }
}

#[test]
fn dot_prints_graphviz() {
    for path in graph_fixtures() {
        let dot = stdout_of(&["graph", "dot", &relative(&path)]);
        assert!(dot.starts_with("digraph") && dot.ends_with("}\n"), "{dot}");
        assert_eq!(dot, saveplan_ir::dot::to_dot(&module_of(&path)));
    }
}

#[test]
fn binary_files_show_like_text_files() {
    let out = tempfile::tempdir().unwrap();
    for path in graph_fixtures() {
        let pb = out.path().join("graph.pb");
        stdout_of(&["graph", "convert", &relative(&path), pb.to_str().unwrap()]);
        assert_eq!(
            stdout_of(&["graph", "show", pb.to_str().unwrap()]),
            stdout_of(&["graph", "show", &relative(&path)])
        );
    }
}

#[test]
fn graph_err() {
    settings().bind(|| {
        insta::glob!("..", "inputs/graph/err/*", |path| {
            let file = relative(path);
            let show = error_line(&["graph", "show", &file], &file);
            let dot = error_line(&["graph", "dot", &file], &file);
            assert_eq!(show, dot);
            insta::assert_snapshot!(show);
        });
    });
}

#[test]
fn convert_rejects_what_show_rejects() {
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("out.pb");
    let target = target.to_str().unwrap();
    for file in [
        "tests/inputs/graph/err/missing_input.pbtxt",
        "tests/inputs/graph/err/malformed_device.pbtxt",
        "tests/inputs/graph/err/truncated.pb",
        "tests/inputs/graph/err/wrong_extension.txt",
    ] {
        let line = error_line(&["graph", "convert", file, target], file);
        assert_eq!(line, error_line(&["graph", "show", file], file));
    }
    assert!(!out.path().join("out.pb").exists());
}

#[test]
fn convert_rejects_unknown_output_extension() {
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("graph.json");
    let line = error_line(
        &[
            "graph",
            "convert",
            "tests/fixtures/tf-2.21/graph/g1_single_cpu/graph.pbtxt",
            target.to_str().unwrap(),
        ],
        target.to_str().unwrap(),
    );
    assert!(
        line.ends_with("unknown extension (expected .pb or .pbtxt)"),
        "{line}"
    );
}

#[test]
fn missing_file_is_one_error_line() {
    let file = "tests/inputs/graph/no_such_file.pbtxt";
    let line = error_line(&["graph", "show", file], file);
    assert!(line.contains("cannot read file"), "{line}");
}

#[test]
fn convert_round_trips_every_fixture_through_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tf-2.21/graph");
    let out = tempfile::tempdir().unwrap();
    let mut n_files = 0;
    for case in std::fs::read_dir(&root).unwrap() {
        for file in std::fs::read_dir(case.unwrap().path()).unwrap() {
            let path = file.unwrap().path();
            if path.extension().is_none_or(|ext| ext != "pbtxt") {
                continue;
            }
            n_files += 1;
            let pb = out.path().join("graph.pb");
            let pbtxt = out.path().join("graph.pbtxt");
            let (pb_arg, pbtxt_arg) = (pb.to_str().unwrap(), pbtxt.to_str().unwrap());
            stdout_of(&["graph", "convert", path.to_str().unwrap(), pb_arg]);
            stdout_of(&["graph", "convert", pb_arg, pbtxt_arg]);
            let original = export::read_proto_file(&path).unwrap();
            let binary = std::fs::read(&pb).unwrap();
            assert_eq!(binary, original.encode_binary(), "{}", path.display());
            assert_eq!(ProtoMessage::decode_binary(&binary), Some(original));
            assert_eq!(
                std::fs::read_to_string(&pbtxt).unwrap(),
                std::fs::read_to_string(&path).unwrap(),
                "{}",
                path.display()
            );
        }
    }
    assert_eq!(n_files, 28);
}
