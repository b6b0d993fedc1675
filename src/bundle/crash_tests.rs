//! Fault injection: a save stopped at every file operation it makes (each create, write,
//! fsync, rename and delete, through [`super::fsops::failpoint`]) as a crash would stop it,
//! checking after each that the prefix holds the old checkpoint or the new one, whole, and
//! that recovery (or the next save) leaves nothing stale.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::{
    BundleReader, BundleWriter, DType, MergeFlags, MergeOptions, Recovered, SaveLock, Values,
    WriteOptions, data_path, merge_bundles, recover,
};
use crate::storage::local::failpoint;

/// With fsync (its fsyncs are crash points too) or without (faster).
const FSYNC: WriteOptions = WriteOptions { fsync: true };
const NO_FSYNC: WriteOptions = WriteOptions { fsync: false };

/// How a save writes its tensors.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// One `BundleWriter` straight onto the prefix (a plan without a merge).
    Direct,
    /// `n` parts under `<prefix>_temp/`, then a merge (TensorFlow's sharded save).
    Sharded(u32),
}

impl Shape {
    fn data_files(self) -> u32 {
        match self {
            Shape::Direct => 1,
            Shape::Sharded(n) => n,
        }
    }
}

/// Tensor `t<i>` holds `[version, i]`; every shape saves three tensors.
fn tensor(version: f32, i: u32) -> Vec<u8> {
    [version, i as f32]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

/// A save as `Session::save` with `BundleIo` runs it: lock, parts, merge, unlock.
fn save(prefix: &Path, shape: Shape, version: f32, options: WriteOptions) -> super::Result<()> {
    let _lock = SaveLock::acquire(prefix)?;
    match shape {
        Shape::Direct => {
            let mut writer = BundleWriter::with_options(prefix, options)?;
            for i in 0..3 {
                writer.add(&format!("t{i}"), DType::Float, &[2], &tensor(version, i))?;
            }
            writer.finish()
        }
        Shape::Sharded(n) => {
            let temp = PathBuf::from(super::temp_prefix(prefix.to_str().unwrap()));
            let parts: Vec<PathBuf> = (0..n).map(|shard| data_prefix(&temp, shard, n)).collect();
            for (shard, part) in (0..n).zip(&parts) {
                let mut writer = BundleWriter::with_options(part, options)?;
                for i in (0..3).filter(|i| i % n == shard) {
                    writer.add(&format!("t{i}"), DType::Float, &[2], &tensor(version, i))?;
                }
                writer.finish()?;
            }
            let options = MergeOptions {
                flags: MergeFlags::default(),
                write: options,
            };
            merge_bundles(&parts, prefix, options)
        }
    }
}

/// `<temp>-SSSSS-of-NNNNN`, a part's prefix.
fn data_prefix(temp: &Path, shard: u32, n: u32) -> PathBuf {
    let mut name = temp.as_os_str().to_owned();
    name.push(format!("-{shard:05}-of-{n:05}"));
    PathBuf::from(name)
}

/// The version every tensor of the checkpoint at `prefix` holds; panics on a mix, a missing
/// tensor or an unreadable checkpoint.
fn version(prefix: &Path) -> f32 {
    let reader = BundleReader::open(prefix).unwrap();
    let versions: BTreeSet<u32> = (0..3)
        .map(|i| {
            let Values::Bytes(bytes) = reader.read(&format!("t{i}")).unwrap().values else {
                panic!("a float tensor");
            };
            assert_eq!(bytes[4..], (i as f32).to_le_bytes());
            f32::from_le_bytes(bytes[..4].try_into().unwrap()) as u32
        })
        .collect();
    assert_eq!(versions.len(), 1, "a mix of saves: {versions:?}");
    versions.into_iter().next().unwrap() as f32
}

/// A fresh directory, in memory where there is a tmpfs: a crash is simulated by the failpoint,
/// so a real disk's fsync latency would only slow the hundreds of trials down.
fn scratch_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap()
}

/// Every file and directory under `dir`, relative.
fn listing(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            out.extend(
                listing(&path)
                    .into_iter()
                    .map(|sub| format!("{name}/{sub}")),
            );
            out.insert(format!("{name}/"));
        } else {
            out.insert(name);
        }
    }
    out
}

