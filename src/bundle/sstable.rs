//! The LevelDB-format SSTable used for `.index` files (FORMATS.md §2): a byte-exact builder
//! (restart intervals 16/1, 256 KiB blocks, separators, trailers, footer) and a reader that
//! checks every CRC and bound.

use std::path::Path;

use super::crc;
use super::error::{BundleError, Result};

/// The table magic number at the end of the footer.
pub const TABLE_MAGIC: u64 = 0xDB47_7524_8B80_FB57;
/// Length of the footer.
pub const FOOTER_LEN: usize = 48;
/// A data block is finished once its size estimate reaches this many bytes.
pub const BLOCK_SIZE: usize = 262_144;
const DATA_RESTART_INTERVAL: usize = 16;
const INDEX_RESTART_INTERVAL: usize = 1;
const TRAILER_LEN: usize = 5;

/// Builds one block: prefix-compressed entries followed by the restart array.
struct BlockBuilder {
    buffer: Vec<u8>,
    restarts: Vec<u32>,
    counter: usize,
    interval: usize,
    last_key: Vec<u8>,
}

impl BlockBuilder {
    fn new(interval: usize) -> BlockBuilder {
        BlockBuilder {
            buffer: Vec::new(),
            restarts: vec![0],
            counter: 0,
            interval,
            last_key: Vec::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.buffer.is_empty()
    }

    fn size_estimate(&self) -> usize {
        self.buffer.len() + 4 * self.restarts.len() + 4
    }

    fn add(&mut self, key: &[u8], value: &[u8]) {
        let shared = if self.counter < self.interval {
            self.last_key
                .iter()
                .zip(key)
                .take_while(|(a, b)| a == b)
                .count()
        } else {
            self.restarts.push(self.buffer.len() as u32);
            self.counter = 0;
            0
        };
        put_varint(&mut self.buffer, shared as u64);
        put_varint(&mut self.buffer, (key.len() - shared) as u64);
        put_varint(&mut self.buffer, value.len() as u64);
        self.buffer.extend_from_slice(&key[shared..]);
        self.buffer.extend_from_slice(value);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.counter += 1;
    }

    /// Appends the restart array and returns the block contents, leaving the builder empty.
    fn finish(&mut self) -> Vec<u8> {
        let mut contents = std::mem::take(&mut self.buffer);
        for restart in &self.restarts {
            contents.extend_from_slice(&restart.to_le_bytes());
        }
        contents.extend_from_slice(&(self.restarts.len() as u32).to_le_bytes());
        self.restarts = vec![0];
        self.counter = 0;
        self.last_key.clear();
        contents
    }
}

/// Writes an SSTable exactly as TensorFlow's (LevelDB's) table builder does. Keys must be added
/// in strictly increasing bytewise order.
pub struct TableBuilder {
    out: Vec<u8>,
    data_block: BlockBuilder,
    index_block: BlockBuilder,
    last_key: Vec<u8>,
    pending_handle: Option<(u64, u64)>,
}

impl Default for TableBuilder {
    fn default() -> Self {
        TableBuilder::new()
    }
}

impl TableBuilder {
    /// An empty table.
    pub fn new() -> TableBuilder {
        TableBuilder {
            out: Vec::new(),
            data_block: BlockBuilder::new(DATA_RESTART_INTERVAL),
            index_block: BlockBuilder::new(INDEX_RESTART_INTERVAL),
            last_key: Vec::new(),
            pending_handle: None,
        }
    }

    /// Adds one entry; `key` must sort after every key added before.
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        if let Some(handle) = self.pending_handle.take() {
            let separator = shortest_separator(&self.last_key, key);
            self.add_index_entry(&separator, handle);
        }
        self.data_block.add(key, value);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        if self.data_block.size_estimate() >= BLOCK_SIZE {
            self.flush();
        }
    }

