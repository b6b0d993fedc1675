//! Merging bundle parts into one checkpoint with MergeV2Checkpoints semantics (FORMATS.md §9.3):
//! merged index, data files renamed to their final shard names, source indexes deleted. The
//! renames are one journaled commit ([`super::journal`]).
//!
//! Entries are not decoded when they need not be: an entry in protobuf's canonical encoding
//! (what TensorFlow and our writer produce) without slices is kept as its bytes, and only its
//! `shard_id` field is rewritten (`CanonicalEntry`), which gives the same bytes as decoding,
//! shifting and encoding it again. Anything else is decoded.

use std::ops::Range;
use std::path::{Path, PathBuf};

use prost::Message;

use super::error::{BundleError, Result};
use super::journal::{self, unique_name};
use super::proto::BundleEntryProto;
use super::reader::{RawIndex, read_index_with};
use super::sstable::{get_varint, put_varint};
use super::writer::{EntryTable, WriteOptions, write_index};
use super::{data_path, index_path};
use crate::storage::local as fsops;

/// The attributes of `MergeV2Checkpoints`. The default is the op's: `delete_old_dirs = true`,
/// `allow_missing_files = false`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MergeFlags {
    /// Afterwards remove each source's directory if it is empty and differs from the
    /// destination's directory.
    pub delete_old_dirs: bool,
    /// Skip sources whose index does not exist instead of failing.
    pub allow_missing_files: bool,
}

impl Default for MergeFlags {
    fn default() -> MergeFlags {
        MergeFlags {
            delete_old_dirs: true,
            allow_missing_files: false,
        }
    }
}

/// Options of [`merge_bundles`]: the op's attributes and how the merged index is written. The
/// default is the op's defaults, no fsync.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MergeOptions {
    /// `MergeV2Checkpoints`' attributes.
    pub flags: MergeFlags,
    /// How the merged index is written.
    pub write: WriteOptions,
}

/// Merges the bundles at `sources` into one bundle at `dest`. Unlike TensorFlow, merging a
/// prefix onto itself is refused.
///
/// A checkpoint already at `dest` survives a failed merge, and a crash at any point leaves it
/// or the new one: everything is checked (sources, their data files, that no destination name
/// is a directory) and the merged index is written under a temporary name before any file
/// moves; then the data files and the index are moved into place by one journaled commit
/// ([`super::journal`]): a failure rolls every step back, and after a crash the journal
/// (`<dest>.merging`) lets the next save, reader or `saveplan recover` finish or undo it.
/// Concurrent merges into one prefix must be serialized by the caller
/// ([`super::SaveLock`]).
pub fn merge_bundles<P: AsRef<Path>>(
    sources: &[P],
    dest: impl AsRef<Path>,
    options: MergeOptions,
) -> Result<()> {
    let dest = dest.as_ref();
    let remote = super::remote::is_remote(dest)
        || sources
            .iter()
            .any(|source| super::remote::is_remote(source.as_ref()));
    if remote {
        // Parts written by this process to a URL are in its spool: merged there, then the
        // result is published ([`super::remote`]).
        let local = |path: &Path| match super::remote::is_remote(path) {
            true => super::remote::spool(path),
            false => path.to_path_buf(),
        };
        let sources: Vec<PathBuf> = sources.iter().map(|s| local(s.as_ref())).collect();
        // The spool is scratch space (the store makes the checkpoint durable): no fsync.
        let mut options = options;
        if super::remote::is_remote(dest) {
            options.write.fsync = false;
        }
        merge_bundles(&sources, local(dest), options)?;
        if super::remote::is_remote(dest) {
            super::remote::publish(&local(dest), dest, None)?;
        }
        return Ok(());
    }
    super::check_write_prefix(dest)?;
    for source in sources {
        if same_prefix(source.as_ref(), dest) {
            return Err(BundleError::MergeOntoItself {
                path: dest.to_path_buf(),
            });
        }
    }
    let mut present: Vec<(PathBuf, RawIndex<MergeEntry>)> = Vec::new();
    for source in sources {
        let source = source.as_ref();
        match read_index_with(&index_path(source), MergeEntry::decode) {
            Ok(raw) => present.push((source.to_path_buf(), raw)),
            Err(BundleError::IndexNotFound { .. }) if options.flags.allow_missing_files => {}
            Err(BundleError::IndexNotFound { .. }) => {
                return Err(BundleError::MergeSourceMissing {
                    path: source.to_path_buf(),
                });
            }
            Err(err) => return Err(err),
        }
    }
    if present.is_empty() {
        return Err(BundleError::MergeNoSources {
            path: dest.to_path_buf(),
        });
    }
    let total_shards = present.iter().try_fold(0u32, |acc, (_, raw)| {
        acc.checked_add(raw.num_shards)
            .filter(|&total| total <= i32::MAX as u32)
    });
    let Some(total_shards) = total_shards else {
        let detail = "the sources have more than 2^31 - 1 data files together".to_string();
        return Err(BundleError::BadHeader {
            path: dest.to_path_buf(),
            detail,
        });
    };
    let merged = merge_entries(&mut present)?;
    let renames = plan_renames(&present, dest, total_shards)?;
    if let Some(dir) = dest.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        fsops::create_dir_all(dir).map_err(|err| BundleError::io(dir, "create directory", err))?;
    }
    // A directory where a file goes is refused before anything is written or moved (moved
    // aside, it could not be deleted as a backup and would be left behind).
    let index = index_path(dest);
    let targets = renames
        .iter()
        .map(|(_, to)| (to.as_path(), "replace data file"))
        .chain([(index.as_path(), "replace index file")]);
    for (to, what) in targets {
        if to.is_dir() {
            let err = std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory");
            return Err(BundleError::io(to, what, err));
        }
    }
    let mut encoded = EntryTable::with_capacity(merged.len());
    for (key, entry) in merged {
        encoded.push_encoded(&key, |out| entry.encode_into(out));
    }
    // The index is complete on disk before any data file moves (see above).
    let staged = unique_name(&index, ".merging");
    write_index(&staged, total_shards as i32, encoded.iter(), options.write)?;
    if let Err(err) = journal::commit(dest, &renames, &staged, options.write.fsync) {
        let _ = fsops::remove_file(&staged);
        return Err(err);
    }
    for (source, _) in &present {
        let index = index_path(source);
        fsops::remove_file(&index).map_err(|err| BundleError::io(&index, "delete", err))?;
    }
    if options.flags.delete_old_dirs {
        let dest_dir = parent_dir(dest);
        for (source, _) in &present {
            let dir = parent_dir(source);
            if !same_dir(&dir, &dest_dir) {
                // A directory that still holds files stays, as in TensorFlow; that is not an error.
                let _ = fsops::remove_dir(&dir);
            }
        }
    }
    Ok(())
}

