//! The tracer: serialized tensors of trackables in, TensorFlow's `MultiDeviceSaver` save and
//! restore plan out, as an [`ir::Module`](saveplan_ir::Module).
//!
//! The input is what `MultiDeviceSaver` receives: per trackable, the tensors it serializes
//! ([`SaveableTensor`]: checkpoint key, slice spec, dtype, shape, device and how the variable
//! behind it is created and read), plus [`TraceOptions`] (TensorFlow's `CheckpointOptions`:
//! the io device and the sharding policy). Spec files ([`spec`]) are the JSON form of it.
//!
//! Four entry points give the four forms TensorFlow builds (fixtures in
//! `tests/fixtures/tf-2.21/graph/`):
//!
//! * [`trace_flat`]: `saver.save(prefix)` then `saver.restore(prefix)` in a fresh `tf.Graph`,
//!   variable creation included (`flat_graph.pbtxt`, names as in `flat.json`; g1–g6);
//! * [`trace_functions`]: `saver.to_proto()`, two `StatefulPartitionedCall`s into library
//!   functions whose bodies hold the plan (`graph.pbtxt`, `saver_def.pbtxt`; g1, g2, g3, g5);
//! * [`trace_save_function`]: the save plan with options as a `tf.function` (`fn_save.pbtxt`;
//!   g1–g6);
//! * [`trace_eager_functions`]: `_traced_save` and `_traced_restore` traced from eager
//!   TensorFlow, variables captured as resources and read inside the function, plus the save
//!   function's `FuncGraph` (g7: both `FunctionDef`s and `traced_save.graph.pbtxt`).
//!
//! [`trace_graph_mode_write`] traces an object-based `Checkpoint.write` and
//! `read().run_restore_ops()` in a TF1 graph (`obj/o9_write_graphs/graph_mode.graph.pbtxt`):
//! the variables with `init`, the object graph and prefixes as fed constants, save, restore.
//!
//! Every op goes through a [`Builder`]: the graph builder ([`GraphBuilder`], a `Graph`)
//! records it; [`BackgroundGraph`] has a thread of its own add it to the graph while the
//! tracer goes on (what [`trace_flat`] uses for large plans); an eager builder
//! (`crate::session::EagerBuilder`) also runs it at once.
//! [`trace_flat_with`] traces parts of the flat plan (variables created or only attached, the
//! save, the restore) through any builder, so the same code serves graph and eager mode.
//!
//! Beyond the fixtures, [`TraceOptions`] takes registered savers ([`RegisteredSaver`]: they
//! save first on `<prefix>-<name>`, their prefixes lead the merge, and they restore last) and
//! a unique temporary id (`<prefix>_temp_<id>/part`), and [`parallel_variable`] turns a
//! variable on a parallel device into one tensor per component (`VARIABLE_VALUE`,
//! `parallel_component_<i>`), each saved on its own task.
//!
//! Semantics (FORMATS.md §8): tensors are grouped by task (their device with `CPU:0`), tasks
//! in order of first appearance; the policy cuts each task's tensors into shards; each shard
//! gets a `ShardedFilename` on its task and a `SaveV2` on the io device or the task; a `Pack`
//! of the shard prefixes (control inputs on every `SaveV2`) feeds `MergeV2Checkpoints` on the
//! io device or the last task's `CPU:0`. Restore reads each task with one `RestoreV2` and
//! assigns each trackable once all of its tensors are read. Node names follow TensorFlow's
//! unique-name rules ([`UniqueNames`]).
//!
//! Tracing does no IO and is linear in the number of tensors.
//!
//! # Differences from TensorFlow
//!
//! * `tf.zeros` of 1000 elements or more is traced as a `Fill` of `zeros/shape_as_tensor` and
//!   `zeros/Const`, read from TensorFlow's Python, not checked against a fixture.
//! * `MaxShardSizePolicy` sizes strings as 0 bytes, as TensorFlow does in graph mode and in
//!   `tf.function`; eager TensorFlow measures them and may shard differently.
//! * Where TensorFlow loops forever (`MaxShardSizePolicy` with a limit no slice fits into) or
//!   fails building a `SaveV2` without tensors, the tracer returns an error.
//! * Under `MaxShardSizePolicy` a zero-element tensor is not saved but still restored, as in
//!   TensorFlow.
//! * Initial values are numbers, bools and strings; float16, bfloat16 and complex variables can
//!   only start at zero.
//! * The function form takes the process-dependent parts as input ([`FunctionOptions`]:
//!   function names with TensorFlow's global counter, the `config_proto` bytes).
//! * Function bodies model automatic control dependencies only as far as these plans need:
//!   ops on the same resource are chained, and the control outputs are the resource ops
//!   (`DisableCopyOnRead`, `ReadVariableOp`, `AssignVariableOp`) plus `MergeV2Checkpoints`,
//!   sorted by name. Capture arguments are named from the capturing op's scope, lower-cased,
//!   `/` → `_`; arguments colliding after lower-casing are not renamed as TensorFlow would.
//! * Which read feeds `SaveV2` ([`ReadKind`]) and how a variable is created ([`Init`]) are
//!   inputs; TensorFlow derives them from the kind of saveable and variable.
//! * Registered savers are called as `MultiDeviceSaver` calls them for a `tf.train.Checkpoint`:
//!   directly, so their ops land in the graph being traced (the flat graph, or the bodies of
//!   [`trace_functions_with_savers`] and [`trace_save_function`]), and are not control outputs
//!   of a function. Both forms equal what TensorFlow traced for a test saver
//!   (`tests/fixtures/saveplan/registered_saver`). A `SavedModel` export with mapped captures,
//!   where TensorFlow wraps each registered function into a concrete function of its own and
//!   calls it, is not modelled; [`trace_eager_functions`] takes no registered savers.
//! * Parallel-device variables follow TensorFlow's `parallel_device/saving.py`, not a
//!   fixture: each component is read by a bare `ReadVariableOp` on its device and restored by
//!   an `AssignVariableOp` of the restored tensor on the restoring task. The traced graph
//!   creates every component as an ordinary variable on its device; TensorFlow creates them
//!   through the parallel device, eagerly only.
//! * TensorFlow 2.21 has no unique temporary prefix (FORMATS.md §9.2); the
//!   `_temp_<id>/part` form follows older TensorFlow's `_temp_<uuid hex>/part`.
//! * The eager form reads every variable through its saveable ([`ReadKind::Saveable`]) and
//!   names each captured handle `resource`, as eager variables are; it matches g7 exactly.
//!   Its restore function's `FuncGraph` is not produced (no fixture has one).
//!
//! Not modelled yet: DTensor variables, registered savers in the eager form and in a
//! `SavedModel` export.

