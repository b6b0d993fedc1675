//! `saveplan spec PREFIX`: for every checkpoint of TensorFlow's `obj/` and `ckpt/` fixtures,
//! `spec` then `save --values PREFIX` writes the fixture's `.index` and data files byte for
//! byte; a checkpoint no spec can write again is refused in one line, and one whose values
//! `save` cannot take is named with the save's error.

use std::path::{Path, PathBuf};

use crate::support::{for_each_case, root, saveplan};

/// Fixtures `spec` refuses, with the reason: their data files were written from several
/// tasks (or by a size policy), which a checkpoint does not record.
const REFUSED: &[(&str, &str)] = &[
    ("ckpt/c3_two_tasks/ckpt", "it has 2 data files"),
    ("ckpt/c6_max_shard_size/ckpt", "it has 4 data files"),
    ("ckpt/c10_merge_parts/after/ckpt", "it has 2 data files"),
    ("obj/o9_write_graphs/fn/ckpt", "it has 2 data files"),
    ("obj/o9_write_graphs/graph/ckpt", "it has 2 data files"),
];

/// Fixtures whose spec is printed but whose values `save` cannot take from the checkpoint.
const UNSAVED: &[(&str, &str)] = &[
    // Sliced tensors whose stored slices do not cover them: no whole value to read.
    (
        "ckpt/c12_slice_keys/ckpt",
        "is not covered by the stored slices",
    ),
    // complex64 values cannot be made into the traced variables' initial values.
    (
        "ckpt/c1_dtypes/ckpt",
        "initial values of dtype complex64 are not supported",
    ),
];

/// Every checkpoint prefix under `tests/fixtures/tf-2.21/{obj,ckpt}` (temporary parts left
/// out), relative to that folder.
fn prefixes() -> Vec<String> {
    let base = root().join("tests/fixtures/tf-2.21");
    let mut found = Vec::new();
    let mut stack = vec![base.join("obj"), base.join("ckpt")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let text = path.to_string_lossy().into_owned();
            if path.is_dir() && !text.ends_with("_temp") {
                stack.push(path);
            } else if let Some(prefix) = text.strip_suffix(".index") {
                let relative = Path::new(prefix).strip_prefix(&base).unwrap();
                found.push(relative.to_string_lossy().into_owned());
            }
        }
    }
    found.sort();
    found
}

/// The files of a checkpoint: its `.index` and data files, by suffix.
fn files(prefix: &Path) -> Vec<(String, Vec<u8>)> {
    let dir = prefix.parent().unwrap();
    let name = prefix.file_name().unwrap().to_string_lossy().into_owned();
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter_map(|path| {
            let file = path.file_name()?.to_string_lossy().into_owned();
            let suffix = file.strip_prefix(&name)?.to_owned();
            (suffix == ".index" || suffix.starts_with(".data-"))
                .then(|| (suffix, std::fs::read(&path).unwrap()))
        })
        .collect();
    files.sort();
    files
}

/// `spec PREFIX > spec.json`, then `save spec.json --values PREFIX --prefix OUT`: the spec's
/// text, and the save's result.
fn spec_then_save(fixture: &str, out: &Path, plain: bool) -> Result<PathBuf, String> {
    let prefix = format!("tests/fixtures/tf-2.21/{fixture}");
    let mut args = vec!["spec", prefix.as_str()];
    if plain {
        args.push("--plain");
    }
    let spec = saveplan(&args);
    let stderr = String::from_utf8(spec.stderr).unwrap();
    if !spec.status.success() {
        return Err(stderr);
    }
    let spec_path = out.join("spec.json");
    std::fs::write(&spec_path, &spec.stdout).unwrap();
    let written = out.join("out");
    let save = saveplan(&[
        "save",
        spec_path.to_str().unwrap(),
        "--values",
        &prefix,
        "--prefix",
        written.to_str().unwrap(),
    ]);
    if !save.status.success() {
        return Err(String::from_utf8(save.stderr).unwrap());
    }
    Ok(written)
}

fn one_line_error(stderr: &str, expected: &str) {
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: ") && stderr.contains(expected),
        "{stderr}"
    );
}

#[test]
fn spec_then_save_writes_every_fixture_again() {
    let all = prefixes();
    assert!(all.len() > 50, "{all:?}");
    for_each_case(all.iter().map(String::as_str), |fixture| {
        let out = tempfile::tempdir().unwrap();
        let result = spec_then_save(fixture, out.path(), false);
        if let Some((_, reason)) = REFUSED.iter().find(|(name, _)| *name == fixture) {
            let err = result.expect_err("refused");
            one_line_error(
                &err,
                &format!("no spec writes this checkpoint again: {reason}"),
            );
            return;
        }
        if let Some((_, reason)) = UNSAVED.iter().find(|(name, _)| *name == fixture) {
            one_line_error(&result.expect_err("not saved"), reason);
            return;
        }
        let written = result.unwrap_or_else(|err| panic!("{fixture}: {err}"));
        let expected = files(&root().join("tests/fixtures/tf-2.21").join(fixture));
        assert_eq!(expected.len(), 2, "{fixture}: one index, one data file");
        assert!(files(&written) == expected, "{fixture}: different bytes");
    });
}

