//! MergeV2Checkpoints semantics against `meta/op_behaviour.json`: for every recorded case the
//! sources are rebuilt (same file names and sizes as TF's), merged, and the resulting files,
//! directories and keys compared with what TensorFlow left behind.

use crate::support::bundle::{ckpt_root, input, load_json};
use crate::support::files::{dirs_under, file_bytes_under};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use saveplan::bundle::{
    BundleError, BundleReader, BundleWriter, DType, MergeFlags, MergeOptions, merge_bundles,
};
use serde_json::Value;

/// Writes the bundle `prefix` from its parts (merging them when there are several).
fn write_source(root: &Path, prefix: &str, parts: &Value) {
    let parts = parts.as_array().unwrap();
    let target = root.join(prefix);
    let part_prefixes: Vec<PathBuf> = if parts.len() == 1 {
        vec![target.clone()]
    } else {
        (0..parts.len())
            .map(|idx| root.join(format!("{prefix}_build/part{idx}")))
            .collect()
    };
    for (part, part_prefix) in parts.iter().zip(&part_prefixes) {
        let mut writer = BundleWriter::create(part_prefix).unwrap();
        for item in part.as_array().unwrap() {
            let dtype = DType::parse(item[1].as_str().unwrap()).unwrap();
            let shape: Vec<i64> = item[2]
                .as_array()
                .unwrap()
                .iter()
                .map(|dim| dim.as_i64().unwrap())
                .collect();
            let n: i64 = shape.iter().product();
            let bytes = vec![7u8; n as usize * dtype.element_size().unwrap()];
            writer
                .add(item[0].as_str().unwrap(), dtype, &shape, &bytes)
                .unwrap();
        }
        writer.finish().unwrap();
    }
    if parts.len() > 1 {
        merge_bundles(&part_prefixes, &target, MergeOptions::default()).unwrap();
    }
}

/// Every regular file under `dir` with its size.
fn file_sizes(dir: &Path) -> BTreeMap<String, u64> {
    file_bytes_under(dir)
        .into_iter()
        .map(|(name, bytes)| (name, bytes.len() as u64))
        .collect()
}

fn json_sizes(value: &Value) -> BTreeMap<String, u64> {
    value
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, size)| (name.clone(), size.as_u64().unwrap()))
        .collect()
}

