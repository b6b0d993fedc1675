//! The data files of a reader: opened (and memory-mapped) on first use or with the index,
//! where an unfinished commit moved them, and read piece by piece with their CRC32C checked
//! (large pieces in parallel chunks).

use crate::storage::Blob;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use memmap2::{Mmap, MmapOptions};
use rayon::prelude::*;

use super::super::crc;
use super::super::data_path;
use super::super::dtype::{DType, is_element_list, num_elements};
use super::super::error::{BundleError, Result};
use super::super::string::{StringError, decode_strings};
use super::super::variant::decode_variants;
use super::index::bad_entry;
use super::{BundleReader, Entry};

/// Fixed-width pieces at least this large are read in parallel chunks.
pub(super) const PARALLEL_READ_MIN: usize = 8 << 20;
/// The chunk size of a parallel read.
pub(super) const PARALLEL_READ_CHUNK: usize = 4 << 20;

/// A data file opened on first use: the file and its length, or why it could not be opened.
pub(super) type Shard = OnceLock<std::result::Result<(Blob, u64), (std::io::ErrorKind, String)>>;

/// A data file's read-only memory map, created on first use by [`BundleReader::map`].
pub(super) type ShardMap = OnceLock<std::result::Result<Arc<Mmap>, (std::io::ErrorKind, String)>>;

/// Reads of a local data file at most this large are served from its [`Window`].
const WINDOW_READ_MAX: usize = 64 << 10;
/// How many bytes a [`Window`] reads at once.
const WINDOW: u64 = 256 << 10;

/// The bytes of a local data file read last for small reads: the offset of the first, and
/// the bytes. A restore of many small tensors reads them in file order: one `pread` of
/// `WINDOW` bytes serves the next hundreds instead of one system call each.
pub(super) type Window = Mutex<(u64, Vec<u8>)>;

impl BundleReader {
    /// The data file of `entry`, opened on first use, with its length.
    pub(super) fn shard(&self, entry: &Entry) -> Result<(&Blob, u64)> {
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
    pub(super) fn open_shard(
        &self,
        shard: u32,
    ) -> &std::result::Result<(Blob, u64), (std::io::ErrorKind, String)> {
        self.shards[shard as usize].get_or_init(|| {
            let blob =
                Blob::open(&self.shard_path(shard)).map_err(|err| (err.kind(), err.to_string()))?;
            let len = blob.len().map_err(|err| (err.kind(), err.to_string()))?;
            Ok((blob, len))
        })
    }

    /// The read-only memory map of the data file of `entry` (the whole file, as long as it was
    /// when first opened), created on first use.
    /// `None` for a data file in an object store (its tensors are read, not mapped).
    pub(super) fn shard_map(&self, entry: &Entry) -> Result<Option<Arc<Mmap>>> {
        let (blob, len) = self.shard(entry)?;
        let Some(file) = blob.file() else {
            return Ok(None);
        };
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
            Ok(map) => Ok(Some(Arc::clone(map))),
            Err((kind, message)) => Err(BundleError::io(
                self.data_file(entry),
                "mmap",
                std::io::Error::new(*kind, message.clone()),
            )),
        }
    }

