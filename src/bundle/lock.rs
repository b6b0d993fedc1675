//! [`SaveLock`]: the exclusive lock a save holds on its prefix, and cleaning up what earlier,
//! killed saves to the prefix left behind.
//!
//! The lock is an advisory `flock` on `<prefix>.lock`, a file that exists only while a save
//! holds the lock: the holder deletes it before it unlocks, and a writer that got the lock on
//! a file already deleted (its inode is no longer the one at the path) tries again. A second
//! writer waits until the first is done. Every file a save writes for its prefix, at any stage, is named after it
//! (`<prefix>.data-….tempstate<pid>-<n>`, `<prefix>.index.merging<pid>-<n>`, backups
//! `….merging-old<pid>-<n>`, the journal `<prefix>.merging`, the parts under `<prefix>_temp/`
//! or `<prefix>_temp_<id>/`), so whoever holds the lock knows that such files belong to saves
//! whose writers are gone, and deletes them ([`SaveLock::acquire`] and when the lock is
//! released, so a save that fails, say on a full disk, leaves no finished shard behind).

use std::path::{Path, PathBuf};

use super::error::{BundleError, Result};
use super::journal::{Recovered, is_data_file_name, is_unique_id, recover_journal};
use crate::storage::local::{self as fsops, File};

/// An exclusive lock on a checkpoint prefix, held for the whole of a save. Dropping it
/// recovers an interrupted merge, deletes leftovers and releases the lock.
#[derive(Debug)]
pub struct SaveLock {
    prefix: PathBuf,
    held: Held,
}

/// What holds the lock.
#[derive(Debug)]
enum Held {
    /// The open, locked lock file (a local prefix).
    File(File),
    /// The lease object (a URL prefix, [`super::remote::Lease`]).
    Lease(#[allow(dead_code)] super::remote::Lease),
}

/// What [`recover`] found and did at a prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// What happened to an interrupted merge.
    pub merge: Recovered,
    /// The leftover files and directories of earlier saves that were deleted.
    pub removed: Vec<PathBuf>,
}

/// The lock file of `prefix`: `<prefix>.lock`.
pub fn lock_path(prefix: &Path) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

impl SaveLock {
    /// Waits for the exclusive lock on `prefix` (creating its directory and lock file if
    /// needed), then finishes or rolls back an interrupted merge and deletes the leftovers of
    /// earlier saves.
    /// On an object store (a URL prefix) the lock is a lease: a second writer fails at once
    /// with [`BundleError::Locked`] instead of waiting.
    pub fn acquire(prefix: impl AsRef<Path>) -> Result<SaveLock> {
        let lock = SaveLock::wait(prefix.as_ref())?;
        if let Held::Lease(_) = lock.held {
            super::remote::recover(&lock.prefix)?;
            return Ok(lock);
        }
        recover_journal(&lock.prefix)?;
        remove_leftovers(&lock.prefix);
        Ok(lock)
    }

    /// Takes the lock without recovering anything.
    fn wait(prefix: &Path) -> Result<SaveLock> {
        if super::remote::is_remote(prefix) {
            return Ok(SaveLock {
                prefix: prefix.to_path_buf(),
                held: Held::Lease(super::remote::Lease::take(prefix)?),
            });
        }
        create_parent_dir(prefix)?;
        let path = lock_path(prefix);
        loop {
            let file = open_lock_file(&path)?;
            file.lock()
                .map_err(|err| BundleError::io(&path, "lock", err))?;
            if still_at(&file, &path) {
                return Ok(SaveLock {
                    prefix: prefix.to_path_buf(),
                    held: Held::File(file),
                });
            }
        }
    }
}

/// Creates the directory of `prefix` and its parents, where missing.
/// An object store has no directories: nothing to do for a URL.
pub fn create_parent_dir(prefix: &Path) -> Result<()> {
    if super::remote::is_remote(prefix) {
        return Ok(());
    }
    let Some(dir) = prefix.parent().filter(|dir| !dir.as_os_str().is_empty()) else {
        return Ok(());
    };
    fsops::create_dir_all(dir).map_err(|err| {
        let err = match err.kind() {
            std::io::ErrorKind::AlreadyExists => std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                "a file is there, not a directory",
            ),
            _ => err,
        };
        BundleError::io(dir, "create directory", err)
    })
}

/// Opens (or creates) the lock file at `path`. A lock file left by another user's killed save
/// may not be writable by us: `flock` needs only an open file, so it is opened read-only then.
/// Anything else that stops it opening (a directory at `path`, no permission to read or
/// create it) is an error: a save never runs unlocked.
fn open_lock_file(path: &Path) -> Result<File> {
    fsops::open_lock_file(path).map_err(|err| BundleError::io(path, "open lock file", err))
}

