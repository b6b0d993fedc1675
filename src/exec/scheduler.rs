//! Runs a [`CompiledPlan`]: one queue per device, an op runs once its data and control inputs
//! are done, queues progress concurrently on the current rayon pool, and the first error
//! cancels the rest.
//!
//! # How a run proceeds
//!
//! Every step has a counter of unfinished dependencies. A step whose counter reaches zero is
//! put on its device queue's ready list; a queue is drained by at most one rayon task at a
//! time, lowest step number first, so ops of one device never overlap while different devices
//! run in parallel. Nothing blocks: a drainer that runs out of ready steps ends, and the step
//! that readies more work starts a new one. This is why a pool of one thread works.
//!
//! Each value slot is written once, by the step that produces it, before any consumer is
//! readied, so the values (and therefore every output and file) do not depend on the number of
//! threads or on timing. Only the order in which independent ops of different devices start
//! may differ between runs.
//!
//! When a kernel fails, its error (with the op's name and device) is kept, the run is marked
//! cancelled, and drainers stop taking steps; ops already running finish. With several
//! threads, if two ops fail at once the earlier-scheduled error wins.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use super::error::ExecError;
use super::fuse::run_fused;
use super::plan::{CompiledPlan, StepId, Work};
use super::step::{RunContext, StepInputs, fetch, finish_call, prepare_slots, run_kernel};
use super::sync::lock;
use super::tensor::HostTensor;

/// The mutable state of one run.
struct RunState<'p> {
    plan: &'p CompiledPlan,
    cx: &'p RunContext<'p>,
    slots: Vec<OnceLock<HostTensor>>,
    pending: Vec<AtomicUsize>,
    queues: Vec<Mutex<QueueState>>,
    cancelled: AtomicBool,
    error: Mutex<Option<ExecError>>,
    finished: AtomicUsize,
}

/// The ready steps of one queue and whether a drainer is active on it.
#[derive(Default)]
struct QueueState {
    ready: BinaryHeap<Reverse<StepId>>,
    draining: bool,
}

impl CompiledPlan {
    /// Runs the plan on the reference interpreter, on the current rayon pool, with `feeds` in
    /// compile order, returning the fetched tensors in target order (targets naming ops
    /// contribute no value). [`super::Executor`] runs it on either backend.
    pub fn run(
        &self,
        cx: &RunContext<'_>,
        feeds: Vec<HostTensor>,
    ) -> Result<Vec<HostTensor>, ExecError> {
        run(self, cx, feeds)
    }
}

/// Runs `plan` with `feeds` (in compile order) and returns the fetched tensors.
fn run(
    plan: &CompiledPlan,
    cx: &RunContext<'_>,
    feeds: Vec<HostTensor>,
) -> Result<Vec<HostTensor>, ExecError> {
    let slots = prepare_slots(plan, feeds)?;
    // Only queued steps run and only they have dependencies, so only theirs are counted. A
    // fused plan of N variables keeps its N folded steps but queues a handful: reading every
    // step's dependencies was a pass over all of them (tens of MB) at each run.
    let mut pending: Vec<AtomicUsize> = (0..plan.steps().len())
        .map(|_| AtomicUsize::new(0))
        .collect();
    for queue in plan.queues() {
        for &id in &queue.steps {
            *pending[id.0 as usize].get_mut() = plan.step(id).deps.len();
        }
    }
    let state = RunState {
        plan,
        cx,
        slots,
        pending,
        queues: plan.queues().iter().map(|_| Mutex::default()).collect(),
        cancelled: AtomicBool::new(false),
        error: Mutex::new(None),
        finished: AtomicUsize::new(0),
    };
    rayon::scope(|scope| {
        // Steps folded into a fused step are in no queue and never run.
        for queue in plan.queues() {
            for &id in &queue.steps {
                if plan.step(id).deps.is_empty() {
                    state.make_ready(scope, id);
                }
            }
        }
    });
    if let Some(err) = lock(&state.error).take() {
        return Err(err);
    }
    debug_assert_eq!(
        state.finished.load(Ordering::Acquire),
        plan.queues()
            .iter()
            .map(|queue| queue.steps.len())
            .sum::<usize>(),
        "a compiled plan is acyclic, so every step runs"
    );
    Ok(fetch(plan, &state.slots))
}

impl<'p> RunState<'p> {
    /// Puts `step` on its queue and starts a drainer if the queue has none.
    fn make_ready<'s>(&'s self, scope: &rayon::Scope<'s>, id: StepId) {
        let queue = self.plan.step(id).queue.0 as usize;
        let start = {
            let mut queue_state = lock(&self.queues[queue]);
            queue_state.ready.push(Reverse(id));
            !std::mem::replace(&mut queue_state.draining, true)
        };
        if start {
            scope.spawn(move |scope| self.drain(scope, queue));
        }
    }

    /// Runs ready steps of `queue` until it has none (or the run is cancelled).
    fn drain<'s>(&'s self, scope: &rayon::Scope<'s>, queue: usize) {
        loop {
            let next = {
                let mut queue_state = lock(&self.queues[queue]);
                let next = if self.cancelled.load(Ordering::Acquire) {
                    queue_state.ready.clear();
                    None
                } else {
                    queue_state.ready.pop().map(|Reverse(id)| id)
                };
                if next.is_none() {
                    queue_state.draining = false;
                }
                next
            };
            let Some(id) = next else { return };
            match self.run_step(id) {
                Ok(()) => {
                    self.finished.fetch_add(1, Ordering::AcqRel);
                    for &user in &self.plan.step(id).users {
                        if self.pending[user.0 as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
                            self.make_ready(scope, user);
                        }
                    }
                }
                Err(err) => {
                    self.cancelled.store(true, Ordering::Release);
                    lock(&self.error).get_or_insert(err);
                }
            }
        }
    }

    /// Runs one step: gathers its inputs, calls its kernel, stores its outputs.
    fn run_step(&self, id: StepId) -> Result<(), ExecError> {
        let step = self.plan.step(id);
        let device = &self.plan.queues()[step.queue.0 as usize].device;
        let inputs = StepInputs::new(step, &self.slots);
        let outputs = match &step.work {
            Work::Kernel(kernel) => run_kernel(self.cx, step, device, kernel, &inputs.all())?,
            Work::Call { function, plan } => finish_call(
                self.cx,
                step,
                device,
                function,
                run(plan, self.cx, inputs.all()),
            )?,
            Work::Fused(fused) => run_fused(self.cx, self.plan, step, device, fused, inputs)?,
        };
        for (slot, value) in step.outputs.iter().zip(outputs) {
            let _ = self.slots[slot.0 as usize].set(value);
        }
        Ok(())
    }
}
