//! The error type of the tensor-bundle layer: every variant names the file and, when one is
//! involved, the tensor key.

use std::path::PathBuf;

use super::dtype::DType;

/// Errors from reading, writing or merging a TF V2 tensor bundle.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// An operating-system call on a file failed.
    #[error("{}: {op}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// What was being done ("open", "read", "rename", ...).
        op: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A URL where only a local path will do ([`super::check_local`]).
    #[error("{}: a URL, not a local path: this output is written on the local file system only", path.display())]
    NotLocal {
        /// The URL.
        path: PathBuf,
    },
    /// Another save holds the lease on an object-store prefix.
    #[error("{}: another save is writing this checkpoint ({owner}; its lease ends in {seconds} s)", path.display())]
    Locked {
        /// The prefix.
        path: PathBuf,
        /// Who holds the lease.
        owner: String,
        /// Seconds until the lease expires.
        seconds: u64,
    },
    /// Saves kept replacing the checkpoint while it was being opened.
    #[error("{}: the checkpoint changed under the reader {attempts} times in a row (saves are replacing it); try again", path.display())]
    KeptChanging {
        /// The prefix.
        path: PathBuf,
        /// How often opening started again.
        attempts: usize,
    },
    /// The `.index` file does not exist.
    #[error("{}: index file not found", path.display())]
    IndexNotFound {
        /// The missing `.index` file.
        path: PathBuf,
    },
    /// The index file does not end with the LevelDB table magic number.
    #[error("{}: bad table magic {found:#018x}", path.display())]
    BadMagic {
        /// The `.index` file.
        path: PathBuf,
        /// The 8 bytes found where the magic belongs, as a little-endian integer.
        found: u64,
    },
    /// The index file is structurally broken (bad varint, out-of-bounds handle, short file).
    #[error("{}: corrupt index: {detail}", path.display())]
    CorruptIndex {
        /// The `.index` file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// A block of the index file failed its CRC32C check.
    #[error("{}: checksum mismatch in index block at offset {offset}", path.display())]
    BlockChecksum {
        /// The `.index` file.
        path: PathBuf,
        /// Offset of the block within the file.
        offset: u64,
    },
    /// The journal of an interrupted merge (`<prefix>.merging`) cannot be read or followed.
    #[error("{}: bad merge journal: {detail} (it cannot be followed: check the checkpoint with `saveplan verify`, then delete the journal)", path.display())]
    BadJournal {
        /// The journal file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// The index's header entry (key `""`) is missing or invalid.
    #[error("{}: bad bundle header: {detail}", path.display())]
    BadHeader {
        /// The `.index` file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// One entry of the index could not be decoded or is inconsistent.
    #[error("{}: tensor `{key}`: bad index entry: {detail}", path.display())]
    BadEntry {
        /// The `.index` file.
        path: PathBuf,
        /// The tensor key (lossily decoded when it is not UTF-8).
        key: String,
        /// What was wrong.
        detail: String,
    },
    /// The requested key is not in the bundle.
    #[error("{}: tensor `{key}` not found", path.display())]
    KeyNotFound {
        /// The `.index` file.
        path: PathBuf,
        /// The key asked for.
        key: String,
    },
    /// A data shard referenced by an entry does not exist or cannot be opened.
    #[error("{}: tensor `{key}`: data shard missing", path.display())]
    MissingShard {
        /// The data file that is missing.
        path: PathBuf,
        /// The tensor whose bytes live there.
        key: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A data file is shorter than an entry says.
    #[error("{}: tensor `{key}`: data file truncated (need bytes {offset}..{end}, file has {len})", path.display())]
    DataTruncated {
        /// The data file.
        path: PathBuf,
        /// The tensor key.
        key: String,
        /// Start of the tensor's bytes.
        offset: u64,
        /// End of the tensor's bytes.
        end: u64,
        /// Actual file length.
        len: u64,
    },
    /// The tensor bytes do not match the entry's CRC32C.
    #[error("{}: tensor `{key}`: checksum mismatch (stored {expected:#010x}, computed {actual:#010x})", path.display())]
    TensorChecksum {
        /// The data file.
        path: PathBuf,
        /// The tensor key.
        key: String,
        /// The masked CRC stored in the index.
        expected: u32,
        /// The masked CRC of the bytes read.
        actual: u32,
    },
    /// The number of bytes does not agree with dtype and shape.
    #[error("{}: tensor `{key}`: size mismatch ({dtype} {shape:?} needs {expected} bytes, got {actual})", path.display())]
    SizeMismatch {
        /// The file involved (index, data file, or the prefix being written).
        path: PathBuf,
        /// The tensor key.
        key: String,
        /// The tensor's dtype.
        dtype: DType,
        /// The tensor's shape.
        shape: Vec<i64>,
        /// Bytes required.
        expected: u64,
        /// Bytes present.
        actual: u64,
    },
    /// A DT_STRING tensor's encoded bytes are malformed.
    #[error("{}: tensor `{key}`: bad string tensor: {detail}", path.display())]
    BadStrings {
        /// The data file.
        path: PathBuf,
        /// The tensor key.
        key: String,
        /// What was wrong.
        detail: String,
    },
    /// A slice spec string could not be parsed or does not fit the tensor.
    #[error("{}: tensor `{key}`: bad slice spec `{spec}`: {detail}", path.display())]
    BadSliceSpec {
        /// The file involved.
        path: PathBuf,
        /// The tensor key.
        key: String,
        /// The offending spec text.
        spec: String,
        /// What was wrong.
        detail: String,
    },
    /// The stored slices of a sliced tensor leave part of it out, so the tensor cannot be read
    /// whole (TensorFlow fails on it too).
    #[error("{}: tensor `{key}`: stored slices cover {covered} of its {n_elements} elements", path.display())]
    SlicesDoNotCover {
        /// The `.index` file.
        path: PathBuf,
        /// The tensor key.
        key: String,
        /// The elements the stored slices cover.
        covered: u64,
        /// The elements of the full shape.
        n_elements: u64,
    },
    /// The operation needs another dtype than the tensor has.
    #[error("{}: tensor `{key}`: dtype {actual} where {expected} is needed", path.display())]
    WrongDType {
        /// The file involved.
        path: PathBuf,
        /// The tensor key.
        key: String,
        /// What the operation needs.
        expected: &'static str,
        /// What the tensor has.
        actual: DType,
    },
    /// The requested slice is not covered by the stored slices.
    #[error("{}: tensor `{key}`: slice {slice} is not covered by the stored slices", path.display())]
    SliceNotCovered {
        /// The `.index` file.
        path: PathBuf,
        /// The tensor key.
        key: String,
        /// The requested slice, in spec form.
        slice: String,
    },
    /// A key was added twice, or as both a whole tensor and a slice, or with conflicting metadata.
    #[error("{}: tensor `{key}`: {detail}", path.display())]
    Conflict {
        /// The prefix being written or merged.
        path: PathBuf,
        /// The tensor key.
        key: String,
        /// What conflicts.
        detail: String,
    },
    /// An empty checkpoint prefix, which would write hidden `.index` and `.data-*` files in the
    /// current folder.
    #[error("the checkpoint prefix is empty")]
    EmptyPrefix,
    /// A checkpoint prefix that is an existing directory (`out/`, `.`): its files would be
    /// hidden `.index` / `.data-*` files inside it, or sit next to it under its name.
    #[error("{}: the checkpoint prefix is an existing directory", path.display())]
    PrefixIsDirectory {
        /// The prefix.
        path: PathBuf,
    },
    /// A merge was asked to write a prefix onto one of its own sources.
    #[error("{}: cannot merge a checkpoint prefix onto itself", path.display())]
    MergeOntoItself {
        /// The prefix that is both source and destination.
        path: PathBuf,
    },
    /// A merge source does not exist and missing files are not allowed.
    #[error("{}: merge source does not exist and allow_missing_files is false", path.display())]
    MergeSourceMissing {
        /// The missing source prefix.
        path: PathBuf,
    },
    /// Every merge source is missing.
    #[error("{}: at least one merge source must exist, but none did", path.display())]
    MergeNoSources {
        /// The destination prefix.
        path: PathBuf,
    },
}

/// A `Result` with [`BundleError`].
pub type Result<T, E = BundleError> = std::result::Result<T, E>;

impl BundleError {
    /// Wraps an I/O error with the path and the operation.
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, source: std::io::Error) -> Self {
        BundleError::Io {
            path: path.into(),
            op,
            source,
        }
    }
}