    /// Finishes the table (metaindex, index block, footer) and returns its bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.flush();
        let metaindex = self.write_block(BlockBuilder::new(DATA_RESTART_INTERVAL).finish());
        if let Some(handle) = self.pending_handle.take() {
            let successor = short_successor(&self.last_key);
            self.add_index_entry(&successor, handle);
        }
        let index_contents = self.index_block.finish();
        let index = self.write_block(index_contents);
        let mut footer = Vec::with_capacity(FOOTER_LEN);
        for (offset, size) in [metaindex, index] {
            put_varint(&mut footer, offset);
            put_varint(&mut footer, size);
        }
        footer.resize(FOOTER_LEN - 8, 0);
        footer.extend_from_slice(&TABLE_MAGIC.to_le_bytes());
        self.out.extend_from_slice(&footer);
        self.out
    }

    fn add_index_entry(&mut self, key: &[u8], (offset, size): (u64, u64)) {
        let mut handle = Vec::with_capacity(20);
        put_varint(&mut handle, offset);
        put_varint(&mut handle, size);
        self.index_block.add(key, &handle);
    }

    fn flush(&mut self) {
        if self.data_block.is_empty() {
            return;
        }
        let contents = self.data_block.finish();
        self.pending_handle = Some(self.write_block(contents));
    }

    /// Appends block contents plus trailer; returns the block handle.
    fn write_block(&mut self, contents: Vec<u8>) -> (u64, u64) {
        let offset = self.out.len() as u64;
        self.out.extend_from_slice(&contents);
        self.out.push(0);
        let checksum = crc::mask(crc::extend(crc::crc32c(&contents), &[0]));
        self.out.extend_from_slice(&checksum.to_le_bytes());
        (offset, contents.len() as u64)
    }
}

/// LevelDB's `FindShortestSeparator` for the bytewise comparator.
fn shortest_separator(start: &[u8], limit: &[u8]) -> Vec<u8> {
    let diff = start.iter().zip(limit).take_while(|(a, b)| a == b).count();
    if diff < start.len().min(limit.len()) {
        let byte = start[diff];
        if byte < 0xff && byte + 1 < limit[diff] {
            let mut separator = start[..=diff].to_vec();
            separator[diff] += 1;
            return separator;
        }
    }
    start.to_vec()
}

/// LevelDB's `FindShortSuccessor` for the bytewise comparator.
fn short_successor(key: &[u8]) -> Vec<u8> {
    match key.iter().position(|&byte| byte != 0xff) {
        Some(pos) => {
            let mut successor = key[..=pos].to_vec();
            successor[pos] += 1;
            successor
        }
        None => key.to_vec(),
    }
}

/// Appends a base-128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads a base-128 varint from the front of `rest`; `None` if truncated or longer than 10 bytes.
pub fn get_varint(rest: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (idx, &byte) in rest.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * idx);
        if byte & 0x80 == 0 {
            if idx == 9 && byte > 1 {
                return None;
            }
            *rest = &rest[idx + 1..];
            return Some(value);
        }
    }
    None
}

/// Parses a whole table, checking the footer, every block checksum and every bound, and returns
/// its entries in order. Keys must be strictly increasing.
pub fn read_table<'a>(path: &Path, bytes: &'a [u8]) -> Result<Vec<(Vec<u8>, &'a [u8])>> {
    let blocks = table_blocks(path, bytes)?;
    let mut entries = Vec::new();
    walk_blocks(path, blocks, |key, value| {
        entries.push((key.to_vec(), value))
    })?;
    Ok(entries)
}

/// The data blocks of a table whose footer, metaindex and index block are sound: the contents
/// of each block in order, up to the first whose handle or checksum is bad, and that error
/// (or, after the last block, the blocks not ending where the metaindex starts).
pub(crate) struct Blocks<'a> {
    /// The contents of the data blocks, checksums checked, in file (and key) order.
    pub contents: Vec<&'a [u8]>,
    /// The error met at the block after the last of `contents`, reported unless a block of
    /// `contents` has an earlier one.
    stop: Option<BundleError>,
}

