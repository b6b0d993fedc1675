//! Storage: where every byte of a checkpoint is read and written. A path names either a local
//! file, or, when it is a URL (`s3://bucket/key`, `gs://…`, `az://…`, `memory://…`), an object
//! of an object store. The other layers keep passing `Path`s; the text of a URL travels in one
//! unchanged (a URL never becomes a local folder named `s3:`) and only this room tells the two
//! apart.
//!
//! - [`local`]: the local file system, every operation that changes it (create, write, fsync,
//!   rename, delete) behind one test-only failpoint, plus the reads.
//! - [`object`] (cargo feature `object-store`): object stores through the `object_store` crate,
//!   configured from the standard environment variables (`AWS_ACCESS_KEY_ID`,
//!   `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`/`AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL`,
//!   `AWS_ALLOW_HTTP`; `GOOGLE_SERVICE_ACCOUNT`…; `AZURE_STORAGE_ACCOUNT_NAME`…). The crate is
//!   async: one small tokio runtime lives here and the rest of the code sees a blocking API.
//!   Without the feature every URL is refused in one line.
//!
//! Errors are `std::io::Error`s (their kind says what went wrong: `NotFound`, `AlreadyExists`,
//! `PermissionDenied`, `TimedOut`, `Unsupported`…) carrying a one-line [`StorageError`], so
//! the layers above report an object as they report a file: like the message of a file's
//! `io::Error`, a store's reason names neither the object nor the operation; the layer that
//! carries it names both, once.
//!
//! This room imports nothing of ours (floor 1).

pub mod local;
#[cfg(feature = "object-store")]
pub mod object;
#[cfg(not(feature = "object-store"))]
#[path = "no_object.rs"]
pub mod object;

use std::io;
use std::ops::Range;
use std::path::Path;

/// What went wrong in storage, one line each; carried inside an `io::Error` whose kind matches.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A URL given to a build without object stores.
    #[error(
        "{url}: object stores are not built in (rebuild saveplan with the `object-store` feature)"
    )]
    NotBuiltIn {
        /// The URL.
        url: String,
    },
    /// A URL that names no object of a supported store.
    #[error("{url}: not a usable object-store URL: {detail}")]
    BadUrl {
        /// The URL.
        url: String,
        /// Why.
        detail: String,
    },
    /// The store refused or failed an operation. Shown as the reason only: as with any
    /// `io::Error`, the error carrying it names the object and the operation (`<url>: read:
    /// <reason>`), so naming them here too would say them twice.
    #[error("{detail}")]
    Store {
        /// The object's URL.
        url: String,
        /// What was being done.
        op: &'static str,
        /// The store's reason, on one line.
        detail: String,
    },
}

impl StorageError {
    /// This error as an `io::Error` of `kind`.
    pub fn into_io(self, kind: io::ErrorKind) -> io::Error {
        io::Error::new(kind, self)
    }
}

/// Whether `path` is a URL (`scheme://…`) rather than a local path.
pub fn is_url(path: &Path) -> bool {
    url_scheme(path).is_some()
}

/// The scheme of `path` when it is a URL (`s3` of `s3://bucket/key`).
pub fn url_scheme(path: &Path) -> Option<&str> {
    let text = path.to_str()?;
    let (scheme, _) = text.split_once("://")?;
    let ok = scheme.len() > 1
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    ok.then_some(scheme)
}

/// How an object [`object::put`] may replace what is at the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Put {
    /// Whatever is there is replaced.
    Overwrite,
    /// Only if nothing is there (`AlreadyExists` otherwise).
    Create,
    /// Only if the object there still has this entity tag (`AlreadyExists` otherwise).
    Update(String),
}

/// What [`object::head`] tells of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    /// Its length in bytes.
    pub size: u64,
    /// Its entity tag, where the store gives one.
    pub e_tag: Option<String>,
}

/// The whole content of the file or object `path`.
pub fn read(path: &Path) -> io::Result<Vec<u8>> {
    if is_url(path) {
        object::read(path)
    } else {
        std::fs::read(path)
    }
}

