//! `saveplan diff A B`: per key same / different / only in A / only in B, as text and as JSON,
//! with `diff`'s exit codes (0 equal, 1 different, 2 error); checkpoints and `.safetensors`
//! files on either side.

use std::collections::BTreeMap;
use std::path::Path;

use saveplan::exec::HostTensor;
use saveplan::session::{Session, SessionOptions};
use saveplan::trace::spec::SpecFile;
use serde_json::{Value, json};

use crate::support::saveplan;

/// Saves `values` (key → tensor) as a checkpoint at `prefix`.
fn save(prefix: &Path, values: &[(&str, HostTensor)]) {
    let variables: Vec<Value> = values
        .iter()
        .map(|(key, value)| {
            json!({"checkpoint_key": key, "dtype": value.dtype().to_string(), "shape": value.shape()})
        })
        .collect();
    let spec = SpecFile::parse(&json!({ "variables": variables }).to_string()).unwrap();
    let session = Session::from_spec(&spec, SessionOptions::default()).unwrap();
    let values: BTreeMap<String, HostTensor> = values
        .iter()
        .map(|(key, value)| ((*key).to_owned(), value.clone()))
        .collect();
    session.assign(values).unwrap();
    session.save(prefix.to_str().unwrap()).unwrap();
}

fn f32s(values: &[f32]) -> HostTensor {
    HostTensor::from_f32s(vec![values.len() as u64], values).unwrap()
}

fn diff(a: &Path, b: &Path, json: bool) -> (i32, String, String) {
    let mut args = vec!["diff", a.to_str().unwrap(), b.to_str().unwrap()];
    if json {
        args.push("--json");
    }
    let output = saveplan(&args);
    (
        output.status.code().unwrap(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn diff_reports_every_key_and_exits_like_diff() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a/ckpt"), dir.path().join("b/ckpt"));
    save(
        &a,
        &[
            ("same", f32s(&[1.0, 2.0])),
            ("values", f32s(&[1.0, 2.0, 3.0])),
            ("nan", f32s(&[f32::NAN, 1.0])),
            ("dtype", HostTensor::from_i32s(vec![1], &[1]).unwrap()),
            ("shape", f32s(&[1.0])),
            ("names", HostTensor::string_vector(["x", "y"])),
            ("only_a", f32s(&[0.0])),
        ],
    );
    save(
        &b,
        &[
            ("same", f32s(&[1.0, 2.0])),
            ("values", f32s(&[1.0, 2.5, -1.0])),
            ("nan", f32s(&[f32::NAN, 1.0])),
            ("dtype", f32s(&[1.0])),
            ("shape", f32s(&[1.0, 2.0])),
            ("names", HostTensor::string_vector(["x", "z"])),
            ("only_b", f32s(&[0.0])),
        ],
    );
    let (code, stdout, _) = diff(&a, &a, false);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(stdout, "7 same, 0 different, 0 only in A, 0 only in B\n");

    let (code, stdout, stderr) = diff(&a, &b, true);
    assert_eq!(code, 1, "{stderr}");
    let found: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        found,
        json!({
            "same": ["nan", "same"],
            "different": [
                {"key": "dtype", "dtype": ["int32", "float32"], "shape": [1],
                 "elements_differing": null, "max_abs_diff": null},
                {"key": "names", "dtype": "string", "shape": [2],
                 "elements_differing": 1, "max_abs_diff": null},
                {"key": "shape", "dtype": "float32", "shape": [[1], [2]],
                 "elements_differing": null, "max_abs_diff": null},
                {"key": "values", "dtype": "float32", "shape": [3],
                 "elements_differing": 2, "max_abs_diff": 4.0},
            ],
            "only_in_a": ["only_a"],
            "only_in_b": ["only_b"],
        })
    );
    let (code, stdout, _) = diff(&a, &b, false);
    assert_eq!(code, 1);
    assert!(
        stdout.contains("different: values: float32 [3]: 2 of 3 elements differ, max abs diff 4\n"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("2 same, 4 different, 1 only in A, 1 only in B\n"),
        "{stdout}"
    );
}

#[test]
fn diff_compares_a_checkpoint_with_a_safetensors_file_and_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    save(&prefix, &[("w", f32s(&[1.5, -2.0]))]);
    let file = dir.path().join("w.safetensors");
    let output = saveplan(&["convert", prefix.to_str().unwrap(), file.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(diff(&prefix, &file, false).0, 0);
    // A directory stands for its latest checkpoint (none here: an error).
    let (code, stdout, stderr) = diff(&prefix, &dir.path().join("missing"), false);
    assert_eq!(code, 2);
    assert!(stdout.is_empty());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
}