/// The data blocks of the table `bytes` ([`Blocks`]); errors of its footer, metaindex and index
/// block. The entries are read by [`walk_blocks`].
pub(crate) fn table_blocks<'a>(path: &Path, bytes: &'a [u8]) -> Result<Blocks<'a>> {
    let corrupt = |detail: String| BundleError::CorruptIndex {
        path: path.to_path_buf(),
        detail,
    };
    if bytes.len() < FOOTER_LEN {
        return Err(corrupt(format!(
            "file is {} bytes, shorter than the {FOOTER_LEN}-byte footer",
            bytes.len()
        )));
    }
    let footer = &bytes[bytes.len() - FOOTER_LEN..];
    let magic = u64::from_le_bytes(
        footer[40..]
            .try_into()
            .expect("the footer slice is 48 bytes long"),
    );
    if magic != TABLE_MAGIC {
        return Err(BundleError::BadMagic {
            path: path.to_path_buf(),
            found: magic,
        });
    }
    let mut rest = &footer[..40];
    let mut handle = || -> Result<(u64, u64)> {
        let offset =
            get_varint(&mut rest).ok_or_else(|| corrupt("bad block handle in footer".into()))?;
        let size =
            get_varint(&mut rest).ok_or_else(|| corrupt("bad block handle in footer".into()))?;
        Ok((offset, size))
    };
    let metaindex_handle = handle()?;
    let index_handle = handle()?;
    // TensorFlow writes minimal varints padded with zeros; anything else means damage.
    let mut canonical = Vec::with_capacity(40);
    for value in [
        metaindex_handle.0,
        metaindex_handle.1,
        index_handle.0,
        index_handle.1,
    ] {
        put_varint(&mut canonical, value);
    }
    canonical.resize(40, 0);
    if canonical != footer[..40] {
        return Err(corrupt("non-canonical footer".into()));
    }
    let table_end = (bytes.len() - FOOTER_LEN) as u64;
    // The metaindex is empty in every bundle, but its checksum still guards its bytes.
    parse_block(path, read_block(path, bytes, metaindex_handle, table_end)?)?;
    // Blocks tile the file: data blocks from offset 0, then the metaindex, the index, the footer.
    let block_end = |(offset, size): (u64, u64)| {
        offset
            .checked_add(size)
            .and_then(|end| end.checked_add(TRAILER_LEN as u64))
    };
    if block_end(metaindex_handle) != Some(index_handle.0)
        || block_end(index_handle) != Some(table_end)
    {
        return Err(corrupt(
            "metaindex and index blocks are not where the footer says".into(),
        ));
    }
    let index = read_block(path, bytes, index_handle, table_end)?;
    let mut contents = Vec::new();
    let mut next_block = 0u64;
    for (_, mut value) in parse_block(path, index)? {
        let offset = get_varint(&mut value);
        let size = get_varint(&mut value);
        let (Some(offset), Some(size)) = (offset, size) else {
            let stop = Some(corrupt("bad block handle in index block".into()));
            return Ok(Blocks { contents, stop });
        };
        if offset != next_block {
            let stop = Some(corrupt(format!(
                "data block at {offset} where {next_block} was expected"
            )));
            return Ok(Blocks { contents, stop });
        }
        next_block = block_end((offset, size)).unwrap_or(u64::MAX);
        match read_block(path, bytes, (offset, size), table_end) {
            Ok(block) => contents.push(block),
            Err(err) => {
                return Ok(Blocks {
                    contents,
                    stop: Some(err),
                });
            }
        }
    }
    let stop = (next_block != metaindex_handle.0)
        .then(|| corrupt("data blocks do not end where the metaindex starts".into()));
    Ok(Blocks { contents, stop })
}

/// The key and value of the first entry of a data block, if it is whole and its key is stored
/// whole (as the first entry of every sound block is); `None` otherwise. Nothing else of the
/// block is checked: [`walk_blocks`] does that.
pub(crate) fn first_entry(block: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut rest = block;
    let shared = get_varint(&mut rest)?;
    let non_shared = usize::try_from(get_varint(&mut rest)?).ok()?;
    let value_len = usize::try_from(get_varint(&mut rest)?).ok()?;
    if shared != 0 {
        return None;
    }
    let key = rest.get(..non_shared)?;
    let value = rest.get(non_shared..non_shared.checked_add(value_len)?)?;
    Some((key, value))
}

