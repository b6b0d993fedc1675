//! A verified plan split by task, as TensorFlow's distributed master splits a graph before
//! each worker runs its share: one graph per task (job, replica, task), with a send/receive
//! pair on every edge that crosses tasks.
//!
//! [`partition`] takes a [`Verified`] module and what one run asks for ([`PartitionOptions`]:
//! the ops to run, the tensors the client feeds, the client's task) and does what TensorFlow
//! does for that run:
//!
//! 1. **Prune** to the ops the targets depend on, through data and control inputs; a fed
//!    tensor cuts the walk (its producer is not run for it).
//! 2. **Place** every kept op on a task (`place.rs`): an op whose device names a job, replica
//!    or task is on that task (a missing job is the client's, a missing replica or task 0);
//!    an op whose device names none (`""`, `/device:CPU:*`) goes where its colocation group
//!    is (`_class: loc:@X`), else beside the variable whose handle it takes as an input,
//!    else on the client's task, where the feeds arrive. Each op gets a full device name,
//!    `/job:J/replica:R/task:T/device:TYPE:N` (type `CPU` and index 0 where it asks for none
//!    or for `*`).
//! 3. **Cut** (`cut.rs`): each task's ops go into a [`Module`] of their own, under their own
//!    names; a fed tensor becomes a client-terminated `_Recv` on the client's task
//!    (`_recv_<op>_<output>`, `tensor_name` the fed tensor's name); a data edge that crosses
//!    tasks becomes a `_Send` in the source's task and a `_Recv` in the destination's, one pair
//!    per tensor and destination task (`_HostSend`/`_HostRecv` for tensors TensorFlow keeps in
//!    host memory: `string`, `int32`, `resource`); a control edge that crosses tasks becomes a
//!    dummy `Const` (an empty `float` vector) that runs after the source, sent and received as
//!    data, and an `Identity` of the received value that the destination takes as a control
//!    input.
//!
//! The attrs of the pairs are TensorFlow's (`tensor_name`, `send_device`, `recv_device`,
//! `send_device_incarnation`, `client_terminated`, `T`/`tensor_type`, `_src`, `_dst`); the
//! rendezvous key of an edge is its `tensor_name`, `edge_<n>_<source op>`, numbered in the
//! order the edges are cut. Names of the added ops follow TensorFlow's pattern (`<op>_S<n>`,
//! `<op>/ctrl_S<n>`) from one counter.
//! Where it differs from TensorFlow (its master also replicates small constants per task and
//! its graph optimizer removes `Identity` ops) is in `docs/partition.md`.
//!
//! The result is plain data ([`Partitions`]): per task its module, the edges it sends and
//! receives ([`CrossEdge`]) and the feeds it receives from the client ([`Feed`]), in a
//! deterministic order (tasks sorted, ops in the source graph's creation order, added ops
//! after the originals). An executor runs each partition on its task and delivers each
//! [`CrossEdge::tensor_name`] from the task that sends it to the task that receives it.
//!
//! A worker needs its own partition alone: [`PartitionOptions::only`] builds that one and
//! leaves the others empty, cutting every pair all the same, so the built partition is the
//! one built with all the others (`tests/it/partition.rs` checks it for every fixture).
//!
//! The cost is linear: every op and edge of the pruned graph is visited a constant number of
//! times (placement is memoized, device strings are parsed once each).
//! Only the top-level graph is partitioned; a call op is placed like any other op and its
//! function stays in each partition's library.

mod cut;
mod place;

use std::fmt;

use saveplan_ir::device::{DeviceError, DeviceSpec};
use saveplan_ir::{DType, GraphError, Module, SaverDef, Verified};

/// A task of a cluster: `/job:<job>/replica:<replica>/task:<task>`. Tasks order by job, then
/// replica, then task (the order partitions are listed in).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Task {
    /// The job name, e.g. `worker`.
    pub job: String,
    /// The replica index within the job.
    pub replica: u32,
    /// The task index within the replica.
    pub task: u32,
}

impl Task {
    /// A task of `job`.
    pub fn new(job: impl Into<String>, replica: u32, task: u32) -> Task {
        Task {
            job: job.into(),
            replica,
            task,
        }
    }

    /// The full name of a device of this task, e.g. `/job:worker/replica:0/task:1/device:CPU:0`.
    pub fn device(&self, device_type: &str, index: u32) -> String {
        format!("{self}/device:{device_type}:{index}")
    }

