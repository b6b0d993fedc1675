//! Bad input never panics and always gives a typed error naming the file (and the key when one
//! is involved): flipped bits, truncation, missing shards, wrong magic, bad slice specs,
//! dtype/size mismatches, plus a property test over mutated index files.

use crate::support::bundle::{ckpt_root, copy_fixture};

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use saveplan::bundle::sstable::TableBuilder;
use saveplan::bundle::{
    BundleError, BundleReader, BundleWriter, DType, TensorSlice, TensorValues, index_path,
};

/// Opens `prefix` and reads every tensor; returns the first error.
fn open_and_read_all(prefix: &Path) -> Result<usize, BundleError> {
    let reader = BundleReader::open(prefix)?;
    for entry in reader.entries() {
        reader.read(&entry.key)?;
    }
    match reader.verify().into_iter().next() {
        Some(err) => Err(err),
        None => Ok(reader.entries().len()),
    }
}

fn flip_bit(path: &Path, bit: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[bit / 8] ^= 1 << (bit % 8);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn every_flipped_bit_in_an_index_is_an_error() {
    // Every bit of c4's index, every 13th bit of c5's (which has slice keys) to keep this quick.
    for (case, name, step) in [
        ("c4_two_cpus_one_task", "ckpt", 1),
        ("c5_partitioned", "ckpt", 13),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let prefix = copy_fixture(case, name, dir.path());
        let index = index_path(&prefix);
        let n_bits = std::fs::metadata(&index).unwrap().len() as usize * 8;
        for bit in (0..n_bits).step_by(step) {
            flip_bit(&index, bit);
            let err = open_and_read_all(&prefix)
                .expect_err(&format!("{case}: flipped bit {bit} went unnoticed"));
            assert!(
                err.to_string().contains("ckpt.index"),
                "{case} bit {bit}: {err}"
            );
            flip_bit(&index, bit);
        }
        assert!(open_and_read_all(&prefix).is_ok());
    }
}

#[test]
fn a_flipped_data_bit_fails_map_too() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = copy_fixture("c1_dtypes", "ckpt", dir.path());
    let data = PathBuf::from(format!("{}.data-00000-of-00001", prefix.display()));
    let entries = BundleReader::open(&prefix).unwrap().entries().to_vec();
    let mut n_checked = 0;
    for entry in entries.iter().filter(|entry| entry.size > 0) {
        if entry.dtype == DType::String {
            continue;
        }
        let bit = (entry.offset + entry.size / 2) as usize * 8 + 3;
        flip_bit(&data, bit);
        // A fresh reader: its map sees the file as it is now.
        let err = BundleReader::open(&prefix)
            .unwrap()
            .map(&entry.key)
            .expect_err(&entry.key);
        match &err {
            BundleError::TensorChecksum { path, key, .. } => {
                assert_eq!((path, key), (&data, &entry.key));
            }
            other => panic!("{}: unexpected {other}", entry.key),
        }
        flip_bit(&data, bit);
        assert!(BundleReader::open(&prefix).unwrap().map(&entry.key).is_ok());
        n_checked += 1;
    }
    assert!(n_checked >= 10, "only {n_checked} tensors checked");
}

#[test]
fn map_checks_large_tensors_in_parallel_chunks() {
    // 9 MiB + 5 bytes: above the parallel threshold, with a short last chunk.
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let bytes: Vec<u8> = (0..(9 << 20) + 5)
        .map(|at: u32| (at * 7 + at / 4099) as u8)
        .collect();
    let mut writer = BundleWriter::create(&prefix).unwrap();
    writer.add("small", DType::UInt8, &[3], &[1, 2, 3]).unwrap();
    writer
        .add("big", DType::UInt8, &[bytes.len() as i64], &bytes)
        .unwrap();
    writer.finish().unwrap();
    let reader = BundleReader::open(&prefix).unwrap();
    let mapped = reader.map("big").unwrap();
    assert!(mapped.is_mapped());
    assert_eq!(&*mapped, bytes.as_slice());
    let data = PathBuf::from(format!("{}.data-00000-of-00001", prefix.display()));
    let offset = reader.entry("big").unwrap().offset as usize;
    for at in [0, (4 << 20) + 1, bytes.len() - 1] {
        let bit = (offset + at) * 8 + 5;
        flip_bit(&data, bit);
        let err = BundleReader::open(&prefix).unwrap().map("big").unwrap_err();
        assert!(
            matches!(&err, BundleError::TensorChecksum { key, .. } if key == "big"),
            "byte {at}: {err}"
        );
        flip_bit(&data, bit);
    }
}

