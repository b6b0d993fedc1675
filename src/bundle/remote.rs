//! Checkpoints in object stores (a prefix that is a URL): the commit protocol on stores
//! without rename, the save lease, reading views and cleanup. `ARCHITECTURE.md`, "Object
//! stores", states what is guaranteed and what costs a copy.
//!
//! - **Writing**: a writer or merge whose prefix is a URL works on a local *spool* prefix
//!   (`$TMPDIR/saveplan-spool-<pid>/<scheme>/<bucket>/<key>`) with the local machinery (same
//!   bytes), then `publish`es the finished bundle. TensorFlow's temporary parts
//!   (`<prefix>.part-NNNNN-of-NNNNN` for `s3://`, `<prefix>_temp/part-…`) stay in the spool for
//!   the merge that follows, so they are never visible in the store.
//! - **Commit** (`publish`): the data objects first (multipart when large), the `.index` last.
//!   A bundle written at its URL prefix (not a temporary part) streams its data straight into
//!   the data object's upload (`storage::object::Upload`, parts sent as they fill; the spool
//!   keeps the index and an empty data file): a multipart upload is invisible until
//!   completed, so completing it takes the place of the upload in this order, after the
//!   backups and journal of an existing prefix.
//!   At a new prefix the index is a conditional put (`PutMode::Create`): its landing is the
//!   commit point, and a second writer's index fails. At an existing prefix, the old index and
//!   data objects are first copied (in the store) to backups `….old-<id>`, then a journal
//!   `<prefix>.merging` naming them is put; readers that find the journal read the backups
//!   (the old checkpoint, whole) while the new data and index are put over the old names; the
//!   journal's deletion is the commit point, then the backups are deleted.
//! - **Recovery** (each save, under the lease): a journal left by a killed save is rolled back
//!   (backups copied over the final names, the index last; then the journal and backups
//!   deleted), and every leftover of the prefix (backups, data objects no index names, stray
//!   parts) is deleted. A journal that cannot be read stops it, nothing deleted.
//! - **Lease** ([`Lease`]): `<prefix>.lock`, put with `PutMode::Create`, holds its owner (host,
//!   pid) and an expiry; a second writer fails in one line while it is live, and takes it over
//!   (conditional on its entity tag) once expired, or at once when its owner is a process of
//!   the same machine that is gone (a killed save). Renewed every third of its life while the
//!   save runs; deleted when the save ends.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::storage::{self, object, object::Put};

use super::error::{BundleError, Result};
use super::remote_view::{MAGIC, journal_path, parse_journal, with_suffix};
use super::{data_path, index_path};

/// How long a save lease lasts.
pub const LEASE: Duration = Duration::from_secs(15 * 60);

/// Whether `prefix` names a checkpoint in an object store.
pub fn is_remote(prefix: &Path) -> bool {
    storage::is_url(prefix)
}

/// The local spool prefix a URL prefix is written through.
pub(crate) fn spool(url: &Path) -> PathBuf {
    let text = url.to_string_lossy();
    let (scheme, rest) = text.split_once("://").unwrap_or(("file", &text));
    spool_root().join(scheme).join(rest.trim_start_matches('/'))
}

/// This process's spool directory; spools of processes that are gone are deleted first.
fn spool_root() -> PathBuf {
    static CLEANED: std::sync::Once = std::sync::Once::new();
    let tmp = std::env::temp_dir();
    CLEANED.call_once(|| {
        let Ok(entries) = crate::storage::local::file_names(&tmp) else {
            return;
        };
        for name in entries {
            let Some(pid) = name.strip_prefix("saveplan-spool-") else {
                continue;
            };
            let gone = pid
                .parse::<u32>()
                .is_ok_and(|pid| pid != std::process::id() && !process_alive(pid));
            if gone {
                let _ = crate::storage::local::remove_tree(&tmp.join(&name));
            }
        }
    });
    tmp.join(format!("saveplan-spool-{}", std::process::id()))
}

fn process_alive(pid: u32) -> bool {
    !cfg!(target_os = "linux") || Path::new("/proc").join(pid.to_string()).exists()
}

/// Whether `prefix` is one of TensorFlow's temporary part prefixes
/// (`….part-NNNNN-of-NNNNN`, `…_temp/part-…`, `…_temp_<id>/part-…`): kept in the spool for
/// the merge.
pub(crate) fn is_temp_part(prefix: &Path) -> bool {
    let text = prefix.to_string_lossy();
    let shard = |rest: &str| {
        let b = rest.as_bytes();
        rest.len() == 14
            && &rest[5..9] == "-of-"
            && b[..5].iter().chain(&b[9..]).all(u8::is_ascii_digit)
    };
    if let Some((_, rest)) = text.rsplit_once(".part-") {
        return shard(rest);
    }
    match text.rsplit_once('/') {
        Some((dir, name)) => {
            let dir_name = dir.rsplit('/').next().unwrap_or(dir);
            name.strip_prefix("part-").is_some_and(shard)
                && (dir_name.ends_with("_temp") || dir_name.contains("_temp_"))
        }
        None => false,
    }
}