mod builder;
mod consts;
mod flat;
mod function;
mod names;
mod object;
mod plan;
mod registered;
mod sharding;
mod share;
pub mod spec;

use std::collections::BTreeMap;

use saveplan_ir::DType;
use saveplan_ir::device::DeviceError;
use saveplan_ir::slice::SliceError;
use saveplan_ir::{GraphError, Module, OpId, SaverNames};

pub use builder::{BACKGROUND_MIN_OPS, BackgroundGraph, Builder, GraphBuilder};
pub use consts::{ConstError, Scalar};
pub(crate) use flat::trace_flat_with_entry_points;
pub use flat::{
    FlatOps, FlatParts, VariableOps, count_tasks, trace_flat, trace_flat_as, trace_flat_save_as,
    trace_flat_with,
};
pub use function::{
    EagerTrace, FunctionOptions, FunctionTrace, trace_eager_functions, trace_functions,
    trace_functions_with_savers, trace_save_function,
};
pub use names::UniqueNames;
pub use object::{GraphModeTrace, trace_graph_mode_write};
pub use registered::{RegisteredSaver, SaverCx};
pub use sharding::{
    MaxShardSize, Shard, ShardByTask, ShardEntry, ShardableTensor, Sharding, ShardingPolicy,
    TensorSlice,
};
pub use share::{LeftOut, TaskShare, trace_flat_save_share, trace_flat_share};

