//! A reader that closes the pipe early (`saveplan graph show F | head -1`) ends the program
//! quietly: exit code 0 and nothing on stderr, for every command that prints much.

use crate::support::root;

use std::io::Read as _;
use std::process::{Command, Stdio};

use saveplan::bundle::{BundleWriter, DType};

/// Runs `saveplan args`, reads one byte of its stdout, closes the pipe and waits; asserts the
/// exit is quiet.
fn assert_quiet_when_pipe_closes(args: &[&str]) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_saveplan"))
        .args(args)
        .current_dir(root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the saveplan binary runs");
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.is_empty(), "saveplan {args:?}: {stderr}");
    assert_eq!(output.status.code(), Some(0), "saveplan {args:?}: {stderr}");
}

/// A spec of `n` variables (a plan whose text is far larger than a pipe's buffer).
fn large_spec(n: usize) -> String {
    let variables: Vec<String> = (0..n)
        .map(|at| format!(r#"{{"checkpoint_key": "v{at}", "dtype": "float32", "shape": [2]}}"#))
        .collect();
    format!(r#"{{"variables": [{}]}}"#, variables.join(", "))
}

#[test]
fn closed_stdout_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("large.json");
    std::fs::write(&spec, large_spec(2000)).unwrap();
    let out = dir.path().join("out");
    let compiled = crate::support::saveplan(&[
        "compile",
        spec.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(compiled.status.success(), "{compiled:?}");
    let graph = out.join("meta_graph.pb");
    let graph = graph.to_str().unwrap();
    assert_quiet_when_pipe_closes(&["graph", "show", graph]);
    assert_quiet_when_pipe_closes(&["graph", "dot", graph]);

    let prefix = dir.path().join("ckpt");
    let mut writer = BundleWriter::create(&prefix).unwrap();
    let bytes: Vec<u8> = (0..200_000u32)
        .flat_map(|value| (value as f32).to_le_bytes())
        .collect();
    writer.add("big", DType::Float, &[200_000], &bytes).unwrap();
    writer.finish().unwrap();
    let prefix = prefix.to_str().unwrap();
    assert_quiet_when_pipe_closes(&["inspect", prefix, "--tensor", "big", "--json"]);
    assert_quiet_when_pipe_closes(&["inspect", prefix, "--tensor", "big"]);
}
