//! `BundleReader`: opens a prefix, lists its entries and reads tensors whole or by slice, into
//! the caller's buffer or an owned value, checking CRC32C on every read. It is `Sync`: threads
//! share one reader and read with positional I/O.
//!
//! This file opens a checkpoint (the index, the data files, what a journal implies) and looks
//! entries up; `reader/index.rs` decodes the index, `reader/read.rs` reads and checks tensors
//! (whole, by slice, strings, coverage), `reader/mapped.rs` hands out zero-copy views of the
//! data files' memory maps, `reader/files.rs` opens, maps and reads the data files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::storage::Blob;

use super::dtype::DType;
use super::error::{BundleError, Result};
use super::index_path;
use super::slice::TensorSlice;

mod files;
mod index;
mod mapped;
mod read;

use files::{Shard, ShardMap, Window, shard_path};
pub(crate) use index::{RawIndex, read_index, read_index_with};
use index::{bad_entry, open_index};
pub use mapped::MappedTensor;

/// One tensor (or, in [`BundleReader::slice_entries`], one stored slice) listed in the index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The tensor name.
    pub key: String,
    /// Element type.
    pub dtype: DType,
    /// Shape: the full shape for a tensor, the slice's shape for a stored slice.
    pub shape: Vec<i64>,
    /// Data file index (`prefix.data-<shard>-of-N`); 0 for the full entry of a sliced tensor.
    pub shard: u32,
    /// Byte offset of the bytes in the data file.
    pub offset: u64,
    /// Number of bytes.
    pub size: u64,
    /// Masked CRC32C of the bytes, as stored in the index.
    pub crc32c: u32,
    /// For a sliced tensor's full entry: the stored slices, in index order. Empty otherwise.
    pub slices: Vec<TensorSlice>,
    /// For a stored slice: which slice of the tensor it is. `None` for tensor entries.
    pub slice: Option<TensorSlice>,
}

/// A tensor read from a bundle.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<i64>,
    /// Row-major values.
    pub values: Values,
}

/// The values of a [`Tensor`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Values {
    /// Little-endian element bytes of a fixed-width dtype.
    Bytes(Vec<u8>),
    /// The elements of a `DT_STRING` tensor, or of a `DT_VARIANT` tensor as opaque bytes
    /// (each a serialized `VariantTensorDataProto`).
    Strings(Vec<Vec<u8>>),
}

/// Reads a tensor bundle. Opening parses and validates the whole index and opens the data
/// files (the first eight while the index decodes: an object's bytes start coming then); a data
/// file is memory-mapped on first use of [`BundleReader::map`].
pub struct BundleReader {
    prefix: PathBuf,
    index_path: PathBuf,
    num_shards: u32,
    entries: Vec<Entry>,
    slice_entries: BTreeMap<String, Vec<Entry>>,
    shards: Vec<Shard>,
    maps: Vec<ShardMap>,
    /// Per local data file, the bytes read last for small reads.
    windows: Vec<Window>,
    /// Data files read under another name than their final one (a commit was interrupted
    /// before its commit point: [`super::journal::read_view`]): (final name, where it is).
    moved: Vec<(PathBuf, PathBuf)>,
    /// The position after the last entry [`BundleReader::entry`] found: where the next lookup
    /// starts, so that lookups in index order (a whole restore) cost one comparison each.
    next_lookup: AtomicUsize,
}

/// How often [`BundleReader::open`] starts again when a save changes the checkpoint while it
/// opens it.
const OPEN_ATTEMPTS: usize = 8;

/// At most this many data files are opened with the index (so that the reader holds one
/// checkpoint even if a save replaces it afterwards); any further ones are opened on first use.
const EAGER_SHARDS: u32 = 256;

/// The first this many data files are opened while the index is decoded, their objects'
/// bytes fetched meanwhile ([`crate::storage::Blob::open_ahead`]).
const AHEAD_SHARDS: u32 = 8;

/// How many bytes of the data files opened with the index are fetched ahead of the reads, at
/// most, shared between them.
const READ_AHEAD: usize = 16 << 20;

/// What identifies the state of a prefix: its journal's bytes and its index file's identity.
#[derive(PartialEq, Eq)]
struct Stamp {
    journal: Option<Vec<u8>>,
    index: Option<FileId>,
}

/// A file's identity and last change, as far as the platform tells.
#[derive(PartialEq, Eq)]
struct FileId {
    #[cfg(unix)]
    dev_ino: (u64, u64),
    len: u64,
    modified: Option<std::time::SystemTime>,
}