/// An object whose tensors are saved and restored together, like a TensorFlow `Trackable`:
/// its restore ops are traced once all of its tensors have been read.
#[derive(Clone, Debug, PartialEq)]
pub struct Trackable {
    /// The tensors it serializes, in order. Each is a whole variable or one slice of a
    /// partitioned variable.
    pub tensors: Vec<SaveableTensor>,
}

/// One serialized tensor: where it goes in the checkpoint and the variable it comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct SaveableTensor {
    /// The checkpoint key (`tensor_names` entry).
    pub checkpoint_key: String,
    /// The slice spec (`shape_and_slices` entry); `""` for a whole tensor.
    pub slice_spec: String,
    /// The element type.
    pub dtype: DType,
    /// The shape of the variable (of the slice, for a partitioned variable).
    pub shape: Vec<i64>,
    /// The variable's device, as a TensorFlow device string.
    pub device: String,
    /// How the variable is created and read.
    pub variable: VariableDef,
}

/// How the traced graph creates a variable and reads it for saving.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct VariableDef {
    /// The `VarHandleOp` name before uniquing; the checkpoint key when `None`.
    pub name: Option<String>,
    /// The initial value.
    pub init: Init,
    /// Which read feeds `SaveV2`.
    pub read: ReadKind,
}

/// The initial value of a traced variable.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum Init {
    /// `tf.Variable(tf.zeros(shape))` under the variable's device: a top-level `zeros`
    /// constant on that device.
    #[default]
    Zeros,
    /// `tf.Variable(values)`: a `<name>/Initializer/initial_value` constant colocated with the
    /// handle. Holds every element in row-major order, or one value that fills the shape.
    Values(Vec<Scalar>),
}

/// Which tensor of a variable `SaveV2` saves.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum ReadKind {
    /// The graph variable's own `<name>/Read/ReadVariableOp` (`saveable_objects_for_op` on a
    /// graph-mode `ResourceVariable`).
    #[default]
    Graph,
    /// A read made at save time by a variable saveable (partitioned variables, eager):
    /// `Read/DisableCopyOnRead`, `Read/ReadVariableOp`, `Identity` on the variable's device,
    /// `Identity` on its task's `CPU:0`.
    Saveable,
    /// One component of a variable on a parallel device (`_ParallelComponentSaveable`): a
    /// bare `ReadVariableOp` on the component's device, and at restore an `AssignVariableOp` of
    /// the restored tensor on the restoring task, without an `Identity`. See
    /// [`parallel_variable`].
    ParallelComponent,
    /// Not a variable: a `Const` holding the initial value ([`Init`]) on the tensor's device,
    /// saved as it is and never restored, as `tf.train.Checkpoint` saves its serialized object
    /// graph (`_CHECKPOINTABLE_OBJECT_GRAPH`, FORMATS.md 13.6). The graph traces the `Const`
    /// where a variable would be created or attached.
    Constant,
}

/// The checkpoint key suffix of a variable's value (`VARIABLE_VALUE_KEY`).
pub const VARIABLE_VALUE: &str = "VARIABLE_VALUE";

/// A variable placed on a parallel device, as TensorFlow's `ParallelVariable` saves it: one
/// tensor per component, each read on its own device (so shards follow the components'
/// tasks), all restored together.
///
/// `checkpoint_key` is the key of the first component and must end in `VARIABLE_VALUE`
/// (`<path>/.ATTRIBUTES/VARIABLE_VALUE`); component `i > 0` is saved under the same key with
/// `parallel_component_<i>` in place of `VARIABLE_VALUE`. Every component is its own variable
/// in the traced graph (handles named after `variable.name` or the key, uniqued), created with
/// `variable.init`; `variable.read` is ignored.
pub fn parallel_variable(
    checkpoint_key: &str,
    dtype: DType,
    shape: &[i64],
    devices: &[String],
    variable: &VariableDef,
) -> Result<Trackable, TraceError> {
    let bad = |reason: &str| TraceError::BadParallelVariable {
        key: checkpoint_key.to_owned(),
        reason: reason.to_owned(),
    };
    let Some(base) = checkpoint_key.strip_suffix(VARIABLE_VALUE) else {
        return Err(bad("the key does not end in `VARIABLE_VALUE`"));
    };
    if devices.is_empty() {
        return Err(bad("no component devices"));
    }
    let tensors = devices
        .iter()
        .enumerate()
        .map(|(i, device)| SaveableTensor {
            checkpoint_key: match i {
                0 => checkpoint_key.to_owned(),
                _ => format!("{base}parallel_component_{i}"),
            },
            slice_spec: String::new(),
            dtype,
            shape: shape.to_vec(),
            device: device.clone(),
            variable: VariableDef {
                name: Some(
                    variable
                        .name
                        .clone()
                        .unwrap_or_else(|| checkpoint_key.to_owned()),
                ),
                init: variable.init.clone(),
                read: ReadKind::ParallelComponent,
            },
        })
        .collect();
    Ok(Trackable { tensors })
}