fn url_io<'a>(path: &'a Path, op: &'static str) -> impl Fn(std::io::Error) -> BundleError + 'a {
    move |err| BundleError::io(path, op, err)
}

/// The number of data files of the finished local bundle at `local_prefix`: told by their
/// names (`<prefix>.data-SSSSS-of-NNNNN`; the spool holds one bundle per prefix), without
/// reading its index; from the index when no data file is there.
fn shards_of(local_prefix: &Path) -> Result<u32> {
    let dir = local_prefix.parent().unwrap_or(Path::new("."));
    let name = local_prefix
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let names = crate::storage::local::file_names(dir).unwrap_or_default();
    let totals: std::collections::BTreeSet<u32> = names
        .iter()
        .filter_map(|file| file.strip_prefix(&name)?.strip_prefix(".data-"))
        .filter(|rest| is_shard_name(rest))
        .filter_map(|rest| rest[9..].parse().ok())
        .collect();
    match totals.len() {
        1 => Ok(totals.into_iter().next().unwrap_or(1)),
        _ => Ok(super::reader::read_index(&index_path(local_prefix))?.num_shards),
    }
}

/// Publishes the finished local bundle at `local` as the checkpoint at URL `url` (module
/// docs), then deletes the local files. `streamed`: the upload of its one data object, fed
/// while the bundle was written (parts sent, nothing landed yet; the spool's data file is
/// empty), which completing stands for uploading that file.
pub(crate) fn publish(local: &Path, url: &Path, streamed: Option<object::Upload>) -> Result<()> {
    let num_shards = match streamed {
        Some(_) => 1,
        None => shards_of(local)?,
    };
    let index = index_path(url);
    let existing = object::head(&index).map_err(url_io(&index, "look up"))?;
    let mut streamed = streamed;
    let mut upload_data = || -> Result<()> {
        for shard in 0..num_shards {
            let from = data_path(local, shard, num_shards);
            let to = data_path(url, shard, num_shards);
            match streamed.take() {
                Some(upload) => upload.complete(),
                None => object::upload_file(&from, &to),
            }
            .map_err(url_io(&to, "upload"))?;
        }
        Ok(())
    };
    let index_bytes = crate::storage::local::read(&index_path(local))
        .map_err(|err| BundleError::io(index_path(local), "read", err))?;
    match existing {
        None => {
            upload_data()?;
            object::put(&index, index_bytes, Put::Create).map_err(url_io(&index, "commit"))?;
        }
        Some(_) => {
            let id = unique_id();
            let old = objects_of(url)?;
            let backups: Vec<(PathBuf, PathBuf)> = old
                .iter()
                .map(|path| (path.clone(), with_suffix(path, &format!(".old-{id}"))))
                .collect();
            for (from, to) in &backups {
                object::copy(from, to).map_err(url_io(from, "back up"))?;
            }
            let journal = journal_path(url);
            let mut text = format!("{MAGIC}\n");
            for (from, to) in &backups {
                text.push_str(&format!("{}\t{}\n", from.display(), to.display()));
            }
            object::put(&journal, text.into_bytes(), Put::Create)
                .map_err(url_io(&journal, "write journal"))?;
            upload_data()?;
            object::put(&index, index_bytes, Put::Overwrite).map_err(url_io(&index, "write"))?;
            // Committed: from here on readers read the new checkpoint.
            object::delete(&journal).map_err(url_io(&journal, "commit"))?;
            let new: Vec<PathBuf> = (0..num_shards)
                .map(|shard| data_path(url, shard, num_shards))
                .collect();
            for (from, backup) in &backups {
                let _ = object::delete(backup);
                if *from != index && !new.contains(from) {
                    let _ = object::delete(from);
                }
            }
        }
    }
    remove_local_bundle(local, num_shards);
    Ok(())
}

/// Deletes a spooled bundle's files (best effort).
fn remove_local_bundle(local: &Path, num_shards: u32) {
    let _ = crate::storage::local::remove_file(&index_path(local));
    for shard in 0..num_shards {
        let _ = crate::storage::local::remove_file(&data_path(local, shard, num_shards));
    }
}

