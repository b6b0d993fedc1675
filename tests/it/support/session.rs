//! Shared helpers of the `session*` and `run*` suites: loading specs and fixtures, generating
//! values for a session's keys, decoding a fixture's `values.json`, comparing and reading back
//! written checkpoints.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use saveplan::exec::{Backend, HostTensor};
use saveplan::session::{Session, SessionOptions};
use saveplan::trace::spec::SpecFile;
use saveplan_ir::DType;

use super::files::files_under;
use super::{ErrorForm, error_chain, fixture, root};

/// A file under `tests/inputs/`.
pub fn input(relative: &str) -> PathBuf {
    root().join("tests/inputs").join(relative)
}

/// Parses a spec file under `tests/inputs/`.
pub fn spec(relative: &str) -> SpecFile {
    let text = std::fs::read_to_string(input(relative)).expect("spec exists");
    SpecFile::parse(&text).unwrap_or_else(|err| panic!("{relative}: {err}"))
}

/// A session traced from a spec file under `tests/inputs/`, on the interpreter.
pub fn spec_session(relative: &str) -> Session {
    spec_session_on(relative, Backend::Interp)
}

/// A session traced from a spec file under `tests/inputs/`, on `backend`.
pub fn spec_session_on(relative: &str, backend: Backend) -> Session {
    let options = SessionOptions {
        backend,
        ..SessionOptions::default()
    };
    Session::from_spec(spec(relative), options).unwrap_or_else(|err| {
        panic!(
            "{relative} on {backend}: {}",
            error_chain(&err, ErrorForm::OneLine)
        )
    })
}

/// A distinct value for every key the session saves, varied by `salt`.
pub fn generated_values(session: &Session, salt: u8) -> BTreeMap<String, HostTensor> {
    let mut values = BTreeMap::new();
    for (key, tensor) in session.saved_tensors() {
        let shape = tensor.shape.clone().expect("spec plans fix every shape");
        let n: u64 = shape.iter().product();
        let value = if tensor.dtype == DType::String {
            let strings = (0..n)
                .map(|i| format!("{key}-{salt}-{i}").into_bytes())
                .collect();
            HostTensor::from_strings(shape, strings).unwrap()
        } else {
            let size = tensor.dtype.element_size().expect("a fixed-width dtype");
            let bytes = (0..n as usize * size)
                .map(|i| (i as u8).wrapping_mul(7).wrapping_add(salt) & 0x3f)
                .collect();
            HostTensor::from_bytes(tensor.dtype, shape, bytes).unwrap()
        };
        values.insert(key.clone(), value);
    }
    values
}

/// The tensors of a checkpoint fixture's `values.json` (prefix `ckpt`), by key.
pub fn fixture_values(case: &str) -> BTreeMap<String, HostTensor> {
    let text = std::fs::read_to_string(fixture(&format!("ckpt/{case}/values.json"))).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut out = BTreeMap::new();
    for (key, entry) in json["ckpt"].as_object().unwrap() {
        let dtype = DType::parse(entry["dtype"].as_str().unwrap()).unwrap();
        let shape: Vec<u64> = entry["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|dim| dim.as_u64().unwrap())
            .collect();
        let value = if dtype == DType::String {
            let strings = entry["values_b64"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| b64.decode(s.as_str().unwrap()).unwrap())
                .collect();
            HostTensor::from_strings(shape, strings).unwrap()
        } else {
            let bytes = b64.decode(entry["raw_le_b64"].as_str().unwrap()).unwrap();
            HostTensor::from_bytes(dtype, shape, bytes).unwrap()
        };
        out.insert(key.clone(), value);
    }
    out
}

/// Asserts that every file of the fixture checkpoint `ckpt/<case>` has the same bytes under
/// `dir`, and that `dir` holds nothing else.
pub fn assert_same_files(case: &str, dir: &Path) {
    let fixture_dir = fixture(&format!("ckpt/{case}"));
    let expected: Vec<String> = files_under(&fixture_dir)
        .into_iter()
        .filter(|name| name.starts_with("ckpt."))
        .collect();
    assert_eq!(files_under(dir), expected, "{case}: file names");
    for name in expected {
        let ours = std::fs::read(dir.join(&name)).unwrap();
        let theirs = std::fs::read(fixture_dir.join(&name)).unwrap();
        assert!(ours == theirs, "{case}: {name} differs from TensorFlow's");
    }
}

/// The checkpoint at `prefix` read back by key with the bundle reader (every checksum
/// checked), as host tensors.
pub fn read_checkpoint(prefix: &Path) -> BTreeMap<String, HostTensor> {
    let reader = saveplan::bundle::BundleReader::open(prefix).unwrap();
    assert!(
        reader.verify().is_empty(),
        "{prefix:?}: {:?}",
        reader.verify()
    );
    let mut out = BTreeMap::new();
    for entry in reader.entries() {
        let tensor = reader.read(&entry.key).unwrap();
        let shape: Vec<u64> = tensor.shape.iter().map(|&dim| dim as u64).collect();
        let value = match tensor.values {
            saveplan::bundle::Values::Bytes(bytes) => {
                let dtype = entry.dtype;
                HostTensor::from_bytes(dtype, shape, bytes).unwrap()
            }
            saveplan::bundle::Values::Strings(strings) => {
                HostTensor::from_strings(shape, strings).unwrap()
            }
        };
        out.insert(entry.key.clone(), value);
    }
    out
}
