//! Small files replaced whole, outside a bundle's journaled commit: the `checkpoint` state
//! file and the manager's delete journal `checkpoint.deleting` (also deleted here). A write goes to a temporary name next to the file, `.<name>.tmp<pid>-<n>`, is synced
//! if asked, and is renamed into place, every step through `bundle::fsops` (so the failpoint
//! tests reach it): the file is always the old one or the new one, whole. The temporary files
//! that killed writers left (their process is gone) are deleted by the next write.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::storage::local as fsops;

/// Replaces the file at `path` with `bytes`, whole (see the module docs).
///
/// On an object store (a URL) one put replaces the object whole.
pub fn replace_whole(path: &Path, bytes: &[u8], fsync: bool) -> io::Result<()> {
    if crate::storage::is_url(path) {
        let put = crate::storage::object::Put::Overwrite;
        return crate::storage::object::put(path, bytes.to_vec(), put).map(|_| ());
    }
    let temp = temp_beside(path)?;
    let written = fsops::write_file(&temp, bytes, fsync).and_then(|()| fsops::rename(&temp, path));
    if written.is_err() {
        let _ = fsops::remove_file(&temp);
    }
    written?;
    if fsync {
        fsops::sync_dir(split(path)?.0)?;
    }
    Ok(())
}

/// The most of a file's name its temporary file's name keeps: a file name has at most 255
/// bytes, and the file's may have them all.
const NAME_KEPT: usize = 100;

/// A new temporary name beside the local file `path`, for a file to be renamed over it:
/// `.<name>.tmp<pid>-<n>`, `<name>` being `path`'s name as text (U+FFFD for a byte that is
/// not UTF-8) cut to 100 bytes (`NAME_KEPT`). The temporary files of writers of `path` whose
/// process is gone are deleted first. Besides this module's own writes, a cluster restore's
/// `--out` is written through one.
pub fn temp_beside(path: &Path) -> io::Result<PathBuf> {
    let (dir, name) = split(path)?;
    let mut end = name.len().min(NAME_KEPT);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let name = &name[..end];
    remove_stale_temps(dir, name);
    // One temporary name per write, so concurrent writers (threads of one process too) never
    // share one.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    Ok(dir.join(format!(
        ".{name}.tmp{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )))
}

/// Deletes the file at `path`, durably when `fsync` (its directory synced); a file already
/// gone is no error. On an object store (a URL) one delete.
pub fn remove(path: &Path, fsync: bool) -> io::Result<()> {
    if crate::storage::is_url(path) {
        return crate::storage::object::delete(path);
    }
    match fsops::remove_file(path) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        removed => removed?,
    }
    if fsync {
        fsops::sync_dir(split(path)?.0)?;
    }
    Ok(())
}

/// `path`'s folder (`.` for a bare name) and its file name, as text (a name that is not
/// UTF-8 with its bad bytes replaced: the temporary name only needs to be recognizable).
fn split(path: &Path) -> io::Result<(&Path, std::borrow::Cow<'_, str>)> {
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    Ok((dir, name))
}

/// Deletes the temporary files `.<name>.tmp<pid>-<n>` in `dir` whose writer process is gone
/// (best effort; where it cannot tell, it keeps them).
fn remove_stale_temps(dir: &Path, name: &str) {
    let Ok(entries) = fsops::file_names(dir) else {
        return;
    };
    let marker = format!(".{name}.tmp");
    let stale: Vec<PathBuf> = entries
        .into_iter()
        .filter_map(|file| {
            let (pid, n) = file.strip_prefix(&marker)?.split_once('-')?;
            let pid: u32 = pid.parse().ok()?;
            let numeric = n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty();
            (numeric && !process_alive(pid)).then(|| dir.join(file))
        })
        .collect();
    for path in stale {
        let _ = fsops::remove_file(&path);
    }
}

/// Whether process `pid` is running (this process always is; where the platform cannot
/// tell, every process is taken to be).
fn process_alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    if cfg!(target_os = "linux") {
        Path::new("/proc").join(pid.to_string()).exists()
    } else {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::local::failpoint;

    /// A process id that is not running: a child that has exited and been waited for.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn a_write_replaces_the_file_whole_and_removes_dead_writers_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        let dead = dir.path().join(format!(".checkpoint.tmp{}-3", dead_pid()));
        let live = dir
            .path()
            .join(format!(".checkpoint.tmp{}-9", std::process::id()));
        let other = dir.path().join(".other.tmp1-1");
        for planted in [&dead, &live, &other] {
            std::fs::write(planted, b"left").unwrap();
        }
        replace_whole(&path, b"new", true).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert!(!dead.exists() && live.exists() && other.exists());
    }

    #[test]
    fn a_name_that_is_not_utf8_gets_a_temporary_name_and_its_dead_writers_are_removed() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
        let dead = dir.path().join(format!(".caf\u{FFFD}.tmp{}-1", dead_pid()));
        std::fs::write(&dead, b"left").unwrap();
        let temp = temp_beside(&path).unwrap();
        assert!(!dead.exists());
        let name = temp.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with(".caf\u{FFFD}.tmp"), "{name}");
        replace_whole(&path, b"new", true).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_path_without_a_file_name_is_refused() {
        for path in ["/", "a/.."] {
            let err = temp_beside(Path::new(path)).expect_err(path);
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{path}");
            assert!(
                replace_whole(Path::new(path), b"x", false).is_err(),
                "{path}"
            );
        }
    }

    #[test]
    fn a_crash_at_any_step_leaves_the_old_file_or_the_new_one() {
        let mut outcomes = std::collections::BTreeSet::new();
        for allowed in 0.. {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("checkpoint");
            std::fs::write(&path, b"old").unwrap();
            failpoint::arm(allowed);
            let result = replace_whole(&path, b"new", true);
            let crashed = failpoint::disarm();
            let found = std::fs::read(&path).unwrap();
            assert!(found == b"old" || found == b"new", "{allowed}: {found:?}");
            if !crashed {
                result.unwrap();
                assert_eq!(found, b"new");
                break;
            }
            outcomes.insert(found);
        }
        assert!(outcomes.contains(b"old".as_slice()));
    }
}