    /// The task as a file name stem, `<job>-<replica>-<task>` (`worker-0-1`); job names hold
    /// only letters, digits and `_`, so the stem names one task.
    pub fn file_stem(&self) -> String {
        format!("{}-{}-{}", self.job, self.replica, self.task)
    }
}

impl std::str::FromStr for Task {
    type Err = PartitionError;

    /// Parses `/job:J[/replica:R][/task:T]` (a missing replica or task is 0; a device part
    /// is ignored).
    fn from_str(text: &str) -> Result<Task, PartitionError> {
        let bad = || PartitionError::BadTask {
            text: text.to_owned(),
        };
        let spec = DeviceSpec::parse(text).map_err(|_| bad())?;
        Ok(Task {
            job: spec.job.ok_or_else(bad)?,
            replica: spec.replica.unwrap_or(0),
            task: spec.task.unwrap_or(0),
        })
    }
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "/job:{}/replica:{}/task:{}",
            self.job, self.replica, self.task
        )
    }
}

/// What one run of a plan asks for: the ops it runs, the tensors the client feeds and where
/// the client is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionOptions {
    /// The ops to run, by name (a session's targets; a fetched tensor's op counts the same).
    /// Empty: every op of the graph.
    pub targets: Vec<String>,
    /// The tensors the client feeds (`saver_filename:0`, or `saver_filename` for output 0).
    pub feeds: Vec<String>,
    /// The task of the session (TensorFlow's master runs on the task the client connects to).
    /// `None`: the first task, in [`Task`] order, any op of the graph names; `/job:localhost/
    /// replica:0/task:0` if none names one.
    pub client: Option<Task>,
    /// Build only the partition at this index (of the tasks that run something, sorted): a
    /// worker runs its own alone. The others are cut all the same (every pair is numbered
    /// as it is when all are built, so the edges' `tensor_name`s and the built partition are
    /// the same) but left empty: their task, and nothing else. `None`: build every one.
    pub only: Option<usize>,
}

/// The two runs of a saver's plan.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SaverRun {
    /// Running the save tensor, the prefix fed.
    Save,
    /// Running the restore op, the prefix fed.
    Restore,
}

impl SaverRun {
    /// Both runs, save first.
    pub const ALL: [SaverRun; 2] = [SaverRun::Save, SaverRun::Restore];

    /// What the run runs in `saver`'s plan: its save tensor, or its restore op.
    pub fn target(self, saver: &SaverDef) -> &str {
        match self {
            SaverRun::Save => &saver.save_tensor_name,
            SaverRun::Restore => &saver.restore_op_name,
        }
    }

    /// `save` or `restore`.
    pub fn name(self) -> &'static str {
        match self {
            SaverRun::Save => "save",
            SaverRun::Restore => "restore",
        }
    }
}

impl PartitionOptions {
    /// The run `run` of the plan `saver` describes, as a TF1 session runs it: its save
    /// tensor or restore op as the target, its filename tensor fed, the client on `client`
    /// (see [`PartitionOptions::client`]).
    pub fn for_saver(saver: &SaverDef, run: SaverRun, client: Option<Task>) -> PartitionOptions {
        PartitionOptions {
            targets: vec![run.target(saver).to_owned()],
            feeds: vec![saver.filename_tensor_name.clone()],
            client,
            only: None,
        }
    }
}

/// A plan split by task: one [`Partition`] per task that runs something, sorted by task.
#[derive(Clone, Debug)]
pub struct Partitions {
    /// The client's task (where the feeds arrive and unplaced ops run).
    pub client: Task,
    /// The partitions, sorted by task (with [`PartitionOptions::only`], the others empty).
    pub partitions: Vec<Partition>,
    /// Per op of the source graph ([`saveplan_ir::OpId::index`]): the index of the
    /// partition it went to; `None` for an op the run does not need.
    pub task_of: Vec<Option<usize>>,
}

impl Partitions {
    /// Every edge that crosses tasks, once (as its source partition sends it), by source
    /// task, then in the order the edges were cut.
    pub fn cross_edges(&self) -> impl Iterator<Item = &CrossEdge> + '_ {
        self.partitions.iter().flat_map(|part| &part.sends)
    }

    /// The partition of `task`, if it runs anything.
    pub fn get(&self, task: &Task) -> Option<&Partition> {
        self.partitions
            .binary_search_by(|part| part.task.cmp(task))
            .ok()
            .map(|index| &self.partitions[index])
    }
}

