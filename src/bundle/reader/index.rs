//! Decoding a bundle's index: the header, every entry checked (dtype, shape, shard, offset and
//! size, slice keys) into an [`Entry`](super::Entry).

use std::path::Path;

use prost::Message;

use super::super::dtype::{num_elements, storable_from_number};
use super::super::error::{BundleError, Result};
use super::super::proto::{BundleEntryProto, BundleHeaderProto, slice_from_proto};
use super::super::slice::decode_slice_key;
use super::super::sstable::read_table;
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
    let bytes = match crate::storage::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(BundleError::IndexNotFound {
                path: path.to_path_buf(),
            });
        }
        Err(err) => return Err(BundleError::io(path, "read", err)),
    };
    let table = read_table(path, &bytes)?;
    let bad_header = |detail: &str| BundleError::BadHeader {
        path: path.to_path_buf(),
        detail: detail.to_string(),
    };
    let Some(((first_key, header_bytes), _)) = table.split_first() else {
        return Err(bad_header("the index has no entries"));
    };
    if !first_key.is_empty() {
        return Err(bad_header("the first key is not the empty header key"));
    }
    let header =
        BundleHeaderProto::decode(*header_bytes).map_err(|err| bad_header(&err.to_string()))?;
    if header.num_shards < 1 {
        return Err(bad_header(&format!("num_shards is {}", header.num_shards)));
    }
    if header.endianness != 0 {
        return Err(bad_header("big-endian bundles are not supported"));
    }
    if header
        .version
        .as_ref()
        .is_some_and(|version| version.min_consumer > 1 || version.bad_consumers.contains(&1))
    {
        return Err(bad_header("the bundle's version excludes this reader"));
    }
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
        num_shards: header.num_shards as u32,
        entries,
    })
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
