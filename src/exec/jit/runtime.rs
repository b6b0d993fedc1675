//! The runtime the native code calls: the driver that runs each queue's chunks on rayon, the
//! `extern "C"` host functions (`wait`, `step`, `signal`) and the per-run synchronization state.
//!
//! Each native call gets a pointer to an [`Invocation`] on the driver's stack, naming the run,
//! the rayon scope, and the queue and chunk being run. Host functions never let a panic cross
//! into native code: each body runs under `catch_unwind`, a panic is stored and turned into the
//! `STOPPED` status.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::exec::error::ExecError;
use crate::exec::fuse::run_fused;
use crate::exec::plan::{StepId, Work};
use crate::exec::step::{RunContext, StepInputs, fetch, finish_call, prepare_slots, run_kernel};
use crate::exec::sync::lock;
use crate::exec::tensor::HostTensor;

use super::JitPlan;
use super::lower::{DONE, HostFunctions, PARKED, STOPPED};

/// The host functions the native code calls.
pub(super) fn host_functions() -> HostFunctions {
    HostFunctions {
        wait: host_wait as *const u8,
        step: host_step as *const u8,
        signal: host_signal as *const u8,
    }
}

/// Runs `jit` with `feeds`: the contract of [`crate::exec::CompiledPlan::run`].
pub(super) fn run(
    jit: &JitPlan,
    cx: &RunContext<'_>,
    feeds: Vec<HostTensor>,
) -> Result<Vec<HostTensor>, ExecError> {
    let state = Run {
        jit,
        cx,
        slots: prepare_slots(&jit.plan, feeds)?,
        done: (0..jit.n_signals).map(|_| AtomicBool::new(false)).collect(),
        waiters: (0..jit.n_signals).map(|_| Mutex::default()).collect(),
        cancelled: AtomicBool::new(false),
        error: Mutex::new(None),
        panic: Mutex::new(None),
    };
    rayon::scope(|scope| {
        for queue in 0..jit.queues.len() {
            let state = &state;
            scope.spawn(move |scope| drive(state, scope, queue as u32, 0, 0));
        }
    });
    if let Some(payload) = lock(&state.panic).take() {
        resume_unwind(payload);
    }
    if let Some(err) = lock(&state.error).take() {
        return Err(err);
    }
    Ok(fetch(&jit.plan, &state.slots))
}

/// The mutable state of one run of a [`JitPlan`].
struct Run<'p> {
    jit: &'p JitPlan,
    cx: &'p RunContext<'p>,
    slots: Vec<OnceLock<HostTensor>>,
    /// Per signal: whether its step finished.
    done: Vec<AtomicBool>,
    /// Per signal: the queues parked until its step finishes.
    waiters: Vec<Mutex<Vec<Parked>>>,
    cancelled: AtomicBool,
    /// The first error.
    error: Mutex<Option<ExecError>>,
    /// The first panic of a host function, resumed by [`run`].
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

/// Where a parked queue resumes.
#[derive(Clone, Copy, Debug)]
struct Parked {
    queue: u32,
    chunk: u32,
    resume: u32,
}

/// What a native chunk gets as its first argument.
struct Invocation<'a, 's> {
    run: &'s Run<'s>,
    scope: &'a rayon::Scope<'s>,
    queue: u32,
    chunk: u32,
}

/// Runs the chunks of `queue` from `chunk` (entered at `resume`) until the queue ends, parks or
/// stops.
fn drive<'s>(run: &'s Run<'s>, scope: &rayon::Scope<'s>, queue: u32, chunk: u32, resume: u32) {
    let chunks = &run.jit.queues[queue as usize];
    let mut resume = resume;
    for (index, function) in chunks.iter().enumerate().skip(chunk as usize) {
        let invocation = Invocation {
            run,
            scope,
            queue,
            chunk: index as u32,
        };
        // SAFETY: the chunk was lowered with this signature; the invocation outlives the call,
        // and the host functions only read it during the call.
        let status = unsafe { function(std::ptr::from_ref(&invocation).cast(), resume) };
        if status != DONE {
            return;
        }
        resume = 0;
    }
}

/// Reads the invocation a native chunk passed to a host function.
///
/// # Safety
///
/// `invocation` must be the pointer [`drive`] passed to the chunk that is calling.
unsafe fn invocation<'a, 's>(invocation: *const u8) -> &'a Invocation<'a, 's> {
    // SAFETY: guaranteed by the caller.
    unsafe { &*invocation.cast::<Invocation<'a, 's>>() }
}