    /// Checks that `piece`'s stored bytes lie inside its data file of `len` bytes.
    pub(super) fn check_in_file(&self, piece: &Entry, len: u64) -> Result<()> {
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
    pub(super) fn data_file(&self, entry: &Entry) -> PathBuf {
        self.shard_path(entry.shard)
    }

    /// Where data file `shard` is read from: its final name, or where an unfinished commit
    /// moved it.
    pub(super) fn shard_path(&self, shard: u32) -> PathBuf {
        shard_path(&self.prefix, self.num_shards, &self.moved, shard)
    }

    /// Reads the stored bytes of `piece` into `out` (exactly its size) and checks its CRC.
    pub(super) fn read_piece_into(&self, piece: &Entry, out: &mut [u8]) -> Result<()> {
        let (file, len) = self.shard(piece)?;
        self.check_in_file(piece, len)?;
        debug_assert_eq!(out.len() as u64, piece.size);
        if is_element_list(piece.dtype) || out.len() < PARALLEL_READ_MIN {
            if !self.read_from_window(file, len, piece, out) {
                file.read_exact_at(out, piece.offset)
                    .map_err(|err| BundleError::io(self.data_file(piece), "read", err))?;
            }
            return self.check_piece(piece, out);
        }
        if file.file().is_none() {
            // An object: fetched in concurrent ranges into `out`, then checksummed in parallel.
            file.read_exact_at(out, piece.offset)
                .map_err(|err| BundleError::io(self.data_file(piece), "read", err))?;
            return self.expect_crc(piece, parallel_crc32c(out));
        }
        prefault(out);
        // Large tensors: chunks are read and checksummed on rayon's pool (page faults in
        // `out`, the copy and the CRC all split over the cores), then the CRCs are combined.
        let crcs = out
            .par_chunks_mut(PARALLEL_READ_CHUNK)
            .enumerate()
            .map(|(index, chunk)| {
                let offset = piece.offset + (index * PARALLEL_READ_CHUNK) as u64;
                file.read_exact_at(chunk, offset)
                    .map(|()| (crc::crc32c(chunk), chunk.len()))
            })
            .collect::<std::io::Result<Vec<(u32, usize)>>>()
            .map_err(|err| BundleError::io(self.data_file(piece), "read", err))?;
        self.expect_crc(piece, combine_crcs(crcs.into_iter()))
    }

    /// Fills `out` with the stored bytes of `piece` (which lie inside the data file of `len`
    /// bytes) from its data file's window, reading the window there first when it does not
    /// hold them; `false` when it cannot: an object (read from its open GET), a large piece,
    /// the window in use by another thread, or the window's read failing (the piece is then
    /// read alone, as if there were no window, and fails or not on its own).
    fn read_from_window(&self, file: &Blob, len: u64, piece: &Entry, out: &mut [u8]) -> bool {
        if out.len() > WINDOW_READ_MAX || file.file().is_none() {
            return false;
        }
        let Some(Ok(mut window)) = self.windows.get(piece.shard as usize).map(Mutex::try_lock)
        else {
            return false;
        };
        let (start, bytes) = &mut *window;
        let end = piece.offset + piece.size;
        if piece.offset < *start || end > *start + bytes.len() as u64 {
            let take = (len - piece.offset).min(WINDOW.max(piece.size));
            bytes.resize(take as usize, 0);
            if file.read_exact_at(bytes, piece.offset).is_err() {
                bytes.clear();
                return false;
            }
            *start = piece.offset;
        }
        let at = (piece.offset - *start) as usize;
        out.copy_from_slice(&bytes[at..at + out.len()]);
        true
    }

    /// `crc` (unmasked, of the piece's bytes) is the one the index holds for `piece`.
    fn expect_crc(&self, piece: &Entry, crc: u32) -> Result<()> {
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

    pub(super) fn read_piece(&self, piece: &Entry) -> Result<Vec<u8>> {
        let size = usize::try_from(piece.size)
            .map_err(|_| bad_entry(&self.index_path, &piece.key, "tensor too large"))?;
        let (file, len) = self.shard(piece)?;
        self.check_in_file(piece, len)?;
        let mut bytes = vec![0u8; size];
        file.read_exact_at(&mut bytes, piece.offset)
            .map_err(|err| BundleError::io(self.data_file(piece), "read", err))?;
        Ok(bytes)
    }

    /// Checks the CRC of a piece's bytes (string pieces: layout and CRC).
    pub(super) fn check_piece(&self, piece: &Entry, bytes: &[u8]) -> Result<()> {
        if is_element_list(piece.dtype) {
            return self.decode_piece_strings(piece, bytes).map(drop);
        }
        self.expect_crc(piece, crc::crc32c(bytes))
    }

    pub(super) fn decode_piece_strings(&self, piece: &Entry, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
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

/// Where data file `shard` of the `num_shards` of `prefix` is read from: its final name, or
/// where an unfinished commit moved it (`moved`: (final name, where it is)).
pub(super) fn shard_path(
    prefix: &Path,
    num_shards: u32,
    moved: &[(PathBuf, PathBuf)],
    shard: u32,
) -> PathBuf {
    let path = data_path(prefix, shard, num_shards);
    match moved.iter().find(|(name, _)| *name == path) {
        Some((_, moved)) => moved.clone(),
        None => path,
    }
}

/// Asks the kernel to back the pages of `out` now, in one call, with transparent huge pages
/// where it can, instead of one 4 KiB page fault at a time as the read first touches them (a
/// fresh 64 MiB buffer is 16384 faults otherwise; docs/benchmarks.md has the figures). Only
/// hints: errors (e.g. kernels before 5.14 without `MADV_POPULATE_WRITE`) are ignored.
#[cfg(target_os = "linux")]
pub(super) fn prefault(out: &mut [u8]) {
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
pub(super) fn prefault(_out: &mut [u8]) {}

/// CRC32C of `bytes`, computed in parallel chunks on rayon's pool when they are large and
/// combined.
pub(super) fn parallel_crc32c(bytes: &[u8]) -> u32 {
    if bytes.len() < PARALLEL_READ_MIN {
        return crc::crc32c(bytes);
    }
    let crcs: Vec<(u32, usize)> = bytes
        .par_chunks(PARALLEL_READ_CHUNK)
        .map(|chunk| (crc::crc32c(chunk), chunk.len()))
        .collect();
    combine_crcs(crcs.into_iter())
}

/// The CRC32C of consecutive chunks, given each chunk's CRC and length in order.
fn combine_crcs(crcs: impl Iterator<Item = (u32, usize)>) -> u32 {
    crcs.reduce(|(crc_a, len_a), (crc_b, len_b)| (crc::combine(crc_a, crc_b, len_b), len_a + len_b))
        .map_or(0, |(crc, _)| crc)
}

#[cfg(test)]
mod tests {
    use super::super::super::writer::BundleWriter;
    use super::*;

    /// 3,000 tensors of 4 to 400 bytes (more than three windows), each byte telling which
    /// tensor it belongs to.
    fn write(prefix: &Path) -> Vec<Vec<u8>> {
        let values: Vec<Vec<u8>> = (0..3000u32)
            .map(|at| vec![at as u8; 4 * (1 + at as usize % 100)])
            .collect();
        let mut writer = BundleWriter::create(prefix).unwrap();
        for (at, bytes) in values.iter().enumerate() {
            let shape = [bytes.len() as i64];
            writer
                .add(&format!("t{at:04}"), DType::UInt8, &shape, bytes)
                .unwrap();
        }
        writer.finish().unwrap();
        values
    }

    #[test]
    fn small_reads_through_the_window_give_every_tensor_in_any_order() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ckpt");
        let values = write(&prefix);
        let reader = BundleReader::open(&prefix).unwrap();
        let n = values.len();
        // In file order, backwards, and striding across the file.
        let orders = [
            (0..n).collect::<Vec<_>>(),
            (0..n).rev().collect(),
            (0..n).map(|at| at * 7 % n).collect(),
        ];
        for order in orders {
            for at in order {
                let mut out = vec![0xAA; values[at].len()];
                reader.read_into(&format!("t{at:04}"), &mut out).unwrap();
                assert_eq!(out, values[at], "t{at:04}");
            }
        }
        // A fresh reader's first read fills a window, which serves the reads after it.
        let reader = BundleReader::open(&prefix).unwrap();
        for at in [0, 1, 500] {
            let mut out = vec![0; values[at].len()];
            reader.read_into(&format!("t{at:04}"), &mut out).unwrap();
        }
        let window = reader.windows[0].lock().unwrap();
        assert!(reader.entry("t0500").unwrap().offset < WINDOW);
        assert_eq!((window.0, window.1.len() as u64), (0, WINDOW));
    }

    #[test]
    fn a_data_file_cut_after_opening_fails_only_the_reads_past_the_cut() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ckpt");
        let values = write(&prefix);
        let reader = BundleReader::open(&prefix).unwrap();
        let data = reader.shard_path(0);
        let cut = reader.entry("t1000").unwrap().offset;
        let file = std::fs::OpenOptions::new().write(true).open(&data).unwrap();
        file.set_len(cut).unwrap();
        // The window cannot be read whole: the pieces before the cut are read alone.
        for at in [0, 999] {
            let mut out = vec![0; values[at].len()];
            reader.read_into(&format!("t{at:04}"), &mut out).unwrap();
            assert_eq!(out, values[at]);
        }
        let mut out = vec![0; values[1000].len()];
        match reader.read_into("t1000", &mut out) {
            Err(BundleError::Io { path, op, .. }) => assert_eq!((path, op), (data, "read")),
            other => panic!("{other:?}"),
        }
    }
}
