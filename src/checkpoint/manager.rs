//! [`CheckpointManager`], `tf.train.CheckpointManager` (FORMATS.md 13.8, 13.9): numbered saves
//! of one [`Checkpoint`] into a directory, keeping the newest `max_to_keep` (and one every
//! `keep_checkpoint_every_n_hours`), the `checkpoint` state file with timestamps, saving only
//! every `checkpoint_interval` steps, and taking over a directory another manager wrote.
//!
//! Timestamps come from a [`Clock`] (by default [`system_time`]), so a fixed clock reproduces
//! TensorFlow's files exactly. After each write the manager does what TensorFlow's write
//! callback does, in an order that keeps the state file true at every step: records the new
//! checkpoint with the time, drops the checkpoints past `max_to_keep` from the books, writes the
//! *delete journal* `<directory>/checkpoint.deleting` naming the dropped checkpoints whose
//! files are to be deleted (synced), writes the state file (the new checkpoint and the kept
//! ones: every checkpoint it names exists, whole), deletes the dropped checkpoints (their
//! `.index`, then `.data-?????-of-?????` files), then deletes the journal.
//! TensorFlow writes the state file once before the deletes, still naming the dropped
//! checkpoints, and once after; its last file is the same (the journal is ours: TensorFlow
//! ignores it). A delete that fails is tried again by the manager's next save, which also
//! deletes what a failed write left (a write can fail after its checkpoint landed: the manager
//! never names it, so it must not stay). A process killed between the state file and the
//! deletes leaves the journal: a manager created over the directory takes over the checkpoints
//! it names that the state file does not (a kill before the state file was written leaves them
//! named, managed, and not deleted), and its first save deletes them. The journal names only
//! checkpoints the manager dropped, never one kept by `keep_checkpoint_every_n_hours`, which
//! also leaves the state file; and it is rewritten before every state file, so a checkpoint
//! saved again under a dropped name leaves it before the state file names it. With an
//! asynchronous checkpoint
//! ([`Checkpoint::with_async`]) this runs on the writer thread after the files are written;
//! [`CheckpointManager::sync`] waits for it.
//!
//! ```
//! use std::collections::BTreeMap;
//! use saveplan::checkpoint::{Checkpoint, CheckpointManager, ManagerOptions, Object,
//!                            build_object_graph};
//! use saveplan::exec::HostTensor;
//!
//! let dir = tempfile::tempdir()?;
//! let graph = build_object_graph(&Object::new().child("v", &Object::variable("Variable")))?;
//! let values = BTreeMap::from([(
//!     "v/.ATTRIBUTES/VARIABLE_VALUE".to_owned(),
//!     HostTensor::from_f32s(vec![1], &[1.0])?,
//! )]);
//! let checkpoint = Checkpoint::new(graph, values)?.with_async(true);
//! let mut manager = CheckpointManager::new(checkpoint, dir.path(), ManagerOptions::new(Some(2)))?;
//! for step in 1..=3 {
//!     let value = HostTensor::from_f32s(vec![1], &[step as f32])?;
//!     manager.checkpoint_mut().set_value("v/.ATTRIBUTES/VARIABLE_VALUE", value)?;
//!     manager.save(None, true)?;
//! }
//! manager.sync()?;
//! assert_eq!(manager.checkpoints(), [dir.path().join("ckpt-2"), dir.path().join("ckpt-3")]);
//! assert!(!dir.path().join("ckpt-1.index").exists());
//!
//! // A new manager over the directory restores the newest checkpoint.
//! let graph = build_object_graph(&Object::new().child("v", &Object::variable("Variable")))?;
//! let zeros = BTreeMap::from([(
//!     "v/.ATTRIBUTES/VARIABLE_VALUE".to_owned(),
//!     HostTensor::from_f32s(vec![1], &[0.0])?,
//! )]);
//! let mut fresh =
//!     CheckpointManager::new(Checkpoint::new(graph, zeros)?, dir.path(), ManagerOptions::new(Some(2)))?;
//! assert_eq!(fresh.restore_or_initialize(|_| Ok(()))?, Some(dir.path().join("ckpt-3")));
//! assert_eq!(fresh.checkpoint().save_counter(), Some(3));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use saveplan_ir::DType;

