//! The local backend: the file operations that change the disk when a checkpoint is written,
//! merged, recovered or deleted (every create, write, fsync, rename and delete of
//! `bundle::writer`, `bundle::merge`, `bundle::journal`, `bundle::lock` and the state file goes
//! through here), positional reads, and this machine's name ([`host_name`]).
//!
//! In tests a thread-local failpoint (`failpoint`, compiled only under `cfg(test)`) can stop
//! the thread at any of them: the operation and every later one fail without touching the
//! disk, which leaves the files as a crash (SIGKILL) at that point would. The object stores'
//! operations that change objects (`object::put`, `upload_file`, `copy`, `delete`) go through
//! the same failpoint.

use std::io::{self, Write};
use std::path::Path;

/// This machine's name as its kernel says it (`/proc/sys/kernel/hostname`), trimmed; empty
/// where it cannot be told (not Linux). It names the machine of a save's lease owner, and the
/// kernel of a file when the processes of a cluster ask whether they share its pages.
pub fn host_name() -> String {
    std::fs::read("/proc/sys/kernel/hostname")
        .map(|name| String::from_utf8_lossy(&name).trim().to_string())
        .unwrap_or_default()
}

/// Creates (or truncates) `path` for writing.
pub(crate) fn create(path: &Path) -> io::Result<File> {
    check()?;
    File::create(path)
}

/// Creates `dir` and its parents.
pub(crate) fn create_dir_all(dir: &Path) -> io::Result<()> {
    check()?;
    std::fs::create_dir_all(dir)
}

/// Renames `from` to `to`, replacing `to`.
pub(crate) fn rename(from: &Path, to: &Path) -> io::Result<()> {
    check()?;
    std::fs::rename(from, to)
}

/// Deletes the file `path`.
pub(crate) fn remove_file(path: &Path) -> io::Result<()> {
    check()?;
    std::fs::remove_file(path)
}

/// The local file type (a lock file's handle).
pub use std::fs::File;

/// The whole content of `path` (reads are no crash points: no failpoint).
pub(crate) fn read(path: &Path) -> io::Result<Vec<u8>> {
    std::fs::read(path)
}

/// The metadata of `path`.
pub(crate) fn metadata(path: &Path) -> io::Result<std::fs::Metadata> {
    std::fs::metadata(path)
}

/// The UTF-8 names in directory `dir`, sorted (other names skipped).
pub(crate) fn file_names(dir: &Path) -> io::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    Ok(names)
}

/// Opens (or creates) the lock file at `path` for `flock`. A lock file left by another user's
/// killed save may not be writable by us: `flock` needs only an open file, so it is opened
/// read-only then.
pub(crate) fn open_lock_file(path: &Path) -> io::Result<File> {
    let opened = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path);
    match opened {
        Err(err) if err.kind() == io::ErrorKind::PermissionDenied && path.is_file() => {
            File::open(path)
        }
        opened => opened,
    }
}

/// Deletes a lock file while its lock is held (no failpoint: the lock is released either
/// way, and a lock file left behind is reused).
pub(crate) fn remove_lock_file(path: &Path) -> io::Result<()> {
    std::fs::remove_file(path)
}

/// Deletes the directory `dir` and everything in it.
pub(crate) fn remove_tree(dir: &Path) -> io::Result<()> {
    check()?;
    std::fs::remove_dir_all(dir)
}

/// Deletes the empty directory `dir`.
pub(crate) fn remove_dir(dir: &Path) -> io::Result<()> {
    check()?;
    std::fs::remove_dir(dir)
}

/// Flushes `file`'s data and metadata to the disk.
pub(crate) fn sync(file: &File) -> io::Result<()> {
    check()?;
    file.sync_all()
}

/// Flushes the directory `dir`, so renames into it are durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    check()?;
    File::open(dir)?.sync_all()
}

/// Writes `bytes` as the whole file `path` (fsynced if `fsync`); on failure the file may be
/// partial, so callers write under a temporary name.
pub(crate) fn write_file(path: &Path, bytes: &[u8], fsync: bool) -> io::Result<()> {
    let mut file = TrackedFile(create(path)?);
    file.write_all(bytes)?;
    if fsync {
        sync(&file.0)?;
    }
    Ok(())
}

/// A file whose every `write` goes through the failpoint.
#[derive(Debug)]
pub(crate) struct TrackedFile(pub(crate) File);

impl Write for TrackedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        check()?;
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// Fills `out` with the bytes of `file` at `offset` (positional: the file offset is unchanged).
#[cfg(unix)]
pub fn read_exact_at(file: &File, out: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, out, offset)
}

#[cfg(windows)]
/// Fills `out` with the bytes of `file` at `offset`.
pub fn read_exact_at(file: &File, mut out: &mut [u8], mut offset: u64) -> std::io::Result<()> {
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

/// The failpoint: every operation that changes the disk or an object store calls it first.
#[cfg(not(test))]
#[inline(always)]
pub(super) fn check() -> io::Result<()> {
    Ok(())
}

/// The failpoint: every operation that changes the disk or an object store calls it first.
#[cfg(test)]
pub(super) fn check() -> io::Result<()> {
    failpoint::check()
}

/// A per-thread crash switch for tests: [`failpoint::arm`] lets a number of file operations
/// through, then every later one on this thread fails.
#[cfg(test)]
pub(crate) mod failpoint {
    use std::cell::Cell;
    use std::io;

    thread_local! {
        /// Operations still allowed, or `None` when disarmed.
        static LEFT: Cell<Option<u64>> = const { Cell::new(None) };
        /// Whether an operation was refused since the last `arm`.
        static CRASHED: Cell<bool> = const { Cell::new(false) };
        /// Whether only one operation fails (then the failpoint disarms itself).
        static ONCE: Cell<bool> = const { Cell::new(false) };
    }

    /// Lets `allowed` operations through, then "crashes" this thread's file operations.
    pub(crate) fn arm(allowed: u64) {
        LEFT.set(Some(allowed));
        CRASHED.set(false);
        ONCE.set(false);
    }

    /// Lets `allowed` operations through, fails the next one, and lets every later one through.
    pub(crate) fn fail_once(allowed: u64) {
        arm(allowed);
        ONCE.set(true);
    }

    /// Disarms the failpoint; returns whether the crash happened.
    pub(crate) fn disarm() -> bool {
        LEFT.set(None);
        CRASHED.get()
    }

    pub(super) fn check() -> io::Result<()> {
        match LEFT.get() {
            None => Ok(()),
            Some(0) => {
                if ONCE.get() {
                    LEFT.set(None);
                }
                CRASHED.set(true);
                Err(io::Error::other("injected crash"))
            }
            Some(left) => {
                LEFT.set(Some(left - 1));
                Ok(())
            }
        }
    }
}
