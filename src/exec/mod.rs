//! The runtime: plans compiled once and run many times, on the reference interpreter or the
//! cranelift JIT, with their kernels, variables and device queues. It runs graphs and knows
//! nothing of how they were made (the tracer and eager mode sit above, in
//! [`crate::session`]).
//!
//! # Layers
//!
//! * [`tensor`]: [`HostTensor`], the runtime value, with reference-counted storage.
//! * [`variables`]: [`VariableStore`], resource variables keyed by container and shared name.
//! * [`io`]: [`CheckpointIo`], the storage `SaveV2`, `RestoreV2` and `MergeV2Checkpoints` use;
//!   [`BundleIo`] writes TensorFlow V2 bundles with [`crate::bundle`].
//! * [`kernels`]: one [`Kernel`] per supported op, resolved from the op's attributes.
//! * [`plan`]: [`CompiledPlan`], a graph pruned to some targets and compiled into plain data:
//!   steps in topological order with kernels, value slots and one queue per device. Function
//!   calls compile into nested plans. Ops join the plan in topological order a chunk at a
//!   time, while the next chunk's kernels and names, which depend on their op alone, are made
//!   on the other cores: reading every op's attributes is most of compiling a large plan.
//! * [`fuse`]: the pass that folds the variable reads feeding a `SaveV2` and the assignments
//!   fed by a `RestoreV2` into one step, and how that step runs.
//! * [`step`]: what both backends share to run a step: [`RunContext`] (variables, checkpoint
//!   backend, observer), the slot table, running a kernel or a call and reporting its result.
//! * [`scheduler`]: the interpreter: runs a plan on rayon, queue by queue, with cancellation on
//!   the first error.
//! * `jit` (cargo feature `jit`): the cranelift backend, one native function per device queue,
//!   driving the same steps through [`step`].
//! * [`rendezvous`]: [`rendezvous::Rendezvous`], how the tasks of a partitioned plan hand each
//!   other tensors: in one process ([`rendezvous::LocalRendezvous`]) or over MPI (feature `mpi`).
//! * [`executor`]: [`Executor`], a plan prepared for a [`Backend`]: the interpreter or the JIT,
//!   which run the same kernels in the same per-device order and write the same bytes.
//! * [`cluster`]: [`TaskPlans`], how every compiled plan runs: whole when it names at most
//!   one task, else split by task ([`crate::partition`]) and run task by task, all in this
//!   process through a [`rendezvous::LocalRendezvous`] or one task per process.
//!
//! # Semantics worth knowing
//!
//! * Devices only choose queues: every kernel runs on the host, and ops of one device never
//!   overlap. Empty or partial devices resolve against [`DEFAULT_DEVICE`] (a function body
//!   against its call's device).
//! * Variables exist from their first assignment; `VarHandleOp` creates nothing, and an empty
//!   `shared_name` means the op's name, as in graph-mode TensorFlow.
//! * A called function runs its outputs, its control outputs and every stateful op of its
//!   body; other unused body ops are pruned.
//! * Limits: `Select`/`SelectV2` support a scalar condition, an equal-shape condition and (for
//!   `Select`) a row vector, and `SelectV2` does no other broadcasting; resource tensors cannot
//!   be packed, selected or sliced; string tensors are never written to `tensor_content`.
//!   Any op type not listed on [`Kernel`] fails to compile with [`ExecError::UnsupportedOp`].
//!
//! # Example
//!
//! ```no_run
//! use saveplan::exec::{CompiledPlan, HostTensor, RunContext, VariableStore};
//! # fn demo(module: &saveplan_ir::Module) -> Result<(), Box<dyn std::error::Error>> {
//! let module = saveplan_ir::verify_module(module)?; // verified once, where it enters
//! let plan = CompiledPlan::compile(module, &["StringJoin:0"], &["saver_filename:0"])?;
//! let variables = VariableStore::new();
//! let outputs = plan.run(&RunContext::new(&variables), vec![HostTensor::string_scalar("/d/ckpt")])?;
//! assert_eq!(outputs[0].as_string_scalar(), Some(&b"/d/ckpt_temp/part"[..]));
//! # Ok(())
//! # }
//! ```

pub mod backend;
pub mod cluster;
pub mod error;
pub mod executor;
pub mod fuse;
pub mod io;
#[cfg(feature = "jit")]
pub mod jit;
pub mod kernels;
pub mod plan;
pub mod rendezvous;
pub mod scheduler;
pub mod step;
pub(crate) mod sync;
pub mod tensor;
mod typed;
pub mod variables;

pub use backend::{Backend, UnknownBackend};
pub use cluster::{TaskPlans, check_cluster_size};
pub use error::{ExecError, KernelError, error_line};
pub use executor::Executor;
pub use io::{
    BundleIo, CheckpointIo, IoError, MergeFlags, OpenedBundleIo, OpenedBundles, RestoreRequest,
    RunIo, SaveGuard, SaveRequest,
};
pub use kernels::{Kernel, KernelCx, VariableAttrs};
pub use plan::{
    CompiledPlan, DEFAULT_DEVICE, Feed, Queue, QueueId, SlotId, Step, StepId, Work, resolve_device,
};
pub use step::{RunContext, StepEvent};
pub use tensor::{HostTensor, ResourceHandle, TensorData, TensorError, Value};
pub use typed::TensorElement;
pub use variables::{
    VarKey, VarKeyRef, VarSlot, VariableError, VariableReader, VariableStore, VariableWriter,
};