use super::tf_checkpoint::write_state;
use super::{Checkpoint, CheckpointError, STATE_FILE};
use crate::exec::HostTensor;
use crate::exec::sync::lock;
use crate::export::{CheckpointState, parse_checkpoint_state};

/// Where a [`CheckpointManager`] takes its timestamps from (seconds since the Unix epoch, as
/// Python's `time.time()`). Any `Fn() -> f64` is a clock.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> f64;
}

impl<F: Fn() -> f64 + Send + Sync> Clock for F {
    fn now(&self) -> f64 {
        self()
    }
}

/// The system clock: seconds since the Unix epoch (0 before it), the default [`Clock`].
pub fn system_time() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

/// How a [`CheckpointManager`] names, keeps and times checkpoints (the arguments of
/// `tf.train.CheckpointManager`).
#[derive(Clone)]
pub struct ManagerOptions {
    /// How many checkpoints to keep; `None` keeps all. 0 is an error.
    pub max_to_keep: Option<usize>,
    /// The name of the checkpoints: `<directory>/<checkpoint_name>-<N>`; `ckpt` by default.
    pub checkpoint_name: String,
    /// Keep one checkpoint every this many hours past `max_to_keep`.
    pub keep_checkpoint_every_n_hours: Option<f64>,
    /// The checkpoint key of the step counter, an int32 or int64 scalar value of the
    /// checkpoint (`step_counter`).
    pub step_counter: Option<String>,
    /// Save only when the step counter advanced this many steps since the last save
    /// (`checkpoint_interval`); needs a step counter.
    pub checkpoint_interval: Option<i64>,
    /// The clock of the timestamps.
    pub clock: Arc<dyn Clock>,
}

impl ManagerOptions {
    /// Keeping `max_to_keep` checkpoints named `ckpt`, no interval, the system clock.
    pub fn new(max_to_keep: Option<usize>) -> ManagerOptions {
        ManagerOptions {
            max_to_keep,
            checkpoint_name: "ckpt".to_owned(),
            keep_checkpoint_every_n_hours: None,
            step_counter: None,
            checkpoint_interval: None,
            clock: Arc::new(system_time),
        }
    }

    /// The same options naming checkpoints `name`.
    pub fn with_checkpoint_name(mut self, name: impl Into<String>) -> ManagerOptions {
        self.checkpoint_name = name.into();
        self
    }

    /// The same options also keeping one checkpoint every `hours`.
    pub fn with_keep_every_n_hours(mut self, hours: f64) -> ManagerOptions {
        self.keep_checkpoint_every_n_hours = Some(hours);
        self
    }

    /// The same options saving every `interval` steps of the step counter saved under
    /// `step_counter` (a checkpoint key).
    pub fn with_interval(
        mut self,
        step_counter: impl Into<String>,
        interval: i64,
    ) -> ManagerOptions {
        self.step_counter = Some(step_counter.into());
        self.checkpoint_interval = Some(interval);
        self
    }

    /// The same options taking timestamps from `clock`.
    pub fn with_clock(mut self, clock: impl Clock + 'static) -> ManagerOptions {
        self.clock = Arc::new(clock);
        self
    }
}

impl fmt::Debug for ManagerOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagerOptions")
            .field("max_to_keep", &self.max_to_keep)
            .field("checkpoint_name", &self.checkpoint_name)
            .field(
                "keep_checkpoint_every_n_hours",
                &self.keep_checkpoint_every_n_hours,
            )
            .field("step_counter", &self.step_counter)
            .field("checkpoint_interval", &self.checkpoint_interval)
            .finish_non_exhaustive()
    }
}

