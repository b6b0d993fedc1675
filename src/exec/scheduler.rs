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
//!
//! # Receives
//!
//! In one task's partition of a cluster run ([`RunContext::cluster`]), a `_Recv` waits for a
//! value another task sends, which may come only after this task ran more steps. A drainer
//! never waits for it: a ready receive is handed to the run's caller (the *pump*, which owns
//! the run), which asks the rendezvous to call back when the value arrives
//! ([`Rendezvous::recv_async`](super::rendezvous::Rendezvous::recv_async); one that cannot is
//! waited on by a thread of its own) and, once it arrived, stores it and readies its users as
//! a finished step would. So no pool thread ever blocks on another task, however few threads
//! the pool has, however many tasks share it and however many receives wait. The pump ends
//! the run when no drainer and no receive is left. The first error of such a run also aborts the cluster's
//! rendezvous, so that the other tasks stop instead of waiting for what will never come.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::error::{ExecError, KernelError, error_line};
use super::fuse::run_fused;
use super::kernels::{Kernel, Transfer, transfer};
use super::plan::{CompiledPlan, Step, StepId, Work};
use super::rendezvous::{RecvDone, RendezvousError};
use super::step::{
    RunContext, StepInputs, fetch, finish_call, finish_step, kernel_cx, op_error, prepare_slots,
    run_kernel,
};
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
    /// In a cluster run whose plan receives: where drainers hand ready receives and report
    /// that they ended, for the pump (see the module docs). `None` otherwise.
    pump: Option<Mutex<Sender<Pumped>>>,
    /// Drainers running plus receives handed to the pump and not yet finished by it (counted
    /// only when `pump` is set): the run is over when none is left.
    active: AtomicUsize,
}

/// What the pump of a cluster run hears.
enum Pumped {
    /// A receive is ready: ask the rendezvous for its value.
    Receive(StepId),
    /// A receive's value arrived (or the rendezvous failed it).
    Arrived(StepId, Result<HostTensor, RendezvousError>),
    /// A drainer ended with nothing left active at that moment.
    Idle,
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
    // Only a partition of a cluster run receives; other runs never pay for the pump.
    let (pump, pumped) = if cx.cluster.is_some() && plan.receives() {
        let (sender, receiver) = channel();
        (Some(Mutex::new(sender)), Some(receiver))
    } else {
        (None, None)
    };
    let state = RunState {
        plan,
        cx,
        slots,
        pending,
        queues: plan.queues().iter().map(|_| Mutex::default()).collect(),
        cancelled: AtomicBool::new(false),
        error: Mutex::new(None),
        finished: AtomicUsize::new(0),
        pump,
        active: AtomicUsize::new(0),
    };
    match pumped {
        None => rayon::scope(|scope| state.start(scope)),
        Some(pumped) => std::thread::scope(|threads| {
            rayon::in_place_scope(|scope| {
                state.start(scope);
                state.pump(scope, threads, &pumped);
            });
        }),
    }
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

/// How long a pump on a pool thread waits for news before helping the pool again.
const PUMP_POLL: Duration = Duration::from_micros(200);

impl<'p> RunState<'p> {
    /// Readies every queued step without dependencies.
    fn start<'s>(&'s self, scope: &rayon::Scope<'s>) {
        // Steps folded into a fused step are in no queue and never run.
        for queue in self.plan.queues() {
            for &id in &queue.steps {
                if self.plan.step(id).deps.is_empty() {
                    self.make_ready(scope, id);
                }
            }
        }
    }

