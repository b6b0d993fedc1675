//! Object stores are not built in (the `object-store` cargo feature is off): every URL is
//! refused in one line.

use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::StorageError;
pub use super::{Meta, Put};

/// An object opened for ranged reads (never made without the feature).
#[derive(Debug)]
pub enum ObjectBlob {}

impl ObjectBlob {
    /// Refuses: no object stores.
    pub fn open(path: &Path) -> io::Result<ObjectBlob> {
        Err(refuse(path))
    }

    /// Refuses: no object stores.
    pub fn open_ahead(path: &Path, _read_ahead: usize) -> io::Result<PendingObject> {
        Err(refuse(path))
    }

    /// Its length.
    pub fn len(&self) -> u64 {
        match *self {}
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        match *self {}
    }

    /// Fills `out` with the bytes at `offset`.
    pub fn read_exact_at(&self, _out: &mut [u8], _offset: u64) -> io::Result<()> {
        match *self {}
    }

    /// Reads `ranges`.
    pub fn read_ranges(&self, _ranges: &[Range<u64>]) -> io::Result<Vec<Vec<u8>>> {
        match *self {}
    }
}

/// An object being opened (never made without the feature).
#[derive(Debug)]
pub enum PendingObject {}

impl PendingObject {
    /// The opened object.
    pub fn wait(self) -> io::Result<ObjectBlob> {
        match self {}
    }
}

/// An upload of an object while it is written (never made without the feature).
#[derive(Debug)]
pub enum Upload {}

impl Upload {
    /// Refuses: no object stores.
    pub fn start(path: &Path) -> io::Result<Upload> {
        Err(refuse(path))
    }

    /// Appends `bytes`.
    pub fn write(&mut self, _bytes: &[u8]) {
        match *self {}
    }

    /// Finishes the upload.
    pub fn complete(self) -> io::Result<()> {
        match self {}
    }
}

fn refuse(path: &Path) -> io::Error {
    StorageError::NotBuiltIn {
        url: path.to_string_lossy().into_owned(),
    }
    .into_io(io::ErrorKind::Unsupported)
}

/// Refuses: no object stores.
pub fn read_pair(first: &Path, second: &Path) -> (io::Result<Vec<u8>>, io::Result<Vec<u8>>) {
    (Err(refuse(first)), Err(refuse(second)))
}

/// Refuses: no object stores.
pub fn read(path: &Path) -> io::Result<Vec<u8>> {
    Err(refuse(path))
}

/// Refuses: no object stores.
pub fn head(path: &Path) -> io::Result<Option<Meta>> {
    Err(refuse(path))
}

/// Refuses: no object stores.
pub fn put(path: &Path, _bytes: Vec<u8>, _mode: Put) -> io::Result<Option<String>> {
    Err(refuse(path))
}

/// Refuses: no object stores.
pub fn upload_file(_from: &Path, to: &Path) -> io::Result<()> {
    Err(refuse(to))
}

/// Refuses: no object stores.
pub fn copy(from: &Path, _to: &Path) -> io::Result<()> {
    Err(refuse(from))
}

/// Refuses: no object stores.
pub fn delete(path: &Path) -> io::Result<()> {
    Err(refuse(path))
}

/// Refuses: no object stores.
pub fn list(prefix: &Path) -> io::Result<Vec<(PathBuf, u64)>> {
    Err(refuse(prefix))
}