impl Drop for SaveLock {
    fn drop(&mut self) {
        let Held::File(file) = &self.held else {
            // The lease: leftovers deleted, then the lease object (by its own drop).
            let _ = super::remote::recover(&self.prefix);
            return;
        };
        let _ = recover_journal(&self.prefix);
        remove_leftovers(&self.prefix);
        // Deleted while locked; closing the file then releases the lock.
        let _ = fsops::remove_lock_file(&lock_path(&self.prefix));
        let _ = file.unlock();
    }
}

/// Whether the locked `file` is still the one at `path` (not deleted by the holder before).
#[cfg(unix)]
fn still_at(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fsops::metadata(path)) {
        (Ok(ours), Ok(theirs)) => ours.dev() == theirs.dev() && ours.ino() == theirs.ino(),
        _ => false,
    }
}

/// Whether the locked `file` is still the one at `path`: without inode numbers, whether a
/// file is there at all.
#[cfg(not(unix))]
fn still_at(_file: &File, path: &Path) -> bool {
    path.exists()
}

/// Takes the lock on `prefix`, finishes or rolls back an interrupted merge and deletes the
/// leftovers of earlier saves (`saveplan recover`).
pub fn recover(prefix: impl AsRef<Path>) -> Result<Recovery> {
    let lock = SaveLock::wait(prefix.as_ref())?;
    if let Held::Lease(_) = lock.held {
        let (merge, removed) = super::remote::recover(&lock.prefix)?;
        return Ok(Recovery { merge, removed });
    }
    let merge = recover_journal(&lock.prefix)?;
    let removed = remove_leftovers(&lock.prefix);
    Ok(Recovery { merge, removed })
}

