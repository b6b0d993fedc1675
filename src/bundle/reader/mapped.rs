//! [`MappedTensor`]: a tensor's bytes as a zero-copy view of its data file's read-only memory
//! map, checksummed when the view is made ([`BundleReader::map`]).

use std::ops::{Deref, Range};
use std::sync::Arc;

use memmap2::Mmap;

use super::super::crc;
use super::super::dtype::DType;
use super::super::error::{BundleError, Result};
use super::files::parallel_crc32c;
use super::{BundleReader, Entry, Values};

/// Mapped tensors at least this large have their pages populated in one `madvise` call (smaller
/// ones are not worth the system call).
#[cfg(target_os = "linux")]
const POPULATE_MIN: usize = 1 << 20;

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
pub(super) enum MappedBytes {
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

impl BundleReader {
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
        let Some(map) = self.shard_map(entry)? else {
            // An object store's data file: the tensor is read (ranged, checked), not mapped.
            let mut bytes = vec![0u8; entry.size as usize];
            self.read_piece_into(entry, &mut bytes)?;
            return Ok(MappedTensor {
                dtype: entry.dtype,
                shape: entry.shape.clone(),
                bytes: MappedBytes::Owned(bytes),
            });
        };
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_of_another_files_map_stays_inside_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("values");
        std::fs::write(&path, [0u8, 1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a read-only map of a file only this test uses.
        let map = Arc::new(unsafe { Mmap::map(&file) }.unwrap());
        let view = MappedTensor::in_map(map.clone(), 1..9, DType::Float, vec![2]).unwrap();
        assert!(view.is_mapped());
        assert_eq!(&view[..], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(MappedTensor::in_map(map.clone(), 2..10, DType::Float, vec![2]).is_none());
        assert!(MappedTensor::in_map(map, 10..12, DType::Float, vec![]).is_none());
    }
}
