//! DT_VARIANT bundle entries (FORMATS.md 13.15): TensorFlow's `o7` iterator state is read as
//! opaque elements with its checksums checked, written back byte for byte, and damaged bytes
//! are errors, never panics.

use base64::Engine;
use saveplan::bundle::variant::{decode_variants, encode_variants};
use saveplan::bundle::{BundleError, BundleReader, BundleWriter, DType, TensorValues, Values};

use crate::support::{files::file_bytes_under, fixture, fixture_json};

const CASE: &str = "obj/o7_non_variable_attributes";
const ITERATOR: &str = "it/.ATTRIBUTES/ITERATOR_STATE";

/// The raw data-file bytes of the iterator state, as `case.json` records them.
fn raw_iterator_bytes() -> Vec<u8> {
    let case = fixture_json(&format!("{CASE}/case.json"));
    let b64 = case["bundles"]["ckpt"]["variant_raw_b64"][ITERATOR]
        .as_str()
        .unwrap();
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap()
}

#[test]
fn reads_the_iterator_state_of_o7() {
    let reader = BundleReader::open(fixture(&format!("{CASE}/ckpt"))).unwrap();
    let entry = reader.entry(ITERATOR).unwrap();
    assert_eq!(
        (entry.dtype, entry.shape.as_slice()),
        (DType::Variant, &[1][..])
    );
    assert!(reader.verify().is_empty(), "{:?}", reader.verify());
    let tensor = reader.read(ITERATOR).unwrap();
    let Values::Strings(elements) = tensor.values else {
        panic!("variant elements are byte strings");
    };
    let raw = raw_iterator_bytes();
    assert_eq!(raw.len() as u64, entry.size);
    // One element: a varint length (2 bytes here), the bytes, a 4-byte checksum.
    assert_eq!(elements.len(), 1);
    assert_eq!(elements[0].as_slice(), &raw[2..raw.len() - 4]);
    assert!(elements[0].starts_with(b"\n\x14tensorflow::Iterator"));
    let encoded = encode_variants(&elements);
    assert_eq!(encoded.bytes, raw);
    assert_eq!(encoded.crc32c, entry.crc32c);
}

#[test]
fn rewrites_o7_byte_for_byte() {
    let case = fixture_json(&format!("{CASE}/case.json"));
    let reader = BundleReader::open(fixture(&format!("{CASE}/ckpt"))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut writer = BundleWriter::create(dir.path().join("ckpt")).unwrap();
    for item in case["bundles"]["ckpt"]["data_order"].as_array().unwrap() {
        let key = item["key"].as_str().unwrap();
        let tensor = reader.read(key).unwrap();
        let values = match &tensor.values {
            Values::Bytes(bytes) => TensorValues::Bytes(bytes),
            Values::Strings(strings) => TensorValues::Strings(strings),
        };
        writer
            .add_values(key, tensor.dtype, &tensor.shape, values)
            .unwrap();
    }
    writer.finish().unwrap();
    let ours = file_bytes_under(dir.path());
    let theirs: Vec<(String, Vec<u8>)> = ["ckpt.data-00000-of-00001", "ckpt.index"]
        .iter()
        .map(|name| {
            let path = fixture(&format!("{CASE}/{name}"));
            ((*name).to_owned(), std::fs::read(path).unwrap())
        })
        .collect();
    assert_eq!(ours, theirs);
}

#[test]
fn damaged_variant_bytes_are_errors() {
    let raw = raw_iterator_bytes();
    let entry_crc = encode_variants(&[raw[2..raw.len() - 4].to_vec()]).crc32c;
    assert!(decode_variants(&raw, 1, entry_crc).is_ok());
    // Every single flipped byte and every truncation is caught.
    for at in 0..raw.len() {
        let mut damaged = raw.clone();
        damaged[at] ^= 0x40;
        assert!(
            decode_variants(&damaged, 1, entry_crc).is_err(),
            "byte {at}"
        );
        assert!(
            decode_variants(&raw[..at], 1, entry_crc).is_err(),
            "cut {at}"
        );
    }
    // A huge element count or length does not allocate.
    assert!(decode_variants(&raw, u64::MAX, entry_crc).is_err());
    assert!(decode_variants(&[0xff; 10], 1, 0).is_err());

    // Through the reader: a flipped payload byte in the data file is a checksum error.
    let dir = tempfile::tempdir().unwrap();
    for name in ["ckpt.index", "ckpt.data-00000-of-00001"] {
        std::fs::copy(fixture(&format!("{CASE}/{name}")), dir.path().join(name)).unwrap();
    }
    let data = dir.path().join("ckpt.data-00000-of-00001");
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[30 + 40] ^= 1;
    std::fs::write(&data, bytes).unwrap();
    let reader = BundleReader::open(dir.path().join("ckpt")).unwrap();
    let err = reader.read(ITERATOR).unwrap_err();
    assert!(matches!(err, BundleError::BadStrings { .. }), "{err}");
    assert!(reader.read("custom/.ATTRIBUTES/first").is_ok());
}

#[test]
fn the_cli_lists_prints_and_skips_variant_tensors() {
    let prefix = format!("tests/fixtures/tf-2.21/{CASE}/ckpt");
    let output = crate::support::saveplan(&["inspect", &prefix, "--tensor", ITERATOR]);
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        stdout.starts_with(&format!(
            "{ITERATOR} (DT_VARIANT) [1]\n[b\"\\n\\x14tensorflow::Iterator"
        )),
        "{stdout}"
    );
    let output = crate::support::saveplan(&["verify", &prefix]);
    assert!(output.status.success());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o7.safetensors");
    let out = out.to_str().unwrap();
    let output = crate::support::saveplan(&["convert", &prefix, out]);
    assert_eq!(
        String::from_utf8(output.stderr).unwrap(),
        "error: tensor `custom/.ATTRIBUTES/with..Sslash....dot` is a string tensor: safetensors cannot hold strings (--skip-strings leaves them out)\n"
    );
    let output = crate::support::saveplan(&["convert", "--skip-strings", &prefix, out]);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "saveplan: convert: skipped variant tensor `{ITERATOR}`\n"
        )),
        "{stderr}"
    );
}