/// Deletes the checkpoint at `prefix` (what `CheckpointManager` does past `max_to_keep`),
/// holding its save lock so that no save of it runs meanwhile, after finishing or rolling back
/// an interrupted merge: its index first (from then on it is no checkpoint), then its data
/// files `<prefix>.data-?????-of-?????` (TensorFlow's glob); the lock deletes the leftovers of
/// killed saves. Files already gone are no error. Returns the index and data files deleted.
pub fn delete_checkpoint(prefix: impl AsRef<Path>) -> Result<Vec<PathBuf>> {
    let lock = SaveLock::acquire(prefix)?;
    let prefix = lock.prefix.as_path();
    if let Held::Lease(_) = lock.held {
        return super::remote::delete_checkpoint(prefix);
    }
    let mut deleted = Vec::new();
    let mut delete = |path: PathBuf| match fsops::remove_file(&path) {
        Ok(()) => {
            deleted.push(path);
            Ok(())
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(BundleError::io(&path, "delete", err)),
    };
    delete(super::index_path(prefix))?;
    let (dir, name) = dir_and_name(prefix);
    if let (Some(name), Ok(entries)) = (name, fsops::file_names(dir)) {
        let mut data: Vec<PathBuf> = entries
            .into_iter()
            .filter(|file| is_data_file_of(name, file))
            .map(|file| dir.join(file))
            .collect();
        data.sort();
        data.into_iter().try_for_each(&mut delete)?;
    }
    Ok(deleted)
}

/// The directory of `prefix` (`.` for a bare name) and its UTF-8 file name.
fn dir_and_name(prefix: &Path) -> (&Path, Option<&str>) {
    let dir = match prefix.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    (dir, prefix.file_name().and_then(|name| name.to_str()))
}

/// Whether `file` matches the glob `<name>.data-?????-of-?????`.
fn is_data_file_of(name: &str, file: &str) -> bool {
    let Some(rest) = file
        .strip_prefix(name)
        .and_then(|rest| rest.strip_prefix(".data-"))
    else {
        return false;
    };
    let chars: Vec<char> = rest.chars().collect();
    chars.len() == 14 && chars[5..9].iter().collect::<String>() == "-of-"
}

/// The leftovers of killed saves at `prefix`, without changing anything (for `saveplan
/// verify`; what a merge journal says is [`super::journal::read_view`]'s).
pub fn unfinished(prefix: &Path) -> Vec<PathBuf> {
    if super::remote::is_remote(prefix) {
        return super::remote::leftovers(prefix).unwrap_or_default();
    }
    leftovers(prefix)
}

/// Deletes the leftovers of earlier saves; returns what was deleted (best effort: what cannot
/// be deleted stays for the next save).
fn remove_leftovers(prefix: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    for path in leftovers(prefix) {
        if path.is_dir() {
            // Only the `part*` files were listed inside; a directory holding more stays.
            if fsops::remove_dir(&path).is_ok() {
                removed.push(path);
            }
        } else if fsops::remove_file(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

/// The leftover files of saves to `prefix`: temporary, staging and backup files next to it,
/// and every `part*` file in its temporary directories, each directory after its files.
fn leftovers(prefix: &Path) -> Vec<PathBuf> {
    let (dir, Some(name)) = dir_and_name(prefix) else {
        return Vec::new();
    };
    let Ok(names) = fsops::file_names(dir) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in names {
        let path = dir.join(&entry);
        if let Some(rest) = entry.strip_prefix(name).and_then(|r| r.strip_prefix('.')) {
            if is_leftover_name(rest) && path.is_file() {
                found.push(path);
            }
        } else if is_temp_dir_name(name, &entry) && path.is_dir() {
            let Ok(parts) = fsops::file_names(&path) else {
                continue;
            };
            let parts: Vec<PathBuf> = parts
                .into_iter()
                .filter(|part| part.starts_with("part"))
                .map(|part| path.join(part))
                .filter(|part| part.is_file())
                .collect();
            found.extend(parts);
            found.push(path);
        }
    }
    found
}

/// Whether `rest` (a file name after `<prefix>.`) is a save's temporary, staging or backup
/// file: `index`, `merging` or `data-NNNNN-of-NNNNN`, then `.tempstate`, `.merging` or
/// `.merging-old`, then `<pid>` or `<pid>-<n>`.
fn is_leftover_name(rest: &str) -> bool {
    let Some((base, tail)) = rest.split_once('.') else {
        return false;
    };
    let base_ok = base == "index" || base == "merging" || is_data_file_name(base);
    let id = ["tempstate", "merging-old", "merging"]
        .iter()
        .find_map(|marker| tail.strip_prefix(marker));
    base_ok && id.is_some_and(is_unique_id)
}

/// Whether `entry` is `<name>_temp` or `<name>_temp_<id>` (`id` of letters, digits and `-`:
/// a uuid or a `unique_temp_id` without `_`).
fn is_temp_dir_name(name: &str, entry: &str) -> bool {
    match entry
        .strip_prefix(name)
        .and_then(|rest| rest.strip_prefix("_temp"))
    {
        Some("") => true,
        Some(rest) => rest.strip_prefix('_').is_some_and(|id| {
            !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        }),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftover_names() {
        for name in [
            "index.merging12",
            "index.merging12-3",
            "index.tempstate5-0",
            "data-00000-of-00002.tempstate5-1",
            "data-00001-of-00002.merging-old77",
            "index.merging-old7-2",
            "merging.tempstate9-9",
        ] {
            assert!(is_leftover_name(name), "{name}");
        }
        for name in [
            "index",
            "merging",
            "lock",
            "data-00000-of-00001",
            "v2.index.merging1",
            "index.merging",
        ] {
            assert!(!is_leftover_name(name), "{name}");
        }
        assert!(is_data_file_of("ckpt-1", "ckpt-1.data-00000-of-00001"));
        assert!(is_data_file_of("ckpt-1", "ckpt-1.data-00001-of-00002"));
        assert!(!is_data_file_of("ckpt-1", "ckpt-10.data-00000-of-00001"));
        assert!(!is_data_file_of("ckpt-1", "ckpt-1.data-00000-of-000010"));
        assert!(!is_data_file_of("ckpt-1", "ckpt-1.index"));
        assert!(is_temp_dir_name("ckpt", "ckpt_temp"));
        assert!(is_temp_dir_name("ckpt", "ckpt_temp_0f-1a"));
        assert!(!is_temp_dir_name("ckpt", "ckpt_temp_x_temp"));
        assert!(!is_temp_dir_name("ckpt", "ckpt2_temp"));
    }

    /// A checkpoint of one tensor at `prefix`.
    fn write_checkpoint(prefix: &Path) {
        let mut writer = crate::bundle::BundleWriter::create(prefix).unwrap();
        writer
            .add("t", crate::bundle::DType::Float, &[1], &1f32.to_le_bytes())
            .unwrap();
        writer.finish().unwrap();
    }

    #[test]
    fn deleting_a_checkpoint_deletes_its_files_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ckpt-1");
        write_checkpoint(&prefix);
        write_checkpoint(&dir.path().join("ckpt-10"));
        let leftover = dir.path().join("ckpt-1.index.tempstate1-1");
        std::fs::write(&leftover, b"left").unwrap();
        let deleted = delete_checkpoint(&prefix).unwrap();
        assert_eq!(
            deleted,
            [
                dir.path().join("ckpt-1.index"),
                dir.path().join("ckpt-1.data-00000-of-00001"),
            ]
        );
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["ckpt-10.data-00000-of-00001", "ckpt-10.index"]);
        assert!(delete_checkpoint(&prefix).unwrap().is_empty());
    }

    /// A crash at any step of a delete leaves the whole checkpoint or no index: never an
    /// index whose data is gone.
    #[test]
    fn a_crash_while_deleting_never_leaves_an_index_without_its_data() {
        use crate::storage::local::failpoint;
        for allowed in 0.. {
            let dir = tempfile::tempdir().unwrap();
            let prefix = dir.path().join("ckpt-1");
            write_checkpoint(&prefix);
            failpoint::arm(allowed);
            let result = delete_checkpoint(&prefix);
            if !failpoint::disarm() {
                result.unwrap();
                assert!(!crate::bundle::index_path(&prefix).exists());
                break;
            }
            if crate::bundle::index_path(&prefix).exists() {
                crate::bundle::BundleReader::open(&prefix)
                    .unwrap()
                    .read("t")
                    .unwrap();
            }
        }
    }
}
