//! Object-based checkpoint fixtures: the values of a TensorFlow bundle and byte-for-byte
//! comparison of the bundles we write with TensorFlow's.

use std::collections::BTreeMap;
use std::path::Path;

use saveplan::bundle::{BundleReader, Values};
use saveplan::checkpoint::OBJECT_GRAPH_KEY;
use saveplan::exec::HostTensor;

/// The checkpoint key of `save_counter` (checked against TensorFlow's files by every fixture
/// comparison that leaves it out).
pub use saveplan::checkpoint::SAVE_COUNTER_KEY as COUNTER_KEY;

/// The values of a fixture bundle by key, without the object graph and the save counter.
pub fn fixture_values(prefix: &Path) -> BTreeMap<String, HostTensor> {
    let reader = BundleReader::open(prefix).unwrap();
    let mut values = BTreeMap::new();
    for entry in reader.entries() {
        if entry.key == OBJECT_GRAPH_KEY || entry.key == COUNTER_KEY {
            continue;
        }
        let tensor = reader.read(&entry.key).unwrap();
        let shape = tensor.shape.iter().map(|&dim| dim as u64).collect();
        let value = match tensor.values {
            Values::Bytes(bytes) => HostTensor::from_bytes(tensor.dtype, shape, bytes),
            Values::Strings(strings) => HostTensor::from_strings(shape, strings),
        };
        values.insert(entry.key.clone(), value.unwrap());
    }
    values
}

/// Asserts that the bundle at `ours` has the files and bytes of the fixture bundle at `theirs`.
pub fn assert_same_bundle(ours: &Path, theirs: &Path) {
    let name = theirs.file_name().unwrap().to_str().unwrap();
    let dir = theirs.parent().unwrap();
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|file| {
            file.strip_prefix(name)
                .is_some_and(|rest| rest == ".index" || rest.starts_with(".data-"))
        })
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{}: no bundle", theirs.display());
    for file in files {
        let suffix = &file[name.len()..];
        let ours_file = format!("{}{suffix}", ours.display());
        let ours_bytes =
            std::fs::read(&ours_file).unwrap_or_else(|err| panic!("{ours_file}: {err}"));
        let theirs_bytes = std::fs::read(dir.join(&file)).unwrap();
        assert!(
            ours_bytes == theirs_bytes,
            "{ours_file} differs from {}",
            dir.join(&file).display()
        );
    }
}

/// The three assertions of `status` against a `status_checks` record of an `expected.json`
/// (`{"assert_consumed": {"ok": …, "message": …}, …}`): the same outcome, and TensorFlow's
/// exact message for each that fails.
pub fn assert_status_checks(
    status: &saveplan::checkpoint::LoadStatus,
    expected: &serde_json::Value,
    what: &str,
) {
    use saveplan::checkpoint::Assertion;
    for (assertion, field) in [
        (Assertion::NontrivialMatch, "assert_nontrivial_match"),
        (
            Assertion::ExistingObjectsMatched,
            "assert_existing_objects_matched",
        ),
        (Assertion::Consumed, "assert_consumed"),
    ] {
        let expected = &expected[field];
        let got = status.check(assertion);
        assert_eq!(
            got.is_ok(),
            expected["ok"] == true,
            "{what} {field}: {got:?}"
        );
        if let Err(err) = got {
            assert_eq!(
                err.to_string(),
                expected["message"].as_str().unwrap(),
                "{what} {field}"
            );
        }
    }
}