fn unique_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    format!(
        "{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The index and data objects of the checkpoint at `url` (what a backup copies).
fn objects_of(url: &Path) -> Result<Vec<PathBuf>> {
    let text = url.to_string_lossy().into_owned();
    let listed = object::list(url).map_err(url_io(url, "list"))?;
    let mut found: Vec<PathBuf> = listed
        .into_iter()
        .map(|(path, _)| path)
        .filter(|path| {
            let rest = path.to_string_lossy();
            let rest = rest.strip_prefix(&text).unwrap_or_default();
            rest == ".index" || rest.strip_prefix(".data-").is_some_and(is_shard_name)
        })
        .collect();
    // The index last, so a roll back puts it back after the data.
    found.sort_by_key(|path| path.to_string_lossy().ends_with(".index"));
    Ok(found)
}

fn is_shard_name(rest: &str) -> bool {
    rest.len() == 14
        && &rest[5..9] == "-of-"
        && rest
            .bytes()
            .take(5)
            .chain(rest.bytes().skip(9))
            .all(|b| b.is_ascii_digit())
}

/// Rolls back a journal left at URL `prefix` by a killed save, then deletes the prefix's
/// leftovers; returns what was deleted. Callers hold the lease.
pub(crate) fn recover(prefix: &Path) -> Result<(super::Recovered, Vec<PathBuf>)> {
    let journal = journal_path(prefix);
    let mut merge = super::Recovered::Clean;
    // One listing tells whether there is a journal and what is left over; the journal's
    // roll back changes the objects, so they are listed again after it.
    let mut listed = object::list(prefix).map_err(url_io(prefix, "list"))?;
    let has_journal = listed.iter().any(|(path, _)| *path == journal);
    // A journal that cannot be read stops the recovery: taken for none, its backups (the
    // only copy of the previous checkpoint once new data is put) would go as leftovers.
    let bytes = match has_journal.then(|| storage::read(&journal)) {
        Some(Err(err)) if err.kind() != std::io::ErrorKind::NotFound => {
            return Err(BundleError::io(&journal, "read", err));
        }
        Some(read) => read.ok(),
        None => None,
    };
    if let Some(bytes) = bytes {
        for (from, backup) in parse_journal(&journal, &bytes)? {
            if object::head(&backup)
                .map_err(url_io(&backup, "look up"))?
                .is_some()
            {
                object::copy(&backup, &from).map_err(url_io(&backup, "roll back"))?;
            }
        }
        object::delete(&journal).map_err(url_io(&journal, "delete"))?;
        merge = super::Recovered::RolledBack;
        listed = object::list(prefix).map_err(url_io(prefix, "list"))?;
    }
    let mut removed = Vec::new();
    for path in leftovers_of(prefix, listed)? {
        if object::delete(&path).is_ok() {
            removed.push(path);
        }
    }
    Ok((merge, removed))
}

/// The leftovers of saves at URL `prefix`: backups, stray parts and temporary objects, and
/// data objects that its index (if any) does not name. Never another checkpoint's objects.
pub(crate) fn leftovers(prefix: &Path) -> Result<Vec<PathBuf>> {
    let listed = object::list(prefix).map_err(url_io(prefix, "list"))?;
    leftovers_of(prefix, listed)
}

/// [`leftovers`] among the objects `listed` (the listing of `prefix`). The index is read only
/// when the data objects there are of more than one bundle (their names say different numbers
/// of shards): else they are all the index's, or, without an index, all leftovers.
fn leftovers_of(prefix: &Path, listed: Vec<(PathBuf, u64)>) -> Result<Vec<PathBuf>> {
    let text = prefix.to_string_lossy().into_owned();
    let index = index_path(prefix);
    let has_index = listed.iter().any(|(path, _)| *path == index);
    let totals: std::collections::BTreeSet<u32> = listed
        .iter()
        .filter_map(|(path, _)| {
            let name = path.to_string_lossy();
            let shard = name.strip_prefix(&text)?.strip_prefix(".data-")?;
            is_shard_name(shard).then(|| shard[9..].parse().ok())?
        })
        .collect();
    let num_shards = if has_index && totals.len() <= 1 {
        totals.first().copied()
    } else if has_index {
        match read_index_remote(&index) {
            Ok(num) => Some(num),
            Err(_) => return Ok(Vec::new()),
        }
    } else {
        None
    };
    let found = listed
        .into_iter()
        .map(|(path, _)| path)
        .filter(|path| {
            let name = path.to_string_lossy();
            let Some(rest) = name.strip_prefix(&text) else {
                return false;
            };
            if rest.contains(".old-") && (rest.starts_with(".index") || rest.starts_with(".data-"))
            {
                return true;
            }
            if let Some(shard) = rest.strip_prefix(".data-") {
                if !is_shard_name(shard) {
                    return false;
                }
                let total: u32 = shard[9..].parse().unwrap_or(0);
                return num_shards != Some(total);
            }
            rest.starts_with(".part-") || rest.starts_with("_temp/") || rest.starts_with("_temp_")
        })
        .collect();
    Ok(found)
}

fn read_index_remote(index: &Path) -> Result<u32> {
    Ok(super::reader::read_index(index)?.num_shards)
}

/// Deletes the checkpoint at URL `prefix`: its index first, then its data objects.
pub(crate) fn delete_checkpoint(prefix: &Path) -> Result<Vec<PathBuf>> {
    let mut deleted = Vec::new();
    let index = index_path(prefix);
    if object::head(&index)
        .map_err(url_io(&index, "look up"))?
        .is_some()
    {
        object::delete(&index).map_err(url_io(&index, "delete"))?;
        deleted.push(index);
    }
    for path in leftovers(prefix)? {
        object::delete(&path).map_err(url_io(&path, "delete"))?;
        deleted.push(path);
    }
    Ok(deleted)
}

/// A save's lease on a URL prefix: the object `<prefix>.lock` (module docs).
#[derive(Debug)]
pub struct Lease {
    path: PathBuf,
    /// Dropped to stop the thread that renews the lease.
    renewing: Option<(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>)>,
}

impl Lease {
    /// Takes the lease on `prefix`, or fails with [`BundleError::Locked`] while another save
    /// holds a live one.
    pub fn take(prefix: &Path) -> Result<Lease> {
        let path = with_suffix(prefix, ".lock");
        let expires = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |now| (now + LEASE).as_secs());
        let owner = format!(
            "host {} pid {} id {}",
            storage::local::host_name(),
            std::process::id(),
            unique_id()
        );
        let body = lease_body(&owner, expires);
        for _ in 0..3 {
            match object::put(&path, body.clone(), Put::Create) {
                Ok(_) => return Ok(Lease::held(path, owner)),
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(err) => return Err(BundleError::io(&path, "take the save lease", err)),
            }
            let Some(meta) = object::head(&path).map_err(url_io(&path, "look up"))? else {
                continue;
            };
            let held = storage::read(&path).unwrap_or_default();
            let held = String::from_utf8_lossy(&held);
            let until: u64 = held
                .lines()
                .find_map(|line| line.strip_prefix("expires "))
                .and_then(|secs| secs.trim().parse().ok())
                .unwrap_or(0);
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |now| now.as_secs());
            let holder = held.lines().nth(1).unwrap_or("?");
            if until > now && !owner_is_gone(holder) {
                return Err(BundleError::Locked {
                    path: prefix.to_path_buf(),
                    owner: holder.to_string(),
                    seconds: until - now,
                });
            }
            // Expired: take it over, unless someone else just did.
            let taken = match meta.e_tag {
                Some(tag) => object::put(&path, body.clone(), Put::Update(tag)),
                None => object::delete(&path).map(|()| None),
            };
            match taken {
                Ok(_) if meta_matches_body(&path, &body) => return Ok(Lease::held(path, owner)),
                Ok(_) => {}
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(err) => return Err(BundleError::io(&path, "take the save lease", err)),
            }
        }
        Err(BundleError::io(
            &path,
            "take the save lease",
            std::io::Error::other("other saves keep taking it"),
        ))
    }
}