/// `tf.train.CheckpointManager` over one [`Checkpoint`], which it owns
/// ([`CheckpointManager::checkpoint_mut`] changes its values,
/// [`CheckpointManager::into_checkpoint`] gives it back).
pub struct CheckpointManager {
    checkpoint: Checkpoint,
    prefix: String,
    step_counter: Option<String>,
    checkpoint_interval: Option<i64>,
    last_checkpoint_step: Option<i64>,
    books: Arc<Books>,
}

impl fmt::Debug for CheckpointManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckpointManager")
            .field("prefix", &self.prefix)
            .field("checkpoints", &self.checkpoints())
            .finish_non_exhaustive()
    }
}

/// What the write callback needs: the directory, the retention rules, the clock and the
/// managed checkpoints.
struct Books {
    directory: PathBuf,
    max_to_keep: Option<usize>,
    keep_checkpoint_every_n_hours: Option<f64>,
    clock: Arc<dyn Clock>,
    state: Mutex<Managed>,
}

/// The managed checkpoints, oldest first, with their timestamps.
#[derive(Debug)]
struct Managed {
    checkpoints: Vec<(PathBuf, f64)>,
    latest: Option<PathBuf>,
    last_preserved: f64,
    /// Checkpoints dropped from the books whose files are not deleted yet (a delete failed,
    /// or a killed manager's journal named them).
    doomed: Vec<PathBuf>,
    /// What the delete journal in storage names; `None` when there is none.
    journal: Option<Vec<PathBuf>>,
}

/// The manager's delete journal in its directory: the checkpoints it dropped whose files it
/// has yet to delete (module docs).
const JOURNAL: &str = "checkpoint.deleting";
/// The first line of a delete journal; each later line names a checkpoint prefix, relative
/// to the directory as in the state file.
const JOURNAL_MAGIC: &str = "saveplan checkpoint deletes 1";

impl CheckpointManager {
    /// A manager of `checkpoint` saving into `directory`. When the directory has a
    /// `checkpoint` file, its latest checkpoint is the manager's, and each checkpoint it lists
    /// with a timestamp after its `last_preserved_timestamp` is managed again (deleted when
    /// past `max_to_keep`); others (`Checkpoint::save`'s, `write`'s) are never touched.
    pub fn new(
        checkpoint: Checkpoint,
        directory: impl Into<PathBuf>,
        options: ManagerOptions,
    ) -> Result<CheckpointManager, CheckpointError> {
        let directory = directory.into();
        if options.max_to_keep == Some(0) {
            return Err(CheckpointError::MaxToKeepZero);
        }
        if options.checkpoint_interval.is_some() {
            let Some(key) = &options.step_counter else {
                return Err(CheckpointError::IntervalWithoutStepCounter);
            };
            step_of(&checkpoint, key)?;
        }
        let prefix_path = directory.join(&options.checkpoint_name);
        let prefix = prefix_path
            .to_str()
            .ok_or(CheckpointError::NonUtf8Path {
                path: prefix_path.clone(),
            })?
            .to_owned();
        let state = recover(&directory, options.clock.now())?;
        Ok(CheckpointManager {
            checkpoint,
            prefix,
            step_counter: options.step_counter,
            checkpoint_interval: options.checkpoint_interval,
            last_checkpoint_step: None,
            books: Arc::new(Books {
                directory,
                max_to_keep: options.max_to_keep,
                keep_checkpoint_every_n_hours: options.keep_checkpoint_every_n_hours,
                clock: options.clock,
                state: Mutex::new(state),
            }),
        })
    }

    /// The checkpoint saved.
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// The checkpoint saved, to change its values.
    pub fn checkpoint_mut(&mut self) -> &mut Checkpoint {
        &mut self.checkpoint
    }

    /// Gives the checkpoint back (waiting for its write in flight when dropped).
    pub fn into_checkpoint(self) -> Checkpoint {
        self.checkpoint
    }

    /// The directory saved into.
    pub fn directory(&self) -> &Path {
        &self.books.directory
    }

    /// The managed checkpoints, oldest first (`checkpoints`).
    pub fn checkpoints(&self) -> Vec<PathBuf> {
        self.books
            .state()
            .checkpoints
            .iter()
            .map(|(path, _)| path.clone())
            .collect()
    }

