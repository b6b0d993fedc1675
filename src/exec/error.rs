//! Errors of the executor: [`ExecError`] for compiling and running plans, [`KernelError`] for
//! what one kernel found wrong (wrapped with the op's name and device by the scheduler).

use saveplan_ir::DType;
use saveplan_ir::device::DeviceError;

use super::tensor::TensorError;
use super::variables::VariableError;

/// Errors from compiling or running a plan.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// A target or feed names no op of the graph.
    #[error("no op named `{name}` in the graph")]
    UnknownOp {
        /// The name that was looked up.
        name: String,
    },
    /// A target or feed is not of the form `op` or `op:N`.
    #[error("`{name}` is not a tensor name (`op:N`)")]
    BadTensorName {
        /// The text given.
        name: String,
    },
    /// A tensor name points past the last output of its op.
    #[error("op `{name}` has {n_outputs} outputs, so it has no output {output}")]
    NoSuchOutput {
        /// The op name.
        name: String,
        /// The output asked for.
        output: u32,
        /// The number of outputs of the op.
        n_outputs: usize,
    },
    /// The same tensor is fed twice.
    #[error("tensor `{name}` is fed twice")]
    DuplicateFeed {
        /// The tensor name.
        name: String,
    },
    /// An op type the executor has no kernel for.
    #[error("op `{name}`: no kernel for op type `{op_type}`")]
    UnsupportedOp {
        /// The op name.
        name: String,
        /// The op type.
        op_type: String,
    },
    /// A needed `Placeholder` that is not fed.
    #[error("placeholder `{name}` must be fed")]
    Unfed {
        /// The placeholder's name.
        name: String,
    },
    /// An attribute that is missing or has the wrong kind or value.
    #[error("op `{name}`: attr `{attr}`: {reason}")]
    BadAttr {
        /// The op name.
        name: String,
        /// The attr name.
        attr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A called function with fewer arguments than its call has inputs (the first slot
    /// without an argument).
    #[error("op `{name}`: input {input} is not connected")]
    MissingInput {
        /// The op name.
        name: String,
        /// The first missing slot.
        input: u32,
    },
    /// An op's device string does not parse.
    #[error("op `{name}`: bad device")]
    BadDevice {
        /// The op name.
        name: String,
        /// Why the device does not parse.
        #[source]
        source: DeviceError,
    },
    /// [`super::CompiledPlan::compile_function`] names a function the library does not hold.
    #[error("no function named `{function}` in the library")]
    NoSuchFunction {
        /// The function name.
        function: String,
    },
    /// A function that (indirectly) calls itself.
    #[error("function `{function}` calls itself")]
    RecursiveFunction {
        /// The function name.
        function: String,
    },
    /// A function's `ret` entry that does not name a tensor of its body.
    #[error("function `{function}`: bad return value `{ret}` for output `{output}`")]
    BadReturn {
        /// The function name.
        function: String,
        /// The output argument.
        output: String,
        /// The `ret` text.
        ret: String,
    },
    /// Compiling the body of a called function failed.
    #[error("op `{name}`: in function `{function}`")]
    InFunction {
        /// The call op's name.
        name: String,
        /// The function name.
        function: String,
        /// What went wrong in the body.
        #[source]
        source: Box<ExecError>,
    },
    /// `run` got a different number of feeds than the plan was compiled with.
    #[error("the plan takes {expected} feeds, got {got}")]
    FeedCount {
        /// Feeds the plan was compiled with.
        expected: usize,
        /// Feeds given to `run`.
        got: usize,
    },
    /// A fed value whose dtype differs from what its placeholder declares.
    #[error("feed `{name}` must be {expected}, got {got}")]
    FeedDType {
        /// The fed tensor's name.
        name: String,
        /// The placeholder's dtype.
        expected: DType,
        /// The fed value's dtype.
        got: DType,
    },
    /// A kernel failed while the plan ran.
    #[error("op `{name}` on {device}")]
    Op {
        /// The op name.
        name: String,
        /// The device (queue) it ran on.
        device: String,
        /// What the kernel reported.
        #[source]
        source: Box<KernelError>,
    },
    /// A plan that spans several tasks could not be split by task.
    #[error("cannot split the plan by task")]
    Partition(#[source] Box<crate::partition::PartitionError>),
    /// A partition the partitioner made does not verify (a bug of the partitioner).
    #[error("the partition is not valid")]
    InvalidPartition(#[source] saveplan_ir::VerifyErrors),
    /// One task of a plan that spans several failed.
    #[error("task {task}")]
    Task {
        /// The task, `/job:J/replica:R/task:T`.
        task: String,
        /// What failed there.
        #[source]
        source: Box<ExecError>,
    },
    /// A task's partition was not compiled in this process (it runs another task).
    #[error("task {task} is not compiled in this process (it runs another task of the cluster)")]
    NotCompiled {
        /// The task.
        task: String,
    },
    /// A cluster of processes does not have one process per task of the plan.
    #[error(
        "the cluster has {processes} process(es) but the plan has {tasks} task(s) ({names}): \
         start one process per task"
    )]
    ClusterSize {
        /// The processes (MPI ranks) started.
        processes: usize,
        /// The tasks of the plan.
        tasks: usize,
        /// The tasks' names, sorted.
        names: String,
    },
    /// The rendezvous of an in-process cluster run could not be made.
    #[error(transparent)]
    Rendezvous(Box<super::rendezvous::RendezvousError>),
    /// A backend this build does not include.
    #[error("backend `{backend}` is not built in (enable the cargo feature `{backend}`)")]
    BackendUnavailable {
        /// The backend asked for.
        backend: super::backend::Backend,
    },
    /// Generating native code for a plan failed.
    #[cfg(feature = "jit")]
    #[error("cannot compile the plan to native code")]
    Jit(#[from] super::jit::error::JitError),
}

/// What one kernel found wrong with its inputs or its effect; the scheduler wraps it in
/// [`ExecError::Op`] with the op's name and device.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// An input of the wrong dtype.
    #[error("input {input} must be {expected}, got {got}")]
    InputDType {
        /// The input slot.
        input: usize,
        /// The dtype the op needs.
        expected: DType,
        /// The dtype it got.
        got: DType,
    },
    /// An input of the wrong shape.
    #[error("input {input} must be {expected}, got shape {got:?}")]
    InputShape {
        /// The input slot.
        input: usize,
        /// What the op needs, in words (`a scalar`, `shape [3]`).
        expected: String,
        /// The shape it got.
        got: Vec<u64>,
    },
    /// A valid input the executor does not implement yet.
    #[error("unsupported: {what}")]
    Unsupported {
        /// What is not supported.
        what: String,
    },
    /// An input value the op rejects.
    #[error("{reason}")]
    Invalid {
        /// Why.
        reason: String,
    },
    /// A regex that does not compile.
    #[error("bad regex `{pattern}`")]
    Regex {
        /// The pattern.
        pattern: String,
        /// The parse error.
        #[source]
        source: Box<regex::Error>,
    },
    /// A variable operation failed.
    #[error(transparent)]
    Variable(#[from] VariableError),
    /// An output tensor could not be built (sizes overflow).
    #[error(transparent)]
    Tensor(#[from] TensorError),
    /// The checkpoint backend failed.
    #[error("checkpoint i/o failed")]
    Checkpoint {
        /// The backend's error.
        #[source]
        source: Box<super::io::IoError>,
    },
    /// A send or receive of a partitioned graph failed to meet its other end.
    #[error(transparent)]
    Rendezvous(#[from] super::rendezvous::RendezvousError),
    /// A send or receive ran outside a cluster, or names a device of no task of it.
    #[error("{what}")]
    Cluster {
        /// What is wrong.
        what: String,
    },
    /// A called function failed.
    #[error("in function `{function}`")]
    Call {
        /// The function name.
        function: String,
        /// The error inside the function.
        #[source]
        source: Box<ExecError>,
    },
}

impl KernelError {
    /// An [`KernelError::Invalid`] with this reason.
    pub fn invalid(reason: impl Into<String>) -> KernelError {
        KernelError::Invalid {
            reason: reason.into(),
        }
    }

    /// An [`KernelError::Unsupported`] for this feature.
    pub fn unsupported(what: impl Into<String>) -> KernelError {
        KernelError::Unsupported { what: what.into() }
    }
}

/// `err` and its sources on one line, `: `-separated (what a cluster's other tasks are told
/// when one fails).
pub fn error_line<E: std::error::Error + ?Sized>(err: &E) -> String {
    let mut line = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        line.push_str(": ");
        line.push_str(&cause.to_string());
        source = cause.source();
    }
    line
}
