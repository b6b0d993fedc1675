//! [`SessionError`] and the typed reasons it carries: why no save plan was found, why a
//! checkpoint op cannot be read, why a key cannot be bound to a variable, and how the parts of
//! a key disagree.

use saveplan_ir::slice::SliceError;
use saveplan_ir::{DType, VerifyErrors};

use super::eager::EagerError;
use crate::exec::{ExecError, IoError, TensorError, VariableError};
use crate::trace::TraceError;

/// Errors from building or running a session.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Tracing the spec failed.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// Eager mode asked of a session that was not made from a spec.
    #[error("eager mode needs a spec (its trackables); a graph runs in graph mode only")]
    EagerNeedsSpec,
    /// Eager saving or restoring failed.
    #[error(transparent)]
    Eager(Box<EagerError>),
    /// The graph breaks an invariant of the IR (every violation is listed).
    #[error("the plan is not valid")]
    Invalid(#[source] VerifyErrors),
    /// A `MetaGraphDef` without a `saver_def`.
    #[error("the meta graph has no saver_def")]
    NoSaverDef,
    /// A graph without a save plan the session can find.
    #[error("cannot find the save plan: {0}")]
    NoSavePlan(MissingSavePlan),
    /// A save or restore asked of a session made without that plan
    /// ([`super::SessionOptions::plans`]).
    #[error("the session was made without its {what} plan (SessionOptions::plans)")]
    PlanLeftOut {
        /// `save` or `restore`.
        what: &'static str,
    },
    /// A target names no op of the graph.
    #[error("target `{name}` names no op of the graph")]
    UnknownTarget {
        /// The target.
        name: String,
    },
    /// A `SaveV2` or `RestoreV2` whose key list cannot be read.
    #[error("op `{op}`: {reason}")]
    BadCheckpointOp {
        /// The op.
        op: String,
        /// What is wrong.
        reason: BadCheckpointOp,
    },
    /// A checkpoint tensor the session cannot tie to a variable.
    #[error("checkpoint key `{key}` (op `{op}`): {reason}")]
    Unbound {
        /// The key.
        key: String,
        /// The `SaveV2` or `RestoreV2`.
        op: String,
        /// Why.
        reason: Unbound,
    },
    /// The plan saves one key inconsistently (dtypes, shapes or a mix of whole and sliced).
    #[error("checkpoint key `{key}`: {reason}")]
    InconsistentKey {
        /// The key.
        key: String,
        /// What disagrees.
        reason: InconsistentKey,
    },
    /// Compiling the save or restore plan failed.
    #[error("cannot compile the {what} plan")]
    Compile {
        /// `save` or `restore`.
        what: &'static str,
        /// Why.
        #[source]
        source: Box<ExecError>,
    },
    /// The prefix a save was given cannot hold a checkpoint (empty, or a directory).
    #[error("cannot save at prefix `{prefix}`")]
    BadPrefix {
        /// The prefix.
        prefix: String,
        /// Why.
        #[source]
        source: Box<IoError>,
    },
    /// Running the save or restore plan failed.
    #[error("{what} of `{prefix}` failed")]
    Run {
        /// `save` or `restore`.
        what: &'static str,
        /// The prefix.
        prefix: String,
        /// Why.
        #[source]
        source: Box<ExecError>,
    },
    /// Another task of the cluster failed, or could not be reached, while this one waited.
    #[error(transparent)]
    Cluster(#[from] crate::exec::rendezvous::RendezvousError),
    /// The session's runner failed in a way a session's own plans never do (a captured save's
    /// files, a plan traced by the runner).
    #[error(transparent)]
    Runner(Box<RunError>),
    /// Values for keys the plan saves are missing (all of them counted, the first few named).
    #[error("no value for {}", missing_keys(keys, *count))]
    MissingValue {
        /// The first few keys without a value, in key order.
        keys: Vec<String>,
        /// How many keys have no value.
        count: usize,
    },
    /// A value for a key the plan does not save.
    #[error("value `{key}` is not a checkpoint key of the plan")]
    UnknownKey {
        /// The key.
        key: String,
    },
    /// A value of the wrong dtype.
    #[error("value `{key}` is {got}, the plan saves {expected}")]
    DTypeMismatch {
        /// The key.
        key: String,
        /// The plan's dtype.
        expected: DType,
        /// The value's dtype.
        got: DType,
    },
    /// A value of the wrong shape.
    #[error("value `{key}` has shape {got:?}, the plan saves shape {expected:?}")]
    ShapeMismatch {
        /// The key.
        key: String,
        /// The plan's shape.
        expected: Vec<u64>,
        /// The value's shape.
        got: Vec<u64>,
    },
    /// A restored value that does not fit the plan's variable.
    #[error("checkpoint key `{key}`: restored {got}, the plan expects {expected}")]
    RestoredMismatch {
        /// The key.
        key: String,
        /// The dtype and shape the plan declares.
        expected: String,
        /// The dtype and shape restored.
        got: String,
    },
    /// The slices a plan restores of a partitioned tensor leave part of it out, so there is no
    /// full value to give back (`saveplan check` reports the gap too).
    #[error(
        "checkpoint key `{key}`: the restored slices cover {covered} of the {n_elements} elements of shape {shape:?}"
    )]
    SlicesDoNotCover {
        /// The key.
        key: String,
        /// The full shape.
        shape: Vec<u64>,
        /// The elements the slices cover.
        covered: u64,
        /// The elements of the full shape.
        n_elements: u64,
    },
    /// Cutting or assembling a value failed.
    #[error("value `{key}`")]
    Tensor {
        /// The key.
        key: String,
        /// Why.
        #[source]
        source: TensorError,
    },
    /// A variable operation failed.
    #[error("checkpoint key `{key}`")]
    Variable {
        /// The key.
        key: String,
        /// Why.
        #[source]
        source: VariableError,
    },
}

