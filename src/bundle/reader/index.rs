//! Decoding a bundle's index: the header, every entry checked (dtype, shape, shard, offset and
//! size, slice keys) into an [`Entry`](super::Entry).

use std::path::Path;

use prost::Message;

use super::super::dtype::{num_elements, storable_from_number};
use super::super::error::{BundleError, Result};
use super::super::proto::{BundleEntryProto, BundleHeaderProto, slice_from_proto};
use super::super::slice::decode_slice_key;
use super::super::sstable::{
    Blocks, first_entry, get_varint, read_table, table_blocks, walk_blocks,
};
use super::Entry;

/// The decoded index of a bundle: header fields and raw entries, each decoded as an `E`
/// ([`read_index_with`]; merge keeps canonical entries encoded).
pub(crate) struct RawIndex<E = BundleEntryProto> {
    pub num_shards: u32,
    /// (key, entry) in key order, header excluded.
    pub entries: Vec<(Vec<u8>, E)>,
}

pub(super) fn bad_entry(path: &Path, key: &str, detail: &str) -> BundleError {
    BundleError::BadEntry {
        path: path.to_path_buf(),
        key: key.to_string(),
        detail: detail.to_string(),
    }
}

/// Reads and decodes an index file: header and raw entries.
pub(crate) fn read_index(path: &Path) -> Result<RawIndex> {
    read_index_with(path, |value| {
        BundleEntryProto::decode(value).map_err(|err| err.to_string())
    })
}

/// Reads an index file: its header, and each entry's value decoded by `decode` (which says
/// why a value is not an entry).
pub(crate) fn read_index_with<E>(
    path: &Path,
    decode: impl Fn(&[u8]) -> std::result::Result<E, String>,
) -> Result<RawIndex<E>> {
    let bytes = read_index_bytes(path)?;
    index_of(path, &bytes, decode)
}

/// The bytes of the index file `path`.
fn read_index_bytes(path: &Path) -> Result<Vec<u8>> {
    index_bytes(path, crate::storage::read(path))
}

/// The bytes of the index file `path` that `read` gave, or its error.
fn index_bytes(path: &Path, read: std::io::Result<Vec<u8>>) -> Result<Vec<u8>> {
    match read {
        Ok(bytes) => Ok(bytes),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Err(BundleError::IndexNotFound {
            path: path.to_path_buf(),
        }),
        Err(err) => Err(BundleError::io(path, "read", err)),
    }
}

/// [`read_index_with`] of the index file's bytes.
fn index_of<E>(
    path: &Path,
    bytes: &[u8],
    decode: impl Fn(&[u8]) -> std::result::Result<E, String>,
) -> Result<RawIndex<E>> {
    let table = read_table(path, bytes)?;
    let Some(((first_key, header_bytes), _)) = table.split_first() else {
        return Err(bad_header(path, "the index has no entries"));
    };
    if !first_key.is_empty() {
        return Err(bad_header(
            path,
            "the first key is not the empty header key",
        ));
    }
    let num_shards = check_header(path, header_bytes)?;
    // Sized once: a collect through `Result` would grow it by doubling, copying every entry
    // decoded so far each time (megabytes for a large index).
    let mut entries = Vec::with_capacity(table.len() - 1);
    for (key, value) in table.into_iter().skip(1) {
        match decode(value) {
            Ok(entry) => entries.push((key, entry)),
            Err(detail) => return Err(bad_entry(path, &String::from_utf8_lossy(&key), &detail)),
        }
    }
    Ok(RawIndex {
        num_shards,
        entries,
    })
}

fn bad_header(path: &Path, detail: &str) -> BundleError {
    BundleError::BadHeader {
        path: path.to_path_buf(),
        detail: detail.to_string(),
    }
}

/// Decodes and checks the header entry's value; its `num_shards`.
fn check_header(path: &Path, header_bytes: &[u8]) -> Result<u32> {
    let header = BundleHeaderProto::decode(header_bytes)
        .map_err(|err| bad_header(path, &err.to_string()))?;
    if header.num_shards < 1 {
        return Err(bad_header(
            path,
            &format!("num_shards is {}", header.num_shards),
        ));
    }
    if header.endianness != 0 {
        return Err(bad_header(path, "big-endian bundles are not supported"));
    }
    if header
        .version
        .as_ref()
        .is_some_and(|version| version.min_consumer > 1 || version.bad_consumers.contains(&1))
    {
        return Err(bad_header(
            path,
            "the bundle's version excludes this reader",
        ));
    }
    Ok(header.num_shards as u32)
}

