//! The JIT backend: a [`CompiledPlan`] lowered with cranelift into native code, one straight-line
//! function per device queue (split into chunks), run concurrently on rayon like the interpreter.
//!
//! # What the native code does
//!
//! For each step of a queue, in schedule order, the generated code
//!
//! 1. waits for every dependency produced on *another* queue (dependencies on its own queue are
//!    done, since a queue runs its steps in topological order): a call to the runtime's `wait`
//!    with the dependency's signal number as an immediate;
//! 2. calls the runtime's `step` trampoline with the step index and the step's input and output
//!    slot ids, stored as immediates into a stack array, which runs
//!    [`Kernel::run`](crate::exec::Kernel::run) on the inputs read from the slot table and
//!    stores the outputs;
//! 3. if another queue depends on the step, calls `signal` with its signal number.
//!
//! Every call returns a status; anything but `0` makes the function return it at once, so an
//! error unwinds the native frames without Rust unwinding through them. There is no
//! interpretive loop over steps: step indices, slot ids and signal numbers are constants in the
//! code. Queues are cut into chunks of [`CHUNK_STEPS`] steps so that functions stay small for
//! the register allocator (and compile in parallel on rayon); the driver calls a queue's chunks
//! in order. Cranelift runs without optimizations and with its single-pass register allocator:
//! the code is a sequence of calls, so compile time matters more than code quality. The cost is
//! code size (about 100 bytes per step) and compile time (several µs per step).
//!
//! # Waiting without blocking
//!
//! A `wait` whose dependency is not done does not block the thread: it parks the queue (records
//! the chunk and resume point on the dependency's waiter list) and the native function returns.
//! The `signal` of that dependency spawns a rayon task that re-enters the chunk at the resume
//! point (a `br_table` at the function's entry). So, as with the interpreter, a pool of one
//! thread runs any plan, and the values (and files) do not depend on the number of threads.
//!
//! # Errors, cancellation, panics
//!
//! A kernel error is recorded (the first one wins, named by op and device as
//! [`ExecError::Op`]), the run is cancelled, and every queue stops at its next `step` or `wait`;
//! queues parked on a step that never finishes are simply never resumed. Every host function
//! runs under `catch_unwind`: a panic (in a kernel or an observer) is stored, the run stops, and
//! the panic resumes in the caller of [`JitPlan::run`] once no native frame is left.
//!
//! # Function calls
//!
//! A `Work::Call` step runs its body as a JIT plan too: the sub-plans of a plan (recursively)
//! are lowered into the same cranelift module, and the trampoline runs the nested [`JitPlan`].
//!
//! **Invariant:** this is the only module that imports cranelift.

pub mod error;
mod lower;
mod runtime;

pub use error::{CraneliftError, JitError};

use std::collections::BTreeMap;
use std::sync::Arc;

use super::error::ExecError;
use super::plan::{CompiledPlan, StepId, Work};
use super::step::RunContext;
use super::tensor::HostTensor;

use lower::{ChunkFn, ChunkStep, NativeCode};

/// The most steps one native function holds.
pub const CHUNK_STEPS: usize = 512;

/// A [`CompiledPlan`] with its native code: compile once, run many times.
///
/// The native code lives as long as the `JitPlan` (sub-plans share their parent's module).
pub struct JitPlan {
    plan: Arc<CompiledPlan>,
    /// The native chunk functions of each queue, in order.
    queues: Vec<Vec<ChunkFn>>,
    /// The JIT plans of the bodies of `Work::Call` steps.
    calls: BTreeMap<StepId, JitPlan>,
    /// The number of steps other queues wait for.
    n_signals: usize,
    /// Keeps the code of `queues` (and of every sub-plan) alive.
    code: Arc<NativeCode>,
}

/// Where the chunks of one plan (and its sub-plans) sit in the list handed to the lowering.
struct Layout {
    plan: Arc<CompiledPlan>,
    /// Per queue, the indices of its chunks in the lowered list.
    queues: Vec<std::ops::Range<usize>>,
    calls: BTreeMap<StepId, Layout>,
    n_signals: usize,
}

impl JitPlan {
    /// Lowers `plan` (and the bodies of the functions it calls) to native code.
    pub fn compile(plan: &CompiledPlan) -> Result<JitPlan, JitError> {
        JitPlan::compile_shared(Arc::new(plan.clone()))
    }

