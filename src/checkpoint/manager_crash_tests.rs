//! Fault injection for [`super::CheckpointManager`]: a managed save (the checkpoint's files,
//! the `checkpoint` state file, the deletes past `max_to_keep`) stopped at each file operation
//! it makes, through [`crate::storage::local::failpoint`]: one operation failing (the save goes
//! on to handle it) or every operation from one on failing (a crash). After each, the newest
//! checkpoint is whole and readable, the state file names only whole checkpoints, and the next
//! save cleans up.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::{Checkpoint, CheckpointError, CheckpointManager, ManagerOptions, Object};
use crate::bundle::{BundleReader, Values};
use crate::exec::HostTensor;
use crate::export::parse_checkpoint_state;
use crate::storage::local::failpoint;

const KEY: &str = "v/.ATTRIBUTES/VARIABLE_VALUE";

fn manager(dir: &Path) -> CheckpointManager {
    let graph = super::build_object_graph(&Object::new().child("v", &Object::variable("Variable")))
        .unwrap();
    let zero = HostTensor::from_f32s(vec![1], &[0.0]).unwrap();
    let checkpoint = Checkpoint::new(graph, BTreeMap::from([(KEY.to_owned(), zero)])).unwrap();
    let mut manager =
        CheckpointManager::new(checkpoint, dir, ManagerOptions::new(Some(2))).unwrap();
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
    let text = std::fs::read_to_string(dir.join("checkpoint")).unwrap();
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

/// The checkpoint (prefix name) each file of `dir` belongs to; `checkpoint` for the state file,
/// the whole name for anything else.
fn owners(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            match name.split_once('.') {
                Some((prefix, rest)) if rest == "index" || rest.starts_with("data-") => {
                    prefix.to_owned()
                }
                _ => name,
            }
        })
        .collect()
}

/// `names` and the state file: what a clean directory holds.
fn clean(names: &[String]) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = names.iter().cloned().collect();
    out.insert("checkpoint".to_owned());
    out
}

fn scratch_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap()
}

/// Stops the fourth save of a manager keeping 2 (it writes `ckpt-4` and deletes `ckpt-2`) at
/// operation `allowed`, once (`crash` false) or for good (`crash`: the process is then
/// considered gone, and a new manager takes the directory over). Returns whether the
/// failpoint was reached.
fn trial(allowed: u64, crash: bool) -> bool {
    let dir = scratch_dir();
    let dir = dir.path();
    let mut first = manager(dir);
    for x in 1..=3 {
        save(&mut first, x as f32).unwrap();
    }
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
        assert_eq!(owners(dir), clean(&names));
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
    // The next save (by the same manager after a failure, by a new one after a crash).
    let mut next = if crash { manager(dir) } else { first };
    save(&mut next, 5.0).unwrap_or_else(|err| panic!("{context}: the next save: {err}"));
    let (newest, names) = check_state(dir, &context);
    assert_eq!(newest, 5.0, "{context}");
    assert_eq!(names.len(), 2, "{context}: {names:?}");
    let mut left = owners(dir);
    if crash {
        // A process killed after the state file dropped `ckpt-2` and before its files were
        // deleted leaves them (the state file never names them again): the only leftover.
        left.remove("ckpt-2");
        // The state file's temporary of a write the crash stopped: the next write deletes
        // those of processes that are gone (`bundle::small_file`), and this one is not gone.
        let ours = format!(".checkpoint.tmp{}-", std::process::id());
        left.retain(|name| !name.starts_with(&ours));
    }
    assert_eq!(left, clean(&names), "{context}");
    true
}

#[test]
fn a_managed_save_stopped_at_any_file_operation_keeps_the_state_file_true() {
    for crash in [false, true] {
        let mut trials = 0;
        while trial(trials, crash) {
            trials += 1;
        }
        assert!(trials > 10, "{trials} operations");
    }
}
