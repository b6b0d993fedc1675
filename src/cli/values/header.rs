//! A `.safetensors` file's header read in one pass: each tensor's name, dtype, shape and
//! place in the file, and the `__metadata__` map. What `save`, `restore`, `run` and `convert`
//! read `.safetensors` files through.
//!
//! The safetensors crate's [`SafeTensors::read_metadata`](safetensors::SafeTensors) parses the
//! header through a `#[serde(flatten)]` map, which buffers every entry as generic JSON content
//! before it reads it as a tensor, then rebuilds the entries into a hash map and a name index:
//! about 0.15 s of a core for 100,000 tensors, paid again by every rank of a cluster that
//! reads the same values file. Here serde_json reads each entry straight into the crate's own
//! [`TensorInfo`], and the checks are the crate's (`Metadata::validate`, `read_metadata`): the
//! same refusals with the same [`SafeTensorError`]s, which `tests` compares case by case with
//! the crate's own parse. One difference: a name given twice is refused (the crate keeps the
//! last and drops the other silently).

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;

use safetensors::SafeTensorError;
use safetensors::tensor::TensorInfo;
use serde::de::{Deserializer, MapAccess, Visitor};

use super::ValuesError;

/// The crate's bound on a header's length (`MAX_HEADER_SIZE`).
const MAX_HEADER: u64 = 100_000_000;

/// The length of the header's length.
const N_LEN: usize = size_of::<u64>();

/// One tensor of a header.
#[derive(Debug)]
pub struct Entry {
    /// Its name.
    pub name: String,
    /// Its dtype, shape and offsets in the data (after the header).
    pub info: TensorInfo,
}

/// A safetensors file's header.
#[derive(Debug)]
pub struct Header {
    /// The tensors, sorted by their place in the file.
    pub entries: Vec<Entry>,
    /// Where the data starts, after the header.
    data: usize,
    /// The `__metadata__` entry, if any.
    pub metadata: Option<HashMap<String, String>>,
}

impl Header {
    /// Where the tensor `info` (one of [`Header::entries`]) lies in the file.
    pub fn range(&self, info: &TensorInfo) -> Range<usize> {
        let (begin, end) = info.data_offsets;
        self.data + begin..self.data + end
    }
}

/// The header of the safetensors file `buffer`, checked against the whole file.
pub fn read(buffer: &[u8]) -> Result<Header, ValuesError> {
    let length = buffer.get(..N_LEN).ok_or(SafeTensorError::HeaderTooSmall)?;
    let n = u64::from_le_bytes(length.try_into().expect("eight bytes"));
    if n > MAX_HEADER {
        return Err(SafeTensorError::HeaderTooLarge.into());
    }
    let stop = N_LEN + n as usize;
    let header = buffer
        .get(N_LEN..stop)
        .ok_or(SafeTensorError::InvalidHeaderLength)?;
    let header = std::str::from_utf8(header).map_err(SafeTensorError::InvalidHeader)?;
    let mut json = serde_json::Deserializer::from_str(header);
    let (mut entries, metadata) = (&mut json)
        .deserialize_map(Entries(expected_entries(header)))
        // Nothing but white space after the map, as `serde_json::from_str` requires.
        .and_then(|entries| json.end().map(|()| entries))
        .map_err(SafeTensorError::InvalidHeaderDeserialization)?;
    // The crate's order: by offsets, a stable sort.
    entries.sort_by_key(|entry| entry.info.data_offsets);
    let end = validate(&entries)?;
    if end + stop != buffer.len() {
        return Err(SafeTensorError::MetadataIncompleteBuffer.into());
    }
    // The crate keeps the last of a name given twice; refused here.
    let mut names: Vec<&str> = entries.iter().map(|entry| entry.name.as_str()).collect();
    names.sort_unstable();
    if let Some(pair) = names.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(ValuesError::NamedTwice(pair[0].to_owned()));
    }
    Ok(Header {
        entries,
        data: stop,
        metadata,
    })
}

/// The crate's `Metadata::validate`: the tensors, sorted by offsets, fill the data from 0 with
/// no gap or overlap, each exactly its shape's bytes. Returns the data's length.
fn validate(entries: &[Entry]) -> Result<usize, SafeTensorError> {
    let mut start = 0;
    for entry in entries {
        let info = &entry.info;
        let (begin, end) = info.data_offsets;
        if begin != start || end < begin {
            return Err(SafeTensorError::InvalidOffset(entry.name.clone()));
        }
        start = end;
        let elements = (info.shape.iter().copied())
            .try_fold(1usize, usize::checked_mul)
            .ok_or(SafeTensorError::ValidationOverflow)?;
        let bits = (elements.checked_mul(info.dtype.bitsize()))
            .ok_or(SafeTensorError::ValidationOverflow)?;
        if bits % 8 != 0 {
            return Err(SafeTensorError::MisalignedSlice);
        }
        if end - begin != bits / 8 {
            return Err(SafeTensorError::TensorInvalidInfo);
        }
    }
    Ok(start)
}

