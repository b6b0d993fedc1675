//! `BundleReader`: opens a prefix, lists its entries and reads tensors whole or by slice, into
//! the caller's buffer or an owned value, checking CRC32C on every read. It is `Sync`: threads
//! share one reader and read with positional I/O.

use std::collections::BTreeMap;
use std::fs::File;
use std::ops::{Deref, Range};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use memmap2::{Mmap, MmapOptions};
use prost::Message;
use rayon::prelude::*;

use super::crc;
use super::dtype::{DType, is_element_list, num_elements, storable_from_number};
use super::error::{BundleError, Result};
use super::proto::{BundleEntryProto, BundleHeaderProto, slice_from_proto};
use super::slice::{
    ShapeAndSlice, TensorSlice, decode_slice_key, encode_slice_key, for_each_overlap_run,
    overlap_volume,
};
use super::sstable::read_table;
use super::string::{StringError, decode_strings};
use super::variant::decode_variants;
use super::{data_path, index_path};

/// Fixed-width pieces at least this large are read in parallel chunks.
const PARALLEL_READ_MIN: usize = 8 << 20;
/// Mapped tensors at least this large have their pages populated in one `madvise` call (smaller
/// ones are not worth the system call).
#[cfg(target_os = "linux")]
const POPULATE_MIN: usize = 1 << 20;
/// The chunk size of a parallel read.
const PARALLEL_READ_CHUNK: usize = 4 << 20;

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

/// The decoded index of a bundle: header fields and raw entries, each decoded as an `E`
/// ([`read_index_with`]; merge keeps canonical entries encoded).
pub(crate) struct RawIndex<E = BundleEntryProto> {
    pub num_shards: u32,
    /// (key, entry) in key order, header excluded.
    pub entries: Vec<(Vec<u8>, E)>,
}

/// A data file opened on first use: the file and its length, or why it could not be opened.
type Shard = OnceLock<std::result::Result<(File, u64), (std::io::ErrorKind, String)>>;

/// A data file's read-only memory map, created on first use by [`BundleReader::map`].
type ShardMap = OnceLock<std::result::Result<Arc<Mmap>, (std::io::ErrorKind, String)>>;

/// The bytes of a fixed-width tensor from [`BundleReader::map`]: a read-only view into the
/// shared memory map of its data file (no copy), or, for a tensor saved as slices, the
/// assembled bytes. Its CRC32C was checked when it was created. ([`MappedTensor::in_map`]
/// makes one of another file's map, unchecked.) Dereferences to the tensor's
/// little-endian element bytes; `Send + Sync`, and cheap to keep (the map is shared by every
/// tensor of the data file and unmapped when the last view and the reader are gone).
#[derive(Debug)]
pub struct MappedTensor {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<i64>,
    bytes: MappedBytes,
}

#[derive(Debug)]
enum MappedBytes {
    Mapped(Arc<Mmap>, Range<usize>),
    Owned(Vec<u8>),
}

impl MappedTensor {
    /// A view of `range` of the read-only memory map `map` of some other file (the tensors of
    /// a `.safetensors` values file), as `dtype` elements of `shape`: no copy, and nothing
    /// checksummed, as that file has no checksums. `None` when `range` lies outside the map.
    /// The caller checks that the length fits the dtype and shape
    /// ([`crate::exec::HostTensor::from_mapped`] does).
    pub fn in_map(
        map: Arc<Mmap>,
        range: Range<usize>,
        dtype: DType,
        shape: Vec<i64>,
    ) -> Option<MappedTensor> {
        (range.start <= range.end && range.end <= map.len()).then_some(MappedTensor {
            dtype,
            shape,
            bytes: MappedBytes::Mapped(map, range),
        })
    }

    /// Whether the bytes are a view into a memory map (`false` when they were copied: tensors
    /// saved as slices, and empty tensors).
    pub fn is_mapped(&self) -> bool {
        matches!(self.bytes, MappedBytes::Mapped(..))
    }
}

impl Deref for MappedTensor {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.bytes {
            MappedBytes::Mapped(map, range) => &map[range.clone()],
            MappedBytes::Owned(bytes) => bytes,
        }
    }
}

