//! Tensor bundles against the TF 2.21 fixtures: byte-identical rebuilds of c1–c12 from their
//! `values.json`, and read-back (whole, slice assembly, sub-slices) equal to `values.json`.

use crate::support::bundle::{Expected, ckpt_root, cut, expected, input, load_json, write_planned};
use crate::support::files::{dirs_under, file_bytes_under};

use saveplan::bundle::{BundleReader, Extent, TensorSlice, Values};

/// Fixture files of one bundle prefix (index + data files), relative to the case folder.
fn fixture_files(case: &str, prefix: &str) -> Vec<(String, Vec<u8>)> {
    let case_dir = ckpt_root().join(case);
    file_bytes_under(&case_dir)
        .into_iter()
        .filter(|(name, _)| {
            name.starts_with(&format!("{prefix}.index"))
                || name.starts_with(&format!("{prefix}.data-"))
        })
        .collect()
}

#[test]
fn rebuild_every_fixture_byte_identical() {
    let plans = load_json(&input("rebuild.json"));
    let plans = plans.as_object().unwrap();
    assert_eq!(plans.len(), 12, "one plan per fixture c1..c12");
    for (case, bundles) in plans {
        let values = load_json(&ckpt_root().join(case).join("values.json"));
        for bundle in bundles.as_array().unwrap() {
            let prefix = bundle["prefix"].as_str().unwrap();
            let out = tempfile::tempdir().unwrap();
            write_planned(out.path(), bundle, &values[prefix]);
            let written = file_bytes_under(out.path());
            let want = fixture_files(case, prefix);
            assert!(!want.is_empty(), "{case}/{prefix}: no fixture files");
            let names = |files: &[(String, Vec<u8>)]| {
                files
                    .iter()
                    .map(|(name, _)| name.clone())
                    .collect::<Vec<_>>()
            };
            assert_eq!(names(&written), names(&want), "{case}/{prefix}: file set");
            for ((name, got), (_, want)) in written.iter().zip(&want) {
                assert!(
                    got == want,
                    "{case}/{name}: bytes differ ({} vs {} bytes)",
                    got.len(),
                    want.len()
                );
            }
            // No temporary directory is left behind.
            let prefix_dirs: Vec<String> = std::path::Path::new(prefix)
                .ancestors()
                .skip(1)
                .filter(|dir| !dir.as_os_str().is_empty())
                .map(|dir| dir.to_string_lossy().into_owned())
                .collect();
            for dir in dirs_under(out.path()) {
                assert!(
                    prefix_dirs.contains(&dir),
                    "{case}/{prefix}: leftover directory {dir}"
                );
            }
        }
    }
}

fn assert_tensor(reader: &BundleReader, key: &str, want: &Expected, what: &str) {
    let got = reader
        .read(key)
        .unwrap_or_else(|err| panic!("{what}: {err}"));
    assert_eq!(
        (got.dtype, &got.shape, &got.values),
        (want.dtype, &want.shape, &want.values),
        "{what}"
    );
}

/// A slice of `shape` that takes the middle of every dimension (never empty when the dimension
/// is at least 1).
fn middle_slice(shape: &[i64]) -> TensorSlice {
    TensorSlice::new(
        shape
            .iter()
            .map(|&dim| {
                if dim <= 1 {
                    Extent::FULL
                } else {
                    Extent::new(dim / 3, dim - dim / 3 - (dim > 2) as i64)
                }
            })
            .collect(),
    )
}