/// The whole contents of `first` and `second`, each as [`read`] gives it; two objects are
/// fetched at once (two GETs in flight), files one after the other.
pub fn read_pair(first: &Path, second: &Path) -> (io::Result<Vec<u8>>, io::Result<Vec<u8>>) {
    if is_url(first) && is_url(second) {
        object::read_pair(first, second)
    } else {
        (read(first), read(second))
    }
}

/// The whole content of `path` as UTF-8 text.
pub fn read_to_string(path: &Path) -> io::Result<String> {
    String::from_utf8(read(path)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// Whether the file or object `path` exists (a local directory counts).
pub fn exists(path: &Path) -> io::Result<bool> {
    if is_url(path) {
        Ok(object::head(path)?.is_some())
    } else {
        path.try_exists()
    }
}

/// A file or object opened for positional reads.
#[derive(Debug)]
pub enum Blob {
    /// A local file.
    File(std::fs::File),
    /// An object: reads in order continue one GET ([`object::ObjectBlob`]).
    Object(object::ObjectBlob),
}

impl Blob {
    /// Opens `path` for reading.
    pub fn open(path: &Path) -> io::Result<Blob> {
        if is_url(path) {
            object::ObjectBlob::open(path).map(Blob::Object)
        } else {
            std::fs::File::open(path).map(Blob::File)
        }
    }

    /// Opens `path` for reads that start at its beginning and go on in order (a restore). A
    /// local file is opened as by [`Blob::open`]. For an object, one GET of the whole object is
    /// sent (no HEAD: its answer gives the length) and not awaited: the caller goes on with
    /// other work while it travels, and [`PendingBlob::wait`] takes the answer. Its body is then
    /// received ahead of the reads, at most `read_ahead` bytes of it held (a read elsewhere
    /// drops it, as any read that does not continue the open GET).
    pub fn open_ahead(path: &Path, read_ahead: usize) -> PendingBlob {
        if !is_url(path) {
            return PendingBlob::Opened(Blob::open(path));
        }
        match object::ObjectBlob::open_ahead(path, read_ahead) {
            Ok(pending) => PendingBlob::Object(pending),
            Err(err) => PendingBlob::Opened(Err(err)),
        }
    }

    /// Its length in bytes (when opened).
    pub fn len(&self) -> io::Result<u64> {
        match self {
            Blob::File(file) => Ok(file.metadata()?.len()),
            Blob::Object(object) => Ok(object.len()),
        }
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// The local file, for memory maps; `None` for objects.
    pub fn file(&self) -> Option<&std::fs::File> {
        match self {
            Blob::File(file) => Some(file),
            Blob::Object(_) => None,
        }
    }

    /// Fills `out` with the bytes at `offset`.
    pub fn read_exact_at(&self, out: &mut [u8], offset: u64) -> io::Result<()> {
        match self {
            Blob::File(file) => local::read_exact_at(file, out, offset),
            Blob::Object(object) => object.read_exact_at(out, offset),
        }
    }

    /// Reads the byte ranges `ranges`, in parallel where that helps.
    pub fn read_ranges(&self, ranges: &[Range<u64>]) -> io::Result<Vec<Vec<u8>>> {
        match self {
            Blob::Object(object) => object.read_ranges(ranges),
            Blob::File(_) => ranges
                .iter()
                .map(|range| {
                    let mut out = vec![0; (range.end - range.start) as usize];
                    self.read_exact_at(&mut out, range.start)?;
                    Ok(out)
                })
                .collect(),
        }
    }
}

/// A file or object being opened by [`Blob::open_ahead`].
#[derive(Debug)]
pub enum PendingBlob {
    /// Opened, or refused, already.
    Opened(io::Result<Blob>),
    /// An object whose GET is under way.
    Object(object::PendingObject),
}

impl PendingBlob {
    /// The opened file or object (waiting for the object's answer), or why it cannot be read
    /// (as [`Blob::open`] says it).
    pub fn wait(self) -> io::Result<Blob> {
        match self {
            PendingBlob::Opened(opened) => opened,
            PendingBlob::Object(pending) => pending.wait().map(Blob::Object),
        }
    }
}