/// Builds the merged table, in key order: shard ids shifted, sliced tensors' slice lists
/// concatenated in source order, duplicates rejected. Takes the sources' entries (they are not
/// needed afterwards). Each source is sorted, so one stable sort of all entries by key merges
/// the sources' runs (linear for one source) and puts equal keys next to each other in source
/// order; the error returned is the one met first going through the sources in order, as
/// entry-by-entry insertion would meet it.
fn merge_entries(
    present: &mut [(PathBuf, RawIndex<MergeEntry>)],
) -> Result<Vec<(Vec<u8>, MergeEntry)>> {
    let total = present.iter().map(|(_, raw)| raw.entries.len()).sum();
    // (key, entry, source, position in the source)
    let mut all: Vec<(Vec<u8>, MergeEntry, usize, usize)> = Vec::with_capacity(total);
    let mut base = 0i32;
    for (source, (_, raw)) in present.iter_mut().enumerate() {
        for (position, (key, mut entry)) in std::mem::take(&mut raw.entries).into_iter().enumerate()
        {
            entry.shift_shard(base);
            all.push((key, entry, source, position));
        }
        base += raw.num_shards as i32;
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    let mut merged: Vec<(Vec<u8>, MergeEntry)> = Vec::with_capacity(all.len());
    // The first conflict in source order: (source, position, key, detail).
    let mut first: Option<(usize, usize, Vec<u8>, &'static str)> = None;
    let mut conflicted: Option<Vec<u8>> = None;
    for (key, entry, source, position) in all {
        let Some((_, existing)) = merged.last_mut().filter(|(last, _)| *last == key) else {
            merged.push((key, entry));
            continue;
        };
        if conflicted.as_ref() == Some(&key) {
            // Only a key's first conflict can be met first.
            continue;
        }
        let detail = match (existing, entry) {
            (MergeEntry::Decoded(existing), MergeEntry::Decoded(entry))
                if !existing.slices.is_empty() && !entry.slices.is_empty() =>
            {
                if existing.dtype != entry.dtype || existing.shape != entry.shape {
                    Some("slices of one tensor disagree on dtype or shape when merging")
                } else {
                    existing.slices.extend(entry.slices);
                    None
                }
            }
            _ => Some("duplicate tensor key encountered when merging"),
        };
        if let Some(detail) = detail {
            if first
                .as_ref()
                .is_none_or(|(s, p, _, _)| (source, position) < (*s, *p))
            {
                first = Some((source, position, key.clone(), detail));
            }
            conflicted = Some(key);
        }
    }
    if let Some((source, _, key, detail)) = first {
        return Err(BundleError::Conflict {
            path: present[source].0.clone(),
            key: String::from_utf8_lossy(&key).into_owned(),
            detail: detail.to_string(),
        });
    }
    Ok(merged)
}

/// An index entry as merge holds it.
#[derive(Debug)]
enum MergeEntry {
    /// A canonically encoded entry without slices, kept as its bytes.
    Canonical(CanonicalEntry),
    /// Any other entry, decoded.
    Decoded(BundleEntryProto),
}

impl MergeEntry {
    /// Keeps `value` encoded if it is canonical and has no slices, else decodes it.
    fn decode(value: &[u8]) -> std::result::Result<MergeEntry, String> {
        match CanonicalEntry::scan(value) {
            Some(entry) => Ok(MergeEntry::Canonical(entry)),
            None => BundleEntryProto::decode(value)
                .map(MergeEntry::Decoded)
                .map_err(|err| err.to_string()),
        }
    }

    /// Adds `base` to the shard id of an entry that is not sliced (a sliced tensor's full
    /// entry keeps shard 0; its slices carry their own).
    fn shift_shard(&mut self, base: i32) {
        match self {
            MergeEntry::Canonical(entry) => entry.shard_id += base,
            MergeEntry::Decoded(entry) if entry.slices.is_empty() => entry.shard_id += base,
            MergeEntry::Decoded(_) => {}
        }
    }

    /// Appends the entry's encoding to `out`.
    fn encode_into(self, out: &mut Vec<u8>) {
        match self {
            MergeEntry::Canonical(entry) => entry.encode_into(out),
            MergeEntry::Decoded(entry) => entry.encode(out).expect("a Vec grows as needed"),
        }
    }
}

/// A `BundleEntryProto` without slices whose bytes are protobuf's canonical encoding of it
/// (known fields in field order, each once, no default values, minimal varints, no negative
/// numbers, a shape of sizes only): decoding and encoding it again gives the same bytes, so
/// merge keeps the bytes and rewrites only the `shard_id` field (3).
#[derive(Debug)]
struct CanonicalEntry {
    bytes: Vec<u8>,
    /// The `shard_id` field's bytes (empty, where it would go, when it is 0 and so absent).
    shard_field: Range<usize>,
    /// The shard id to encode.
    shard_id: i32,
}

impl CanonicalEntry {
    /// `value` if it is a canonical entry without slices.
    fn scan(value: &[u8]) -> Option<CanonicalEntry> {
        let mut rest = value;
        let mut last = 0;
        let mut shard = None;
        let mut insert_at = None;
        while !rest.is_empty() {
            let start = value.len() - rest.len();
            let (field, wire) = canonical_tag(&mut rest)?;
            if field <= last {
                return None;
            }
            last = field;
            if field > 3 && shard.is_none() && insert_at.is_none() {
                insert_at = Some(start);
            }
            match (field, wire) {
                // dtype, offset, size
                (1, 0) => {
                    positive(&mut rest, i32::MAX as u64)?;
                }
                (4 | 5, 0) => {
                    positive(&mut rest, i64::MAX as u64)?;
                }
                (2, 2) => canonical_shape(length_delimited(&mut rest)?)?,
                (3, 0) => {
                    let id = positive(&mut rest, i32::MAX as u64)?;
                    shard = Some((start..value.len() - rest.len(), id as i32));
                }
                (6, 5) => {
                    let (crc, tail) = rest.split_first_chunk::<4>()?;
                    if *crc == [0; 4] {
                        return None;
                    }
                    rest = tail;
                }
                _ => return None,
            }
        }
        let (shard_field, shard_id) = shard.unwrap_or_else(|| {
            let at = insert_at.unwrap_or(value.len());
            (at..at, 0)
        });
        Some(CanonicalEntry {
            bytes: value.to_vec(),
            shard_field,
            shard_id,
        })
    }

    /// Appends the entry's encoding, its `shard_id` field rewritten, to `out`.
    fn encode_into(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.bytes[..self.shard_field.start]);
        if self.shard_id != 0 {
            out.push(3 << 3);
            put_varint(out, self.shard_id as u64);
        }
        out.extend_from_slice(&self.bytes[self.shard_field.end..]);
    }
}

/// A `TensorShapeProto` of dimension sizes only (no names), canonically encoded.
fn canonical_shape(mut rest: &[u8]) -> Option<()> {
    let mut last = 0;
    while !rest.is_empty() {
        let (field, wire) = canonical_tag(&mut rest)?;
        // `dim` (2) repeats; `unknown_rank` (3) comes once, after it.
        if field < last || (field == last && field != 2) {
            return None;
        }
        last = field;
        match (field, wire) {
            (2, 2) => {
                let mut dim = length_delimited(&mut rest)?;
                if !dim.is_empty() {
                    let (1, 0) = canonical_tag(&mut dim)? else {
                        return None;
                    };
                    positive(&mut dim, i64::MAX as u64)?;
                    if !dim.is_empty() {
                        return None;
                    }
                }
            }
            (3, 0) => {
                if minimal_varint(&mut rest)? != 1 {
                    return None;
                }
            }
            _ => return None,
        }
    }
    Some(())
}

/// A field tag of one byte: (field number, wire type).
fn canonical_tag(rest: &mut &[u8]) -> Option<(u8, u8)> {
    let (&tag, tail) = rest.split_first()?;
    if tag & 0x80 != 0 {
        return None;
    }
    *rest = tail;
    Some((tag >> 3, tag & 7))
}

/// A varint encoded in as few bytes as its value needs.
fn minimal_varint(rest: &mut &[u8]) -> Option<u64> {
    let before = rest.len();
    let value = get_varint(rest)?;
    let needed = (64 - value.leading_zeros()).div_ceil(7).max(1) as usize;
    (needed == before - rest.len()).then_some(value)
}

/// A minimal varint in `1..=max` (zero is a default value, which a canonical encoding omits).
fn positive(rest: &mut &[u8], max: u64) -> Option<u64> {
    minimal_varint(rest).filter(|&value| value != 0 && value <= max)
}

/// The bytes of a length-delimited field (minimal length varint).
fn length_delimited<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(minimal_varint(rest)?).ok()?;
    if len > rest.len() {
        return None;
    }
    let (field, tail) = rest.split_at(len);
    *rest = tail;
    Some(field)
}