impl SessionError {
    /// Whether the error is about the values given to [`super::Session::assign`] (or to
    /// [`super::Session::new_with_values`]): a missing or unknown key, a wrong dtype or
    /// shape, a value that cannot be cut or stored. The others are about the plan.
    pub fn is_about_values(&self) -> bool {
        matches!(
            self,
            SessionError::MissingValue { .. }
                | SessionError::UnknownKey { .. }
                | SessionError::DTypeMismatch { .. }
                | SessionError::ShapeMismatch { .. }
                | SessionError::Tensor { .. }
                | SessionError::Variable { .. }
        )
    }
}

/// Why a graph has no save plan a session can find without a `SaverDef`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MissingSavePlan {
    /// Neither a merge nor a save.
    #[error("the graph has no MergeV2Checkpoints or SaveV2 op")]
    NoSaveOp,
    /// More than one candidate.
    #[error("the graph has several save plans; give a SaverDef")]
    SeveralSaves,
    /// Not exactly one prefix placeholder.
    #[error("the save plan depends on {count} string placeholders, expected one")]
    Placeholders {
        /// How many string placeholders the save depends on.
        count: usize,
    },
}

/// What is wrong with a `SaveV2` or `RestoreV2` whose keys a session reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadCheckpointOp {
    /// `tensor_names` is not a string constant (one entry per dtype at most).
    #[error("`tensor_names` is not a constant string vector")]
    NamesNotConstant,
    /// `shape_and_slices` is not a string constant (one entry per dtype at most).
    #[error("`shape_and_slices` is not a constant string vector")]
    SlicesNotConstant,
    /// The two constants have different lengths.
    #[error("`tensor_names` and `shape_and_slices` differ in length")]
    LengthsDiffer,
    /// No `dtypes` attribute.
    #[error("no `dtypes` attribute")]
    NoDTypes,
    /// More keys than dtypes.
    #[error("fewer dtypes than tensor names")]
    FewerDTypes,
}