#[test]
fn object_specs_declare_value_less_nodes_other_paths_and_the_root_layout() {
    let keras = saveplan(&["spec", "tests/fixtures/tf-2.21/obj/o2_optimizer/keras"]);
    assert!(keras.status.success());
    let text = String::from_utf8(keras.stdout).unwrap();
    // One entry per line; the model's edge to the optimizer is in its place among the
    // model's children.
    assert!(text.starts_with("{\"objects\": [\n"), "{text}");
    assert!(
        text.contains(r#"{"path":["model","_functional"],"object":true}"#),
        "{text}"
    );
    assert!(
        text.contains(r#"{"path":["model","optimizer"],"same_as":["optimizer"]}"#),
        "{text}"
    );
    let object: serde_json::Value = serde_json::from_str(&text).unwrap();
    let entries = object["objects"].as_array().unwrap();
    let position = |path: &str| {
        let path: serde_json::Value = serde_json::from_str(path).unwrap();
        entries
            .iter()
            .position(|entry| entry["path"] == path)
            .unwrap()
    };
    assert!(position(r#"["model","_functional"]"#) < position(r#"["model","optimizer"]"#));
    // `Checkpoint(root=module)`: the root layout.
    let write = saveplan(&[
        "spec",
        "tests/fixtures/tf-2.21/obj/o1_module_tree/write/ckpt",
    ]);
    let text = String::from_utf8(write.stdout).unwrap();
    assert!(
        text.starts_with("{\"root\": true, \"objects\": [\n"),
        "{text}"
    );
}

#[test]
fn plain_spec_of_an_object_checkpoint_writes_it_again() {
    let out = tempfile::tempdir().unwrap();
    let fixture = "obj/o1_module_tree/kwarg/ckpt";
    let written = spec_then_save(fixture, out.path(), true).unwrap();
    let expected = files(&root().join("tests/fixtures/tf-2.21").join(fixture));
    assert!(files(&written) == expected);
    let text = std::fs::read_to_string(out.path().join("spec.json")).unwrap();
    assert!(
        text.contains(
            r#""checkpoint_key":"_CHECKPOINTABLE_OBJECT_GRAPH","dtype":"string","shape":[]"#
        ),
        "{text}"
    );
}

#[test]
fn object_and_same_as_entries_are_checked() {
    let out = tempfile::tempdir().unwrap();
    let cases = [
        (
            r#"{"objects": [{"path": ["a"], "object": true, "dtype": "float32"}]}"#,
            "entry 0: an `object` or `same_as` entry has a `path` and no `dtype`",
        ),
        (
            r#"{"objects": [{"path": ["a"], "same_as": ["b"]}]}"#,
            "entry 0: `same_as` names `(root).b`, which no entry declares",
        ),
        (
            r#"{"objects": [{"path": ["a"], "object": true}, {"path": ["a", "b"], "same_as": ["a"]}]}"#,
            "`(root).a.b` is another path to a module it is inside of",
        ),
        (
            r#"{"objects": [{"path": ["a"], "dtype": "float32"}]}"#,
            "entry 0: no `shape` (only an `object` entry has none)",
        ),
    ];
    for (index, (spec, expected)) in cases.iter().enumerate() {
        let path = out.path().join(format!("spec{index}.json"));
        std::fs::write(&path, spec).unwrap();
        let save = saveplan(&[
            "save",
            path.to_str().unwrap(),
            "--values",
            "tests/fixtures/tf-2.21/obj/o1_module_tree/kwarg/ckpt",
            "--prefix",
            out.path().join("out").to_str().unwrap(),
        ]);
        assert!(!save.status.success());
        one_line_error(&String::from_utf8(save.stderr).unwrap(), expected);
    }
}

#[test]
fn save_and_restore_read_the_spec_from_standard_input() {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let fixture = "tests/fixtures/tf-2.21/obj/o2_optimizer/keras/ckpt-1";
    let spec = saveplan(&["spec", fixture]);
    assert!(spec.status.success());
    let out = tempfile::tempdir().unwrap();
    let written = out.path().join("q");
    let restored = out.path().join("r.safetensors");
    let runs: [&[&str]; 2] = [
        &[
            "save",
            "-",
            "--values",
            fixture,
            "--prefix",
            written.to_str().unwrap(),
        ],
        &[
            "restore",
            "-",
            "--prefix",
            written.to_str().unwrap(),
            "--out",
            restored.to_str().unwrap(),
            "--expect",
            "consumed",
        ],
    ];
    for args in runs {
        let mut child = Command::new(env!("CARGO_BIN_EXE_saveplan"))
            .args(args)
            .current_dir(root())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&spec.stdout).unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert_eq!(
        std::fs::read(written.with_extension("index")).unwrap(),
        std::fs::read(format!("{}/{fixture}.index", root().display())).unwrap()
    );
    assert!(restored.exists());
}
