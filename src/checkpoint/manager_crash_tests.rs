//! Fault injection for [`super::CheckpointManager`]: a managed save (the checkpoint's files,
//! the delete journal, the `checkpoint` state file, the deletes past `max_to_keep`) stopped at
//! each file or object operation it makes, through [`crate::storage::local::failpoint`]: one
//! operation failing (the save goes on to handle it) or every operation from one on failing (a
//! crash). After each, the newest checkpoint is whole and readable, the state file names only
//! whole checkpoints, and the next save cleans up: no file of a dropped checkpoint is left,
//! and none of a checkpoint `keep_checkpoint_every_n_hours` kept is deleted. On a local
//! directory and on an object store (`memory://`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Checkpoint, CheckpointError, CheckpointManager, ManagerOptions, Object};
use crate::bundle::{BundleReader, Values};
use crate::exec::HostTensor;
use crate::export::parse_checkpoint_state;
use crate::storage::local::failpoint;

const KEY: &str = "v/.ATTRIBUTES/VARIABLE_VALUE";

/// A manager keeping 2 (and, with `keep_hours`, one checkpoint an hour) whose clock reads
/// `clock` seconds.
fn manager(dir: &Path, keep_hours: bool, clock: &Arc<AtomicU64>) -> CheckpointManager {
    let graph = super::build_object_graph(&Object::new().child("v", &Object::variable("Variable")))
        .unwrap();
    let zero = HostTensor::from_f32s(vec![1], &[0.0]).unwrap();
    let checkpoint = Checkpoint::new(graph, BTreeMap::from([(KEY.to_owned(), zero)])).unwrap();
    let clock = Arc::clone(clock);
    let mut options =
        ManagerOptions::new(Some(2)).with_clock(move || clock.load(Ordering::Relaxed) as f64);
    if keep_hours {
        options = options.with_keep_every_n_hours(1.0);
    }
    let mut manager = CheckpointManager::new(checkpoint, dir, options).unwrap();
    manager.restore_or_initialize(|_| Ok(())).unwrap();
    manager
}

fn save(manager: &mut CheckpointManager, x: f32) -> Result<(), CheckpointError> {
    let value = HostTensor::from_f32s(vec![1], &[x]).unwrap();
    manager.checkpoint_mut().set_value(KEY, value).unwrap();
    manager.save(None, false).map(|_| ())
}

/// The value saved in the checkpoint `name` of `dir`; panics unless it is whole and readable.
fn value(dir: &Path, name: &str) -> f32 {
    let reader = BundleReader::open(dir.join(name)).unwrap_or_else(|err| panic!("{name}: {err}"));
    let Values::Bytes(bytes) = reader
        .read(KEY)
        .unwrap_or_else(|err| panic!("{name}: {err}"))
        .values
    else {
        panic!("{name}: not a float tensor");
    };
    f32::from_le_bytes(bytes[..4].try_into().unwrap())
}

/// The state file's newest checkpoint and its list, each checked whole and readable; the
/// newest's value.
fn check_state(dir: &Path, context: &str) -> (f32, Vec<String>) {
    let text = crate::storage::read_to_string(&dir.join("checkpoint")).unwrap();
    let state = parse_checkpoint_state(&text).unwrap();
    for name in &state.all_model_checkpoint_paths {
        let _ = value(dir, name);
    }
    assert!(
        state
            .all_model_checkpoint_paths
            .contains(&state.model_checkpoint_path),
        "{context}: {text}"
    );
    (
        value(dir, &state.model_checkpoint_path),
        state.all_model_checkpoint_paths,
    )
}

/// The names of the files (or objects) in `dir`.
fn names_in(dir: &Path) -> Vec<String> {
    if !crate::storage::is_url(dir) {
        return crate::storage::local::file_names(dir).unwrap();
    }
    let inside = format!("{}/", dir.display());
    crate::storage::object::list(dir)
        .unwrap()
        .into_iter()
        .filter_map(|(path, _)| Some(path.to_str()?.strip_prefix(&inside)?.to_owned()))
        .collect()
}

/// The checkpoint (prefix name) each file of `dir` belongs to; `checkpoint` for the state file,
/// the whole name for anything else.
fn owners(dir: &Path) -> BTreeSet<String> {
    names_in(dir)
        .into_iter()
        .map(|name| match name.split_once('.') {
            Some((prefix, rest)) if rest == "index" || rest.starts_with("data-") => {
                prefix.to_owned()
            }
            _ => name,
        })
        .collect()
}

/// `names` and the state file: what a clean directory holds.
fn clean(names: &[String]) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = names.iter().cloned().collect();
    out.insert("checkpoint".to_owned());
    out
}

/// Where a trial's checkpoints go.
enum Scratch {
    Local(tempfile::TempDir),
    Object(PathBuf),
}