/// TensorFlow's `CheckpointOptions`, as far as they shape the plan, plus the savers
/// registered with `MultiDeviceSaver` and the temporary-prefix option of older TensorFlow.
pub struct TraceOptions {
    /// `experimental_io_device`: where `SaveV2`, `RestoreV2` and the merge run.
    pub io_device: Option<String>,
    /// `experimental_sharding_callback`; [`ShardByTask`] by default.
    pub sharding: Box<dyn ShardingPolicy>,
    /// Savers registered with `tf.saved_model.experimental.register_checkpoint_saver`, in
    /// registration order (`MultiDeviceSaver`'s `registered_savers`).
    pub registered_savers: Vec<Box<dyn RegisteredSaver>>,
    /// When set, shards are written under `<prefix>_temp_<id>/part` instead of
    /// `<prefix>_temp/part`, as TensorFlow before 2.x did with a fresh uuid per saver, so two
    /// concurrent saves to one prefix cannot collide. Must be a non-empty run of ASCII letters,
    /// digits, `-` and `_` (see [`new_temp_id`]).
    pub unique_temp_id: Option<String>,
}

impl Default for TraceOptions {
    fn default() -> TraceOptions {
        TraceOptions {
            io_device: None,
            sharding: Box::new(ShardByTask),
            registered_savers: Vec::new(),
            unique_temp_id: None,
        }
    }
}

impl std::fmt::Debug for TraceOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let savers: Vec<&str> = self.registered_savers.iter().map(|s| s.name()).collect();
        f.debug_struct("TraceOptions")
            .field("io_device", &self.io_device)
            .field("sharding", &self.sharding.description())
            .field("registered_savers", &savers)
            .field("unique_temp_id", &self.unique_temp_id)
            .finish()
    }
}

/// A fresh id for [`TraceOptions::unique_temp_id`]: a version 4 uuid as 32 lower-case hex
/// digits, as TensorFlow's `uuid.uuid4().hex`.
pub fn new_temp_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A traced flat plan: the graph and the names a caller needs to run it.
#[derive(Clone, Debug)]
pub struct FlatTrace {
    /// The graph (variable creation, save and restore ops) with TensorFlow's version stamp.
    pub module: Module,
    /// Where save and restore start and end: the prefix placeholder's output
    /// (`saver_filename:0`), the op `save()` returns (the `MergeV2Checkpoints`), and every
    /// `AssignVariableOp` a `RestoreV2` feeds.
    pub saver: SaverNames,
    /// TensorFlow's `restore_ops` (the fixtures' `flat.json`): per checkpoint key, the last
    /// restore op of its trackable (an `AssignVariableOp`).
    pub restore_ops: BTreeMap<String, String>,
    /// The ops of each input tensor's variable, in input order: what a caller would otherwise
    /// find again by name (`compile` lists every variable's ops in the `MetaGraphDef`).
    pub variables: Vec<VariableOpIds>,
    /// The ops [`SaverNames::restore_targets`] names, in the same order.
    pub restore_targets: Vec<OpId>,
    /// What the plan saves and restores, and from and into which variables, as the tracer
    /// made it: what a session would otherwise find by walking the graph back from every
    /// `SaveV2` and forward from every `RestoreV2` (`session::bind`). Recorded only in a
    /// session's form ([`VariableOps::Handles`]), and `None` when the plan holds ops the
    /// tracer does not bind itself: saved constants, registered savers.
    pub keys: Option<TracedKeys>,
}