/// A bundle's index as a reader opens it: the header's `num_shards` and every entry checked
/// and converted ([`convert_entry`]), in key order.
pub(super) struct OpenedIndex {
    pub num_shards: u32,
    /// One more than the highest data file an entry names (0 without entries).
    pub shards_used: u32,
    /// The tensors' entries.
    pub tensors: Vec<Entry>,
    /// The entries of stored slices.
    pub slices: Vec<Entry>,
}

/// Reads the index file `path` (or takes its bytes, `fetched`) and checks and converts every entry, with the errors of
/// [`read_index`] followed by [`convert_entry`], in the same order. `on_header(num_shards)` is
/// called once the header is known, before the entries are decoded (the reader starts
/// fetching data files then).
///
/// The entries are decoded where they lie in the file's blocks (on rayon's pool when there are
/// several), without the intermediate lists of keys and messages, and an entry in the form
/// TensorFlow writes (an unsliced tensor: dtype, shape, shard, offset, size, CRC, each once) by
/// [`fast_entry`]; anything else goes through prost and [`convert_entry`].
pub(super) fn open_index(
    path: &Path,
    fetched: Option<std::io::Result<Vec<u8>>>,
    on_header: impl FnOnce(u32),
) -> Result<OpenedIndex> {
    let bytes = match fetched {
        Some(read) => index_bytes(path, read)?,
        None => read_index_bytes(path)?,
    };
    let blocks = table_blocks(path, &bytes)?;
    let header = blocks
        .contents
        .first()
        .and_then(|block| first_entry(block))
        .filter(|(key, _)| key.is_empty())
        .and_then(|(_, value)| check_header(path, value).ok());
    let Some(num_shards) = header else {
        // A damaged or unusual header: the errors in the order the whole table gives them.
        let raw = index_of(path, &bytes, |value| {
            BundleEntryProto::decode(value).map_err(|err| err.to_string())
        })?;
        on_header(raw.num_shards);
        let mut decoded = Decoded::default();
        for (key, proto) in raw.entries {
            decoded.push(convert_entry(path, key, proto, raw.num_shards)?);
        }
        return Ok(OpenedIndex {
            num_shards: raw.num_shards,
            shards_used: decoded.shards_used,
            tensors: decoded.tensors,
            slices: decoded.slices,
        });
    };
    on_header(num_shards);
    let mut decoded = Decoded::new(&blocks);
    walk_blocks(path, blocks, |key, value| {
        decoded.add(path, key, value, num_shards);
    })?;
    // Every entry's message decodes before any is checked: the first that does not decode is
    // the error, else the first that is not a valid entry.
    match decoded.undecodable.or(decoded.invalid) {
        Some(err) => Err(err),
        None => Ok(OpenedIndex {
            num_shards,
            shards_used: decoded.shards_used,
            tensors: decoded.tensors,
            slices: decoded.slices,
        }),
    }
}

/// The entries of an index, decoded and checked, and the first entry that does not decode,
/// and the first that is not valid.
#[derive(Default)]
struct Decoded {
    /// The next entry is the header (the first entry of the table).
    header: bool,
    tensors: Vec<Entry>,
    slices: Vec<Entry>,
    shards_used: u32,
    undecodable: Option<BundleError>,
    invalid: Option<BundleError>,
}

impl Decoded {
    fn new(blocks: &Blocks) -> Decoded {
        // A block with R restart points holds at most 16 R entries (TensorFlow's interval),
        // and its restart array takes 4 R bytes (the walk checks it; until then R is bounded by
        // the block's size).
        let capacity: usize = blocks
            .contents
            .iter()
            .map(|block| {
                let restarts = block
                    .last_chunk::<4>()
                    .map_or(0, |bytes| u32::from_le_bytes(*bytes) as usize);
                restarts.min(block.len() / 4) * 16
            })
            .sum();
        Decoded {
            header: true,
            tensors: Vec::with_capacity(capacity),
            ..Decoded::default()
        }
    }