/// Whether a lease's `owner` line names a process of this machine that is no longer running
/// (a killed save: its lease need not run out).
fn owner_is_gone(owner: &str) -> bool {
    let mut words = owner.split_whitespace();
    let (Some("host"), Some(host), Some("pid"), Some(pid)) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return false;
    };
    let here = storage::local::host_name();
    !here.is_empty()
        && host == here
        && pid
            .parse::<u32>()
            .is_ok_and(|pid| pid != std::process::id() && !process_alive(pid))
}

fn meta_matches_body(path: &Path, body: &[u8]) -> bool {
    storage::read(path).is_ok_and(|held| held == body)
}

impl Lease {
    /// The lease at `path`, held by `owner`, renewed every third of [`LEASE`] by a thread of
    /// its own until it is dropped (so a save longer than the lease keeps it).
    fn held(path: PathBuf, owner: String) -> Lease {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let at = path.clone();
        let renew = move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(LEASE / 3)
            {
                let expires = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |now| (now + LEASE).as_secs());
                let _ = object::put(&at, lease_body(&owner, expires), Put::Overwrite);
            }
        };
        let renewing = std::thread::Builder::new()
            .name("saveplan-lease".into())
            .spawn(renew)
            .ok()
            .map(|thread| (stop, thread));
        Lease { path, renewing }
    }
}

/// The content of a lease object.
fn lease_body(owner: &str, expires: u64) -> Vec<u8> {
    format!("saveplan lease 1\n{owner}\nexpires {expires}\n").into_bytes()
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some((stop, thread)) = self.renewing.take() {
            drop(stop);
            let _ = thread.join();
        }
        // Tried twice: a lease left behind holds its prefix until it expires.
        if object::delete(&self.path).is_err() {
            let _ = object::delete(&self.path);
        }
    }
}