    /// Puts `step` on its queue and starts a drainer if the queue has none.
    fn make_ready<'s>(&'s self, scope: &rayon::Scope<'s>, id: StepId) {
        let queue = self.plan.step(id).queue.0 as usize;
        let start = {
            let mut queue_state = lock(&self.queues[queue]);
            queue_state.ready.push(Reverse(id));
            !std::mem::replace(&mut queue_state.draining, true)
        };
        if start {
            if self.pump.is_some() {
                self.active.fetch_add(1, Ordering::AcqRel);
            }
            scope.spawn(move |scope| self.drain(scope, queue));
        }
    }

    /// Tells the pump `news` (a cluster run's only).
    fn tell(&self, news: Pumped) {
        if let Some(pump) = &self.pump {
            // The pump holds the receiving end until the run is over.
            let _ = lock(pump).send(news);
        }
    }

    /// Readies the users of `id`, which finished, or records its error and cancels the run.
    fn finished<'s>(&'s self, scope: &rayon::Scope<'s>, id: StepId, result: Result<(), ExecError>) {
        match result {
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
                let mut first = lock(&self.error);
                if first.is_none() {
                    // The other tasks of a cluster stop too, and this task's pending
                    // receives with them.
                    if let Some(cluster) = self.cx.cluster {
                        cluster.rendezvous.abort(&error_line(&err));
                    }
                    *first = Some(err);
                }
            }
        }
    }

    /// The pump of a cluster run (on the run's own thread): starts each ready receive on a
    /// thread of its own, finishes it once it ran, and returns when nothing is left active.
    fn pump<'s, 't>(
        &'s self,
        scope: &rayon::Scope<'s>,
        threads: &'t std::thread::Scope<'t, '_>,
        pumped: &Receiver<Pumped>,
    ) where
        's: 't,
    {
        let on_pool = rayon::current_thread_index().is_some();
        while self.active.load(Ordering::Acquire) > 0 {
            let news = if on_pool {
                // A pump on a pool thread must not hold the thread the drainers need.
                match pumped.try_recv() {
                    Ok(news) => news,
                    Err(_) if rayon::yield_now() == Some(rayon::Yield::Executed) => continue,
                    Err(_) => match pumped.recv_timeout(PUMP_POLL) {
                        Ok(news) => news,
                        Err(RecvTimeoutError::Timeout) => continue,
                        Err(RecvTimeoutError::Disconnected) => return,
                    },
                }
            } else {
                match pumped.recv() {
                    Ok(news) => news,
                    Err(_) => return,
                }
            };
            match news {
                Pumped::Receive(id) => {
                    if let Err(err) = self.receive(threads, id) {
                        self.finished(scope, id, Err(err));
                        self.active.fetch_sub(1, Ordering::AcqRel);
                    }
                }
                Pumped::Arrived(id, value) => {
                    let result = self.arrived(id, value);
                    self.finished(scope, id, result);
                    self.active.fetch_sub(1, Ordering::AcqRel);
                }
                Pumped::Idle => {}
            }
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
            let Some(id) = next else {
                if self.pump.is_some() && self.active.fetch_sub(1, Ordering::AcqRel) == 1 {
                    self.tell(Pumped::Idle);
                }
                return;
            };
            if self.pump.is_some() && self.plan.is_receive(id) {
                // Counted until the pump finishes it.
                self.active.fetch_add(1, Ordering::AcqRel);
                self.tell(Pumped::Receive(id));
                continue;
            }
            let result = self.run_step(id);
            self.finished(scope, id, result);
        }
    }

    /// Asks the cluster's rendezvous for the value of receive step `id`, to be told to the
    /// pump when it arrives ([`Pumped::Arrived`]); a rendezvous that cannot call back is
    /// waited on by a thread of `threads`.
    fn receive<'t>(
        &'t self,
        threads: &'t std::thread::Scope<'t, '_>,
        id: StepId,
    ) -> Result<(), ExecError> {
        let (step, device, transfer) = self.receive_step(id);
        let (cluster, key) = transfer::key(&kernel_cx(self.cx, step, device), transfer)
            .map_err(|source| op_error(step, device, source))?;
        let pump = lock(self.pump.as_ref().expect("a pumped run")).clone();
        let done: RecvDone = Box::new(move |value| {
            // The pump holds the receiving end until the run is over.
            let _ = pump.send(Pumped::Arrived(id, value));
        });
        if let Err(done) = cluster.rendezvous.recv_async(&key, done) {
            threads.spawn(move || done(cluster.rendezvous.recv(&key)));
        }
        Ok(())
    }

    /// Finishes receive step `id` with the value that arrived: checks it, stores it, tells
    /// the observer, as [`RunState::run_step`] does for a kernel.
    fn arrived(
        &self,
        id: StepId,
        value: Result<HostTensor, RendezvousError>,
    ) -> Result<(), ExecError> {
        let (step, device, transfer) = self.receive_step(id);
        let result = value
            .map_err(KernelError::from)
            .and_then(|value| transfer::received(transfer, value));
        let outputs = finish_step(self.cx, step, device, result, step.outputs.len())?;
        self.store(step, outputs);
        Ok(())
    }

    /// Receive step `id`, its device and what it receives (only receives are pumped).
    fn receive_step(&self, id: StepId) -> (&'p Step, &'p str, &'p Transfer) {
        let step = self.plan.step(id);
        let device = &self.plan.queues()[step.queue.0 as usize].device;
        let Work::Kernel(Kernel::Recv(transfer)) = &step.work else {
            unreachable!("only receives are pumped")
        };
        (step, device, transfer)
    }

    /// Stores the outputs of `step`.
    fn store(&self, step: &Step, outputs: Vec<HostTensor>) {
        for (slot, value) in step.outputs.iter().zip(outputs) {
            let _ = self.slots[slot.0 as usize].set(value);
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
        self.store(step, outputs);
        Ok(())
    }
}