/// What a clean prefix holds: the index and its data files.
fn clean_listing(shape: Shape) -> BTreeSet<String> {
    let n = shape.data_files();
    let mut out: BTreeSet<String> = (0..n)
        .map(|shard| {
            let path = data_path(Path::new("ckpt"), shard, n);
            path.to_string_lossy().into_owned()
        })
        .collect();
    out.insert("ckpt.index".to_string());
    out
}

/// Crashes a save over an existing checkpoint at every file operation in turn; returns
/// (trials, old checkpoint after recovery, new checkpoint after recovery).
fn crash_everywhere(shape: Shape) -> (u64, u64, u64) {
    let (mut old, mut new) = (0, 0);
    for allowed in 0.. {
        let dir = scratch_dir();
        let prefix = dir.path().join("ckpt");
        save(&prefix, shape, 1.0, FSYNC).unwrap();
        failpoint::arm(allowed);
        let result = save(&prefix, shape, 2.0, FSYNC);
        if !failpoint::disarm() {
            result.unwrap();
            assert_eq!(version(&prefix), 2.0);
            assert_eq!(listing(dir.path()), clean_listing(shape));
            return (allowed, old, new);
        }
        let context = format!("{shape:?}, crash at operation {allowed}");
        // A reader sees the old checkpoint before the commit point and the new one after it,
        // and changes nothing. (A process killed there reports nothing; a crash after the
        // commit point leaves only cleanup undone, so the save returns success.)
        let unread = listing(dir.path());
        let found = version(&prefix);
        assert_eq!(
            listing(dir.path()),
            unread,
            "{context}: the read changed files"
        );
        assert!(
            result.is_err() || found == 2.0,
            "{context}: success, old values"
        );
        match found {
            1.0 => old += 1,
            2.0 => new += 1,
            _ => panic!("{context}: version {found}"),
        }
        // Recovery agrees with what the reader saw.
        let recovery = recover(&prefix).unwrap();
        let agrees = match recovery.merge {
            Recovered::Clean => true,
            Recovered::RolledBack => found == 1.0,
            Recovered::Completed => found == 2.0,
        };
        assert!(agrees, "{context}: read {found}, then {:?}", recovery.merge);
        assert_eq!(version(&prefix), found, "{context}");
        assert_eq!(listing(dir.path()), clean_listing(shape), "{context}");
        // The next save works over what the crash left.
        save(&prefix, shape, 3.0, FSYNC).unwrap();
        assert_eq!(version(&prefix), 3.0, "{context}");
        assert_eq!(listing(dir.path()), clean_listing(shape), "{context}");
    }
    unreachable!("the loop returns once a save runs without a crash")
}

/// After a crash the next save, not an explicit recovery, cleans up and replaces the old
/// checkpoint (the leftovers of a crash in the middle of the merge included).
fn crash_then_save(shape: Shape) -> u64 {
    for allowed in 0.. {
        let dir = scratch_dir();
        let prefix = dir.path().join("ckpt");
        save(&prefix, shape, 1.0, NO_FSYNC).unwrap();
        failpoint::arm(allowed);
        let _ = save(&prefix, shape, 2.0, NO_FSYNC);
        if !failpoint::disarm() {
            return allowed;
        }
        save(&prefix, shape, 3.0, NO_FSYNC).unwrap();
        assert_eq!(version(&prefix), 3.0, "{shape:?}, crash at {allowed}");
        assert_eq!(
            listing(dir.path()),
            clean_listing(shape),
            "{shape:?}, crash at {allowed}"
        );
    }
    unreachable!("the loop returns once a save runs without a crash")
}

/// One file operation fails (a full disk, a permission) and the save goes on to handle it:
/// the save reports the failure or succeeds, the prefix holds the old or the new checkpoint,
/// and no file of the failed save is left, with no recovery run.
fn fail_each_once(shape: Shape) -> (u64, u64) {
    let mut failed = 0;
    for allowed in 0.. {
        let dir = scratch_dir();
        let prefix = dir.path().join("ckpt");
        save(&prefix, shape, 1.0, NO_FSYNC).unwrap();
        failpoint::fail_once(allowed);
        let result = save(&prefix, shape, 2.0, NO_FSYNC);
        if !failpoint::disarm() {
            result.unwrap();
            return (allowed, failed);
        }
        let context = format!("{shape:?}, failure at operation {allowed}");
        assert_eq!(listing(dir.path()), clean_listing(shape), "{context}");
        let found = version(&prefix);
        if result.is_err() {
            failed += 1;
        }
        assert!(
            found == 2.0 || (found == 1.0 && result.is_err()),
            "{context}: version {found}, {result:?}"
        );
    }
    unreachable!("the loop returns once a save runs without a failure")
}