/// Why a checkpoint tensor cannot be tied to a variable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unbound {
    /// A walk back through the plan found an op without the input it needs.
    #[error("op `{op}` has no input {input}")]
    NoInput {
        /// The op.
        op: String,
        /// The input slot.
        input: u32,
    },
    /// An edge naming an output its source does not have.
    #[error("op `{op}` has no output {port:?}")]
    NoOutput {
        /// The source op.
        op: String,
        /// The port the edge names.
        port: saveplan_ir::Port,
    },
    /// A function argument whose `index` is not a slot number.
    #[error("argument `{arg}` has a bad index")]
    BadArgIndex {
        /// The argument op.
        arg: String,
    },
    /// A function argument without an `index`.
    #[error("argument `{arg}` has no index")]
    NoArgIndex {
        /// The argument op.
        arg: String,
    },
    /// A saved tensor that is not a variable's value.
    #[error("the saved tensor comes from `{op}` ({op_type}), not from a variable read")]
    NotAVariableRead {
        /// The op producing it.
        op: String,
        /// Its type.
        op_type: String,
    },
    /// A handle that does not come from a `VarHandleOp`.
    #[error("the variable handle comes from `{op}` ({op_type}), not from a VarHandleOp")]
    NotAVarHandle {
        /// The op producing it.
        op: String,
        /// Its type.
        op_type: String,
    },
    /// A restored tensor that no `AssignVariableOp` stores.
    #[error("the restored tensor is not assigned to a variable")]
    NotAssigned,
    /// A traced entry naming a variable the trace does not list ([`crate::trace::TracedKeys`]).
    #[error("the trace lists no variable {index}")]
    NoTracedVariable {
        /// The entry's variable.
        index: u32,
    },
}

/// How the parts of one checkpoint key disagree.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InconsistentKey {
    /// A slice spec that does not parse.
    #[error("bad slice spec `{spec}`: {reason}")]
    BadSliceSpec {
        /// The spec.
        spec: String,
        /// Why.
        reason: SliceError,
    },
    /// Two dtypes for one key.
    #[error("saved as {first} and as {second}")]
    DTypes {
        /// The dtype seen first.
        first: DType,
        /// The other.
        second: DType,
    },
    /// Two full shapes for one key.
    #[error("its parts disagree on the full shape")]
    FullShapes,
    /// Saved whole by one op and in slices by another.
    #[error("saved both whole and in slices")]
    WholeAndSliced,
}

impl From<EagerError> for SessionError {
    fn from(err: EagerError) -> SessionError {
        SessionError::Eager(Box::new(err))
    }
}

/// How many keys a [`SessionError::MissingValue`] names.
pub(super) const MISSING_NAMED: usize = 3;

/// "checkpoint key `a`", or "3 checkpoint keys: `a`, `b`, `c`" (with ", …" past the named ones).
fn missing_keys(keys: &[String], count: usize) -> String {
    let named: Vec<String> = keys.iter().map(|key| format!("`{key}`")).collect();
    match count {
        1 => format!("checkpoint key {}", named.join("")),
        _ => {
            let more = if count > keys.len() { ", …" } else { "" };
            format!("{count} checkpoint keys: {}{more}", named.join(", "))
        }
    }
}

/// Why a [`Runner`](super::Runner) could not be made or could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A call the runner was made without a plan for.
    #[error("no {what} plan to run")]
    LeftOut {
        /// `init`, `save` or `restore`.
        what: &'static str,
    },
    /// The plan could not be traced.
    #[error(transparent)]
    Trace(Box<TraceError>),
    /// The traced plan breaks an invariant of the IR (a tracer bug; every violation listed).
    #[error("the traced plan is not valid")]
    Invalid(#[source] VerifyErrors),
    /// The traced plan could not be compiled.
    #[error("cannot compile the {what} plan")]
    Compile {
        /// `save` or `restore`.
        what: &'static str,
        /// Why.
        #[source]
        source: Box<ExecError>,
    },
    /// A save cannot start at the prefix (empty, a directory, its lock not taken).
    #[error(transparent)]
    Prefix(Box<IoError>),
    /// Running the compiled plan failed.
    #[error(transparent)]
    Plan(Box<ExecError>),
    /// The eager saver failed.
    #[error(transparent)]
    Eager(Box<EagerError>),
    /// Writing the files a captured save made failed.
    #[error(transparent)]
    Files(Box<IoError>),
    /// Another task of the cluster failed (or could not be reached) while this one waited
    /// for it.
    #[error(transparent)]
    Cluster(crate::exec::rendezvous::RendezvousError),
    /// A captured write (an object-based or asynchronous one) runs in one process only.
    #[error("a captured write runs in one process: a cluster run writes straight through")]
    CaptureInCluster,
    /// Eager mode runs its tasks in one process only.
    #[error("eager mode runs in one process: a cluster run needs a compiled plan (graph mode)")]
    EagerCluster,
}
