//! The `inspect`, `verify` and `convert` subcommands, run as the built binary on the fixtures.

use crate::support::bundle::{ckpt_root, copy_fixture, load_json};
use crate::support::saveplan;

use std::path::Path;
use std::process::Output;

use saveplan::bundle::{BundleReader, BundleWriter, DType};

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn path_arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn inspect_lists_like_inspect_checkpoint() {
    let prefix = ckpt_root().join("c5_partitioned/ckpt");
    let output = saveplan(&["inspect", path_arg(&prefix)]);
    assert!(output.status.success());
    assert_eq!(
        stdout(&output),
        "col (DT_INT32) [2,4]\npart (DT_FLOAT) [4,3]\nplain (DT_FLOAT) [1]\nvec (DT_INT64) [7]\n"
    );
}

#[test]
fn inspect_json_lists_entries() {
    let prefix = ckpt_root().join("c4_two_cpus_one_task/ckpt");
    let output = saveplan(&["inspect", "--json", path_arg(&prefix)]);
    assert!(output.status.success());
    let listing: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    // FORMATS.md §2.8: a = float32[2] at 0 with crc 0x35E53C59, b = int32[2] at 8 with 0xAAA34374.
    assert_eq!(
        listing,
        serde_json::json!([
            {"key": "a", "dtype": "float32", "shape": [2], "shard": 0, "offset": 0, "size": 8, "crc32c": 0x35E5_3C59u32, "slices": []},
            {"key": "b", "dtype": "int32", "shape": [2], "shard": 0, "offset": 8, "size": 8, "crc32c": 0xAAA3_4374u32, "slices": []}
        ])
    );
    let sliced = saveplan(&[
        "inspect",
        "--json",
        path_arg(&ckpt_root().join("c12_slice_keys/ckpt")),
    ]);
    let listing: serde_json::Value = serde_json::from_slice(&sliced.stdout).unwrap();
    let m = listing
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["key"] == "m")
        .unwrap();
    let slices: Vec<&str> = m["slices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["slice"].as_str().unwrap())
        .collect();
    assert_eq!(slices, ["0,2:-", "2,2:-"]);
    assert_eq!(
        listing
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["dtype"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["float32", "float32", "int32", "int64"]
    );
}

#[test]
fn inspect_tensor_prints_values() {
    let c1 = ckpt_root().join("c1_dtypes/ckpt");
    let output = saveplan(&["inspect", "--tensor", "matrix_i32", path_arg(&c1)]);
    assert!(output.status.success());
    let text = stdout(&output);
    assert_eq!(
        text,
        "matrix_i32 (DT_INT32) [2,3,4]\n[[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]], [[12, 13, 14, 15], [16, 17, 18, 19], [20, 21, 22, 23]]]\n"
    );
    let output = saveplan(&["inspect", "--tensor", "f32", "--json", path_arg(&c1)]);
    let tensor: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let values = load_values("c1_dtypes")["ckpt"]["f32"]["values"].clone();
    assert_eq!(tensor["values"], values);
    let strings = saveplan(&[
        "inspect",
        "--tensor",
        "str_2d",
        path_arg(&ckpt_root().join("c2_strings/ckpt")),
    ]);
    assert!(
        stdout(&strings).starts_with("str_2d (DT_STRING) [2,2]\n[[b\""),
        "{}",
        stdout(&strings)
    );
    let missing = saveplan(&["inspect", "--tensor", "nope", path_arg(&c1)]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no value named `nope`"));
}

fn load_values(case: &str) -> serde_json::Value {
    load_json(&ckpt_root().join(case).join("values.json"))
}

#[test]
fn verify_good_and_corrupted() {
    let good = saveplan(&[
        "verify",
        path_arg(&ckpt_root().join("c6_max_shard_size/ckpt")),
    ]);
    assert!(good.status.success(), "{}", stdout(&good));
    assert!(stdout(&good).starts_with("ok: 2 tensors"));

    let dir = tempfile::tempdir().unwrap();
    let prefix = copy_fixture("c1_dtypes", "ckpt", dir.path());
    let data = dir.path().join("ckpt.data-00000-of-00001");
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[40] ^= 0x10; // inside f64 (offset 36..68)
    bytes[300] ^= 0x01; // inside matrix_i32 (offset 237..333)
    std::fs::write(&data, bytes).unwrap();
    let bad = saveplan(&["verify", path_arg(&prefix)]);
    assert_eq!(bad.status.code(), Some(1));
    let text = stdout(&bad);
    let bad_lines: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("bad: "))
        .collect();
    assert_eq!(bad_lines.len(), 2, "{text}");
    assert!(
        bad_lines[0].starts_with("bad: f64: ") && bad_lines[0].contains("checksum mismatch"),
        "{text}"
    );
    assert!(bad_lines[1].starts_with("bad: matrix_i32: "), "{text}");
    assert!(text.contains("2 of 22 tensors are bad"), "{text}");

    let missing = saveplan(&["verify", path_arg(&dir.path().join("nope"))]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nope.index: index file not found"));
}

/// A data file gone is said once, with the number of tensors stored there, not once per
/// tensor.
#[test]
fn verify_reports_a_missing_shard_once() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = copy_fixture("c1_dtypes", "ckpt", dir.path());
    std::fs::remove_file(dir.path().join("ckpt.data-00000-of-00001")).unwrap();
    let output = saveplan(&["verify", path_arg(&prefix)]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with("bad: ")
            && lines[0].contains("ckpt.data-00000-of-00001: data shard missing")
            && lines[0].ends_with(", 22 tensors stored there"),
        "{text}"
    );
    assert_eq!(lines[1], "22 of 22 tensors are bad");
}

/// A sliced tensor whose stored slices leave part of it out fails `verify`, and `convert`
/// (which reads it whole) fails too.
#[test]
fn verify_reports_slices_that_do_not_cover_their_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let mut writer = BundleWriter::create(&prefix).unwrap();
    let top_rows = saveplan::bundle::TensorSlice::parse("0,2:-").unwrap();
    let bytes: Vec<u8> = (0..6u8).flat_map(|v| f32::from(v).to_le_bytes()).collect();
    writer
        .add_slice(
            "part",
            DType::Float,
            &[4, 3],
            &top_rows,
            saveplan::bundle::TensorValues::Bytes(&bytes),
        )
        .unwrap();
    writer.finish().unwrap();
    let output = saveplan(&["verify", path_arg(&prefix)]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    assert!(
        text.starts_with("bad: part: ")
            && text.contains("tensor `part`: stored slices cover 6 of its 12 elements"),
        "{text}"
    );
    let out = dir.path().join("out.safetensors");
    let converted = saveplan(&["convert", path_arg(&prefix), path_arg(&out)]);
    assert_eq!(converted.status.code(), Some(1));
}

#[test]
fn convert_both_ways_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let mut writer = BundleWriter::create(&src).unwrap();
    let cases: Vec<(&str, DType, Vec<i64>)> = vec![
        ("w/kernel", DType::Float, vec![3, 2]),
        ("b16", DType::BFloat16, vec![4]),
        ("h", DType::Half, vec![2, 1]),
        ("step", DType::Int64, vec![]),
        ("mask", DType::Bool, vec![3]),
        ("z", DType::Complex64, vec![1]),
        ("u", DType::UInt32, vec![0]),
    ];
    for (key, dtype, shape) in &cases {
        let n: i64 = shape.iter().product();
        let bytes: Vec<u8> = (0..n as usize * dtype.element_size().unwrap())
            .map(|i| (i * 7 % 2 + i) as u8)
            .collect();
        let bytes = if *dtype == DType::Bool {
            vec![1, 0, 1]
        } else {
            bytes
        };
        writer.add(key, *dtype, shape, &bytes).unwrap();
    }
    writer.finish().unwrap();
    let st = dir.path().join("model.safetensors");
    let out = saveplan(&["convert", path_arg(&src), path_arg(&st)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let back = dir.path().join("back/ckpt");
    let out = saveplan(&["convert", path_arg(&st), path_arg(&back)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (a, b) = (
        BundleReader::open(&src).unwrap(),
        BundleReader::open(&back).unwrap(),
    );
    assert_eq!(a.entries().len(), b.entries().len());
    for entry in a.entries() {
        assert_eq!(
            a.read(&entry.key).unwrap(),
            b.read(&entry.key).unwrap(),
            "{}",
            entry.key
        );
    }

    // A sliced checkpoint converts too: slices are assembled into whole tensors.
    let st5 = dir.path().join("c5.safetensors");
    let out = saveplan(&[
        "convert",
        path_arg(&ckpt_root().join("c5_partitioned/ckpt")),
        path_arg(&st5),
    ]);
    assert!(out.status.success());
    let bytes = std::fs::read(&st5).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let part = file.tensor("part").unwrap();
    assert_eq!(part.shape(), [4, 3]);
    let c5 = BundleReader::open(ckpt_root().join("c5_partitioned/ckpt")).unwrap();
    assert_eq!(
        saveplan::bundle::Values::Bytes(part.data().to_vec()),
        c5.read("part").unwrap().values
    );
}

#[test]
fn convert_refuses_strings_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("s.safetensors");
    let out = saveplan(&[
        "convert",
        path_arg(&ckpt_root().join("c2_strings/ckpt")),
        path_arg(&st),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is a string tensor: safetensors cannot hold strings"),
        "{stderr}"
    );
    assert!(!st.exists());
}

/// A `.safetensors` file of `header` (padded to 8 bytes) and `data`.
fn safetensors_file(path: &Path, header: &str, data: &[u8]) {
    let mut header = header.as_bytes().to_vec();
    header.resize(header.len().next_multiple_of(8), b' ');
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&header);
    bytes.extend_from_slice(data);
    std::fs::write(path, bytes).unwrap();
}

/// A values file that names a tensor twice, or holds a dtype TensorFlow has none for, is
/// refused in one line naming the file and the tensor, by `convert` and by the commands that
/// read values (`diff` here), and no checkpoint is written (`convert` checks every dtype
/// before it writes).
#[test]
fn value_files_that_cannot_be_read_are_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let twice = dir.path().join("twice.safetensors");
    safetensors_file(
        &twice,
        r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
        &[0; 8],
    );
    let e8m0 = dir.path().join("e8m0.safetensors");
    safetensors_file(
        &e8m0,
        r#"{"b":{"dtype":"F8_E8M0","shape":[2],"data_offsets":[0,2]}}"#,
        &[0; 2],
    );
    for (file, expected) in [
        (
            &twice,
            "not a valid safetensors file: tensor `a` is named twice in the header",
        ),
        (
            &e8m0,
            "tensor `b` has safetensors dtype F8_E8M0, which TensorFlow has no type for",
        ),
    ] {
        let prefix = dir.path().join("out/ckpt");
        for args in [
            vec!["convert", path_arg(file), path_arg(&prefix)],
            vec!["diff", path_arg(file), path_arg(file)],
        ] {
            let out = saveplan(&args);
            assert_ne!(out.status.code(), Some(0), "{args:?}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
            assert!(stderr.contains(expected), "{args:?}: {stderr}");
            assert!(stderr.contains(path_arg(file)), "{args:?}: {stderr}");
            assert!(!dir.path().join("out/ckpt.index").exists(), "{args:?}");
        }
    }
}
