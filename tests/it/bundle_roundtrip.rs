//! Write-then-read round trips beyond the fixtures: tensors large enough to take the writer's
//! direct path, sliced string tensors, and fsync'd bundles.

use saveplan::bundle::crc;
use saveplan::bundle::{
    BundleReader, BundleWriter, DType, TensorSlice, TensorValues, Values, WriteOptions,
};

#[test]
fn large_tensor_between_small_ones() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("large");
    let large: Vec<u8> = (0..3u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let mut writer = BundleWriter::with_options(&prefix, WriteOptions { fsync: true }).unwrap();
    writer.add("a", DType::UInt8, &[3], &[1, 2, 3]).unwrap();
    writer
        .add("big", DType::Float, &[768, 1024], &large)
        .unwrap();
    writer.add("c", DType::UInt8, &[2], &[4, 5]).unwrap();
    writer.finish().unwrap();
    let reader = BundleReader::open(&prefix).unwrap();
    let big = reader.entry("big").unwrap();
    assert_eq!((big.offset, big.size), (3, large.len() as u64));
    assert_eq!(big.crc32c, crc::mask(crc::crc32c(&large)));
    assert_eq!(reader.entry("c").unwrap().offset, 3 + large.len() as u64);
    let data = std::fs::read(dir.path().join("large.data-00000-of-00001")).unwrap();
    assert_eq!(&data[..3], &[1, 2, 3]);
    assert_eq!(&data[3..3 + large.len()], &large[..]);
    assert_eq!(&data[3 + large.len()..], &[4, 5]);
    let mut out = vec![0u8; large.len()];
    reader.read_into("big", &mut out).unwrap();
    assert!(out == large);
    // Rows 100..102, columns 10..12 of the float32[768, 1024] tensor.
    let slice = TensorSlice::parse("100,2:10,2").unwrap();
    let got = reader.read_slice("big", &slice).unwrap();
    let at = |row: usize, col: usize| &large[(row * 1024 + col) * 4..(row * 1024 + col + 1) * 4];
    let want: Vec<u8> = [at(100, 10), at(100, 11), at(101, 10), at(101, 11)].concat();
    assert_eq!(got.values, Values::Bytes(want));
}

#[test]
fn sliced_string_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("strings");
    let strings: Vec<Vec<u8>> = (0..6)
        .map(|i| format!("s{i}").repeat(i).into_bytes())
        .collect();
    let mut writer = BundleWriter::create(&prefix).unwrap();
    let top = TensorSlice::parse("0,1:-").unwrap();
    let bottom = TensorSlice::parse("1,1:-").unwrap();
    writer
        .add_slice(
            "t",
            DType::String,
            &[2, 3],
            &bottom,
            TensorValues::Strings(&strings[3..]),
        )
        .unwrap();
    writer
        .add_slice(
            "t",
            DType::String,
            &[2, 3],
            &top,
            TensorValues::Strings(&strings[..3]),
        )
        .unwrap();
    writer.finish().unwrap();
    let reader = BundleReader::open(&prefix).unwrap();
    assert_eq!(reader.read_strings("t").unwrap(), strings);
    let column = reader.read_spec("t", "2 3 -:1,1").unwrap();
    assert_eq!(column.shape, [2, 1]);
    assert_eq!(
        column.values,
        Values::Strings(vec![strings[1].clone(), strings[4].clone()])
    );
    assert!(reader.verify().is_empty());
}

/// `entry_position_from` finds what `entry_position` finds from every hint: keys at, after
/// (near and far) and before the hint, keys between entries and past both ends, hints past
/// the end.
#[test]
fn a_search_from_a_hint_finds_what_a_search_of_the_index_finds() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("keys");
    let mut writer = BundleWriter::with_options(&prefix, WriteOptions::default()).unwrap();
    // Even numbers only, so that the odd ones fall between entries.
    for index in (0..74).step_by(2) {
        writer
            .add(&format!("k{index:03}"), DType::UInt8, &[1], &[index as u8])
            .unwrap();
    }
    writer.finish().unwrap();
    let reader = BundleReader::open(&prefix).unwrap();
    let n_entries = reader.entries().len();
    assert_eq!(n_entries, 37);
    let keys: Vec<String> = (0..80).map(|index| format!("k{index:03}")).collect();
    for hint in 0..n_entries + 3 {
        for key in keys.iter().map(String::as_str).chain(["a", "k", "z"]) {
            assert_eq!(
                reader.entry_position_from(hint, key),
                reader.entry_position(key),
                "{key} from {hint}"
            );
        }
    }
    assert_eq!(reader.entry_position_from(3, "k072"), Some(36));
    // `entry` starts where the last lookup ended: whatever came before, it finds what a search
    // of the index finds (the same key again, the next, one before, one far on, a miss).
    for order in [1usize, 7, 36, 3] {
        for step in 0..keys.len() * 2 {
            let key = &keys[(step * order) % keys.len()];
            let found = reader.entry(key).map(|entry| entry.key.clone());
            let expected = reader
                .entry_position(key)
                .map(|at| reader.entries()[at].key.clone());
            assert_eq!(found, expected, "{key} at step {step} of order {order}");
            assert_eq!(reader.entry(key).map(|entry| &entry.key), expected.as_ref());
        }
    }
}