impl Scratch {
    /// A fresh local directory (in memory where there is a tmpfs), or a fresh "directory" of
    /// the `memory://` store.
    fn new(object: bool) -> Scratch {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        if object {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            return Scratch::Object(PathBuf::from(format!("memory://manager/trial-{n:06}")));
        }
        let dir = tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        Scratch::Local(dir)
    }

    fn path(&self) -> &Path {
        match self {
            Scratch::Local(dir) => dir.path(),
            Scratch::Object(url) => url,
        }
    }
}

/// What a process killed in a save leaves that the next process takes over at once: on an
/// object store, the save leases of its prefixes (a lease whose owner is a process that is
/// gone is taken over; this process is not gone, so the test deletes them as if it were).
fn as_if_gone(dir: &Path) {
    if crate::storage::is_url(dir) {
        for name in names_in(dir).iter().filter(|name| name.ends_with(".lock")) {
            crate::storage::object::delete(&dir.join(name)).unwrap();
        }
    }
}

/// Stops the fourth save of a manager keeping 2 (it writes `ckpt-4` and deletes `ckpt-2`) at
/// operation `allowed`, once (`crash` false) or for good (`crash`: the process is then
/// considered gone, and a new manager takes the directory over). With `keep_hours` the
/// manager also keeps one checkpoint an hour: the third save drops `ckpt-1` from the state
/// file but keeps its files, which nothing may delete. On the `memory://` store when
/// `object`. Returns whether the failpoint was reached.
fn trial(allowed: u64, crash: bool, keep_hours: bool, object: bool) -> bool {
    let scratch = Scratch::new(object);
    let dir = scratch.path();
    // The first checkpoint an hour after the manager starts (kept by `keep_hours`), the
    // others a second apart.
    let clock = Arc::new(AtomicU64::new(0));
    let mut first = manager(dir, keep_hours, &clock);
    for x in 1..=3 {
        clock.store(3599 + x, Ordering::Relaxed);
        save(&mut first, x as f32).unwrap();
    }
    let kept: Vec<String> = match keep_hours {
        true => vec!["ckpt-1".to_owned()],
        false => Vec::new(),
    };
    let check_kept = |context: &str| {
        for name in &kept {
            assert_eq!(value(dir, name), 1.0, "{context}: {name}");
        }
    };
    clock.store(3603, Ordering::Relaxed);
    if crash {
        failpoint::arm(allowed);
    } else {
        failpoint::fail_once(allowed);
    }
    let result = save(&mut first, 4.0);
    if !failpoint::disarm() {
        result.unwrap();
        let (newest, names) = check_state(dir, "no failure");
        assert_eq!(newest, 4.0);
        assert_eq!(names, ["ckpt-3", "ckpt-4"]);
        assert_eq!(owners(dir), clean(&[&names[..], &kept[..]].concat()));
        check_kept("no failure");
        return false;
    }
    let context = format!(
        "{} at operation {allowed}",
        if crash { "crash" } else { "failure" }
    );
    let (newest, _) = check_state(dir, &context);
    assert!(
        newest == 4.0 || (newest == 3.0 && result.is_err()),
        "{context}: newest {newest}, {result:?}"
    );
    check_kept(&context);
    // The next save (by the same manager after a failure, by a new one after a crash).
    clock.store(3604, Ordering::Relaxed);
    let mut next = match crash {
        true => {
            drop(first);
            as_if_gone(dir);
            manager(dir, keep_hours, &clock)
        }
        false => first,
    };
    save(&mut next, 5.0).unwrap_or_else(|err| panic!("{context}: the next save: {err}"));
    let (newest, names) = check_state(dir, &context);
    assert_eq!(newest, 5.0, "{context}");
    assert_eq!(names.len(), 2, "{context}: {names:?}");
    check_kept(&context);
    let mut left = owners(dir);
    if crash {
        // The temporaries of the state file's or the journal's write the crash stopped: the
        // next write deletes those of processes that are gone (`bundle::small_file`), and
        // this one is not gone.
        let ours = format!(".tmp{}-", std::process::id());
        left.retain(|name| !(name.starts_with('.') && name.contains(&ours)));
    }
    assert_eq!(left, clean(&[&names[..], &kept[..]].concat()), "{context}");
    true
}

/// Every operation of the fourth save stopped, once and for good, in `trial`.
fn every_operation(keep_hours: bool, object: bool) {
    for crash in [false, true] {
        let mut trials = 0;
        while trial(trials, crash, keep_hours, object) {
            trials += 1;
        }
        assert!(trials > 10, "{trials} operations");
    }
}

#[test]
fn a_managed_save_stopped_at_any_file_operation_keeps_the_state_file_true() {
    every_operation(false, false);
}

#[test]
fn a_managed_save_stopped_at_any_operation_leaves_no_dropped_and_deletes_no_kept_checkpoint() {
    every_operation(true, false);
}

#[test]
fn a_managed_save_on_an_object_store_stopped_at_any_operation_leaves_no_dropped_checkpoint() {
    every_operation(true, true);
}
