//! `saveplan save`, `restore` and `run`: byte-identical checkpoints for the inputs of TF's
//! `ckpt/c3_two_tasks`, `c4_two_cpus_one_task` and `c6_max_shard_size`; save → inspect →
//! verify → restore round trips for the traced specs `tests/inputs/trace/g1`–`g6`; `run` on
//! TF's `g8_meta_graph` MetaGraphDef, its flat graphs and the `g9_v1_saver` GraphDef +
//! SaverDef; and the error inputs of `tests/inputs/run/err/` (one snapshot each).

use crate::support::session::{assert_same_files, generated_values, read_checkpoint, spec_session};
use crate::support::{TRACE_CASES, fixture, saveplan, settings};

use std::collections::BTreeMap;
use std::path::Path;

use saveplan::exec::HostTensor;

/// Runs the CLI and asserts success.
fn ok(args: &[&str]) -> String {
    let output = saveplan(args);
    assert!(
        output.status.success(),
        "saveplan {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("output is UTF-8")
}

/// Writes `tensors` as a `.safetensors` file with the safetensors crate.
fn write_safetensors(path: &Path, tensors: &BTreeMap<String, HostTensor>) {
    use safetensors::tensor::{Dtype, TensorView};
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(key, tensor)| {
            let dtype = match tensor.dtype() {
                saveplan_ir::DType::Float => Dtype::F32,
                saveplan_ir::DType::Int32 => Dtype::I32,
                saveplan_ir::DType::Int64 => Dtype::I64,
                other => panic!("no safetensors dtype for {other}"),
            };
            let shape = tensor.shape().iter().map(|&dim| dim as usize).collect();
            (
                key.clone(),
                TensorView::new(dtype, shape, tensor.bytes().unwrap()).unwrap(),
            )
        })
        .collect();
    safetensors::tensor::serialize_to_file(views, None, path).unwrap();
}

/// Reads a `.safetensors` file into host tensors.
fn read_safetensors(path: &Path) -> BTreeMap<String, HostTensor> {
    let buffer = std::fs::read(path).unwrap();
    let file = safetensors::SafeTensors::deserialize(&buffer).unwrap();
    file.tensors()
        .into_iter()
        .map(|(key, view)| {
            let dtype = match view.dtype() {
                safetensors::Dtype::F32 => saveplan_ir::DType::Float,
                safetensors::Dtype::I32 => saveplan_ir::DType::Int32,
                safetensors::Dtype::I64 => saveplan_ir::DType::Int64,
                other => panic!("unexpected dtype {other}"),
            };
            let shape = view.shape().iter().map(|&dim| dim as u64).collect();
            (
                key,
                HostTensor::from_bytes(dtype, shape, view.data().to_vec()).unwrap(),
            )
        })
        .collect()
}

/// `saveplan save` writes TF's bytes for the inputs of TF's checkpoint fixtures (values from a
/// safetensors file, or for string tensors from TF's own checkpoint), on every backend.
#[test]
fn save_matches_tf_fixture_bytes() {
    let cases = [
        (
            "c4_two_cpus_one_task",
            "tests/inputs/run/values/c4.safetensors",
        ),
        (
            "c6_max_shard_size",
            "tests/inputs/run/values/c6.safetensors",
        ),
        (
            "c3_two_tasks",
            "tests/fixtures/tf-2.21/ckpt/c3_two_tasks/ckpt",
        ),
    ];
    for backend in saveplan::exec::Backend::available() {
        for (case, values) in cases {
            let dir = tempfile::tempdir().unwrap();
            let prefix = dir.path().join("ckpt");
            ok(&[
                "save",
                &format!("tests/inputs/run/{case}.json"),
                "--values",
                values,
                "--prefix",
                prefix.to_str().unwrap(),
                "--backend",
                backend.name(),
            ]);
            assert_same_files(case, dir.path());
        }
    }
}