#[test]
fn merge_cases_from_op_behaviour() {
    let behaviour = load_json(&ckpt_root().join("../meta/op_behaviour.json"));
    let setups = load_json(&input("merge_cases.json"));
    let cases = behaviour["MergeV2Checkpoints"].as_array().unwrap();
    assert_eq!(cases.len(), 11);
    for case in cases {
        let label = case["label"].as_str().unwrap();
        let setup = setups
            .get(label)
            .unwrap_or_else(|| panic!("no setup for `{label}`"));
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        let sources: Vec<PathBuf> = case["sources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| root.join(s.as_str().unwrap()))
            .collect();
        for source in &sources {
            std::fs::create_dir_all(source.parent().unwrap()).unwrap();
        }
        for (prefix, parts) in setup.as_object().unwrap() {
            write_source(root, prefix, parts);
        }
        for (name, size) in json_sizes(&case["files_before"]) {
            let path = root.join(&name);
            if !path.exists() {
                std::fs::write(&path, vec![b'j'; size as usize]).unwrap();
            }
        }
        assert_eq!(
            file_sizes(root),
            json_sizes(&case["files_before"]),
            "{label}: setup differs from TF's files"
        );
        let attrs = &case["attrs"];
        let options = MergeOptions {
            flags: MergeFlags {
                delete_old_dirs: attrs
                    .get("delete_old_dirs")
                    .is_none_or(|flag| flag.as_bool().unwrap()),
                allow_missing_files: attrs
                    .get("allow_missing_files")
                    .is_some_and(|flag| flag.as_bool().unwrap()),
            },
            ..MergeOptions::default()
        };
        let dest = root.join(case["destination"].as_str().unwrap());
        let result = merge_bundles(&sources, &dest, options);
        if label == "source prefix == destination prefix" {
            // TensorFlow deletes the fresh index here; we refuse and keep the checkpoint intact.
            assert!(
                matches!(result, Err(BundleError::MergeOntoItself { .. })),
                "{label}: {result:?}"
            );
            assert_eq!(
                file_sizes(root),
                json_sizes(&case["files_before"]),
                "{label}"
            );
            continue;
        }
        if case["ok"].as_bool().unwrap() {
            result.unwrap_or_else(|err| panic!("{label}: {err}"));
            let reader = BundleReader::open(&dest).unwrap();
            let keys: Vec<&str> = reader
                .entries()
                .iter()
                .map(|entry| entry.key.as_str())
                .collect();
            let want: Vec<&str> = case["merged_keys"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k.as_str().unwrap())
                .collect();
            assert_eq!(keys, want, "{label}");
            assert!(reader.verify().is_empty(), "{label}");
        } else {
            let err = result.expect_err(label);
            let error = case["error"].as_str().unwrap();
            let expected_kind = match &err {
                BundleError::MergeSourceMissing { .. } => {
                    error.contains("allow_missing_files was set to false")
                }
                BundleError::MergeNoSources { .. } => {
                    error.contains("At least one prefix checkpoint file must exist")
                }
                BundleError::Conflict { key, .. } => {
                    error.contains(&format!("Duplicate tensor keyed by {key}"))
                }
                _ => false,
            };
            assert!(expected_kind, "{label}: got {err}, TF said {error}");
        }
        let mut want_dirs: Vec<String> = case["dirs_after"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap().to_string())
            .collect();
        want_dirs.sort();
        let got_dirs: Vec<String> = dirs_under(root)
            .into_iter()
            .filter(|dir| !dir.contains("_build"))
            .collect();
        assert_eq!(got_dirs, want_dirs, "{label}: directories");
        assert_eq!(
            file_sizes(root),
            json_sizes(&case["files_after"]),
            "{label}: files"
        );
    }
}

#[test]
fn c10_merge_reproduces_after_from_before() {
    let root = tempfile::tempdir().unwrap();
    let case = ckpt_root().join("c10_merge_parts");
    std::fs::create_dir_all(root.path().join("ckpt_temp")).unwrap();
    for (name, bytes) in file_bytes_under(&case.join("before/ckpt_temp")) {
        std::fs::write(root.path().join("ckpt_temp").join(name), bytes).unwrap();
    }
    let sources = [
        root.path().join("ckpt_temp/part-00000-of-00002"),
        root.path().join("ckpt_temp/part-00001-of-00002"),
    ];
    merge_bundles(&sources, root.path().join("ckpt"), MergeOptions::default()).unwrap();
    assert_eq!(
        file_bytes_under(root.path()),
        file_bytes_under(&case.join("after"))
    );
}

#[test]
fn sharded_filenames_and_temp_prefixes_match_tf() {
    let behaviour = load_json(&ckpt_root().join("../meta/op_behaviour.json"));
    for case in behaviour["ShardedFilename"].as_array().unwrap() {
        let name = saveplan::bundle::sharded_filename(
            case["basename"].as_str().unwrap(),
            case["shard"].as_u64().unwrap() as u32,
            case["num_shards"].as_u64().unwrap() as u32,
        );
        assert_eq!(name, case["filename"].as_str().unwrap());
    }
    for case in behaviour["tmp_prefix"].as_array().unwrap() {
        assert_eq!(
            saveplan::bundle::temp_prefix(case["prefix"].as_str().unwrap()),
            case["tmp_prefix"].as_str().unwrap()
        );
    }
}

/// With several conflicts, the merge reports the one met first going through the sources in
/// order (what TensorFlow's entry-by-entry merge meets first), not the first in key order:
/// sources `{b}`, `{a, b}`, `{a}` fail on `b` in the second source, though `a` sorts first.
#[test]
fn merge_reports_the_first_conflict_in_source_order() {
    let dir = tempfile::tempdir().unwrap();
    let sources: Vec<PathBuf> = [&["b"][..], &["a", "b"], &["a"]]
        .iter()
        .enumerate()
        .map(|(index, keys)| {
            let prefix = dir.path().join(format!("part{index}"));
            let mut writer = BundleWriter::create(&prefix).unwrap();
            for key in *keys {
                writer.add(key, DType::Int8, &[1], &[index as u8]).unwrap();
            }
            writer.finish().unwrap();
            prefix
        })
        .collect();
    let err =
        merge_bundles(&sources, dir.path().join("merged"), MergeOptions::default()).unwrap_err();
    match &err {
        BundleError::Conflict { path, key, .. } => {
            assert_eq!((path, key.as_str()), (&sources[1], "b"), "{err}");
        }
        other => panic!("expected a conflict, got {other}"),
    }
}