impl Stamp {
    fn take(prefix: &Path) -> Stamp {
        let journal = crate::storage::local::read(&super::journal::journal_path(prefix)).ok();
        let index = crate::storage::local::metadata(&index_path(prefix))
            .ok()
            .map(|meta| FileId {
                #[cfg(unix)]
                dev_ino: {
                    use std::os::unix::fs::MetadataExt;
                    (meta.dev(), meta.ino())
                },
                len: meta.len(),
                modified: meta.modified().ok(),
            });
        Stamp { journal, index }
    }
}

impl BundleReader {
    /// Opens the bundle at `prefix`: reads and checks `prefix.index` and opens its data files.
    /// It never changes anything on disk. Where a save's commit was interrupted (or is under
    /// way) before its commit point, it reads the previous checkpoint, part of which is then
    /// under backup names ([`super::journal::read_view`]; `saveplan recover` or the next save
    /// cleans up). A save replacing the checkpoint while it is opened makes it start again, so
    /// the reader holds one whole checkpoint, the old or the new one.
    ///
    /// On an object store, the first data objects' bytes are fetched ahead of the reads, in
    /// order, while the index decodes (at most 16 MiB held): the reads of a restore, which
    /// go through the bundle in order, then wait for nothing. A tool that reads only the index
    /// or a few tensors opens it with [`BundleReader::open_for_lookups`] instead.
    pub fn open(prefix: impl AsRef<Path>) -> Result<BundleReader> {
        BundleReader::open_reading(prefix.as_ref(), true)
    }

    /// [`BundleReader::open`] for a reader of the index and of a few tensors (`inspect`,
    /// `spec`): on an object store, nothing is fetched ahead; each tensor read is a ranged
    /// GET of its own bytes alone.
    pub fn open_for_lookups(prefix: impl AsRef<Path>) -> Result<BundleReader> {
        BundleReader::open_reading(prefix.as_ref(), false)
    }

    /// [`BundleReader::open`], fetching the data objects ahead when `ahead`.
    fn open_reading(prefix: &Path, ahead: bool) -> Result<BundleReader> {
        if crate::storage::is_url(prefix) {
            // An object store: the journal and the index fetched together (two GETs at once;
            // with no journal, the index fetched is the one to read), then the data objects'
            // GETs while the index decodes, read in order.
            let journal = super::remote_view::journal_path(prefix);
            let (journal, index) = crate::storage::read_pair(&journal, &index_path(prefix));
            // Both failing (bad credentials, no bucket), the index's error is the one said:
            // the checkpoint the caller named, not its journal.
            if journal.is_err() && index.is_err() {
                return BundleReader::open_view(prefix, None, Vec::new(), Some(index), ahead);
            }
            return match super::remote_view::view_of(prefix, journal)? {
                Some((index, moved)) => {
                    BundleReader::open_view(prefix, Some(&index), moved, None, ahead)
                }
                None => BundleReader::open_view(prefix, None, Vec::new(), Some(index), ahead),
            };
        }
        for _ in 0..OPEN_ATTEMPTS {
            let before = Stamp::take(prefix);
            let view = super::journal::read_view(prefix);
            let opened =
                BundleReader::open_view(prefix, view.index.as_deref(), view.data, None, ahead);
            let unchanged = Stamp::take(prefix) == before
                && view.absent_backups.iter().all(|backup| !backup.exists());
            if unchanged {
                return opened;
            }
        }
        Err(BundleError::KeptChanging {
            path: prefix.to_path_buf(),
            attempts: OPEN_ATTEMPTS,
        })
    }