    /// The newest checkpoint: the last saved, or the directory's when none was
    /// (`latest_checkpoint`).
    pub fn latest_checkpoint(&self) -> Option<PathBuf> {
        self.books.state().latest.clone()
    }

    /// `save(checkpoint_number, check_interval)`: adds one to `save_counter` and writes
    /// `<directory>/<checkpoint_name>-<N>`, N the counter or `checkpoint_number`; then records
    /// it, writes the state file and deletes what is past `max_to_keep`. With a
    /// `checkpoint_interval`, returns `None` without saving when the step counter equals the
    /// step of the last save, or (`check_interval`) is less than `checkpoint_interval` past it.
    /// Returns the path written.
    pub fn save(
        &mut self,
        checkpoint_number: Option<i64>,
        check_interval: bool,
    ) -> Result<Option<PathBuf>, CheckpointError> {
        if let (Some(interval), Some(key)) = (self.checkpoint_interval, &self.step_counter) {
            let step = step_of(&self.checkpoint, key)?;
            if let Some(last) = self.last_checkpoint_step
                && (step == last || (check_interval && step < last.saturating_add(interval)))
            {
                return Ok(None);
            }
            self.last_checkpoint_step = Some(step);
        }
        let path = self
            .checkpoint
            .next_save_path(&self.prefix, checkpoint_number)?;
        let books = Arc::clone(&self.books);
        let saved = PathBuf::from(&path);
        let after = move |written: Result<(), CheckpointError>| match written {
            Ok(()) => books.record_and_sweep(saved),
            Err(err) => {
                books.forget(saved);
                Err(err)
            }
        };
        self.checkpoint.write_then(&path, Some(Box::new(after)))?;
        Ok(Some(PathBuf::from(path)))
    }

    /// Waits for the checkpoint's asynchronous write (and its bookkeeping) and returns its
    /// error ([`Checkpoint::sync`]).
    pub fn sync(&self) -> Result<(), CheckpointError> {
        self.checkpoint.sync()
    }

    /// `restore_or_initialize(init_fn)`: restores the latest checkpoint into the checkpoint and
    /// returns its path, or, without one, calls `init` and returns `None`.
    pub fn restore_or_initialize(
        &mut self,
        init: impl FnOnce(&mut Checkpoint) -> Result<(), CheckpointError>,
    ) -> Result<Option<PathBuf>, CheckpointError> {
        let Some(latest) = self.latest_checkpoint() else {
            init(&mut self.checkpoint)?;
            return Ok(None);
        };
        let prefix = latest.to_str().ok_or(CheckpointError::NonUtf8Path {
            path: latest.clone(),
        })?;
        self.checkpoint.restore(Some(prefix))?;
        if let (Some(_), Some(key)) = (self.checkpoint_interval, &self.step_counter) {
            self.last_checkpoint_step = Some(step_of(&self.checkpoint, key)?);
        }
        Ok(Some(latest))
    }
}