/// The ops a trace made for one input tensor's variable ([`FlatTrace::variables`],
/// [`FunctionTrace::variables`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct VariableOpIds {
    /// The `VarHandleOp`; for a saved constant, its `Const`.
    pub handle: OpId,
    /// What a save reads: the `Read/ReadVariableOp`, or the handle itself where the trace made
    /// no read (a saved constant, a variable only attached to for a restore).
    pub read: OpId,
    /// The `Assign` of the initial value, where the trace built it ([`VariableOps::Create`]
    /// and the function form's outer graph).
    pub assign: Option<OpId>,
}

/// The checkpoint tensors of a traced flat plan and the variables behind them
/// ([`FlatTrace::keys`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TracedKeys {
    /// The variable of each input tensor, in input order (every trackable's tensors in turn).
    pub variables: Vec<TracedVariable>,
    /// The `SaveV2` ops, in creation order.
    pub saves: Vec<TracedOp>,
    /// The `RestoreV2` ops, in creation order. Each of their outputs has exactly one
    /// `AssignVariableOp`, into its entry's variable.
    pub restores: Vec<TracedOp>,
}

/// The variable a traced plan made for one input tensor: a `VarHandleOp` with an empty
/// `container`.
#[derive(Clone, Debug, PartialEq)]
pub struct TracedVariable {
    /// The `VarHandleOp`'s `shared_name` (its op name).
    pub shared_name: String,
    /// The element type.
    pub dtype: DType,
    /// The `VarHandleOp`'s `shape`.
    pub shape: Vec<i64>,
}

/// A `SaveV2` or `RestoreV2` of a traced plan: its name and its entries, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct TracedOp {
    /// The op's name.
    pub name: String,
    /// One per `tensor_names` entry, in order.
    pub entries: Vec<TracedEntry>,
}

/// One tensor a [`TracedOp`] saves or restores.
#[derive(Clone, Debug, PartialEq)]
pub struct TracedEntry {
    /// The checkpoint key (its `tensor_names` entry).
    pub checkpoint_key: String,
    /// The slice spec (its `shape_and_slices` entry).
    pub slice_spec: String,
    /// The variable saved or restored (a position in [`TracedKeys::variables`]).
    pub variable: u32,
    /// Whether the saved tensor is a piece the plan cuts out of the variable's value with a
    /// `Slice` op (a sharding policy's piece of a large variable).
    pub cut: bool,
}

/// What is wrong with a variable's slice spec.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadSlice {
    /// It does not parse, or does not fit its full shape.
    #[error(transparent)]
    Parse(#[from] SliceError),
    /// The slice's shape is not the variable's.
    #[error("the slice has shape {slice:?} but the variable has shape {variable:?}")]
    ShapeMismatch {
        /// The slice's shape.
        slice: Vec<i64>,
        /// The variable's shape.
        variable: Vec<i64>,
    },
}

/// The most dimensions a TensorFlow shape may have (`TensorShape::MaxDimensions()`).
pub const MAX_RANK: usize = 254;