#[test]
fn every_flipped_bit_in_a_data_file_names_file_and_key() {
    for case in ["c1_dtypes", "c2_strings", "c5_partitioned"] {
        let dir = tempfile::tempdir().unwrap();
        let prefix = copy_fixture(case, "ckpt", dir.path());
        let data = PathBuf::from(format!("{}.data-00000-of-00001", prefix.display()));
        let reader = BundleReader::open(&prefix).unwrap();
        let len = std::fs::metadata(&data).unwrap().len() as usize;
        // A stride through each file keeps this quick; any flipped byte must be caught.
        let step = if len > 2000 { 97 } else { 3 };
        for byte in (0..len).step_by(step) {
            let bit = byte * 8 + byte % 8;
            flip_bit(&data, bit);
            let failures = reader.verify();
            assert_eq!(failures.len(), 1, "{case} byte {byte}: {failures:?}");
            match &failures[0] {
                BundleError::TensorChecksum { path, key, .. }
                | BundleError::BadStrings { path, key, .. } => {
                    assert_eq!(path, &data);
                    let entry_holds_byte = |entry: &saveplan::bundle::Entry| {
                        (entry.offset..entry.offset + entry.size).contains(&(byte as u64))
                    };
                    let owner = reader
                        .entries()
                        .iter()
                        .chain(
                            reader
                                .entries()
                                .iter()
                                .flat_map(|entry| reader.slice_entries(&entry.key)),
                        )
                        .find(|entry| entry_holds_byte(entry))
                        .unwrap();
                    assert_eq!(key, &owner.key, "{case} byte {byte}");
                }
                other => panic!("{case} byte {byte}: unexpected {other}"),
            }
            flip_bit(&data, bit);
        }
    }
}