/// Walks every entry of `blocks` in key order, calling `visit(key, value)` for each, and checks
/// what [`read_table`] checks: each block's layout, and keys strictly increasing within and
/// across blocks. The error is the first a walk in order meets; entries visited before it
/// are not taken back, so callers keep what they made of them only when it returns `Ok`.
pub(crate) fn walk_blocks<'a>(
    path: &Path,
    blocks: Blocks<'a>,
    mut visit: impl FnMut(&[u8], &'a [u8]),
) -> Result<()> {
    let out_of_order = |key: &[u8]| BundleError::CorruptIndex {
        path: path.to_path_buf(),
        detail: format!("keys out of order at `{}`", String::from_utf8_lossy(key)),
    };
    let mut last: Option<Vec<u8>> = None;
    for block in &blocks.contents {
        let walked = walk_block(path, block, &mut visit)?;
        if let (Some(first), Some(last)) = (&walked.first, &last)
            && first.as_slice() <= last.as_slice()
        {
            return Err(out_of_order(first));
        }
        if let Some(key) = walked.out_of_order {
            return Err(out_of_order(&key));
        }
        if walked.last.is_some() {
            last = walked.last;
        }
    }
    match blocks.stop {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

/// What [`walk_block`] saw of a block's keys.
struct Walked {
    first: Option<Vec<u8>>,
    last: Option<Vec<u8>>,
    /// The first key not after the one before it in the block.
    out_of_order: Option<Vec<u8>>,
}

/// Walks the entries of one data block, calling `visit(key, value)` for each in order; its
/// layout errors, or its first and last keys and the first one out of order.
fn walk_block<'a>(
    path: &Path,
    block: &'a [u8],
    mut visit: impl FnMut(&[u8], &'a [u8]),
) -> Result<Walked> {
    let corrupt = |detail: &str| BundleError::CorruptIndex {
        path: path.to_path_buf(),
        detail: detail.to_string(),
    };
    let data_end = check_restarts(path, block)?;
    let mut rest = &block[..data_end];
    let mut key: Vec<u8> = Vec::new();
    let mut first = None;
    let mut out_of_order = None;
    while !rest.is_empty() {
        let header = (
            get_varint(&mut rest),
            get_varint(&mut rest),
            get_varint(&mut rest),
        );
        let (Some(shared), Some(non_shared), Some(value_len)) = header else {
            return Err(corrupt("bad entry header"));
        };
        let (shared, non_shared, value_len) =
            (shared as usize, non_shared as usize, value_len as usize);
        if shared > key.len() || non_shared > rest.len() || value_len > rest.len() - non_shared {
            return Err(corrupt("entry extends past its block"));
        }
        let delta = &rest[..non_shared];
        // The new key is `key[..shared] + delta`: it sorts after `key` exactly when `delta`
        // sorts after what it replaces.
        let increasing = first.is_none() || delta > &key[shared..];
        key.truncate(shared);
        key.extend_from_slice(delta);
        if first.is_none() {
            first = Some(key.clone());
        } else if !increasing && out_of_order.is_none() {
            out_of_order = Some(key.clone());
        }
        visit(&key, &rest[non_shared..non_shared + value_len]);
        rest = &rest[non_shared + value_len..];
    }
    let last = first.is_some().then_some(key);
    Ok(Walked {
        first,
        last,
        out_of_order,
    })
}

/// Returns the contents of the block at `handle` after checking bounds, type and CRC.
fn read_block<'a>(
    path: &Path,
    bytes: &'a [u8],
    (offset, size): (u64, u64),
    table_end: u64,
) -> Result<&'a [u8]> {
    let end = offset
        .checked_add(size)
        .and_then(|end| end.checked_add(TRAILER_LEN as u64));
    let Some(end) = end.filter(|&end| end <= table_end) else {
        return Err(BundleError::CorruptIndex {
            path: path.to_path_buf(),
            detail: format!("block handle ({offset}, {size}) points outside the file"),
        });
    };
    let (offset, size, end) = (offset as usize, size as usize, end as usize);
    let contents = &bytes[offset..offset + size];
    let trailer = &bytes[offset + size..end];
    let stored = u32::from_le_bytes(
        trailer[1..5]
            .try_into()
            .expect("the trailer is 5 bytes long"),
    );
    let actual = crc::mask(crc::extend(crc::crc32c(contents), &trailer[..1]));
    if stored != actual {
        return Err(BundleError::BlockChecksum {
            path: path.to_path_buf(),
            offset: offset as u64,
        });
    }
    if trailer[0] != 0 {
        return Err(BundleError::CorruptIndex {
            path: path.to_path_buf(),
            detail: format!("compressed block (type {}) is not supported", trailer[0]),
        });
    }
    Ok(contents)
}