    /// Opens the bundle at `prefix` reading the index at `index` (default `prefix.index`;
    /// `fetched` when its bytes were read already) and the data files `moved` from their final
    /// names; with `read_ahead`, the first data objects are fetched while the index decodes.
    fn open_view(
        prefix: &Path,
        index: Option<&Path>,
        moved: Vec<(PathBuf, PathBuf)>,
        fetched: Option<std::io::Result<Vec<u8>>>,
        read_ahead: bool,
    ) -> Result<BundleReader> {
        let prefix = prefix.to_path_buf();
        let index_path = index.map_or_else(|| index_path(&prefix), Path::to_path_buf);
        // The data files are opened (an object's bytes start coming) while the entries are
        // decoded.
        let mut ahead = Vec::new();
        let index = open_index(&index_path, fetched, |num_shards| {
            if !read_ahead {
                return;
            }
            let count = num_shards.min(AHEAD_SHARDS);
            ahead = (0..count)
                .map(|shard| {
                    let path = shard_path(&prefix, num_shards, &moved, shard);
                    Blob::open_ahead(&path, READ_AHEAD / count as usize)
                })
                .collect();
        })?;
        let entries = index.tensors;
        let mut slice_entries: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
        for entry in index.slices {
            slice_entries
                .entry(entry.key.clone())
                .or_default()
                .push(entry);
        }
        for (name, slices) in &slice_entries {
            let full = entries
                .binary_search_by(|entry| entry.key.as_str().cmp(name))
                .ok()
                .map(|at| &entries[at]);
            let Some(full) = full else {
                return Err(bad_entry(
                    &index_path,
                    name,
                    "stored slice without a full-tensor entry",
                ));
            };
            for stored in slices {
                let slice = stored
                    .slice
                    .as_ref()
                    .expect("slice entries carry their slice");
                let shape = slice
                    .slice_shape(&full.shape)
                    .map_err(|err| bad_entry(&index_path, name, &err.to_string()))?;
                if shape != stored.shape || stored.dtype != full.dtype {
                    return Err(bad_entry(
                        &index_path,
                        name,
                        "stored slice disagrees with its tensor's shape or dtype",
                    ));
                }
            }
        }
        // One slot per data file that an entry uses: a damaged header's huge `num_shards` must
        // not turn into a huge allocation.
        let used = index.shards_used;
        let shards = (0..used).map(|_| OnceLock::new()).collect();
        let maps = (0..used).map(|_| OnceLock::new()).collect();
        let windows = (0..used).map(|_| Window::default()).collect();
        let reader = BundleReader {
            prefix,
            index_path,
            num_shards: index.num_shards,
            entries,
            slice_entries,
            shards,
            maps,
            windows,
            moved,
            next_lookup: AtomicUsize::new(0),
        };
        for (shard, pending) in (0..used).zip(ahead) {
            let opened = pending.wait().and_then(|blob| Ok((blob.len()?, blob)));
            let opened = opened
                .map(|(len, blob)| (blob, len))
                .map_err(|err| (err.kind(), err.to_string()));
            let _ = reader.shards[shard as usize].set(opened);
        }
        for shard in 0..used.min(EAGER_SHARDS) {
            reader.open_shard(shard);
        }
        Ok(reader)
    }

    /// The prefix this reader was opened with.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// Number of data files.
    pub fn num_shards(&self) -> u32 {
        self.num_shards
    }

    /// Every tensor entry (stored slices excluded), sorted by key.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entry of tensor `key`. The search starts at the entry found last, then after it
    /// ([`BundleReader::entry_position_from`]): a lookup of the same key or of the next one in
    /// index order costs one or two comparisons, any other about two searches of the index at
    /// most.
    pub fn entry(&self, key: &str) -> Option<&Entry> {
        let next = self.next_lookup.load(Ordering::Relaxed);
        if let Some(last) = next.checked_sub(1).and_then(|at| self.entries.get(at))
            && last.key == key
        {
            return Some(last);
        }
        let at = self.entry_position_from(next, key)?;
        self.next_lookup.store(at + 1, Ordering::Relaxed);
        Some(&self.entries[at])
    }

    /// Where tensor `key`'s entry is in [`BundleReader::entries`].
    pub fn entry_position(&self, key: &str) -> Option<usize> {
        self.entries
            .binary_search_by(|entry| entry.key.as_str().cmp(key))
            .ok()
    }

    /// [`BundleReader::entry_position`] of `key`, searching forward from position `hint` first:
    /// callers that look keys up in index order (as `RestoreV2`'s sorted names are) pass the
    /// position after the last one found. The search gallops (`hint`, then 1, 2, 4, … entries
    /// on) and then bisects, so a key `d` entries on costs about `2 log2 d` comparisons: one
    /// for the next key, a few for every eighth (one task's share of eight), never more than a
    /// search of the whole index. A key before `hint` is searched for in the whole index.
    pub fn entry_position_from(&self, hint: usize, key: &str) -> Option<usize> {
        use std::cmp::Ordering;
        let entries = &self.entries;
        let compare = |at: usize| entries[at].key.as_str().cmp(key);
        match entries.get(hint).map(|_| compare(hint)) {
            Some(Ordering::Equal) => return Some(hint),
            Some(Ordering::Less) => {}
            // Before `hint`, or past the end: the whole index.
            _ => return self.entry_position(key),
        }
        // Invariant: the key sorts after entries[low - 1] and before entries[high].
        let (mut low, mut step) = (hint + 1, 1);
        let high = loop {
            let probe = hint + step;
            if probe >= entries.len() {
                break entries.len();
            }
            match compare(probe) {
                Ordering::Less => {
                    low = probe + 1;
                    step *= 2;
                }
                Ordering::Equal => return Some(probe),
                Ordering::Greater => break probe,
            }
        };
        entries[low..high]
            .binary_search_by(|entry| entry.key.as_str().cmp(key))
            .ok()
            .map(|at| low + at)
    }

    /// The stored slices of tensor `key`, in index (slice-key) order; empty for unsliced tensors.
    pub fn slice_entries(&self, key: &str) -> &[Entry] {
        self.slice_entries.get(key).map_or(&[], Vec::as_slice)
    }
}