#[test]
fn truncated_files() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = copy_fixture("c1_dtypes", "ckpt", dir.path());
    let index = index_path(&prefix);
    let full = std::fs::read(&index).unwrap();
    for len in (0..full.len()).step_by(5) {
        std::fs::write(&index, &full[..len]).unwrap();
        let err = BundleReader::open(&prefix)
            .err()
            .unwrap_or_else(|| panic!("index truncated to {len} opened"));
        assert!(
            matches!(
                err,
                BundleError::CorruptIndex { .. }
                    | BundleError::BadMagic { .. }
                    | BundleError::BlockChecksum { .. }
            ),
            "{len}: {err}"
        );
    }
    std::fs::write(&index, &full).unwrap();
    let data = PathBuf::from(format!("{}.data-00000-of-00001", prefix.display()));
    let bytes = std::fs::read(&data).unwrap();
    std::fs::write(&data, &bytes[..300]).unwrap();
    let reader = BundleReader::open(&prefix).unwrap();
    match reader.read("matrix_i32") {
        Err(BundleError::DataTruncated { path, key, len, .. }) => {
            assert_eq!((path, key.as_str(), len), (data.clone(), "matrix_i32", 300));
        }
        other => panic!("{other:?}"),
    }
    // The mapped and caller-buffer reads check the same bounds.
    let entry = reader.entry("matrix_i32").unwrap().clone();
    let mut buffer = vec![0u8; entry.size as usize];
    for err in [
        reader.map("matrix_i32").err(),
        reader.read_into("matrix_i32", &mut buffer).err(),
    ] {
        match err {
            Some(BundleError::DataTruncated { path, key, len, .. }) => {
                assert_eq!((path, key.as_str(), len), (data.clone(), "matrix_i32", 300));
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(reader.read("f32").is_ok());
    assert!(reader.map("f32").is_ok());
}

#[test]
fn missing_data_shard() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = copy_fixture("c3_two_tasks", "ckpt", dir.path());
    let shard = PathBuf::from(format!("{}.data-00001-of-00002", prefix.display()));
    std::fs::remove_file(&shard).unwrap();
    let reader = BundleReader::open(&prefix).unwrap();
    assert!(reader.read("a").is_ok());
    match reader.read("s") {
        Err(err @ BundleError::MissingShard { .. }) => {
            let text = err.to_string();
            assert!(
                text.contains("ckpt.data-00001-of-00002") && text.contains("`s`"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
    let failures = reader.verify();
    assert_eq!(failures.len(), 2, "{failures:?}");
}

#[test]
fn wrong_magic_and_missing_index() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = copy_fixture("c4_two_cpus_one_task", "ckpt", dir.path());
    let index = index_path(&prefix);
    let mut bytes = std::fs::read(&index).unwrap();
    let at = bytes.len() - 1;
    bytes[at] = 0;
    std::fs::write(&index, &bytes).unwrap();
    assert!(matches!(
        BundleReader::open(&prefix),
        Err(BundleError::BadMagic {
            found: 0x0047_7524_8B80_FB57,
            ..
        })
    ));
    assert!(matches!(
        BundleReader::open(dir.path().join("nope")),
        Err(BundleError::IndexNotFound { .. })
    ));
}

#[test]
fn bad_slice_specs() {
    let reader = BundleReader::open(ckpt_root().join("c5_partitioned/ckpt")).unwrap();
    for spec in ["4 3 x,2:0,3", "4 3 0,2", "4", "4 3 0,5:0,3", "5 3 0,2:0,3"] {
        match reader.read_spec("part", spec) {
            Err(BundleError::BadSliceSpec { key, spec: got, .. }) => {
                assert_eq!((key.as_str(), got.as_str()), ("part", spec))
            }
            other => panic!("{spec}: {other:?}"),
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut writer = BundleWriter::create(dir.path().join("w")).unwrap();
    let err = writer
        .add_with_spec(
            "t",
            DType::Float,
            &[2],
            "4 0,2:",
            TensorValues::Bytes(&[0; 8]),
        )
        .unwrap_err();
    assert!(matches!(err, BundleError::BadSliceSpec { .. }), "{err}");
    let err = writer
        .add_with_spec(
            "t",
            DType::Float,
            &[3],
            "4 0,2",
            TensorValues::Bytes(&[0; 12]),
        )
        .unwrap_err();
    assert!(matches!(err, BundleError::BadSliceSpec { .. }), "{err}");
}

#[test]
fn dtype_and_size_mismatches() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = BundleWriter::create(dir.path().join("w")).unwrap();
    let err = writer.add("t", DType::Float, &[3], &[0; 8]).unwrap_err();
    assert!(
        matches!(&err, BundleError::SizeMismatch { key, expected: 12, actual: 8, .. } if key == "t"),
        "{err}"
    );
    for bad_key in ["", "\0x"] {
        let err = writer.add(bad_key, DType::Int8, &[], &[0]).unwrap_err();
        assert!(matches!(err, BundleError::Conflict { .. }), "{err}");
    }
    let err = writer.add("t", DType::String, &[1], &[0; 8]).unwrap_err();
    assert!(matches!(err, BundleError::WrongDType { .. }), "{err}");
    writer.add("t", DType::Float, &[2], &[0; 8]).unwrap();
    writer.add("t", DType::Float, &[2], &[0; 8]).unwrap();
    let err = writer.finish().unwrap_err();
    assert!(
        matches!(&err, BundleError::Conflict { key, .. } if key == "t"),
        "{err}"
    );
    // Nothing was left behind by the failed writer.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|item| item.unwrap().file_name())
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // An index whose entry says 12 bytes for float32[2].
    let prefix = dir.path().join("bad");
    let mut table = TableBuilder::new();
    table.add(b"", &[0x08, 0x01, 0x1a, 0x02, 0x08, 0x01]);
    table.add(
        b"a",
        &[
            0x08, 0x01, 0x12, 0x04, 0x12, 0x02, 0x08, 0x02, 0x28, 0x0c, 0x35, 0, 0, 0, 0,
        ],
    );
    std::fs::write(index_path(&prefix), table.finish()).unwrap();
    match BundleReader::open(&prefix) {
        Err(BundleError::SizeMismatch {
            key,
            expected: 8,
            actual: 12,
            ..
        }) => assert_eq!(key, "a"),
        other => panic!("{:?}", other.err()),
    }

    let reader = BundleReader::open(ckpt_root().join("c1_dtypes/ckpt")).unwrap();
    let mut small = [0u8; 4];
    assert!(matches!(
        reader.read_into("f32", &mut small),
        Err(BundleError::SizeMismatch { .. })
    ));
    assert!(matches!(
        reader.read_into("nope", &mut small),
        Err(BundleError::KeyNotFound { .. })
    ));
    let strings = BundleReader::open(ckpt_root().join("c2_strings/ckpt")).unwrap();
    assert!(matches!(
        strings.read_into("strs", &mut small),
        Err(BundleError::WrongDType { .. })
    ));
}

#[test]
fn uncovered_slice_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("holes");
    let mut writer = BundleWriter::create(&prefix).unwrap();
    let slice = TensorSlice::parse("0,1:-").unwrap();
    writer
        .add_slice(
            "m",
            DType::Int32,
            &[2, 2],
            &slice,
            TensorValues::Bytes(&[1, 0, 0, 0, 2, 0, 0, 0]),
        )
        .unwrap();
    writer.finish().unwrap();
    let reader = BundleReader::open(&prefix).unwrap();
    assert!(matches!(
        reader.read("m"),
        Err(BundleError::SliceNotCovered { .. })
    ));
    assert_eq!(
        reader.read_spec("m", "2 2 0,1:1,1").unwrap().values,
        saveplan::bundle::Values::Bytes(vec![2, 0, 0, 0])
    );
}

fn mutate(bytes: &mut Vec<u8>, ops: &[(u8, usize, u8)]) {
    for &(kind, at, value) in ops {
        if bytes.is_empty() {
            bytes.push(value);
            continue;
        }
        let at = at % bytes.len();
        match kind % 4 {
            0 => bytes[at] ^= 1 << (value % 8),
            1 => bytes[at] = value,
            2 => bytes.truncate(at),
            _ => bytes.insert(at, value),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn mutated_indexes_never_panic(
        case in prop::sample::select(vec!["c2_strings", "c5_partitioned", "c12_slice_keys", "c3_two_tasks"]),
        ops in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..6),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let prefix = copy_fixture(case, "ckpt", dir.path());
        let index = index_path(&prefix);
        let mut bytes = std::fs::read(&index).unwrap();
        mutate(&mut bytes, &ops);
        std::fs::write(&index, &bytes).unwrap();
        // Either outcome is fine; a panic fails the test.
        let _ = open_and_read_all(&prefix);
    }

    /// Mutations inside entry keys and values, re-encoded with valid block checksums, so they
    /// reach the entry decoding and the read path rather than stopping at a CRC check.
    #[test]
    fn mutated_entries_with_valid_checksums_never_panic(
        case in prop::sample::select(vec!["c2_strings", "c5_partitioned", "c12_slice_keys", "c6_max_shard_size"]),
        ops in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..4),
        target in any::<usize>(),
        mutate_key in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let prefix = copy_fixture(case, "ckpt", dir.path());
        let index = index_path(&prefix);
        let bytes = std::fs::read(&index).unwrap();
        let mut entries: Vec<(Vec<u8>, Vec<u8>)> = saveplan::bundle::sstable::read_table(&index, &bytes)
            .unwrap()
            .into_iter()
            .map(|(key, value)| (key, value.to_vec()))
            .collect();
        let at = target % entries.len();
        if mutate_key && at > 0 {
            mutate(&mut entries[at].0, &ops);
        } else {
            mutate(&mut entries[at].1, &ops);
        }
        entries.sort();
        entries.dedup_by(|a, b| a.0 == b.0);
        let mut table = TableBuilder::new();
        for (key, value) in &entries {
            table.add(key, value);
        }
        std::fs::write(&index, table.finish()).unwrap();
        let _ = open_and_read_all(&prefix);
    }

    #[test]
    fn random_indexes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400), magic in any::<bool>()) {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("r");
        let mut bytes = bytes;
        if magic {
            bytes.extend_from_slice(&[0u8; 40]);
            bytes.extend_from_slice(&0xDB47_7524_8B80_FB57u64.to_le_bytes());
        }
        std::fs::write(index_path(&prefix), &bytes).unwrap();
        prop_assert!(open_and_read_all(&prefix).is_err());
    }
}

#[test]
fn writer_refuses_overlapping_slices_and_abandoned_streams() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = BundleWriter::create(dir.path().join("o")).unwrap();
    let rows = |spec: &str| TensorSlice::parse(spec).unwrap();
    writer
        .add_slice(
            "m",
            DType::Int8,
            &[4, 2],
            &rows("0,2:-"),
            TensorValues::Bytes(&[1; 4]),
        )
        .unwrap();
    let err = writer
        .add_slice(
            "m",
            DType::Int8,
            &[4, 2],
            &rows("1,2:-"),
            TensorValues::Bytes(&[1; 4]),
        )
        .unwrap_err();
    assert!(
        matches!(&err, BundleError::Conflict { key, .. } if key == "m"),
        "{err}"
    );
    let err = writer
        .add_slice(
            "m",
            DType::Int16,
            &[4, 2],
            &rows("2,2:-"),
            TensorValues::Bytes(&[1; 8]),
        )
        .unwrap_err();
    assert!(matches!(&err, BundleError::Conflict { .. }), "{err}");
    writer
        .add_slice(
            "m",
            DType::Int8,
            &[4, 2],
            &rows("2,2:-"),
            TensorValues::Bytes(&[2; 4]),
        )
        .unwrap();
    {
        let mut stream = writer.begin("big", DType::Float, &[4]).unwrap();
        stream.write(&[0; 8]).unwrap();
        // Dropped with 8 of 16 bytes written.
    }
    let err = writer.finish().unwrap_err();
    assert!(
        matches!(&err, BundleError::Conflict { key, .. } if key == "big"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn streamed_tensor_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("s");
    let mut writer = BundleWriter::create(&prefix).unwrap();
    let bytes: Vec<u8> = (0..4096u32)
        .flat_map(|i| (i as f32).to_le_bytes())
        .collect();
    let mut stream = writer.begin("w", DType::Float, &[64, 64]).unwrap();
    for chunk in bytes.chunks(1000) {
        stream.write(chunk).unwrap();
    }
    assert!(matches!(
        stream.write(&[0]),
        Err(BundleError::SizeMismatch { .. })
    ));
    stream.finish().unwrap();
    writer
        .add_strings("s", &[2], &[b"x".to_vec(), Vec::new()])
        .unwrap();
    writer.finish().unwrap();
    let reader = BundleReader::open(&prefix).unwrap();
    let mut out = vec![0u8; bytes.len()];
    reader.read_into("w", &mut out).unwrap();
    assert_eq!(out, bytes);
    assert_eq!(
        reader.read_strings("s").unwrap(),
        [b"x".to_vec(), Vec::new()]
    );
    assert_eq!(reader.entry("s").unwrap().offset, bytes.len() as u64);
}

#[test]
fn crafted_index_cannot_force_huge_allocations() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("huge");
    let mut table = TableBuilder::new();
    // num_shards = 2^31 - 1, version producer 1.
    table.add(
        b"",
        &[0x08, 0xff, 0xff, 0xff, 0xff, 0x07, 0x1a, 0x02, 0x08, 0x01],
    );
    // `a`: float32[2^40] with size 2^42 (consistent with the shape) at offset 0 of shard 0.
    let mut entry = vec![0x08, 0x01, 0x12, 0x09, 0x12, 0x07, 0x08];
    entry.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x20]);
    entry.extend_from_slice(&[0x28, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]);
    table.add(b"a", &entry);
    // `s`: string[2^40] in 4 bytes.
    let mut strings = vec![0x08, 0x07, 0x12, 0x09, 0x12, 0x07, 0x08];
    strings.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x20]);
    strings.extend_from_slice(&[0x28, 0x04]);
    table.add(b"s", &strings);
    std::fs::write(index_path(&prefix), table.finish()).unwrap();
    std::fs::write(dir.path().join("huge.data-00000-of-2147483647"), [0u8; 16]).unwrap();
    let reader = BundleReader::open(&prefix).unwrap();
    assert_eq!(reader.entry("a").unwrap().shape, [1 << 40]);
    assert!(
        matches!(reader.read("a"), Err(BundleError::DataTruncated { .. })),
        "{:?}",
        reader.read("a").err()
    );
    assert!(
        matches!(reader.read("s"), Err(BundleError::BadStrings { .. })),
        "{:?}",
        reader.read("s").err()
    );
    let slice = TensorSlice::parse("5,3").unwrap();
    assert!(matches!(
        reader.read_slice("s", &slice),
        Err(BundleError::BadStrings { .. })
    ));
    assert_eq!(reader.verify().len(), 2);
}