#[test]
fn read_back_every_fixture() {
    let mut n_checked = 0;
    let mut n_mapped = 0;
    for case_dir in std::fs::read_dir(ckpt_root()).unwrap() {
        let case_dir = case_dir.unwrap().path();
        let values = load_json(&case_dir.join("values.json"));
        for (prefix, tensors) in values.as_object().unwrap() {
            let reader = BundleReader::open(case_dir.join(prefix)).unwrap();
            assert!(
                reader.verify().is_empty(),
                "{}/{prefix}",
                case_dir.display()
            );
            for (key, tensor) in tensors.as_object().unwrap() {
                let what = format!("{}/{prefix}/{key}", case_dir.display());
                if key == "_summary" {
                    assert_eq!(
                        reader.entries().len() as u64,
                        tensor["count"].as_u64().unwrap(),
                        "{what}"
                    );
                    assert_eq!(
                        reader.entries()[0].key,
                        tensor["first_key"].as_str().unwrap()
                    );
                    assert_eq!(
                        reader.entries().last().unwrap().key,
                        tensor["last_key"].as_str().unwrap()
                    );
                    continue;
                }
                let want = expected(tensor);
                if let Some(name) = key.strip_prefix("_partial:") {
                    let spec = tensor["slice"].as_str().unwrap();
                    let got = reader
                        .read_spec(name, spec)
                        .unwrap_or_else(|err| panic!("{what}: {err}"));
                    assert_eq!(
                        (got.dtype, &got.shape, &got.values),
                        (want.dtype, &want.shape, &want.values),
                        "{what}"
                    );
                    n_checked += 1;
                    continue;
                }
                assert_tensor(&reader, key, &want, &what);
                let entry = reader.entry(key).unwrap();
                assert_eq!(entry.dtype, want.dtype, "{what}");
                // A sub-slice, cut from stored data or assembled across stored slices.
                let slice = middle_slice(&want.shape);
                let got = reader
                    .read_slice(key, &slice)
                    .unwrap_or_else(|err| panic!("{what} {slice}: {err}"));
                let want_slice = cut(&want, &slice);
                assert_eq!(
                    (&got.shape, &got.values),
                    (&want_slice.shape, &want_slice.values),
                    "{what} {slice}"
                );
                if let Values::Bytes(bytes) = &want.values {
                    let mut buffer = vec![0u8; bytes.len()];
                    reader.read_into(key, &mut buffer).unwrap();
                    assert_eq!(&buffer, bytes, "{what}: read_into");
                    let mapped = reader
                        .map(key)
                        .unwrap_or_else(|err| panic!("{what}: {err}"));
                    assert_eq!(&*mapped, bytes.as_slice(), "{what}: map");
                    assert_eq!((mapped.dtype, &mapped.shape), (want.dtype, &want.shape));
                    // Only unsliced, non-empty tensors are views into the map.
                    assert_eq!(
                        mapped.is_mapped(),
                        entry.slices.is_empty() && !bytes.is_empty(),
                        "{what}: is_mapped"
                    );
                    n_mapped += 1;
                } else {
                    let err = reader.map(key).expect_err(&what);
                    assert!(
                        matches!(err, saveplan::bundle::BundleError::WrongDType { .. }),
                        "{what}: {err}"
                    );
                }
                n_checked += 1;
            }
        }
    }
    assert!(n_checked >= 77, "only {n_checked} tensors checked");
    assert!(n_mapped >= 40, "only {n_mapped} tensors mapped");
}

#[test]
fn sliced_tensor_listing_and_spec_reads() {
    let reader = BundleReader::open(ckpt_root().join("c5_partitioned/ckpt")).unwrap();
    let part = reader.entry("part").unwrap();
    assert_eq!(part.shape, [4, 3]);
    assert_eq!(
        part.slices
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["0,2:0,3", "2,2:0,3"]
    );
    assert_eq!(reader.slice_entries("part").len(), 2);
    // Rows 1..3 straddle both stored slices.
    let got = reader.read_spec("part", "4 3 1,2:1,2").unwrap();
    let floats: Vec<f32> = match got.values {
        Values::Bytes(bytes) => bytes
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        Values::Strings(_) => unreachable!(),
    };
    assert_eq!(floats, [4.5, 5.5, 7.5, 8.5]);
    assert_eq!(got.shape, [2, 2]);
    // `map` of a sliced tensor falls back to assembling a copy.
    let mapped = reader.map("part").unwrap();
    assert!(!mapped.is_mapped());
    let Values::Bytes(whole) = reader.read("part").unwrap().values else {
        unreachable!()
    };
    assert_eq!(&*mapped, whole.as_slice());
    assert_eq!(mapped.shape, [4, 3]);
}

#[test]
fn many_threads_share_one_reader() {
    let reader = BundleReader::open(ckpt_root().join("c9_multiblock_index/ckpt")).unwrap();
    std::thread::scope(|scope| {
        for thread in 0..4 {
            let reader = &reader;
            scope.spawn(move || {
                for entry in reader.entries().iter().skip(thread).step_by(4) {
                    let index: i32 = entry.key[1..6].parse().unwrap();
                    let mut out = [0u8; 4];
                    reader.read_into(&entry.key, &mut out).unwrap();
                    assert_eq!(i32::from_le_bytes(out), index);
                }
            });
        }
    });
}

#[test]
fn dtype_table_matches_tensorflow_enum() {
    let fields = load_json(&ckpt_root().join("../meta/proto_fields.json"));
    let enum_values = fields["tensorflow.DataType"]["enum"].as_object().unwrap();
    for dtype in saveplan::bundle::dtype::storable() {
        let proto_name = dtype.proto_name().unwrap();
        let value = enum_values
            .get(proto_name)
            .unwrap_or_else(|| panic!("{proto_name}"));
        assert_eq!(
            value.as_i64().unwrap(),
            i64::from(dtype.number()),
            "{dtype}"
        );
    }
    // Every dtype the fixtures use has the TF name values.json gives it.
    let values = load_json(&ckpt_root().join("c1_dtypes/values.json"));
    for tensor in values["ckpt"].as_object().unwrap().values() {
        let dtype = saveplan::bundle::DType::parse(tensor["dtype"].as_str().unwrap()).unwrap();
        assert!(saveplan::bundle::dtype::is_storable(dtype), "{dtype}");
        assert_eq!(dtype.name(), tensor["dtype"].as_str());
        assert_eq!(
            i64::from(dtype.number()),
            tensor["dtype_enum"].as_i64().unwrap()
        );
    }
}