/// `wait(invocation, signal, resume)`: `DONE` if the step behind `signal` finished, else parks
/// the queue to re-enter its chunk at `resume` and returns `PARKED`.
extern "C" fn host_wait(invocation_ptr: *const u8, signal: u32, resume: u32) -> u32 {
    // SAFETY: only native chunks call this, with their invocation.
    let invocation = unsafe { invocation(invocation_ptr) };
    let run = invocation.run;
    let signal = signal as usize;
    if run.done[signal].load(Ordering::Acquire) {
        return DONE;
    }
    if run.cancelled.load(Ordering::Acquire) {
        return STOPPED;
    }
    guarded(run, || {
        let mut waiters = lock(&run.waiters[signal]);
        // Checked again under the lock `signal` takes, so a wake-up cannot be missed.
        if run.done[signal].load(Ordering::Acquire) {
            return DONE;
        }
        waiters.push(Parked {
            queue: invocation.queue,
            chunk: invocation.chunk,
            resume,
        });
        PARKED
    })
}

/// `step(invocation, step, slots, n_inputs, n_outputs)`: runs a step's kernel on the values of
/// its input slots and stores its outputs; `STOPPED` on an error or a cancelled run.
extern "C" fn host_step(
    invocation_ptr: *const u8,
    step: u32,
    slots: *const u32,
    n_inputs: u32,
    n_outputs: u32,
) -> u32 {
    // SAFETY: only native chunks call this, with their invocation.
    let invocation = unsafe { invocation(invocation_ptr) };
    let run = invocation.run;
    if run.cancelled.load(Ordering::Acquire) {
        return STOPPED;
    }
    let n_slots = (n_inputs + n_outputs) as usize;
    let slots = if n_slots == 0 {
        &[]
    } else {
        // SAFETY: the chunk stored `n_inputs + n_outputs` slot ids in its (4-aligned) stack
        // array at `slots`.
        unsafe { std::slice::from_raw_parts(slots, n_slots) }
    };
    let (inputs, outputs) = slots.split_at(n_inputs as usize);
    guarded(run, || match run.step(StepId(step), inputs, outputs) {
        Ok(()) => DONE,
        Err(err) => {
            run.cancelled.store(true, Ordering::Release);
            lock(&run.error).get_or_insert(err);
            STOPPED
        }
    })
}

/// `signal(invocation, signal)`: marks the step behind `signal` finished and resumes the queues
/// parked on it.
extern "C" fn host_signal(invocation_ptr: *const u8, signal: u32) -> u32 {
    // SAFETY: only native chunks call this, with their invocation.
    let invocation = unsafe { invocation(invocation_ptr) };
    let run = invocation.run;
    guarded(run, || {
        run.done[signal as usize].store(true, Ordering::Release);
        let parked = std::mem::take(&mut *lock(&run.waiters[signal as usize]));
        for Parked {
            queue,
            chunk,
            resume,
        } in parked
        {
            invocation
                .scope
                .spawn(move |scope| drive(run, scope, queue, chunk, resume));
        }
        DONE
    })
}

/// Runs a host function body, turning a panic into a stored payload and `STOPPED`.
fn guarded(run: &Run<'_>, body: impl FnOnce() -> u32) -> u32 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(status) => status,
        Err(payload) => {
            run.cancelled.store(true, Ordering::Release);
            lock(&run.panic).get_or_insert(payload);
            STOPPED
        }
    }
}

impl Run<'_> {
    /// Runs step `id` with the values of `inputs`, storing its results in `outputs`.
    fn step(&self, id: StepId, inputs: &[u32], outputs: &[u32]) -> Result<(), ExecError> {
        let plan = &self.jit.plan;
        let step = plan.step(id);
        let device = &plan.queues()[step.queue.0 as usize].device;
        // The native code passes the step's own input slots (`chunk_step`), so they are read
        // through the step, as the interpreter reads them.
        debug_assert!(
            inputs
                .iter()
                .copied()
                .eq(step.inputs.iter().map(|slot| slot.0))
        );
        let inputs = StepInputs::new(step, &self.slots);
        let results = match (&step.work, self.jit.calls.get(&id)) {
            (Work::Kernel(kernel), _) => run_kernel(self.cx, step, device, kernel, &inputs.all())?,
            (Work::Call { function, .. }, Some(body)) => {
                let result = body.run(self.cx, inputs.all());
                finish_call(self.cx, step, device, function, result)?
            }
            (Work::Fused(fused), _) => run_fused(self.cx, plan, step, device, fused, inputs)?,
            (Work::Call { .. }, None) => unreachable!("compile lowers the body of every call"),
        };
        for (&slot, value) in outputs.iter().zip(results) {
            let _ = self.slots[slot as usize].set(value);
        }
        Ok(())
    }
}