impl AsRef<[u8]> for MappedTensor {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

/// Reads a tensor bundle. Opening parses and validates the whole index; data files are opened
/// (and, for [`BundleReader::map`], memory-mapped) on first use.
pub struct BundleReader {
    prefix: PathBuf,
    index_path: PathBuf,
    num_shards: u32,
    entries: Vec<Entry>,
    slice_entries: BTreeMap<String, Vec<Entry>>,
    shards: Vec<Shard>,
    maps: Vec<ShardMap>,
    /// Data files read under another name than their final one (a commit was interrupted
    /// before its commit point: [`super::journal::read_view`]): (final name, where it is).
    moved: Vec<(PathBuf, PathBuf)>,
}

/// How often [`BundleReader::open`] starts again when a save changes the checkpoint while it
/// opens it.
const OPEN_ATTEMPTS: usize = 8;

/// At most this many data files are opened with the index (so that the reader holds one
/// checkpoint even if a save replaces it afterwards); any further ones are opened on first use.
const EAGER_SHARDS: u32 = 256;

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
        let journal = std::fs::read(super::journal::journal_path(prefix)).ok();
        let index = std::fs::metadata(index_path(prefix))
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
    pub fn open(prefix: impl AsRef<Path>) -> Result<BundleReader> {
        let prefix = prefix.as_ref();
        for _ in 0..OPEN_ATTEMPTS {
            let before = Stamp::take(prefix);
            let view = super::journal::read_view(prefix);
            let opened = BundleReader::open_view(prefix, view.index.as_deref(), view.data);
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

    /// Opens the bundle at `prefix` reading the index at `index` (default `prefix.index`) and
    /// the data files `moved` from their final names.
    fn open_view(
        prefix: &Path,
        index: Option<&Path>,
        moved: Vec<(PathBuf, PathBuf)>,
    ) -> Result<BundleReader> {
        let prefix = prefix.to_path_buf();
        let index_path = index.map_or_else(|| index_path(&prefix), Path::to_path_buf);
        let raw = read_index(&index_path)?;
        let mut entries = Vec::with_capacity(raw.entries.len());
        let mut slice_entries: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
        for (key, proto) in raw.entries {
            let entry = convert_entry(&index_path, key, proto, raw.num_shards)?;
            match entry.slice {
                Some(_) => slice_entries
                    .entry(entry.key.clone())
                    .or_default()
                    .push(entry),
                None => entries.push(entry),
            }
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
        let used = entries
            .iter()
            .chain(slice_entries.values().flatten())
            .map(|entry| entry.shard + 1)
            .max();
        let used = used.unwrap_or(0);
        let shards = (0..used).map(|_| OnceLock::new()).collect();
        let maps = (0..used).map(|_| OnceLock::new()).collect();
        let reader = BundleReader {
            prefix,
            index_path,
            num_shards: raw.num_shards,
            entries,
            slice_entries,
            shards,
            maps,
            moved,
        };
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

    /// The entry of tensor `key`.
    pub fn entry(&self, key: &str) -> Option<&Entry> {
        self.entry_position(key).map(|at| &self.entries[at])
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

    /// Reads tensor `key` whole, assembling it from its slices if it was saved sliced.
    pub fn read(&self, key: &str) -> Result<Tensor> {
        let entry = self.require(key)?;
        self.read_slice(key, &TensorSlice::full(entry.shape.len()))
    }

    /// Reads a whole fixed-width tensor into `out`, which must be exactly its size. An unsliced
    /// tensor is read straight into `out` (no intermediate copy).
    pub fn read_into(&self, key: &str, out: &mut [u8]) -> Result<()> {
        let entry = self.require(key)?;
        self.read_slice_into(key, &TensorSlice::full(entry.shape.len()), out)
    }

    /// The fixed-width tensor `key` without copying it: a view into a read-only memory map of its
    /// data file (one map per data file, created on first use and shared), with its CRC32C
    /// checked over the mapped bytes (in parallel chunks on rayon's pool). On Linux the pages
    /// of a tensor of 1 MiB or more are populated in bulk (`MADV_POPULATE_READ`) before the
    /// check, instead of one page fault at a time.
    ///
    /// A tensor saved as slices is assembled by the copying path ([`BundleReader::read`]) and
    /// returned owned ([`MappedTensor::is_mapped`] is `false`); so is an empty tensor. A
    /// `DT_STRING` tensor is a [`BundleError::WrongDType`]: use [`BundleReader::read_strings`].
    ///
    /// The checksum proves the bytes matched the index when the view was created. The view
    /// reads the file itself, so if another process rewrites the data file in place while the
    /// view lives, later reads through it see the new bytes (unchecked), and truncating the
    /// file makes them fault (`SIGBUS`). Checkpoint files are written once under a temporary
    /// name and renamed, so a file that is replaced (not modified in place) does not affect
    /// an existing map.
    pub fn map(&self, key: &str) -> Result<MappedTensor> {
        self.map_entry(self.require(key)?)
    }

    /// [`BundleReader::map`] of an entry of this reader (from [`BundleReader::entry`] or
    /// [`BundleReader::entries`]), without looking its key up again.
    pub fn map_entry(&self, entry: &Entry) -> Result<MappedTensor> {
        let key = entry.key.as_str();
        if entry.dtype.element_size().is_none() {
            return Err(self.wrong_dtype(key, "a fixed-width dtype", entry.dtype));
        }
        if !entry.slices.is_empty() || entry.size == 0 {
            let Values::Bytes(bytes) = self.read(key)?.values else {
                return Err(self.wrong_dtype(key, "a fixed-width dtype", entry.dtype));
            };
            return Ok(MappedTensor {
                dtype: entry.dtype,
                shape: entry.shape.clone(),
                bytes: MappedBytes::Owned(bytes),
            });
        }
        let (_, len) = self.shard(entry)?;
        self.check_in_file(entry, len)?;
        let end = entry.offset + entry.size;
        let map = self.shard_map(entry)?;
        // `end <= len`, and `len` (the file's length when it was opened) is the map's length,
        // which fits in memory, so these conversions cannot fail.
        let range = entry.offset as usize..end as usize;
        #[cfg(target_os = "linux")]
        if range.len() >= POPULATE_MIN {
            // Only a hint: on kernels without MADV_POPULATE_READ (before 5.14) the CRC below
            // faults the pages in instead.
            let _ = map.advise_range(memmap2::Advice::PopulateRead, range.start, range.len());
        }
        let bytes = &map[range.clone()];
        let actual = crc::mask(parallel_crc32c(bytes));
        if actual != entry.crc32c {
            return Err(BundleError::TensorChecksum {
                path: self.data_file(entry),
                key: entry.key.clone(),
                expected: entry.crc32c,
                actual,
            });
        }
        Ok(MappedTensor {
            dtype: entry.dtype,
            shape: entry.shape.clone(),
            bytes: MappedBytes::Mapped(map, range),
        })
    }

    /// Reads the `DT_STRING` (or `DT_VARIANT`, as opaque bytes) tensor `key` whole.
    pub fn read_strings(&self, key: &str) -> Result<Vec<Vec<u8>>> {
        match self.read(key)?.values {
            Values::Strings(strings) => Ok(strings),
            Values::Bytes(_) => Err(self.wrong_dtype(key, "string", self.require(key)?.dtype)),
        }
    }

    /// Reads what RestoreV2 returns for one `shape_and_slices` element: `""` is the whole
    /// tensor; otherwise the spec's full shape must equal the stored one and its slice is cut out
    /// of (or assembled from) the stored data.
    pub fn read_spec(&self, key: &str, spec: &str) -> Result<Tensor> {
        if spec.is_empty() {
            return self.read(key);
        }
        let entry = self.require(key)?;
        let bad_spec = |detail: String| BundleError::BadSliceSpec {
            path: self.index_path.clone(),
            key: key.to_string(),
            spec: spec.to_string(),
            detail,
        };
        let parsed = ShapeAndSlice::parse(spec).map_err(|err| bad_spec(err.to_string()))?;
        if parsed.full_shape != entry.shape {
            return Err(bad_spec(format!(
                "shape {:?} differs from the stored shape {:?}",
                parsed.full_shape, entry.shape
            )));
        }
        self.read_slice(key, &parsed.slice)
    }

    /// Reads the part `slice` of tensor `key` (relative to its full shape).
    pub fn read_slice(&self, key: &str, slice: &TensorSlice) -> Result<Tensor> {
        let entry = self.require(key)?;
        let region = self.resolve(entry, slice)?;
        let shape: Vec<i64> = region.iter().map(|&(_, length)| length).collect();
        let n_elements = num_elements(&shape).unwrap_or(0);
        self.check_available(entry, &region)?;
        let values = match entry.dtype.element_size() {
            Some(element_size) => {
                let size = self.checked_len(entry, n_elements, element_size)?;
                let mut out = vec![0u8; size];
                self.fill_bytes(entry, &region, &mut out, element_size)?;
                Values::Bytes(out)
            }
            None => Values::Strings(self.fill_strings(entry, &region, n_elements)?),
        };
        Ok(Tensor {
            dtype: entry.dtype,
            shape,
            values,
        })
    }

    /// Reads the part `slice` of fixed-width tensor `key` into `out` (exactly the slice's size).
    pub fn read_slice_into(&self, key: &str, slice: &TensorSlice, out: &mut [u8]) -> Result<()> {
        let entry = self.require(key)?;
        let Some(element_size) = entry.dtype.element_size() else {
            return Err(self.wrong_dtype(key, "a fixed-width dtype", entry.dtype));
        };
        let region = self.resolve(entry, slice)?;
        let n_elements = region
            .iter()
            .fold(1u64, |acc, &(_, length)| acc.saturating_mul(length as u64));
        let size = self.checked_len(entry, n_elements, element_size)?;
        if out.len() != size {
            return Err(BundleError::SizeMismatch {
                path: self.index_path.clone(),
                key: key.to_string(),
                dtype: entry.dtype,
                shape: region.iter().map(|&(_, length)| length).collect(),
                expected: size as u64,
                actual: out.len() as u64,
            });
        }
        self.fill_bytes(entry, &region, out, element_size)
    }

    /// Reads every tensor and every stored slice, checking every checksum; returns the failures
    /// in key order (empty if all is well).
    pub fn verify(&self) -> Vec<BundleError> {
        self.entries
            .iter()
            .filter_map(|entry| self.verify_entry(&entry.key).err())
            .collect()
    }

    /// Reads the stored bytes of tensor `key` (every stored slice of a sliced tensor) and checks
    /// their checksums, without assembling the tensor. Whether a sliced tensor can be read
    /// whole is [`BundleReader::check_coverage`].
    pub fn verify_entry(&self, key: &str) -> Result<()> {
        let entry = self.require(key)?;
        let stored = if entry.slices.is_empty() {
            std::slice::from_ref(entry)
        } else {
            self.slice_entries(key)
        };
        for piece in stored {
            let bytes = self.read_piece(piece)?;
            self.check_piece(piece, &bytes)?;
        }
        Ok(())
    }

    /// Checks that tensor `key` can be read whole: a sliced tensor's stored slices must cover
    /// its full shape ([`BundleError::SlicesDoNotCover`]). The part bundles of a sharded save
    /// (`<prefix>_temp/part-*`) hold slices that do not, legitimately; a checkpoint does not.
    pub fn check_coverage(&self, key: &str) -> Result<()> {
        let entry = self.require(key)?;
        if entry.slices.is_empty() {
            return Ok(());
        }
        let regions = entry
            .slices
            .iter()
            .map(|slice| self.resolve(entry, slice))
            .collect::<Result<Vec<_>>>()?;
        let regions: Vec<&[(i64, i64)]> = regions.iter().map(Vec::as_slice).collect();
        let whole: Vec<(i64, i64)> = entry.shape.iter().map(|&dim| (0, dim)).collect();
        let covered = saveplan_ir::slice::covered_volume(&whole, &regions);
        let n_elements = entry
            .shape
            .iter()
            .map(|&dim| dim.max(0) as u64)
            .product::<u64>();
        if covered != n_elements {
            return Err(BundleError::SlicesDoNotCover {
                path: self.index_path.clone(),
                key: entry.key.clone(),
                covered,
                n_elements,
            });
        }
        Ok(())
    }

    fn require(&self, key: &str) -> Result<&Entry> {
        self.entry(key).ok_or_else(|| BundleError::KeyNotFound {
            path: self.index_path.clone(),
            key: key.to_string(),
        })
    }

    fn wrong_dtype(&self, key: &str, expected: &'static str, actual: DType) -> BundleError {
        BundleError::WrongDType {
            path: self.index_path.clone(),
            key: key.to_string(),
            expected,
            actual,
        }
    }

    fn resolve(&self, entry: &Entry, slice: &TensorSlice) -> Result<Vec<(i64, i64)>> {
        slice
            .resolve(&entry.shape)
            .map_err(|err| BundleError::BadSliceSpec {
                path: self.index_path.clone(),
                key: entry.key.clone(),
                spec: slice.to_string(),
                detail: err.to_string(),
            })
    }

    fn checked_len(&self, entry: &Entry, n_elements: u64, element_size: usize) -> Result<usize> {
        n_elements
            .checked_mul(element_size as u64)
            .and_then(|size| usize::try_from(size).ok())
            .ok_or_else(|| {
                bad_entry(
                    &self.index_path,
                    &entry.key,
                    "tensor too large for this machine",
                )
            })
    }

    /// Fills `out` (the region `region` of fixed-width tensor `entry`) from the stored data.
    fn fill_bytes(
        &self,
        entry: &Entry,
        region: &[(i64, i64)],
        out: &mut [u8],
        element_size: usize,
    ) -> Result<()> {
        let full: Vec<(i64, i64)> = entry.shape.iter().map(|&dim| (0, dim)).collect();
        if entry.slices.is_empty() && region == full.as_slice() {
            return self.read_piece_into(entry, out);
        }
        let size = element_size as u64;
        self.for_each_piece(entry, region, |piece, piece_region| {
            let bytes = self.read_piece(piece)?;
            self.check_piece(piece, &bytes)?;
            for_each_overlap_run(piece_region, region, |src, dst, run| {
                let (src, dst, len) = (
                    (src * size) as usize,
                    (dst * size) as usize,
                    (run * size) as usize,
                );
                out[dst..dst + len].copy_from_slice(&bytes[src..src + len]);
            });
            Ok(())
        })
    }

    fn fill_strings(
        &self,
        entry: &Entry,
        region: &[(i64, i64)],
        n_elements: u64,
    ) -> Result<Vec<Vec<u8>>> {
        let whole = region
            .iter()
            .zip(&entry.shape)
            .all(|(&(start, length), &dim)| start == 0 && length == dim);
        if entry.slices.is_empty() && whole {
            let bytes = self.read_piece(entry)?;
            return self.decode_piece_strings(entry, &bytes);
        }
        let mut out = vec![Vec::new(); usize::try_from(n_elements).unwrap_or(0)];
        self.for_each_piece(entry, region, |piece, piece_region| {
            let bytes = self.read_piece(piece)?;
            let strings = self.decode_piece_strings(piece, &bytes)?;
            for_each_overlap_run(piece_region, region, |src, dst, run| {
                for offset in 0..run as usize {
                    out[dst as usize + offset] = strings[src as usize + offset].clone();
                }
            });
            Ok(())
        })?;
        Ok(out)
    }

    /// Calls `visit(piece, piece_region)` for every stored piece overlapping `region` and checks
    /// that together they cover it.
    fn for_each_piece(
        &self,
        entry: &Entry,
        region: &[(i64, i64)],
        mut visit: impl FnMut(&Entry, &[(i64, i64)]) -> Result<()>,
    ) -> Result<()> {
        if entry.slices.is_empty() {
            let full: Vec<(i64, i64)> = entry.shape.iter().map(|&dim| (0, dim)).collect();
            return visit(entry, &full);
        }
        let mut pieces = Vec::with_capacity(entry.slices.len());
        for slice in &entry.slices {
            let piece_region = self.resolve(entry, slice)?;
            let key = encode_slice_key(&entry.key, slice);
            let stored = self.slice_entries(&entry.key).iter().find(|stored| {
                stored
                    .slice
                    .as_ref()
                    .is_some_and(|stored_slice| encode_slice_key(&entry.key, stored_slice) == key)
            });
            let Some(stored) = stored else {
                return Err(bad_entry(
                    &self.index_path,
                    &entry.key,
                    &format!("stored slice {slice} has no entry"),
                ));
            };
            pieces.push((stored, piece_region));
        }
        for (idx, (_, a)) in pieces.iter().enumerate() {
            if pieces[..idx].iter().any(|(_, b)| overlap_volume(a, b) > 0) {
                return Err(bad_entry(
                    &self.index_path,
                    &entry.key,
                    "stored slices overlap",
                ));
            }
        }
        let wanted = region
            .iter()
            .fold(1u64, |acc, &(_, length)| acc.saturating_mul(length as u64));
        let covered: u64 = pieces
            .iter()
            .map(|(_, piece_region)| overlap_volume(piece_region, region))
            .sum();
        if covered != wanted {
            return Err(BundleError::SliceNotCovered {
                path: self.index_path.clone(),
                key: entry.key.clone(),
                slice: TensorSlice::new(
                    region
                        .iter()
                        .map(|&(start, length)| super::slice::Extent::new(start, length))
                        .collect(),
                )
                .to_string(),
            });
        }
        for (stored, piece_region) in pieces {
            if wanted == 0 || overlap_volume(&piece_region, region) > 0 {
                visit(stored, &piece_region)?;
            }
        }
        Ok(())
    }

    /// Checks, before anything is allocated, that the stored pieces needed for `region` lie
    /// inside their data files, so a damaged index cannot make a read allocate more memory than
    /// the files hold.
    fn check_available(&self, entry: &Entry, region: &[(i64, i64)]) -> Result<()> {
        self.for_each_piece(entry, region, |piece, _| {
            let (_, len) = self.shard(piece)?;
            self.check_in_file(piece, len)?;
            if is_element_list(piece.dtype)
                && num_elements(&piece.shape).is_none_or(|n| n > piece.size)
            {
                let detail = "fewer bytes than elements".to_string();
                return Err(BundleError::BadStrings {
                    path: self.data_file(piece),
                    key: piece.key.clone(),
                    detail,
                });
            }
            Ok(())
        })
    }

    /// The data file of `entry`, opened on first use, with its length.
    fn shard(&self, entry: &Entry) -> Result<(&File, u64)> {
        match self.open_shard(entry.shard) {
            Ok((file, len)) => Ok((file, *len)),
            Err((kind, message)) => Err(BundleError::MissingShard {
                path: self.data_file(entry),
                key: entry.key.clone(),
                source: std::io::Error::new(*kind, message.clone()),
            }),
        }
    }

    /// Data file `shard`, opened on first use, with its length, or why it cannot be opened.
    fn open_shard(
        &self,
        shard: u32,
    ) -> &std::result::Result<(File, u64), (std::io::ErrorKind, String)> {
        self.shards[shard as usize].get_or_init(|| {
            let file =
                File::open(self.shard_path(shard)).map_err(|err| (err.kind(), err.to_string()))?;
            let len = file
                .metadata()
                .map_err(|err| (err.kind(), err.to_string()))?
                .len();
            Ok((file, len))
        })
    }

    /// The read-only memory map of the data file of `entry` (the whole file, as long as it was
    /// when first opened), created on first use.
    fn shard_map(&self, entry: &Entry) -> Result<Arc<Mmap>> {
        let (file, len) = self.shard(entry)?;
        let slot = &self.maps[entry.shard as usize];
        let mapped = slot.get_or_init(|| {
            let len = usize::try_from(len).map_err(|_| {
                (
                    std::io::ErrorKind::OutOfMemory,
                    "data file larger than the address space".to_string(),
                )
            })?;
            // SAFETY: mapping a file is sound only while nobody modifies or truncates it. We
            // cannot prevent that (checkpoint files are shared, not locked); what we do is hand
            // out only `&[u8]` views (no writes through the map) and check every view's CRC32C
            // when it is created, so a view starts out equal to what the index recorded. A
            // later in-place change shows through the view and a truncation makes reads fault:
            // see `BundleReader::map`.
            let map = unsafe { MmapOptions::new().len(len).map(file) };
            map.map(Arc::new)
                .map_err(|err| (err.kind(), err.to_string()))
        });
        match mapped {
            Ok(map) => Ok(Arc::clone(map)),
            Err((kind, message)) => Err(BundleError::io(
                self.data_file(entry),
                "mmap",
                std::io::Error::new(*kind, message.clone()),
            )),
        }
    }

    /// Checks that `piece`'s stored bytes lie inside its data file of `len` bytes.
    fn check_in_file(&self, piece: &Entry, len: u64) -> Result<()> {
        let end = piece.offset + piece.size;
        if end > len {
            return Err(BundleError::DataTruncated {
                path: self.data_file(piece),
                key: piece.key.clone(),
                offset: piece.offset,
                end,
                len,
            });
        }
        Ok(())
    }

    /// The path of the data file holding `entry` (built only when needed: reads of small
    /// tensors should not format a path each).
    fn data_file(&self, entry: &Entry) -> PathBuf {
        self.shard_path(entry.shard)
    }

    /// Where data file `shard` is read from: its final name, or where an unfinished commit
    /// moved it.
    fn shard_path(&self, shard: u32) -> PathBuf {
        let path = data_path(&self.prefix, shard, self.num_shards);
        match self.moved.iter().find(|(name, _)| *name == path) {
            Some((_, moved)) => moved.clone(),
            None => path,
        }
    }

    /// Reads the stored bytes of `piece` into `out` (exactly its size) and checks its CRC.
    fn read_piece_into(&self, piece: &Entry, out: &mut [u8]) -> Result<()> {
        let (file, len) = self.shard(piece)?;
        self.check_in_file(piece, len)?;
        debug_assert_eq!(out.len() as u64, piece.size);
        if is_element_list(piece.dtype) || out.len() < PARALLEL_READ_MIN {
            read_exact_at(file, out, piece.offset)
                .map_err(|err| BundleError::io(self.data_file(piece), "read", err))?;
            return self.check_piece(piece, out);
        }
        prefault(out);
        // Large tensors: chunks are read and checksummed on rayon's pool (page faults in
        // `out`, the copy and the CRC all split over the cores), then the CRCs are combined.
        let crcs = out
            .par_chunks_mut(PARALLEL_READ_CHUNK)
            .enumerate()
            .map(|(index, chunk)| {
                let offset = piece.offset + (index * PARALLEL_READ_CHUNK) as u64;
                read_exact_at(file, chunk, offset).map(|()| (crc::crc32c(chunk), chunk.len()))
            })
            .collect::<std::io::Result<Vec<(u32, usize)>>>()
            .map_err(|err| BundleError::io(self.data_file(piece), "read", err))?;
        let crc = crcs
            .into_iter()
            .reduce(|(crc_a, len_a), (crc_b, len_b)| {
                (crc::combine(crc_a, crc_b, len_b), len_a + len_b)
            })
            .map_or(0, |(crc, _)| crc);
        let actual = crc::mask(crc);
        if actual != piece.crc32c {
            return Err(BundleError::TensorChecksum {
                path: self.data_file(piece),
                key: piece.key.clone(),
                expected: piece.crc32c,
                actual,
            });
        }
        Ok(())
    }

    fn read_piece(&self, piece: &Entry) -> Result<Vec<u8>> {
        let size = usize::try_from(piece.size)
            .map_err(|_| bad_entry(&self.index_path, &piece.key, "tensor too large"))?;
        let (file, len) = self.shard(piece)?;
        self.check_in_file(piece, len)?;
        let mut bytes = vec![0u8; size];
        read_exact_at(file, &mut bytes, piece.offset)
            .map_err(|err| BundleError::io(self.data_file(piece), "read", err))?;
        Ok(bytes)
    }

    /// Checks the CRC of a piece's bytes (string pieces: layout and CRC).
    fn check_piece(&self, piece: &Entry, bytes: &[u8]) -> Result<()> {
        if is_element_list(piece.dtype) {
            return self.decode_piece_strings(piece, bytes).map(drop);
        }
        let actual = crc::mask(crc::crc32c(bytes));
        if actual != piece.crc32c {
            return Err(BundleError::TensorChecksum {
                path: self.shard_path(piece.shard),
                key: piece.key.clone(),
                expected: piece.crc32c,
                actual,
            });
        }
        Ok(())
    }

    fn decode_piece_strings(&self, piece: &Entry, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
        let path = self.shard_path(piece.shard);
        let n_elements = num_elements(&piece.shape).unwrap_or(0);
        let decoded = if piece.dtype == DType::Variant {
            decode_variants(bytes, n_elements, piece.crc32c)
        } else {
            decode_strings(bytes, n_elements, piece.crc32c)
        };
        decoded.map_err(|err| match err {
            StringError::Layout(detail) => BundleError::BadStrings {
                path,
                key: piece.key.clone(),
                detail: detail.to_string(),
            },
            StringError::Checksum(actual) => BundleError::TensorChecksum {
                path,
                key: piece.key.clone(),
                expected: piece.crc32c,
                actual,
            },
        })
    }
}

/// Asks the kernel to back the pages of `out` now, in one call, with transparent huge pages
/// where it can, instead of one 4 KiB page fault at a time as the read first touches them (a
/// fresh 64 MiB buffer is 16384 faults otherwise). On `big` this took the copying read from
/// ≈1.0 s to ≈0.3–0.5 s. Only hints: errors (e.g. kernels before 5.14 without
/// `MADV_POPULATE_WRITE`) are ignored.
#[cfg(target_os = "linux")]
fn prefault(out: &mut [u8]) {
    let page = 4096;
    let start = (out.as_mut_ptr() as usize).next_multiple_of(page);
    let end = (out.as_mut_ptr() as usize + out.len()) / page * page;
    if end > start {
        // SAFETY: `[start, end)` lies inside `out`, which we borrow mutably, so no one else
        // uses it; MADV_HUGEPAGE and MADV_POPULATE_WRITE change how the pages are backed,
        // never their contents.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            libc::madvise(
                start as *mut libc::c_void,
                end - start,
                libc::MADV_POPULATE_WRITE,
            );
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn prefault(_out: &mut [u8]) {}

/// CRC32C of `bytes`, computed in parallel chunks on rayon's pool when they are large and
/// combined.
fn parallel_crc32c(bytes: &[u8]) -> u32 {
    if bytes.len() < PARALLEL_READ_MIN {
        return crc::crc32c(bytes);
    }
    bytes
        .par_chunks(PARALLEL_READ_CHUNK)
        .map(|chunk| (crc::crc32c(chunk), chunk.len()))
        .reduce_with(|(crc_a, len_a), (crc_b, len_b)| {
            (crc::combine(crc_a, crc_b, len_b), len_a + len_b)
        })
        .map_or(0, |(crc, _)| crc)
}

#[cfg(unix)]
fn read_exact_at(file: &File, out: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, out, offset)
}

#[cfg(windows)]
fn read_exact_at(file: &File, mut out: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    while !out.is_empty() {
        match std::os::windows::fs::FileExt::seek_read(file, out, offset)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => {
                out = &mut out[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

fn bad_entry(path: &Path, key: &str, detail: &str) -> BundleError {
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
    let bytes = match std::fs::read(path) {
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
    let entries = table
        .into_iter()
        .skip(1)
        .map(|(key, value)| match decode(value) {
            Ok(entry) => Ok((key, entry)),
            Err(detail) => Err(bad_entry(path, &String::from_utf8_lossy(&key), &detail)),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RawIndex {
        num_shards: header.num_shards as u32,
        entries,
    })
}

/// Validates one raw entry and converts it to an [`Entry`].
/// Takes the key's buffer: the name of an unsliced tensor is not copied.
fn convert_entry(
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
    use super::*;

    #[test]
    fn a_view_of_another_files_map_stays_inside_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("values");
        std::fs::write(&path, [0u8, 1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        let file = File::open(&path).unwrap();
        // SAFETY: a read-only map of a file only this test uses.
        let map = Arc::new(unsafe { Mmap::map(&file) }.unwrap());
        let view = MappedTensor::in_map(map.clone(), 1..9, DType::Float, vec![2]).unwrap();
        assert!(view.is_mapped());
        assert_eq!(&view[..], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(MappedTensor::in_map(map.clone(), 2..10, DType::Float, vec![2]).is_none());
        assert!(MappedTensor::in_map(map, 10..12, DType::Float, vec![]).is_none());
    }
}
