//! The TensorFlow V2 tensor bundle (checkpoint) format: `prefix.index` (an SSTable of
//! `BundleEntryProto`s) plus `prefix.data-SSSSS-of-NNNNN` files, written byte-identical to
//! TensorFlow 2.21, read back with checksums, and merged like MergeV2Checkpoints.
//!
//! One [`BundleWriter`] writes one data file, as one SaveV2 call does; a multi-shard checkpoint
//! is several writers (one per shard, under [`temp_prefix`]) followed by [`merge_bundles`].
//!
//! Invariants:
//! - Written bytes depend only on the tensors and the order they were added: the data file
//!   holds them in insertion order with no padding, the index holds entries sorted by key.
//! - Files appear under their final names only when complete (temporary name, then rename;
//!   the data file before the index). A failed or dropped writer leaves nothing behind.
//! - Replacing a checkpoint is one journaled commit ([`journal`]): after a crash at any point
//!   the prefix holds the old checkpoint or the new one once recovered, which every save,
//!   [`BundleReader::open`] and [`recover`] do first. Saves hold [`SaveLock`] on the prefix,
//!   which also deletes what killed saves left behind ([`lock`]).
//! - Every read checks the CRC32C of every byte it returns; every index block is checked when
//!   the bundle is opened. Bad input is a [`BundleError`] naming the file (and key), never a
//!   panic, and never an allocation larger than the files it reads.
//! - [`BundleReader`] is `Sync` and reads with positional I/O, so threads can share one.
//!   [`BundleReader::map`] is the zero-copy alternative for fixed-width tensors: a
//!   [`MappedTensor`] is a CRC-checked view into a read-only memory map of the data file (one
//!   shared map per file); the `unsafe` of mapping a file and what the checksum does and does
//!   not guarantee are documented there.
//! - Threads come only from rayon: the writer checksums a large tensor in a `rayon::join` task
//!   while the calling thread writes it, and the reader reads (or, when mapped, checksums) a
//!   large tensor in chunks on rayon's pool and combines their CRCs. Results do not depend on
//!   the number of threads.
//!
//! Its speed against TensorFlow's SaveV2 and RestoreV2 is measured by `cargo bench --bench
//! bundle` (`docs/benchmarks.md`).
//!
//! Module map: [`crc`] (CRC32C, LevelDB mask), [`sstable`] (index table builder/reader),
//! [`slice`](mod@slice) (slice specs, slice keys, region copies), [`dtype`] (which of the
//! IR's [`DType`]s a bundle stores), [`string`](mod@string) (DT_STRING
//! encoding), [`variant`] (DT_VARIANT elements as opaque bytes), [`writer`], [`reader`], [`merge`], [`journal`] (commit and recovery), [`lock`], [`error`].
//!
//! ```no_run
//! use saveplan::bundle::{BundleReader, BundleWriter, DType};
//! # fn main() -> Result<(), saveplan::bundle::BundleError> {
//! let mut writer = BundleWriter::create("/tmp/ckpt")?;
//! writer.add("a", DType::Float, &[2], &[0, 0, 0x80, 0x3f, 0, 0, 0, 0x40])?;
//! writer.finish()?;
//! let reader = BundleReader::open("/tmp/ckpt")?;
//! let tensor = reader.read("a")?;
//! assert_eq!(tensor.shape, [2]);
//! # Ok(())
//! # }
//! ```

pub mod crc;
pub mod dtype;
pub mod element;
pub mod error;
pub mod journal;
pub mod lock;
pub mod merge;
mod proto;
pub mod reader;
pub mod remote;
mod remote_view;
pub mod slice;
pub mod small_file;
pub mod sstable;
pub mod string;
pub mod variant;
pub mod writer;

#[cfg(test)]
mod crash_tests;

use std::path::{Path, PathBuf};

pub use dtype::DType;
pub use element::{Element, decode_element, element_json};
pub use error::{BundleError, Result};
pub use journal::Recovered;
pub use lock::{Recovery, SaveLock, recover};
pub use merge::{MergeFlags, MergeOptions, merge_bundles};
pub use reader::{BundleReader, Entry, MappedTensor, Tensor, Values};
pub use slice::{Extent, ShapeAndSlice, SliceError, TensorSlice};
pub use writer::{BundleWriter, TensorStream, TensorValues, WriteOptions, check_write_prefix};

/// Refuses a URL (`s3://bucket/ckpt`, `gs://…`, any `scheme://`) where only a local path will
/// do (graph files written by `compile`): a URL taken as a path would become a local folder
/// named `s3:`. Checkpoint prefixes take URLs ([`remote`]).
pub fn check_local(path: &Path) -> Result<()> {
    if crate::storage::is_url(path) {
        return Err(BundleError::NotLocal {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// `ShardedFilename(base, shard, num_shards)`: `base-SSSSS-of-NNNNN` (numbers padded to at least
/// 5 digits, never truncated).
pub fn sharded_filename(base: &str, shard: u32, num_shards: u32) -> String {
    format!("{base}-{shard:05}-of-{num_shards:05}")
}

/// The `.index` file of the bundle at `prefix`.
pub fn index_path(prefix: &Path) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(".index");
    PathBuf::from(name)
}

/// The data file `shard` of `num_shards` of the bundle at `prefix`.
pub fn data_path(prefix: &Path, shard: u32, num_shards: u32) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(format!(".data-{shard:05}-of-{num_shards:05}"));
    PathBuf::from(name)
}

/// The temporary prefix SaveV2 parts are written under before the merge: `prefix + "_temp/part"`,
/// or `prefix + ".part"` for `s3://` prefixes (FORMATS.md §9.2).
pub fn temp_prefix(prefix: &str) -> String {
    if prefix.starts_with("s3://") {
        format!("{prefix}.part")
    } else {
        format!("{prefix}_temp/part")
    }
}