/// About how many tensors `header` lists, to size their vector ahead: a 100,000-tensor header
/// grown one doubling at a time copies its entries about twice over. Every entry but
/// `__metadata__` has a `"data_offsets"` and takes 40 bytes at least, so a header that says
/// `data_offsets` more often than that (in names, say) is not taken at its word.
fn expected_entries(header: &str) -> usize {
    let said = memchr::memmem::find_iter(header.as_bytes(), b"\"data_offsets\"").count();
    said.min(header.len() / 40)
}

/// Reads the header's map into entries, with room asked for the number given (not required:
/// a refusal leaves the vector to grow as it goes).
struct Entries(usize);

impl<'de> Visitor<'de> for Entries {
    type Value = (Vec<Entry>, Option<HashMap<String, String>>);

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a map of tensor names to tensor infos")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut entries = Vec::new();
        let _ = entries.try_reserve_exact(self.0.max(map.size_hint().unwrap_or(0)));
        let mut metadata = None;
        while let Some(name) = map.next_key::<String>()? {
            if name == "__metadata__" {
                metadata = Some(map.next_value::<HashMap<String, String>>()?);
                continue;
            }
            let info = map.next_value::<TensorInfo>()?;
            entries.push(Entry { name, info });
        }
        Ok((entries, metadata))
    }
}

#[cfg(test)]
mod tests {
    use safetensors::SafeTensors;

    use super::*;

    /// A file of `header` (padded with spaces to a multiple of 8, as writers do) and
    /// `data_len` bytes of data.
    fn file(header: &str, data_len: usize) -> Vec<u8> {
        let mut header = header.as_bytes().to_vec();
        header.resize(header.len().next_multiple_of(8), b' ');
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(&header);
        bytes.extend((0..data_len).map(|i| i as u8));
        bytes
    }

    /// A tensor as read: its name, dtype, shape and bytes.
    type Read = (String, String, Vec<usize>, Vec<u8>);

    /// What the crate reads of `bytes`: its tensors (sorted by name), or its error.
    fn crate_reads(bytes: &[u8]) -> Result<Vec<Read>, String> {
        let file = SafeTensors::deserialize(bytes).map_err(|err| err.to_string())?;
        let mut tensors: Vec<_> = (file.tensors().into_iter())
            .map(|(name, view)| {
                let dtype = format!("{:?}", view.dtype());
                (name, dtype, view.shape().to_vec(), view.data().to_vec())
            })
            .collect();
        tensors.sort();
        Ok(tensors)
    }

    /// The same of [`read`].
    fn we_read(bytes: &[u8]) -> Result<Vec<Read>, String> {
        let header = read(bytes).map_err(|err| err.to_string())?;
        let mut tensors: Vec<_> = (header.entries.iter())
            .map(|Entry { name, info }| {
                let data = bytes[header.range(info)].to_vec();
                (
                    name.clone(),
                    format!("{:?}", info.dtype),
                    info.shape.clone(),
                    data,
                )
            })
            .collect();
        tensors.sort();
        Ok(tensors)
    }

