//! `saveplan save` and `restore` with `--mode eager`: TensorFlow's bytes for the inputs of
//! `ckpt/c4_two_cpus_one_task` (one task, run op by op) and `ckpt/c3_two_tasks` (two tasks,
//! traced into a function and reported on stderr), on every backend; eager restores give the
//! same values as graph-mode restores.

use crate::support::saveplan;
use crate::support::session::assert_same_files;

/// Runs the CLI, asserts success and returns stderr.
fn ok(args: &[&str]) -> String {
    let output = saveplan(args);
    let stderr = String::from_utf8(output.stderr).expect("stderr is UTF-8");
    assert!(
        output.status.success(),
        "saveplan {args:?} failed: {stderr}"
    );
    stderr
}

const CASES: [(&str, &str, &str); 2] = [
    (
        "c4_two_cpus_one_task",
        "tests/inputs/run/values/c4.safetensors",
        "",
    ),
    (
        "c3_two_tasks",
        "tests/fixtures/tf-2.21/ckpt/c3_two_tasks/ckpt",
        "saveplan: save: traced: no cached function\n",
    ),
];

#[test]
fn eager_save_writes_tensorflow_bytes() {
    for backend in saveplan::exec::Backend::available() {
        for (case, values, report) in CASES {
            let dir = tempfile::tempdir().unwrap();
            let prefix = dir.path().join("ckpt");
            let stderr = ok(&[
                "save",
                &format!("tests/inputs/run/{case}.json"),
                "--values",
                values,
                "--prefix",
                prefix.to_str().unwrap(),
                "--mode",
                "eager",
                "--backend",
                backend.name(),
            ]);
            assert_eq!(stderr, report, "{case}: {backend}");
            assert_same_files(case, dir.path());
        }
    }
}

/// Writes the values of `tests/inputs/trace/g3_two_tasks.json` (a, b: float32; c: int64).
fn write_g3_values(path: &std::path::Path) {
    use safetensors::tensor::{Dtype, TensorView};
    let a: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let b: Vec<u8> = 3.25f32.to_le_bytes().to_vec();
    let c: Vec<u8> = 7i64.to_le_bytes().to_vec();
    let views = vec![
        ("a", TensorView::new(Dtype::F32, vec![2], &a).unwrap()),
        ("b", TensorView::new(Dtype::F32, vec![1], &b).unwrap()),
        ("c", TensorView::new(Dtype::I64, vec![], &c).unwrap()),
    ];
    safetensors::tensor::serialize_to_file(views, None, path).unwrap();
}

/// Restores in both modes give the same values: c4 (one task, from TensorFlow's checkpoint)
/// and g3 (two tasks, from a checkpoint saved eagerly here).
#[test]
fn eager_restore_matches_graph_restore() {
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("g3.safetensors");
    write_g3_values(&values);
    let g3_prefix = dir.path().join("g3");
    ok(&[
        "save",
        "tests/inputs/trace/g3_two_tasks.json",
        "--values",
        values.to_str().unwrap(),
        "--prefix",
        g3_prefix.to_str().unwrap(),
        "--mode",
        "eager",
    ]);
    let cases = [
        (
            "tests/inputs/run/c4_two_cpus_one_task.json".to_owned(),
            "tests/fixtures/tf-2.21/ckpt/c4_two_cpus_one_task/ckpt".to_owned(),
            "",
        ),
        (
            "tests/inputs/trace/g3_two_tasks.json".to_owned(),
            g3_prefix.to_str().unwrap().to_owned(),
            "saveplan: restore: traced: no cached function\n",
        ),
    ];
    for (spec, prefix, report) in cases {
        let mut outputs = Vec::new();
        for mode in ["graph", "eager"] {
            let out = dir.path().join(format!("{mode}.safetensors"));
            let stderr = ok(&[
                "restore",
                &spec,
                "--prefix",
                &prefix,
                "--out",
                out.to_str().unwrap(),
                "--mode",
                mode,
            ]);
            let expected = if mode == "eager" { report } else { "" };
            assert_eq!(stderr, expected, "{spec}: {mode}");
            outputs.push(std::fs::read(&out).unwrap());
        }
        assert!(outputs[0] == outputs[1], "{spec}: restored values differ");
    }
    let restored = std::fs::read(dir.path().join("eager.safetensors")).unwrap();
    assert!(
        restored == std::fs::read(&values).unwrap(),
        "g3: values differ"
    );
}

#[test]
fn eager_errors_name_the_op_and_device() {
    // A file where the save's temporary directory goes: the lock is taken, then `SaveV2`
    // fails.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ckpt_temp"), b"not a directory").unwrap();
    let prefix = dir.path().join("ckpt");
    let output = saveplan(&[
        "save",
        "tests/inputs/run/c4_two_cpus_one_task.json",
        "--values",
        "tests/inputs/run/values/c4.safetensors",
        "--prefix",
        prefix.to_str().unwrap(),
        "--mode",
        "eager",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("op `SaveV2"), "{stderr}");
    assert!(
        stderr.contains("on /job:localhost/replica:0/task:0/device:CPU:0"),
        "{stderr}"
    );
}

#[test]
fn help_documents_eager_mode() {
    for command in ["save", "restore"] {
        let output = saveplan(&[command, "--help"]);
        let help = String::from_utf8(output.stdout).unwrap();
        assert!(help.contains("traced: <reason>"), "{command}: {help}");
        // One text fits both commands: it names neither the save tensor nor the restore op.
        assert!(help.contains("save or restore plan"), "{command}: {help}");
        assert!(!help.contains("save tensor"), "{command}: {help}");
    }
}