/// What one task runs.
#[derive(Clone, Debug)]
pub struct Partition {
    /// The task.
    pub task: Task,
    /// The graph the task runs (with the source module's versions and library). Its first
    /// [`Partition::n_original`] ops, in creation order, are the source graph's ops placed
    /// here; the sends, receives and control helpers follow.
    pub module: Module,
    /// How many of the module's ops (the first ones) are ops of the source graph.
    pub n_original: usize,
    /// The edges this task sends to other tasks, in the order they were cut.
    pub sends: Vec<CrossEdge>,
    /// The edges this task receives from other tasks, in the order they were cut.
    pub recvs: Vec<CrossEdge>,
    /// The tensors the client feeds into this task (only the client's task has any).
    pub feeds: Vec<Feed>,
}

impl Partition {
    /// The names of the source graph's ops placed on this task, in creation order.
    pub fn original_ops(&self) -> impl Iterator<Item = &str> + '_ {
        let graph = &self.module.graph;
        (0..self.n_original)
            .filter_map(|index| graph.op_at(index))
            .map(|id| graph.op(id).name.as_str())
    }
}

/// What an edge that crosses tasks carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CrossKind {
    /// A tensor: output `output` of the op `op` (a fed tensor's edge names the feed's
    /// `_Recv`).
    Data {
        /// The producing op, by its name in the source partition.
        op: String,
        /// Its output.
        output: u32,
    },
    /// An order: everything after the receive runs after the op `op` (the value sent is the
    /// dummy constant's).
    Control {
        /// The op that must finish first.
        op: String,
    },
}

/// An edge that crosses tasks: a `_Send` in the source task's partition, a `_Recv` in the
/// destination's, both with the same `tensor_name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrossEdge {
    /// The rendezvous key both ops carry (`edge_<n>_<source op>`).
    pub tensor_name: String,
    /// What it carries.
    pub kind: CrossKind,
    /// The sending task.
    pub src: Task,
    /// The receiving task.
    pub dst: Task,
    /// The sending device (the source op's).
    pub send_device: String,
    /// The receiving device (the first consumer's).
    pub recv_device: String,
    /// The send op's name, in the source partition.
    pub send_op: String,
    /// The receive op's name, in the destination partition.
    pub recv_op: String,
    /// The dtype of the value sent (`float` for a control edge's dummy).
    pub dtype: DType,
    /// Whether the pair is `_HostSend`/`_HostRecv` (the value lives in host memory).
    pub host_memory: bool,
}

/// A tensor the client feeds: a client-terminated `_Recv` on the client's task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Feed {
    /// The fed tensor's name, `op:output` (the receive's `tensor_name`).
    pub tensor: String,
    /// The receive op's name.
    pub recv_op: String,
    /// Its dtype.
    pub dtype: DType,
}

/// Why a plan cannot be partitioned.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    /// A target names no op of the graph.
    #[error("target `{name}`: no such op")]
    MissingTarget {
        /// The name.
        name: String,
    },
    /// A feed names no output of an op of the graph.
    #[error("feed `{tensor}`: no such tensor")]
    MissingFeed {
        /// The tensor name as given.
        tensor: String,
    },
    /// An op's device string does not parse.
    #[error("op `{op}`: {source}")]
    Device {
        /// The op.
        op: String,
        /// What is wrong with its device.
        source: DeviceError,
    },
    /// The dtype of an output that crosses tasks (or is fed) is unknown: the op's type has
    /// no known signature and no `T`, `dtype` or `tensor_type` attr.
    #[error("op `{op}`: the dtype of output {output} is unknown")]
    UnknownDtype {
        /// The op.
        op: String,
        /// The output.
        output: u32,
    },
    /// An op's input names an output by argument that its signature does not resolve.
    #[error("op `{op}`: input {input} names an output its producer does not have")]
    BadPort {
        /// The consuming op.
        op: String,
        /// The input slot.
        input: u32,
    },
    /// A task name that is not `/job:J[/replica:R][/task:T]`.
    #[error("`{text}` is not a task (`/job:J/replica:R/task:T`)")]
    BadTask {
        /// The text given.
        text: String,
    },
    /// Building a partition failed (an added op's name is taken).
    #[error("cannot build a partition: {0}")]
    Graph(#[from] GraphError),
}

/// Splits the verified `module` by task for the run `options` describes; see the module
/// docs for the rules.
pub fn partition(
    module: Verified<'_>,
    options: &PartitionOptions,
) -> Result<Partitions, PartitionError> {
    cut::partition(module.module(), options)
}