/// Save → inspect → verify → restore on every traced spec; the restored file holds the saved
/// values.
#[test]
fn save_inspect_verify_restore_round_trips() {
    for case in TRACE_CASES {
        let spec = format!("tests/inputs/trace/{case}.json");
        let values = generated_values(&spec_session(&format!("trace/{case}.json")), 9);
        let dir = tempfile::tempdir().unwrap();
        let values_file = dir.path().join("values.safetensors");
        write_safetensors(&values_file, &values);
        let prefix = dir.path().join("ckpt");
        let prefix_text = prefix.to_str().unwrap();
        ok(&[
            "save",
            &spec,
            "--values",
            values_file.to_str().unwrap(),
            "--prefix",
            prefix_text,
        ]);
        let listing = ok(&["inspect", prefix_text]);
        for key in values.keys() {
            assert!(listing.contains(&format!("{key} (")), "{case}: {listing}");
        }
        let verified = ok(&["verify", prefix_text]);
        assert!(verified.starts_with("ok: "), "{case}: {verified}");
        let out = dir.path().join("restored.safetensors");
        ok(&[
            "restore",
            &spec,
            "--prefix",
            prefix_text,
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(read_safetensors(&out), values, "{case}");
        assert_eq!(read_checkpoint(&prefix), values, "{case}");
    }
}

/// `saveplan run` on TF's MetaGraphDef, its flat graphs and a TF1 GraphDef with a SaverDef:
/// save then restore through the graph's own plan.
#[test]
fn run_executes_tf_graphs() {
    let v = BTreeMap::from([(
        "v".to_owned(),
        HostTensor::from_f32s(vec![3], &[7.0, 8.0, 9.0]).unwrap(),
    )]);
    let mut graphs: Vec<(String, Option<String>, BTreeMap<String, HostTensor>)> = vec![(
        "graph/g8_meta_graph/meta_graph.pbtxt".to_owned(),
        None,
        v.clone(),
    )];
    for case in TRACE_CASES {
        let values = generated_values(&spec_session(&format!("trace/{case}.json")), 4);
        graphs.push((format!("graph/{case}/flat_graph.pbtxt"), None, values));
    }
    for variant in ["sharded", "unsharded"] {
        graphs.push((
            format!("graph/g9_v1_saver/{variant}.graph.pbtxt"),
            Some(format!(
                "tests/fixtures/tf-2.21/graph/g9_v1_saver/{variant}.saver_def.pbtxt"
            )),
            BTreeMap::new(),
        ));
    }
    for (graph, saver_def, mut values) in graphs {
        let graph_path = format!("tests/fixtures/tf-2.21/{graph}");
        let dir = tempfile::tempdir().unwrap();
        let mut common = vec![graph_path.clone()];
        if let Some(saver_def) = saver_def {
            common.extend(["--saver-def".to_owned(), saver_def]);
        }
        if values.is_empty() {
            // g9's keys come from its graph: ask the library which it saves.
            let module = match saveplan::export::read_graph_file(&fixture(&graph)).unwrap() {
                saveplan::export::Loaded::Graph(module) => module,
                _ => panic!("{graph}: not a GraphDef"),
            };
            let saver = common[2].clone();
            let saver = match saveplan::export::read_graph_file(
                Path::new(env!("CARGO_MANIFEST_DIR")).join(saver).as_path(),
            )
            .unwrap()
            {
                saveplan::export::Loaded::Saver(saver) => saver,
                _ => panic!("not a SaverDef"),
            };
            let targets = saver.names();
            let session =
                saveplan::session::Session::new(&module, targets, Default::default()).unwrap();
            values = generated_values(&session, 6);
        }
        let values_file = dir.path().join("values.safetensors");
        write_safetensors(&values_file, &values);
        let prefix = dir.path().join("ckpt");
        let prefix_text = prefix.to_str().unwrap();
        let out = dir.path().join("out.safetensors");
        let mut save_args: Vec<&str> = common.iter().map(String::as_str).collect();
        save_args.splice(0..0, ["run"]);
        let mut restore_args = save_args.clone();
        save_args.extend([
            "--save",
            prefix_text,
            "--values",
            values_file.to_str().unwrap(),
        ]);
        ok(&save_args);
        assert_eq!(read_checkpoint(&prefix), values, "{graph}");
        restore_args.extend(["--restore", prefix_text, "--out", out.to_str().unwrap()]);
        ok(&restore_args);
        assert_eq!(read_safetensors(&out), values, "{graph}");
    }
}

/// A failed `saveplan save` leaves the checkpoint already at the prefix readable.
#[test]
fn failed_save_keeps_the_previous_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let prefix_text = prefix.to_str().unwrap();
    let spec = "tests/inputs/run/c4_two_cpus_one_task.json";
    ok(&[
        "save",
        spec,
        "--values",
        "tests/inputs/run/values/c4.safetensors",
        "--prefix",
        prefix_text,
    ]);
    let before = read_checkpoint(&prefix);
    for values in ["c4_missing_b", "c4_a_int32", "not_safetensors"] {
        let values = format!("tests/inputs/run/values/{values}.safetensors");
        let output = saveplan(&["save", spec, "--values", &values, "--prefix", prefix_text]);
        assert_eq!(output.status.code(), Some(1));
        assert_eq!(read_checkpoint(&prefix), before);
    }
    std::fs::write(format!("{prefix_text}_temp"), b"in the way").unwrap();
    let output = saveplan(&[
        "save",
        spec,
        "--values",
        "tests/inputs/run/values/c6.safetensors",
        "--prefix",
        prefix_text,
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(read_checkpoint(&prefix), before);
    assert_same_files("c4_two_cpus_one_task", &{
        std::fs::remove_file(format!("{prefix_text}_temp")).unwrap();
        dir.path().to_path_buf()
    });
}

/// Every command line in `tests/inputs/run/err/` fails with exit code 1 and one error line on
/// stderr, nothing on stdout; the snapshot is that line (`{tmp}` is a fresh directory).
#[test]
fn run_cli_errors() {
    settings().bind(|| {
        insta::glob!("..", "inputs/run/err/*.args", |path| {
            let dir = tempfile::tempdir().unwrap();
            let tmp = dir.path().to_str().unwrap();
            let text = std::fs::read_to_string(path).unwrap();
            let args: Vec<String> = text
                .split_whitespace()
                .map(|arg| arg.replace("{tmp}", tmp))
                .collect();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let output = saveplan(&args);
            assert_eq!(output.status.code(), Some(1), "{path:?}");
            assert!(output.stdout.is_empty(), "{path:?} printed to stdout");
            let stderr = String::from_utf8(output.stderr).unwrap();
            assert_eq!(stderr.lines().count(), 1, "{path:?}: {stderr}");
            insta::assert_snapshot!(stderr.trim_end().replace(tmp, "[TMP]"));
        });
    });
}

/// A FIFO given as `--values` is refused at once (reading it would block forever).
#[test]
fn values_fifo_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("values.safetensors");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let prefix = dir.path().join("ckpt");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_saveplan"))
        .args([
            "save",
            "tests/inputs/run/c4_two_cpus_one_task.json",
            "--values",
            fifo.to_str().unwrap(),
            "--prefix",
            prefix.to_str().unwrap(),
        ])
        .current_dir(crate::support::root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("saveplan save blocked on a FIFO");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.ends_with("values.safetensors: not a regular file\n"),
        "{stderr}"
    );
}

/// The CLI reads a `.safetensors` values file in place (views into its memory map): tensors
/// at any offset, here all at odd ones (a header three bytes longer than the file it comes
/// from), still save TF's bytes, on every backend.
#[test]
fn values_at_odd_offsets_save_the_same_bytes() {
    let original =
        std::fs::read(crate::support::root().join("tests/inputs/run/values/c4.safetensors"))
            .unwrap();
    let header_len = u64::from_le_bytes(original[..8].try_into().unwrap()) as usize;
    let (header, data) = original[8..].split_at(header_len);
    let mut shifted = (header_len as u64 + 3).to_le_bytes().to_vec();
    shifted.extend_from_slice(header);
    shifted.extend_from_slice(b"   ");
    shifted.extend_from_slice(data);
    assert_eq!(
        (8 + header_len + 3) % 2,
        1,
        "the data starts at an odd offset"
    );
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("values.safetensors");
    std::fs::write(&values, &shifted).unwrap();
    for backend in saveplan::exec::Backend::available() {
        let out = dir.path().join(backend.name());
        ok(&[
            "save",
            "tests/inputs/run/c4_two_cpus_one_task.json",
            "--values",
            values.to_str().unwrap(),
            "--prefix",
            out.join("ckpt").to_str().unwrap(),
            "--backend",
            backend.name(),
        ]);
        assert_same_files("c4_two_cpus_one_task", &out);
    }
}

/// `run` on the TF1 `.meta` of `tests/fixtures/saveplan/v1_saver_meta` (ref variables:
/// `VariableV2`, `Assign`, `Identity` reads): restoring TF's checkpoint gives TF's values, and
/// saving them writes TF's checkpoint byte for byte, on every backend.
#[test]
fn run_restores_and_saves_tf1_ref_variables() {
    let fixture_dir = "tests/fixtures/saveplan/v1_saver_meta";
    let meta = format!("{fixture_dir}/model.meta");
    let expected = BTreeMap::from([
        (
            "dense/kernel".to_owned(),
            HostTensor::from_f32s(vec![2, 3], &[0.0, 0.25, 0.5, 0.75, 1.0, 1.25]).unwrap(),
        ),
        (
            "dense/bias".to_owned(),
            HostTensor::from_f32s(vec![3], &[0.5, -1.5, 2.0]).unwrap(),
        ),
        (
            "global_step".to_owned(),
            HostTensor::from_bytes(
                saveplan_ir::DType::Int64,
                vec![],
                42i64.to_le_bytes().to_vec(),
            )
            .unwrap(),
        ),
    ]);
    for backend in saveplan::exec::Backend::available() {
        let backend = backend.name();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("restored.safetensors");
        let out_text = out.to_str().unwrap();
        let tf_prefix = format!("{fixture_dir}/ckpt");
        ok(&[
            "run",
            &meta,
            "--restore",
            &tf_prefix,
            "--out",
            out_text,
            "--backend",
            backend,
        ]);
        assert_eq!(read_safetensors(&out), expected, "{backend}");
        let saved = dir.path().join("saved");
        std::fs::create_dir(&saved).unwrap();
        let prefix = saved.join("ckpt");
        let prefix_text = prefix.to_str().unwrap();
        ok(&[
            "run",
            &meta,
            "--save",
            prefix_text,
            "--values",
            out_text,
            "--backend",
            backend,
        ]);
        for file in ["ckpt.index", "ckpt.data-00000-of-00001"] {
            assert_eq!(
                std::fs::read(saved.join(file)).unwrap(),
                std::fs::read(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join(fixture_dir)
                        .join(file)
                )
                .unwrap(),
                "{backend}: {file} differs from TF's"
            );
        }
    }
}