impl Books {
    fn state(&self) -> MutexGuard<'_, Managed> {
        lock(&self.state)
    }

    /// The write callback: records `saved` now (a path saved again moves to the end), drops
    /// what is past `max_to_keep` from the books, journals the dropped checkpoints (and those an
    /// earlier delete or a killed manager left), writes the state file, then deletes them and
    /// the journal.
    fn record_and_sweep(&self, saved: PathBuf) -> Result<(), CheckpointError> {
        let timestamp = self.clock.now();
        let mut state = self.state();
        state.checkpoints.retain(|(path, _)| *path != saved);
        state.doomed.retain(|path| *path != saved);
        state.checkpoints.push((saved.clone(), timestamp));
        state.latest = Some(saved);
        self.sweep(&mut state);
        self.write_journal(&mut state)?;
        self.write(&state)?;
        while let Some(path) = state.doomed.first() {
            delete_bundle(path)?;
            state.doomed.remove(0);
        }
        self.write_journal(&mut state)
    }

    /// After a failed write to `failed`: what it left (a checkpoint may have landed before a
    /// later step failed) is deleted by the next save, unless `failed` is a managed checkpoint
    /// (saved again under its number: the save it replaced, or the new one, is there, whole).
    /// The journal names it at once where it can, so that a process killed before the next
    /// save leaves it to the next manager (a journal that cannot be written now is written by
    /// the next save; the write's own error is the one returned).
    fn forget(&self, failed: PathBuf) {
        let mut state = self.state();
        if !state.checkpoints.iter().any(|(path, _)| *path == failed)
            && !state.doomed.contains(&failed)
        {
            state.doomed.push(failed);
            let _ = self.write_journal(&mut state);
        }
    }

    /// Makes the delete journal name the doomed checkpoints (written whole and synced, or
    /// deleted when there are none), unless it already does.
    fn write_journal(&self, state: &mut Managed) -> Result<(), CheckpointError> {
        let current = match &state.journal {
            Some(named) => *named == state.doomed,
            None => state.doomed.is_empty(),
        };
        if current {
            return Ok(());
        }
        let path = self.directory.join(JOURNAL);
        let journal_error = |op, source| CheckpointError::DeleteJournal {
            path: path.clone(),
            op,
            source,
        };
        if state.doomed.is_empty() {
            crate::bundle::small_file::remove(&path, true)
                .map_err(|source| journal_error("delete", source))?;
            state.journal = None;
            return Ok(());
        }
        let mut text = format!("{JOURNAL_MAGIC}\n");
        for prefix in &state.doomed {
            text.push_str(&self.relative(prefix));
            text.push('\n');
        }
        crate::bundle::small_file::replace_whole(&path, text.as_bytes(), true)
            .map_err(|source| journal_error("write", source))?;
        state.journal = Some(state.doomed.clone());
        Ok(())
    }

    /// `path` relative to the directory, as the state file and the journal name checkpoints.
    fn relative(&self, path: &Path) -> String {
        path.strip_prefix(&self.directory)
            .unwrap_or(path)
            .to_string_lossy()
            .into_owned()
    }

    /// Drops the oldest checkpoints past `max_to_keep` from the books: keeps the files of one
    /// every `keep_checkpoint_every_n_hours`, marks the others' for deletion.
    fn sweep(&self, state: &mut Managed) {
        let Some(max_to_keep) = self.max_to_keep else {
            return;
        };
        while state.checkpoints.len() > max_to_keep {
            let (path, timestamp) = state.checkpoints.remove(0);
            if let Some(hours) = self.keep_checkpoint_every_n_hours
                && timestamp - hours * 3600.0 >= state.last_preserved
            {
                state.last_preserved = timestamp;
                continue;
            }
            state.doomed.push(path);
        }
    }

    /// Writes the state file: paths relative to the directory, with their timestamps.
    fn write(&self, state: &Managed) -> Result<(), CheckpointError> {
        let relative = |path: &Path| self.relative(path);
        write_state(
            &self.directory,
            &CheckpointState {
                model_checkpoint_path: state.latest.as_deref().map(relative).unwrap_or_default(),
                all_model_checkpoint_paths: state
                    .checkpoints
                    .iter()
                    .map(|(path, _)| relative(path))
                    .collect(),
                all_model_checkpoint_timestamps: state
                    .checkpoints
                    .iter()
                    .map(|&(_, timestamp)| timestamp)
                    .collect(),
                last_preserved_timestamp: state.last_preserved,
            },
        )
    }
}

/// What a manager created at `now` takes over from the `checkpoint` file of `directory`
/// (FORMATS.md 13.9) and from the delete journal a killed manager left: the checkpoints the
/// journal names that the state file does not are doomed (deleted by the first save).
fn recover(directory: &Path, now: f64) -> Result<Managed, CheckpointError> {
    let (mut managed, named) = recover_state_file(directory, now)?;
    let Some(journal) = read_journal(directory)? else {
        return Ok(managed);
    };
    let named: BTreeSet<&PathBuf> = named.iter().chain(&managed.latest).collect();
    managed.doomed = journal
        .iter()
        .filter(|path| !named.contains(path))
        .cloned()
        .collect();
    managed.journal = Some(journal);
    Ok(managed)
}

