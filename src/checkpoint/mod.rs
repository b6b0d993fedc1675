//! Object-based checkpoints (`tf.train.Checkpoint`, FORMATS.md 13), the driver: [`Checkpoint`]
//! writes, saves and restores by object (`tf.train.Checkpoint.write`/`save`/`restore`/`read`),
//! synchronously or not ([`Checkpoint::with_async`]), gives the TF1 graph-mode form of a write
//! and read ([`Checkpoint::graph_mode`]), or restores by variable name when the checkpoint has
//! no object graph (a TF1 `Saver` checkpoint; [`full_name_keys`] for the reverse direction);
//! [`CheckpointManager`] numbers, keeps and deletes saves in a directory
//! (`tf.train.CheckpointManager`). It also reads the graph a checkpoint stores
//! ([`read_object_graph`]) and which checkpoint a directory's `checkpoint` state file names
//! ([`latest_checkpoint`], [`resolve_prefix`]).
//!
//! What is plain data lives below, in [`crate::object`]: building the object graph
//! ([`Checkpointable`], [`Object`], [`build_object_graph`]), matching (13.10, 13.13), the load
//! status, the report and restore-on-create's bookkeeping, all re-exported here. This layer
//! hands the object layer the open bundle and our tensors, runs the plans and touches the
//! files. The graph itself and its key rules live in [`saveplan_ir::object_graph`], its
//! protobuf form in [`crate::export::object_graph`].
//!
//! ```
//! use saveplan::checkpoint::{Object, build_object_graph};
//!
//! let kernel = Object::variable("kernel");
//! let dense = Object::new().child("kernel", &kernel).child("bias", &Object::variable("bias"));
//! let root = Object::new().child("model", &dense).child("shared", &kernel);
//! let graph = build_object_graph(&root)?;
//! // `shared` is the shorter path, so the kernel's key uses it.
//! assert_eq!(graph.node(saveplan_ir::object_graph::NodeId(2)).attributes[0].checkpoint_key,
//!            "shared/.ATTRIBUTES/VARIABLE_VALUE");
//! # Ok::<(), saveplan::checkpoint::CheckpointError>(())
//! ```

mod framework;
mod latest;
mod manager;
#[cfg(test)]
mod manager_crash_tests;
mod read;
mod restore;
mod spec;
mod spec_of;
mod tf_checkpoint;
mod writer;

use std::path::{Path, PathBuf};

pub use crate::object::{
    Assertion, AssertionError, Checkpointable, Child, LoadStatus, Object, ObjectError,
    ObjectIdentity, ReportCounts, ReportValue, RestoreKind, RestoreReport, SAVE_COUNTER,
    SAVE_COUNTER_KEY, SlotGroup, TensorAttribute, TensorType, ValueStatus, build_object_graph,
    display_path, without_attributes_of,
};
pub use framework::{RestoreNode, SaveNode, Saveable, Variable, restore_object, save_object};
pub use latest::{STATE_FILE, latest_checkpoint, resolve_prefix};
pub use manager::{CheckpointManager, Clock, ManagerOptions, system_time};
pub use read::{full_name_keys, read_all, read_value, resolve_name};
pub use restore::RestoreMatch;
pub use saveplan_ir::object_graph::{
    Attribute, ChildRef, NodeId, OBJECT_GRAPH_KEY, ObjectGraph, ObjectNode, SlotVariable,
};
pub use spec::{ObjectEntry, ObjectSpec, ObjectSpecError, SlotSpec};
pub use spec_of::{object_spec_of, plain_spec_of};
pub use tf_checkpoint::{
    Checkpoint, GraphModeFailure, GraphModeSession, GraphModeWrite, WriteFailure,
};

use saveplan_ir::device::DeviceError;

use crate::bundle::{BundleError, BundleReader, DType};
use crate::exec::VariableError;
use crate::export::CheckpointStateError;
use crate::export::object_graph::{ObjectGraphDecodeError, decode};