/// Errors from tracing (and from reading spec files).
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// There is nothing to save (TensorFlow fails on an empty saver too).
    #[error("no tensors to save")]
    Empty,
    /// A (checkpoint key, slice spec) pair occurs twice.
    #[error("checkpoint key `{key}` with slice spec {slice_spec:?} is given twice")]
    DuplicateKey {
        /// The key.
        key: String,
        /// The slice spec.
        slice_spec: String,
    },
    /// A variable's device string does not parse.
    #[error("variable `{key}`: invalid device")]
    BadDevice {
        /// The checkpoint key.
        key: String,
        /// Why.
        #[source]
        source: DeviceError,
    },
    /// The io device string does not parse.
    #[error("invalid io device")]
    BadIoDevice {
        /// Why.
        #[source]
        source: DeviceError,
    },
    /// A slice spec does not parse or does not match the variable.
    #[error("variable `{key}`: invalid slice spec `{spec}`: {reason}")]
    BadSliceSpec {
        /// The checkpoint key.
        key: String,
        /// The slice spec.
        spec: String,
        /// What is wrong.
        reason: BadSlice,
    },
    /// The bounds of a slice a sharding policy cut do not fit the `Slice` op's int32 inputs.
    #[error("variable `{key}`: invalid slice spec `{spec}`: {reason}")]
    BadSliceBounds {
        /// The checkpoint key.
        key: String,
        /// The slice spec of the tensor being sliced.
        spec: String,
        /// What is wrong.
        reason: ConstError,
    },
    /// A dtype name is not a TensorFlow dtype.
    #[error("variable `{key}`: unknown dtype `{dtype}`")]
    UnknownDType {
        /// The checkpoint key.
        key: String,
        /// The name given.
        dtype: String,
    },
    /// A shape has a negative dimension.
    #[error("variable `{key}`: invalid shape {shape:?}")]
    BadShape {
        /// The checkpoint key.
        key: String,
        /// The shape given.
        shape: Vec<i64>,
    },
    /// A shape has more dimensions than TensorFlow allows ([`MAX_RANK`]).
    #[error("variable `{key}`: shape of rank {rank}, above TensorFlow's limit of {MAX_RANK}")]
    RankTooLarge {
        /// The checkpoint key.
        key: String,
        /// The rank given.
        rank: usize,
    },
    /// A shape (of the variable, or the full shape of its slice spec) has more elements than
    /// TensorFlow's `TensorShape` holds (2^63 - 1).
    #[error("variable `{key}`: shape {shape:?} has more than 2^63 - 1 elements")]
    TooManyElements {
        /// The checkpoint key.
        key: String,
        /// The shape given.
        shape: Vec<i64>,
    },
    /// A checkpoint key is empty (the bundle index cannot store it).
    #[error("a variable has an empty checkpoint key")]
    EmptyKey,
    /// An initial value does not fit the variable.
    #[error("variable `{key}`: invalid initial value: {reason}")]
    BadInit {
        /// The checkpoint key.
        key: String,
        /// What is wrong.
        reason: ConstError,
    },
    /// `MaxShardSizePolicy` cannot fit even the smallest slice of a tensor into an empty shard
    /// (TensorFlow loops forever on this input).
    #[error("variable `{key}`: no slice fits in a shard of {max_shard_size} bytes")]
    ShardSizeTooSmall {
        /// The checkpoint key.
        key: String,
        /// The limit.
        max_shard_size: u64,
    },
    /// A sharding policy returned a shard without tensors (`SaveV2` needs at least one).
    #[error("shard {shard} of task `{task}` holds no tensors")]
    EmptyShard {
        /// The task.
        task: String,
        /// The shard's index within the task.
        shard: usize,
    },
    /// A sharding policy returned an entry that points at no tensor.
    #[error("sharding policy returned tensor index {index} for a task of {n_tensors} tensors")]
    BadShardEntry {
        /// The index returned.
        index: usize,
        /// The number of tensors of the task.
        n_tensors: usize,
    },
    /// A spec file names a sharding callback that is not known.
    #[error("unknown sharding callback `{name}`")]
    UnknownShardingCallback {
        /// The name given.
        name: String,
    },
    /// `MaxShardSizePolicy` without `max_shard_size`.
    #[error("sharding callback `MaxShardSizePolicy` needs `max_shard_size`")]
    MissingMaxShardSize,
    /// A unique temporary id would not make a single path component.
    #[error("invalid unique temporary id `{id}`: use ASCII letters, digits, `-` and `_`")]
    BadTempId {
        /// The id given.
        id: String,
    },
    /// A parallel-device variable cannot be split into components.
    #[error("parallel variable `{key}`: {reason}")]
    BadParallelVariable {
        /// The checkpoint key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A spec file is not valid JSON of the expected shape.
    #[error("invalid spec file")]
    Json(#[source] serde_json::Error),
    /// Building the graph failed (a tracer bug: names are uniqued before use).
    #[error("graph construction failed")]
    Graph(#[from] GraphError),
    /// A builder stopped at an op it could not take: an eager builder could not run it. The
    /// builder keeps why (`crate::session::EagerBuilder::take_failure`).
    #[error("the builder stopped at op `{op}`")]
    Stopped {
        /// The op's name.
        op: String,
    },
}