#[test]
fn a_failing_file_operation_leaves_the_old_or_the_new_checkpoint_and_no_leftovers() {
    for shape in [Shape::Direct, Shape::Sharded(1), Shape::Sharded(3)] {
        let (trials, failed) = fail_each_once(shape);
        assert!(failed > 0 && failed <= trials, "{shape:?}");
    }
}

#[test]
#[expect(
    clippy::print_stderr,
    reason = "prints the figures of the run, for people"
)]
fn a_crash_at_any_file_operation_leaves_the_old_or_the_new_checkpoint() {
    let mut figures = Vec::new();
    for shape in [Shape::Direct, Shape::Sharded(1), Shape::Sharded(3)] {
        let (trials, old, new) = crash_everywhere(shape);
        assert!(old > 0 && new > 0, "{shape:?}: {old} old, {new} new");
        assert_eq!(old + new, trials);
        figures.push(format!(
            "{shape:?}: {trials} crash points, {old} old, {new} new"
        ));
        let trials = crash_then_save(shape);
        figures.push(format!("{shape:?}: {trials} crash points then a save"));
    }
    // Shown with `--nocapture`.
    eprintln!("{}", figures.join("\n"));
}

/// The objects whose names start with URL `prefix`'s, by what follows it.
#[cfg(feature = "object-store")]
fn object_listing(prefix: &Path) -> BTreeSet<String> {
    let text = prefix.to_string_lossy().into_owned();
    (crate::storage::object::list(prefix).unwrap().into_iter())
        .map(|(path, _)| path.to_string_lossy()[text.len()..].to_owned())
        .collect()
}

/// A replacement of the checkpoint at an object-store prefix (`memory://`) stopped at any
/// storage operation (each put, copy and delete goes through the failpoint), once or for
/// good, from one data object to one, three to one and one to three: a reader then reads the
/// old checkpoint or the new one, whole, and the new one whenever the save said it succeeded;
/// the next save's recovery keeps what the reader read; then only the checkpoint's own
/// objects are left. (The lease of a save stopped for good is deleted by hand, as the next
/// save takes over a dead process's.)
#[cfg(feature = "object-store")]
#[test]
fn a_replacement_in_an_object_store_stopped_anywhere_is_read_whole_and_recovered_to() {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let shapes = [
        (Shape::Direct, Shape::Direct),
        (Shape::Sharded(3), Shape::Direct),
        (Shape::Direct, Shape::Sharded(3)),
    ];
    for (old, new) in shapes {
        for for_good in [false, true] {
            let mut stopped = 0;
            for allowed in 0.. {
                let n = NEXT.fetch_add(1, Ordering::Relaxed);
                let prefix = PathBuf::from(format!("memory://crash/{n}/ckpt"));
                save(&prefix, old, 1.0, NO_FSYNC).unwrap();
                match for_good {
                    true => failpoint::arm(allowed),
                    false => failpoint::fail_once(allowed),
                }
                let result = save(&prefix, new, 2.0, NO_FSYNC);
                if !failpoint::disarm() {
                    result.unwrap();
                    assert_eq!(version(&prefix), 2.0);
                    break;
                }
                stopped += 1;
                let _ = crate::storage::object::delete(&super::lock::lock_path(&prefix));
                let context = format!("{old:?} -> {new:?}, stopped at {allowed}: {result:?}");
                let read = version(&prefix);
                assert!(result.is_err() || read == 2.0, "{context}: read {read}");
                drop(SaveLock::acquire(&prefix).unwrap());
                assert_eq!(version(&prefix), read, "{context}: recovery changed it");
                let shape = if read == 2.0 { new } else { old };
                let n_files = shape.data_files();
                let mut own: BTreeSet<String> = (0..n_files)
                    .map(|shard| format!(".data-{shard:05}-of-{n_files:05}"))
                    .collect();
                own.insert(".index".into());
                assert_eq!(object_listing(&prefix), own, "{context}");
            }
            assert!(stopped > 5, "{old:?} -> {new:?}: {stopped} operations");
        }
    }
}