/// Errors of object-based checkpointing.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The checkpoint has no `_CHECKPOINTABLE_OBJECT_GRAPH` tensor.
    #[error(
        "{}: a name-based (TF1) checkpoint: it has no object graph (`_CHECKPOINTABLE_OBJECT_GRAPH`)",
        prefix.display()
    )]
    NameBased {
        /// The checkpoint prefix.
        prefix: PathBuf,
    },
    /// A spec cannot describe a checkpoint so that saving its values writes it again.
    #[error("{}: no spec writes this checkpoint again: {reason}", prefix.display())]
    NoSpec {
        /// The checkpoint prefix.
        prefix: PathBuf,
        /// What a spec cannot say.
        reason: String,
    },
    /// The `_CHECKPOINTABLE_OBJECT_GRAPH` tensor is not a string scalar.
    #[error(
        "{}: `_CHECKPOINTABLE_OBJECT_GRAPH` is {dtype} {shape:?}, not a string scalar",
        prefix.display()
    )]
    ObjectGraphTensor {
        /// The checkpoint prefix.
        prefix: PathBuf,
        /// Its dtype.
        dtype: DType,
        /// Its shape.
        shape: Vec<i64>,
    },
    /// The stored object graph does not decode.
    #[error("{}: corrupt object graph", prefix.display())]
    CorruptObjectGraph {
        /// The checkpoint prefix.
        prefix: PathBuf,
        /// What is wrong with it.
        #[source]
        source: ObjectGraphDecodeError,
    },
    /// Reading the bundle failed.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// Building or matching the object graph failed ([`crate::object`]).
    #[error(transparent)]
    Object(#[from] ObjectError),
    /// A directory has no `checkpoint` state file.
    #[error("{}: no `checkpoint` state file", dir.display())]
    NoStateFile {
        /// The directory.
        dir: PathBuf,
    },
    /// The state file could not be read.
    #[error("{}: cannot read", path.display())]
    ReadStateFile {
        /// The state file.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The state file is not `CheckpointState` text.
    #[error("{}: bad checkpoint state file", path.display())]
    BadStateFile {
        /// The state file.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: CheckpointStateError,
    },
    /// The state file names no checkpoint.
    #[error("{}: names no checkpoint (empty model_checkpoint_path)", path.display())]
    NoLatestCheckpoint {
        /// The state file.
        path: PathBuf,
    },
    /// The checkpoint the state file names has no `.index` file.
    #[error("{}: names checkpoint {}, which does not exist (no .index file)", path.display(), prefix.display())]
    MissingLatestCheckpoint {
        /// The state file.
        path: PathBuf,
        /// The prefix it names, resolved against its directory.
        prefix: PathBuf,
    },
    /// The root already has a child named `save_counter`.
    #[error("the root already has a child named `save_counter`")]
    SaveCounterTaken,
    /// An attribute of the object graph has no value.
    #[error("no value for `{key}`")]
    MissingValue {
        /// Its checkpoint key.
        key: String,
    },
    /// A variable's device does not parse.
    #[error("`{key}`: invalid device `{device}`")]
    BadDevice {
        /// Its checkpoint key.
        key: String,
        /// The device given.
        device: String,
        /// Why.
        #[source]
        source: DeviceError,
    },
    /// A value cannot be stored in its variable.
    #[error("`{key}`: bad value")]
    Variable {
        /// Its checkpoint key.
        key: String,
        /// Why.
        #[source]
        source: VariableError,
    },
    /// Writing the checkpoint failed.
    #[error("writing checkpoint {prefix} failed")]
    Write {
        /// The prefix.
        prefix: String,
        /// Why.
        #[source]
        source: Box<WriteFailure>,
    },
    /// No checkpoint at a prefix to restore.
    #[error(
        "{prefix}: no checkpoint (no .index file); you may be missing the checkpoint suffix (e.g. the '-1' in 'path/to/ckpt-1')"
    )]
    NotFound {
        /// The prefix.
        prefix: String,
    },
    /// Tracing, compiling or inspecting the TF1 graph-mode form of a write failed
    /// ([`Checkpoint::graph_mode`]).
    #[error("TF1 graph-mode checkpoint: {what} failed")]
    GraphMode {
        /// What was being done: `tracing`, `compiling`, `running`, `reading`.
        what: &'static str,
        /// Why.
        #[source]
        source: Box<GraphModeFailure>,
    },
    /// Running the TF1 graph-mode restore ops failed
    /// ([`GraphModeSession::run_restore_ops`]).
    #[error("restoring from checkpoint {prefix} failed")]
    Read {
        /// The prefix.
        prefix: String,
        /// Why.
        #[source]
        source: Box<GraphModeFailure>,
    },
    /// Reading the matched values from the open checkpoint failed.
    #[error("reading the values matched in checkpoint {prefix} failed")]
    ReadValues {
        /// The prefix.
        prefix: String,
        /// Why.
        #[source]
        source: Box<crate::exec::IoError>,
    },
    /// The thread writing an asynchronous checkpoint could not be started.
    #[error("writing checkpoint {prefix} failed: cannot start the writer thread")]
    SpawnWriter {
        /// The prefix.
        prefix: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The thread writing an asynchronous checkpoint panicked.
    #[error("writing checkpoint {prefix} failed: the writer thread panicked")]
    WriterPanicked {
        /// The prefix.
        prefix: String,
    },
    /// `max_to_keep` of a CheckpointManager is 0 (TensorFlow's message).
    #[error("Expected a positive integer or `None` for `max_to_keep`, got 0.")]
    MaxToKeepZero,
    /// A CheckpointManager has a `checkpoint_interval` but no step counter (TensorFlow's
    /// message).
    #[error("`step_counter` should be passed if `checkpoint_interval` is not None.")]
    IntervalWithoutStepCounter,
    /// A CheckpointManager's step counter is no integer scalar value of its checkpoint.
    #[error("step counter `{key}` is no int32 or int64 scalar value of the checkpoint")]
    BadStepCounter {
        /// The checkpoint key given as the step counter.
        key: String,
    },
    /// A path that is not UTF-8, where a checkpoint prefix must be.
    #[error("{}: a checkpoint prefix must be UTF-8", path.display())]
    NonUtf8Path {
        /// The path.
        path: PathBuf,
    },
    /// Deleting an old checkpoint failed (the error names the file).
    #[error("cannot delete an old checkpoint")]
    DeleteCheckpoint(#[source] BundleError),
    /// The `checkpoint` state file cannot be written.
    #[error("{}: cannot write", path.display())]
    WriteStateFile {
        /// The state file.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// A [`CheckpointManager`]'s delete journal (`checkpoint.deleting`: the checkpoints it
    /// dropped whose files it has yet to delete) cannot be read, written or deleted.
    #[error("{}: cannot {op}", path.display())]
    DeleteJournal {
        /// The journal.
        path: PathBuf,
        /// What was being done (`read`, `write`, `delete`).
        op: &'static str,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// A `checkpoint.deleting` file that is no [`CheckpointManager`]'s delete journal.
    #[error("{}: not a checkpoint manager's delete journal", path.display())]
    BadDeleteJournal {
        /// The file.
        path: PathBuf,
    },
    /// A [`Saveable`] asked, while restoring, for a child or attribute it did not list when
    /// saved.
    #[error("object `{path}` saved no child or attribute named `{name}`")]
    NotSaved {
        /// The object's path (`(root).model`).
        path: String,
        /// The name asked for.
        name: String,
    },
    /// A [`Saveable`] lists one of the objects it is a child of as its child.
    #[error("object `{path}` lists `{name}`, one of the objects it is reached through, as a child")]
    Cycle {
        /// The object's path.
        path: String,
        /// The child's name.
        name: String,
    },
    /// A tensor of the wrong kind (a framework's [`Saveable::restore`] reading its values).
    #[error(transparent)]
    Tensor(#[from] crate::exec::TensorError),
    /// A name that is no key, object path or full name of a checkpoint's values.
    #[error("{prefix}: no value named `{name}` (by key, object path or full name)")]
    NoSuchValue {
        /// The checkpoint prefix.
        prefix: String,
        /// The name given.
        name: String,
    },
    /// A name that means several values of a checkpoint.
    #[error("`{name}` names {} values: {}{}", candidates.len(), candidates[..candidates.len().min(5)].join(", "), if candidates.len() > 5 { ", …" } else { "" })]
    AmbiguousName {
        /// The name given.
        name: String,
        /// The keys of the values it names.
        candidates: Vec<String>,
    },
    /// A write or restore in a cluster that does not have one process per task of the
    /// checkpoint's values ([`Checkpoint::tasks`]).
    #[error(transparent)]
    ClusterSize(Box<crate::exec::ExecError>),
    /// Another process of a cluster write or restore failed, or the rendezvous did.
    #[error(transparent)]
    Rendezvous(#[from] crate::exec::rendezvous::RendezvousError),
}

/// Reads the object graph a checkpoint stores; [`CheckpointError::NameBased`] when it has none.
pub fn read_object_graph(reader: &BundleReader) -> Result<ObjectGraph, CheckpointError> {
    let bytes = read_object_graph_bytes(reader)?;
    decode(&bytes).map_err(|source| CheckpointError::CorruptObjectGraph {
        prefix: reader.prefix().to_owned(),
        source,
    })
}

/// The serialized object graph a checkpoint stores, as stored.
pub fn read_object_graph_bytes(reader: &BundleReader) -> Result<Vec<u8>, CheckpointError> {
    let prefix = || reader.prefix().to_owned();
    let Some(entry) = reader.entry(OBJECT_GRAPH_KEY) else {
        return Err(CheckpointError::NameBased { prefix: prefix() });
    };
    if entry.dtype != DType::String || !entry.shape.is_empty() {
        return Err(CheckpointError::ObjectGraphTensor {
            prefix: prefix(),
            dtype: entry.dtype,
            shape: entry.shape.clone(),
        });
    }
    let mut strings = reader.read_strings(OBJECT_GRAPH_KEY)?;
    Ok(strings.pop().unwrap_or_default())
}

/// Whether a checkpoint is object-based (has an object graph).
pub fn is_object_based(reader: &BundleReader) -> bool {
    reader.entry(OBJECT_GRAPH_KEY).is_some()
}

/// The directory part of a prefix for messages; `.` for a bare name.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}