    /// Every header here is read as the crate reads it, or refused as it refuses it: the same
    /// tensors with the same bytes, or the same error (for JSON the crate cannot deserialize,
    /// the same kind of error: serde's wording depends on how the map is read).
    #[test]
    fn reads_and_refuses_what_the_crate_does() {
        let f32s = r#""dtype":"F32","shape":[2]"#;
        let cases: Vec<(String, Vec<u8>)> = [
            ("empty", file("{}", 0)),
            ("one", file(&format!(r#"{{"a":{{{f32s},"data_offsets":[0,8]}}}}"#), 8)),
            (
                "out of order, with metadata",
                file(
                    &format!(
                        r#"{{"b":{{{f32s},"data_offsets":[8,16]}},"__metadata__":{{"k":"v"}},"a":{{{f32s},"data_offsets":[0,8]}}}}"#
                    ),
                    16,
                ),
            ),
            (
                "scalar and empty",
                file(
                    r#"{"s":{"dtype":"I64","shape":[],"data_offsets":[0,8]},"e":{"dtype":"U8","shape":[0,3],"data_offsets":[8,8]}}"#,
                    8,
                ),
            ),
            ("a gap", file(&format!(r#"{{"a":{{{f32s},"data_offsets":[4,12]}}}}"#), 12)),
            (
                "an overlap",
                file(
                    &format!(
                        r#"{{"a":{{{f32s},"data_offsets":[0,8]}},"b":{{{f32s},"data_offsets":[4,12]}}}}"#
                    ),
                    12,
                ),
            ),
            ("too short", file(&format!(r#"{{"a":{{{f32s},"data_offsets":[0,4]}}}}"#), 4)),
            ("bytes left", file(&format!(r#"{{"a":{{{f32s},"data_offsets":[0,8]}}}}"#), 9)),
            ("bytes missing", file(&format!(r#"{{"a":{{{f32s},"data_offsets":[0,8]}}}}"#), 7)),
            (
                "misaligned",
                file(r#"{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}"#, 2),
            ),
            (
                "overflow",
                file(
                    r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}}"#,
                    8,
                ),
            ),
            ("ends before", file(&format!(r#"{{"a":{{{f32s},"data_offsets":[8,0]}}}}"#), 8)),
            ("not a map", file("[1,2]", 0)),
            ("unknown dtype", file(r#"{"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}}"#, 1)),
            ("no offsets", file(r#"{"a":{"dtype":"F32","shape":[1]}}"#, 4)),
            ("bad metadata", file(r#"{"__metadata__":{"k":1}}"#, 0)),
            ("trailing", file(r#"{} x"#, 0)),
            ("not JSON", file("{", 0)),
            ("tiny", vec![1, 0, 0]),
            ("too large", u64::MAX.to_le_bytes().to_vec()),
            ("header past the end", 64u64.to_le_bytes().to_vec()),
            ("not UTF-8", {
                let mut bytes = 8u64.to_le_bytes().to_vec();
                bytes.extend_from_slice(&[b'{', 0xff, b'}', b' ', b' ', b' ', b' ', b' ']);
                bytes
            }),
        ]
        .into_iter()
        .map(|(what, bytes)| (what.to_owned(), bytes))
        .collect();
        for (what, bytes) in &cases {
            let (theirs, ours) = (crate_reads(bytes), we_read(bytes));
            match (&theirs, &ours) {
                (Ok(theirs), Ok(ours)) => assert_eq!(ours, theirs, "{what}"),
                (Err(theirs), Err(ours)) if theirs.starts_with("invalid JSON in header") => {
                    assert!(ours.starts_with("invalid JSON in header"), "{what}: {ours}");
                }
                (Err(theirs), Err(ours)) => assert_eq!(ours, theirs, "{what}"),
                _ => panic!("{what}: the crate gives {theirs:?}, we give {ours:?}"),
            }
        }
        // The metadata, as the crate reads it.
        let (_, bytes) = &cases[2];
        let (_, theirs) = SafeTensors::read_metadata(bytes).unwrap();
        assert_eq!(&read(bytes).unwrap().metadata, theirs.metadata());
        // A name twice: the crate keeps one, silently; refused here.
        let twice = file(
            &format!(
                r#"{{"a":{{{f32s},"data_offsets":[0,8]}},"a":{{{f32s},"data_offsets":[8,16]}}}}"#
            ),
            16,
        );
        let error = read(&twice).unwrap_err().to_string();
        assert_eq!(error, "tensor `a` is named twice in the header");
    }

    /// The entries' vector is sized by the times `"data_offsets"` appears, but never beyond
    /// one entry per 40 bytes, however often a name says it; and a header read with a count
    /// too small or too large still reads every entry.
    #[test]
    fn entries_are_counted_ahead_within_bounds() {
        let entry = |name: &str, at: usize| {
            format!(
                r#""{name}":{{"dtype":"F32","shape":[1],"data_offsets":[{at},{}]}}"#,
                at + 4
            )
        };
        let three = format!("{{{},{},{}}}", entry("a", 0), entry("b", 4), entry("c", 8));
        assert_eq!(expected_entries(&three), 3);
        let loud = "\"data_offsets\"".repeat(100);
        let named = format!("{{{}}}", entry(&loud, 0));
        assert!(named.len() / 40 < 100);
        assert_eq!(expected_entries(&named), named.len() / 40);
        for hint in [0, 1, 3, 1_000] {
            let mut json = serde_json::Deserializer::from_str(&three);
            let (entries, _) = (&mut json).deserialize_map(Entries(hint)).unwrap();
            let names: Vec<&str> = entries.iter().map(|entry| entry.name.as_str()).collect();
            assert_eq!(names, ["a", "b", "c"], "hint {hint}");
        }
    }
}