    fn push(&mut self, entry: Entry) {
        self.shards_used = self.shards_used.max(entry.shard + 1);
        match entry.slice {
            Some(_) => self.slices.push(entry),
            None => self.tensors.push(entry),
        }
    }

    fn add(&mut self, path: &Path, key: &[u8], value: &[u8], num_shards: u32) {
        if std::mem::take(&mut self.header) || self.undecodable.is_some() {
            return;
        }
        if let Some(entry) = fast_entry(key, value, num_shards) {
            if self.invalid.is_none() {
                self.shards_used = self.shards_used.max(entry.shard + 1);
                self.tensors.push(entry);
            }
            return;
        }
        match BundleEntryProto::decode(value) {
            Err(err) => {
                let key = String::from_utf8_lossy(key);
                self.undecodable = Some(bad_entry(path, &key, &err.to_string()));
            }
            Ok(_) if self.invalid.is_some() => {}
            Ok(proto) => match convert_entry(path, key.to_vec(), proto, num_shards) {
                Ok(entry) => self.push(entry),
                Err(err) => self.invalid = Some(err),
            },
        }
    }
}

/// The entry of an unsliced tensor whose message is in the form TensorFlow writes (fields 1–6,
/// each at most once, the shape's dimensions sizes only), checked and converted exactly as
/// prost and [`convert_entry`] would; `None` for anything else, valid or not, which is left
/// to them.
fn fast_entry(key: &[u8], value: &[u8], num_shards: u32) -> Option<Entry> {
    if key.first() == Some(&0) {
        return None;
    }
    let name = std::str::from_utf8(key).ok()?;
    let (mut dtype, mut shape, mut shard, mut offset, mut size, mut crc) =
        (None, None, None, None, None, None);
    let mut rest = value;
    while let Some((&tag, after)) = rest.split_first() {
        rest = after;
        let unset = match tag {
            0x08 => dtype.replace(get_varint(&mut rest)? as i32).is_none(),
            0x12 => {
                let len = usize::try_from(get_varint(&mut rest)?).ok()?;
                let message = rest.get(..len)?;
                rest = &rest[len..];
                shape.replace(fast_shape(message)?).is_none()
            }
            0x18 => shard.replace(get_varint(&mut rest)? as i32).is_none(),
            0x20 => offset.replace(get_varint(&mut rest)? as i64).is_none(),
            0x28 => size.replace(get_varint(&mut rest)? as i64).is_none(),
            0x35 => {
                let bytes: [u8; 4] = rest.get(..4)?.try_into().ok()?;
                rest = &rest[4..];
                crc.replace(u32::from_le_bytes(bytes)).is_none()
            }
            _ => return None,
        };
        if !unset {
            return None;
        }
    }
    let (shape, shard) = (shape?, shard.unwrap_or(0));
    let (offset, size) = (offset.unwrap_or(0), size.unwrap_or(0));
    let dtype = storable_from_number(dtype.unwrap_or(0))?;
    let n_elements = num_elements(&shape)?;
    if shard < 0 || shard as u32 >= num_shards {
        return None;
    }
    if offset < 0 || size < 0 || offset.checked_add(size).is_none() {
        return None;
    }
    if let Some(element_size) = dtype.element_size()
        && n_elements.checked_mul(element_size as u64) != Some(size as u64)
    {
        return None;
    }
    Some(Entry {
        key: name.to_string(),
        dtype,
        shape,
        shard: shard as u32,
        offset: offset as u64,
        size: size as u64,
        crc32c: crc.unwrap_or(0),
        slices: Vec::new(),
        slice: None,
    })
}

/// The dimension sizes of a `TensorShapeProto` holding only dimensions with sizes only (as
/// TensorFlow writes them); `None` otherwise.
fn fast_shape(mut message: &[u8]) -> Option<Vec<i64>> {
    let mut shape = Vec::new();
    while let Some((&tag, after)) = message.split_first() {
        if tag != 0x12 {
            return None;
        }
        message = after;
        let len = usize::try_from(get_varint(&mut message)?).ok()?;
        let mut dim = message.get(..len)?;
        message = &message[len..];
        let size = match dim.split_first() {
            None => 0,
            Some((0x08, after)) => {
                dim = after;
                let size = get_varint(&mut dim)? as i64;
                if !dim.is_empty() {
                    return None;
                }
                size
            }
            Some(_) => return None,
        };
        shape.push(size);
    }
    Some(shape)
}