/// Checks a block's restart array; the length of its entries.
fn check_restarts(path: &Path, block: &[u8]) -> Result<usize> {
    let corrupt = |detail: &str| BundleError::CorruptIndex {
        path: path.to_path_buf(),
        detail: detail.to_string(),
    };
    if block.len() < 4 {
        return Err(corrupt("block shorter than its restart count"));
    }
    let n_restarts =
        u32::from_le_bytes(block[block.len() - 4..].try_into().expect("4 bytes")) as usize;
    let restarts_len = n_restarts.checked_mul(4).and_then(|len| len.checked_add(4));
    let Some(data_end) = restarts_len.and_then(|len| block.len().checked_sub(len)) else {
        return Err(corrupt("restart array larger than its block"));
    };
    if n_restarts == 0 {
        return Err(corrupt("block without restart points"));
    }
    for idx in 0..n_restarts {
        let at = data_end + 4 * idx;
        let restart = u32::from_le_bytes(block[at..at + 4].try_into().expect("4 bytes")) as usize;
        if restart > data_end || (restart == data_end && data_end != 0) {
            return Err(corrupt("restart point outside the block"));
        }
    }
    Ok(data_end)
}

/// Decodes the entries of one block (the metaindex and index blocks), with
/// [`walk_block`]'s layout checks (their keys' order is not checked).
fn parse_block<'a>(path: &Path, block: &'a [u8]) -> Result<Vec<(Vec<u8>, &'a [u8])>> {
    let mut entries = Vec::new();
    walk_block(path, block, |key, value| {
        entries.push((key.to_vec(), value))
    })?;
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators() {
        assert_eq!(shortest_separator(b"abc", b"abe"), b"abd");
        assert_eq!(shortest_separator(b"k6", b"k7"), b"k6");
        assert_eq!(shortest_separator(b"ab", b"abc"), b"ab");
        assert_eq!(short_successor(b"b"), b"c");
        assert_eq!(short_successor(b"u8"), b"v");
        assert_eq!(short_successor(b"\xff\xffa"), b"\xff\xffb");
    }

    #[test]
    fn empty_table_round_trips() {
        let bytes = TableBuilder::new().finish();
        assert!(read_table(Path::new("t"), &bytes).unwrap().is_empty());
    }

    #[test]
    fn many_entries_round_trip() {
        let mut builder = TableBuilder::new();
        let keys: Vec<Vec<u8>> = (0..5000u32)
            .map(|i| format!("key{i:06}{}", "x".repeat(100)).into_bytes())
            .collect();
        for key in &keys {
            builder.add(key, key);
        }
        let bytes = builder.finish();
        let entries = read_table(Path::new("t"), &bytes).unwrap();
        assert_eq!(entries.len(), keys.len());
        assert!(
            entries
                .iter()
                .zip(&keys)
                .all(|((key, value), want)| key == want && value == want)
        );
    }
}