/// Lists (from, to) data-file renames, checking that every source data file exists.
fn plan_renames(
    present: &[(PathBuf, RawIndex<MergeEntry>)],
    dest: &Path,
    total_shards: u32,
) -> Result<Vec<(PathBuf, PathBuf)>> {
    let mut renames = Vec::new();
    let mut base = 0u32;
    for (source, raw) in present {
        for shard in 0..raw.num_shards {
            let from = data_path(source, shard, raw.num_shards);
            if let Err(err) = fsops::metadata(&from) {
                return Err(BundleError::io(&from, "find data file", err));
            }
            renames.push((from, data_path(dest, base + shard, total_shards)));
        }
        base += raw.num_shards;
    }
    Ok(renames)
}

fn parent_dir(prefix: &Path) -> PathBuf {
    match prefix.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Whether two prefixes name the same checkpoint (same directory and file name).
fn same_prefix(a: &Path, b: &Path) -> bool {
    a.file_name() == b.file_name() && same_dir(&parent_dir(a), &parent_dir(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::{BundleReader, BundleWriter, DType, Values};

    fn write(prefix: &Path, values: [f32; 2]) {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut writer = BundleWriter::create(prefix).unwrap();
        writer.add("a", DType::Float, &[2], &bytes).unwrap();
        writer.finish().unwrap();
    }

    fn read(prefix: &Path) -> Vec<u8> {
        match BundleReader::open(prefix)
            .unwrap()
            .read("a")
            .unwrap()
            .values
        {
            Values::Bytes(bytes) => bytes,
            Values::Strings(_) => panic!("a float tensor"),
        }
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = walk(dir);
        names.sort();
        names
    }

    fn walk(dir: &Path) -> Vec<String> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                names.extend(walk(&path));
            } else {
                names.push(path.to_string_lossy().into_owned());
            }
        }
        names
    }

    /// A file operation failing at any point of the merge leaves the old checkpoint readable
    /// with its old values and every file as it was, or (failing after the commit point) the
    /// new checkpoint; the merge then leaves no staging or backup file behind.
    #[test]
    fn a_failed_operation_rolls_back_or_keeps_the_new_checkpoint() {
        use crate::storage::local::failpoint;
        let new: Vec<u8> = [3.0f32, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        for fail_at in 0.. {
            let dir = tempfile::tempdir().unwrap();
            let dest = dir.path().join("ckpt");
            let part = dir.path().join("ckpt_temp/part-00000-of-00001");
            write(&dest, [1.0, 2.0]);
            write(&part, [3.0, 4.0]);
            let old = read(&dest);
            let before = files(dir.path());
            failpoint::fail_once(fail_at);
            let result = merge_bundles(&[&part], &dest, MergeOptions::default());
            if !failpoint::disarm() {
                result.unwrap();
                assert_eq!(read(&dest), new);
                assert!(fail_at > 8, "the merge makes more than 8 file operations");
                break;
            }
            let unread = files(dir.path());
            let values = read(&dest);
            assert_eq!(
                files(dir.path()),
                unread,
                "a read at {fail_at} changed files"
            );
            if result.is_err() && values == old {
                assert_eq!(
                    files(dir.path()),
                    before,
                    "files after a failure at {fail_at}"
                );
            } else {
                assert_eq!(values, new, "values after a failure at {fail_at}");
            }
            // What a failure left for recovery (a backup it could not delete) goes with it.
            crate::bundle::recover(&dest).unwrap();
            assert_eq!(
                read(&dest),
                values,
                "recovery at {fail_at} changed the values"
            );
            let after = files(dir.path());
            assert!(
                after.iter().all(|name| !name.contains(".merging")),
                "{fail_at}: {after:?}"
            );
        }
    }

    /// Keeping a canonical entry's bytes and rewriting its shard id gives what decoding,
    /// shifting and encoding it gives; entries that are not canonical are decoded.
    #[test]
    fn canonical_entries_are_patched_like_a_decode_and_encode() {
        use saveplan_proto::tensorflow::{TensorShapeProto, tensor_shape_proto::Dim};
        let shapes = [
            None,
            Some(vec![]),
            Some(vec![0]),
            Some(vec![64]),
            Some(vec![3, 0, 1 << 40]),
        ];
        let mut checked = 0;
        for shape in &shapes {
            for (dtype, shard, offset, size, crc) in [
                (1, 0, 0, 0, 0),
                (1, 2, 300, 256, 7),
                (9, 0, 1 << 33, 4, u32::MAX),
                (19, 1, 5, 0, 1),
            ] {
                let entry = BundleEntryProto {
                    dtype,
                    shape: shape.as_ref().map(|dims: &Vec<i64>| TensorShapeProto {
                        dim: dims
                            .iter()
                            .map(|&size| Dim {
                                size,
                                name: String::new(),
                            })
                            .collect(),
                        unknown_rank: false,
                    }),
                    shard_id: shard,
                    offset,
                    size,
                    crc32c: crc,
                    slices: Vec::new(),
                };
                let bytes = entry.encode_to_vec();
                for base in [0, 1, 200] {
                    let mut merged = MergeEntry::decode(&bytes).unwrap();
                    assert!(matches!(merged, MergeEntry::Canonical(_)), "{entry:?}");
                    merged.shift_shard(base);
                    let mut shifted = entry.clone();
                    shifted.shard_id += base;
                    // Appended after what the buffer holds.
                    let mut encoded = vec![0xa5];
                    merged.encode_into(&mut encoded);
                    assert_eq!(encoded[0], 0xa5);
                    assert_eq!(encoded[1..], shifted.encode_to_vec(), "{entry:?} + {base}");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, shapes.len() * 4 * 3);
        // A default written out, fields out of order, a non-minimal varint, a dimension name.
        for bytes in [
            &[0x08, 0x01, 0x18, 0x00][..],
            &[0x18, 0x01, 0x08, 0x01],
            &[0x08, 0x81, 0x00],
            &[0x12, 0x05, 0x12, 0x03, 0x12, 0x01, b'x'],
        ] {
            assert!(CanonicalEntry::scan(bytes).is_none(), "{bytes:?}");
        }
    }
}