/// Validates one raw entry and converts it to an [`Entry`].
/// Takes the key's buffer: the name of an unsliced tensor is not copied.
pub(super) fn convert_entry(
    path: &Path,
    key: Vec<u8>,
    proto: BundleEntryProto,
    num_shards: u32,
) -> Result<Entry> {
    let (name, slice) = if key.first() == Some(&0) {
        let (name, slice) = decode_slice_key(&key)
            .map_err(|err| bad_entry(path, &String::from_utf8_lossy(&key), &err.to_string()))?;
        (name, Some(slice))
    } else {
        let name = String::from_utf8(key).map_err(|err| {
            bad_entry(
                path,
                &String::from_utf8_lossy(err.as_bytes()),
                "key is not UTF-8",
            )
        })?;
        (name, None)
    };
    let bad = |detail: &str| bad_entry(path, &name, detail);
    let dtype = storable_from_number(proto.dtype)
        .ok_or_else(|| bad(&format!("unsupported dtype {}", proto.dtype)))?;
    let shape_proto = proto.shape.as_ref().ok_or_else(|| bad("no shape"))?;
    if shape_proto.unknown_rank {
        return Err(bad("unknown rank"));
    }
    let shape: Vec<i64> = shape_proto.dim.iter().map(|dim| dim.size).collect();
    let n_elements =
        num_elements(&shape).ok_or_else(|| bad(&format!("invalid shape {shape:?}")))?;
    if proto.shard_id < 0 || proto.shard_id as u32 >= num_shards {
        return Err(bad(&format!(
            "shard {} outside 0..{num_shards}",
            proto.shard_id
        )));
    }
    if proto.offset < 0 || proto.size < 0 || proto.offset.checked_add(proto.size).is_none() {
        return Err(bad("negative or overflowing offset/size"));
    }
    let slices = proto
        .slices
        .iter()
        .map(|slice| {
            let slice = slice_from_proto(slice).ok_or_else(|| bad("negative slice extent"))?;
            slice.resolve(&shape).map_err(|err| bad(&err.to_string()))?;
            Ok(slice)
        })
        .collect::<Result<Vec<_>>>()?;
    if slice.is_some() && !slices.is_empty() {
        return Err(bad("a stored slice lists slices itself"));
    }
    if let (Some(element_size), true) = (dtype.element_size(), slices.is_empty()) {
        let expected = n_elements.checked_mul(element_size as u64);
        if expected != Some(proto.size as u64) {
            return Err(BundleError::SizeMismatch {
                path: path.to_path_buf(),
                key: name,
                dtype,
                shape,
                expected: expected.unwrap_or(u64::MAX),
                actual: proto.size as u64,
            });
        }
    }
    Ok(Entry {
        key: name,
        dtype,
        shape,
        shard: proto.shard_id as u32,
        offset: proto.offset as u64,
        size: proto.size as u64,
        crc32c: proto.crc32c,
        slices,
        slice,
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::super::super::sstable::TableBuilder;
    use super::*;

    /// What the index decode gave before [`open_index`]: the whole table, then every message,
    /// then every entry checked, split as the reader keeps them.
    fn reference(path: &Path) -> Result<(u32, Vec<Entry>, Vec<Entry>)> {
        let raw = read_index(path)?;
        let (mut tensors, mut slices) = (Vec::new(), Vec::new());
        for (key, proto) in raw.entries {
            let entry = convert_entry(path, key, proto, raw.num_shards)?;
            match entry.slice {
                Some(_) => slices.push(entry),
                None => tensors.push(entry),
            }
        }
        Ok((raw.num_shards, tensors, slices))
    }

    fn opened(path: &Path) -> Result<(u32, Vec<Entry>, Vec<Entry>)> {
        let mut told = None;
        let index = open_index(path, None, |num_shards| told = Some(num_shards))?;
        assert_eq!(told, Some(index.num_shards), "{}", path.display());
        Ok((index.num_shards, index.tensors, index.slices))
    }

    /// Both decodes of the index file `path` agree: the same entries, or the same error.
    fn assert_same(path: &Path, what: &str) {
        match (reference(path), opened(path)) {
            (Ok(want), Ok(got)) => assert!(want == got, "{what}: entries differ"),
            (Err(want), Err(got)) => assert_eq!(want.to_string(), got.to_string(), "{what}"),
            (want, got) => panic!("{what}: {:?} against {:?}", want.err(), got.err()),
        }
    }

    fn fixture(case: &str, name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/tf-2.21/ckpt")
            .join(case)
            .join(name)
    }

    const CASES: [(&str, &str); 6] = [
        ("c1_dtypes", "ckpt.index"),
        ("c2_strings", "ckpt.index"),
        ("c3_two_tasks", "ckpt.index"),
        ("c5_partitioned", "ckpt.index"),
        ("c9_multiblock_index", "ckpt.index"),
        ("c12_slice_keys", "ckpt.index"),
    ];

    #[test]
    fn tensorflows_entries_take_the_fast_path_and_decode_as_prost_does() {
        let mut fast = 0;
        for (case, name) in CASES {
            let path = fixture(case, name);
            assert_same(&path, case);
            let bytes = std::fs::read(&path).unwrap();
            let raw = read_index(&path).unwrap();
            let table = read_table(&path, &bytes).unwrap();
            for ((key, value), (_, proto)) in table.iter().skip(1).zip(raw.entries) {
                let Ok(want) = convert_entry(&path, key.clone(), proto, raw.num_shards) else {
                    continue;
                };
                let got = fast_entry(key, value, raw.num_shards);
                if want.slice.is_some() || !want.slices.is_empty() {
                    assert!(got.is_none(), "{case}: {}", want.key);
                } else {
                    assert_eq!(got.as_ref(), Some(&want), "{case}");
                    fast += 1;
                }
            }
        }
        assert!(fast > 100, "only {fast} entries on the fast path");
    }

    #[test]
    fn flipped_bits_give_the_errors_of_the_whole_table_decode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ckpt.index");
        for (case, name, step) in [
            ("c1_dtypes", "ckpt.index", 1),
            ("c5_partitioned", "ckpt.index", 7),
            ("c9_multiblock_index", "ckpt.index", 4001),
        ] {
            let bytes = std::fs::read(fixture(case, name)).unwrap();
            for bit in (0..bytes.len() * 8).step_by(step) {
                let mut flipped = bytes.clone();
                flipped[bit / 8] ^= 1 << (bit % 8);
                std::fs::write(&path, &flipped).unwrap();
                assert_same(&path, &format!("{case} bit {bit}"));
            }
        }
    }

    /// Each entry's message changed in turn (every bit flipped, cut short, an unknown or a
    /// repeated field added) in a table rebuilt around it, so that its checksums hold and the
    /// message itself is what is decoded.
    #[test]
    fn changed_messages_decode_as_prost_and_the_checks_decode_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ckpt.index");
        for case in ["c1_dtypes", "c12_slice_keys"] {
            let bytes = std::fs::read(fixture(case, "ckpt.index")).unwrap();
            let table = read_table(&path, &bytes).unwrap();
            for at in 0..table.len() {
                let value = table[at].1;
                let mut changed: Vec<Vec<u8>> = (0..value.len() * 8)
                    .map(|bit| {
                        let mut value = value.to_vec();
                        value[bit / 8] ^= 1 << (bit % 8);
                        value
                    })
                    .collect();
                changed.extend((0..value.len()).map(|len| value[..len].to_vec()));
                for extra in [&[0x40, 0x01][..], &[0x18, 0x00], &[0x12, 0x02, 0x12, 0x00]] {
                    changed.push([value, extra].concat());
                }
                for value in changed {
                    let mut builder = TableBuilder::new();
                    for (index, (key, original)) in table.iter().enumerate() {
                        builder.add(key, if index == at { &value } else { original });
                    }
                    std::fs::write(&path, builder.finish()).unwrap();
                    assert_same(&path, &format!("{case} entry {at}: {value:?}"));
                }
            }
        }
    }
}