    /// Lowers a shared plan without copying it.
    pub fn compile_shared(plan: Arc<CompiledPlan>) -> Result<JitPlan, JitError> {
        let mut chunks = Vec::new();
        let layout = layout(plan, &mut chunks)?;
        let (code, functions) = lower::lower(&chunks, &runtime::host_functions())?;
        Ok(assemble(layout, &functions, &Arc::new(code)))
    }

    /// Runs the plan on the current rayon pool with `feeds` in compile order, returning the
    /// fetched tensors in target order: the same contract as [`CompiledPlan::run`].
    pub fn run(
        &self,
        run: &RunContext<'_>,
        feeds: Vec<HostTensor>,
    ) -> Result<Vec<HostTensor>, ExecError> {
        runtime::run(self, run, feeds)
    }

    /// The plan this code runs.
    pub fn plan(&self) -> &CompiledPlan {
        &self.plan
    }

    /// The bytes of machine code generated for this plan and its sub-plans (they share one
    /// module, so a sub-plan reports the whole module's).
    pub fn code_bytes(&self) -> usize {
        self.code.code_bytes()
    }

    /// The number of native functions of this plan and its sub-plans.
    pub fn n_functions(&self) -> usize {
        self.queues.iter().map(Vec::len).sum::<usize>()
            + self.calls.values().map(JitPlan::n_functions).sum::<usize>()
    }
}

impl std::fmt::Debug for JitPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JitPlan")
            .field("steps", &self.plan.steps().len())
            .field("queues", &self.plan.queues().len())
            .field("functions", &self.n_functions())
            .finish()
    }
}

/// Describes the chunks of `plan` and of its sub-plans, appending them to `chunks`.
fn layout(plan: Arc<CompiledPlan>, chunks: &mut Vec<Vec<ChunkStep>>) -> Result<Layout, JitError> {
    let too_large = |what: &str| JitError::TooLarge {
        what: what.to_owned(),
    };
    let n_steps = plan.steps().len();
    u32::try_from(n_steps).map_err(|_| too_large("steps"))?;
    u32::try_from(plan.n_slots()).map_err(|_| too_large("slots"))?;
    // A step signals when a step of another queue depends on it.
    let mut signal_of: Vec<Option<u32>> = vec![None; n_steps];
    let mut n_signals = 0u32;
    for (index, step) in plan.steps().iter().enumerate() {
        if step
            .users
            .iter()
            .any(|user| plan.step(*user).queue != step.queue)
        {
            signal_of[index] = Some(n_signals);
            n_signals += 1;
        }
    }
    let mut queues = Vec::with_capacity(plan.queues().len());
    for queue in plan.queues() {
        let first = chunks.len();
        for ids in queue.steps.chunks(CHUNK_STEPS) {
            let chunk = ids
                .iter()
                .map(|&id| chunk_step(&plan, id, &signal_of))
                .collect();
            chunks.push(chunk);
        }
        queues.push(first..chunks.len());
    }
    let mut calls = BTreeMap::new();
    for (index, step) in plan.steps().iter().enumerate() {
        if let Work::Call { plan: body, .. } = &step.work {
            calls.insert(StepId(index as u32), layout(Arc::clone(body), chunks)?);
        }
    }
    Ok(Layout {
        plan,
        queues,
        calls,
        n_signals: n_signals as usize,
    })
}

/// What the native code of step `id` needs: its cross-queue waits, slots and signal.
fn chunk_step(plan: &CompiledPlan, id: StepId, signal_of: &[Option<u32>]) -> ChunkStep {
    let step = plan.step(id);
    let waits = step
        .deps
        .iter()
        .filter(|dep| plan.step(**dep).queue != step.queue)
        .map(|dep| signal_of[dep.0 as usize].expect("a cross-queue dependency signals"))
        .collect();
    ChunkStep {
        step: id.0,
        waits,
        slots: step
            .inputs
            .iter()
            .chain(&step.outputs)
            .map(|slot| slot.0)
            .collect(),
        n_inputs: step.inputs.len() as u32,
        signal: signal_of[id.0 as usize],
    }
}

/// Builds the [`JitPlan`] tree from a layout and the lowered functions.
fn assemble(layout: Layout, functions: &[ChunkFn], code: &Arc<NativeCode>) -> JitPlan {
    JitPlan {
        plan: layout.plan,
        queues: layout
            .queues
            .into_iter()
            .map(|range| functions[range].to_vec())
            .collect(),
        calls: layout
            .calls
            .into_iter()
            .map(|(id, sub)| (id, assemble(sub, functions, code)))
            .collect(),
        n_signals: layout.n_signals,
        code: Arc::clone(code),
    }
}