/// The checkpoints the delete journal of `directory` names, or `None` without a journal.
fn read_journal(directory: &Path) -> Result<Option<Vec<PathBuf>>, CheckpointError> {
    let path = directory.join(JOURNAL);
    let bytes = match crate::storage::read(&path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(CheckpointError::DeleteJournal {
                path,
                op: "read",
                source,
            });
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    let mut lines = text.lines();
    if lines.next() != Some(JOURNAL_MAGIC) {
        return Err(CheckpointError::BadDeleteJournal { path });
    }
    Ok(Some(
        lines
            .filter(|line| !line.is_empty())
            .map(|name| directory.join(name))
            .collect(),
    ))
}

/// What a manager created at `now` takes over from the `checkpoint` file of `directory`, and
/// every checkpoint that file names (managed again or not).
fn recover_state_file(
    directory: &Path,
    now: f64,
) -> Result<(Managed, Vec<PathBuf>), CheckpointError> {
    let file = directory.join(STATE_FILE);
    let found = match crate::storage::is_url(&file) {
        true => crate::storage::exists(&file).unwrap_or(false),
        false => file.is_file(),
    };
    if !found {
        let managed = Managed {
            checkpoints: Vec::new(),
            latest: None,
            last_preserved: now - 1.0,
            doomed: Vec::new(),
            journal: None,
        };
        return Ok((managed, Vec::new()));
    }
    let text =
        crate::storage::read_to_string(&file).map_err(|source| CheckpointError::ReadStateFile {
            path: file.clone(),
            source,
        })?;
    let recovered =
        parse_checkpoint_state(&text).map_err(|source| CheckpointError::BadStateFile {
            path: file.clone(),
            source,
        })?;
    let resolve = |name: &str| directory.join(name);
    // A clock that went back before the last preserved checkpoint restarts from now.
    let last_preserved = recovered.last_preserved_timestamp.min(now);
    let timestamps = if recovered.all_model_checkpoint_timestamps.is_empty() {
        vec![last_preserved; recovered.all_model_checkpoint_paths.len()]
    } else {
        recovered.all_model_checkpoint_timestamps
    };
    let named: Vec<PathBuf> = recovered
        .all_model_checkpoint_paths
        .iter()
        .map(|name| resolve(name))
        .collect();
    let checkpoints = named
        .iter()
        .cloned()
        .zip(timestamps)
        .map(|(path, timestamp)| (path, timestamp.min(now)))
        .filter(|&(_, timestamp)| timestamp > last_preserved)
        .collect();
    let managed = Managed {
        checkpoints,
        latest: Some(recovered.model_checkpoint_path)
            .filter(|name| !name.is_empty())
            .map(|name| resolve(&name)),
        last_preserved,
        doomed: Vec::new(),
        journal: None,
    };
    Ok((managed, named))
}

/// Deletes the checkpoint at `prefix` under its save lock ([`crate::bundle::lock::delete_checkpoint`]).
fn delete_bundle(prefix: &Path) -> Result<(), CheckpointError> {
    crate::bundle::lock::delete_checkpoint(prefix).map_err(CheckpointError::DeleteCheckpoint)?;
    Ok(())
}

/// The value of the step counter saved under `key`.
fn step_of(checkpoint: &Checkpoint, key: &str) -> Result<i64, CheckpointError> {
    let bad = || CheckpointError::BadStepCounter {
        key: key.to_owned(),
    };
    let value: &HostTensor = checkpoint.values().get(key).ok_or_else(bad)?;
    match value.dtype() {
        DType::Int32 => value.as_i32_scalar().map(i64::from).ok_or_else(bad),
        DType::Int64 => value.as_i64_scalar().ok_or_else(bad),
        _ => Err(bad()),
    }
}
