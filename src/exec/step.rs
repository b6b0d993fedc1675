//! The step machinery both backends share: [`RunContext`] (what a run acts on), the slot table
//! a run starts from (`prepare_slots`) and reads its fetches from (`fetch`), and how one
//! step runs (`run_kernel`, `finish_call`): a kernel's error gets the op's name and device,
//! its output count is checked and the observer is told. The interpreter
//! ([`super::scheduler`]) and the JIT (`super::jit`) differ only in how they order steps, so
//! their errors and observer events are the same.

use std::sync::OnceLock;

use super::error::{ExecError, KernelError};
use super::io::CheckpointIo;
use super::kernels::{Kernel, KernelCx};
use super::plan::{CompiledPlan, Step};
use super::rendezvous::ClusterRun;
use super::tensor::HostTensor;
use super::variables::VariableStore;

/// What a run of a plan acts on: variables, the checkpoint backend, an observer.
#[derive(Clone, Copy)]
pub struct RunContext<'a> {
    /// The variables `VarHandleOp` and friends use.
    pub variables: &'a VariableStore,
    /// Where `SaveV2`, `RestoreV2` and `MergeV2Checkpoints` go; those ops fail without one.
    pub io: Option<&'a dyn CheckpointIo>,
    /// Called after each step (function body steps included) finishes successfully.
    pub observer: Option<&'a (dyn Fn(&StepEvent<'_>) + Sync)>,
    /// The cluster a partition's `_Send`/`_Recv` ops meet the other tasks in; those ops fail
    /// without one.
    pub cluster: Option<ClusterRun<'a>>,
}

/// A finished step, as an observer sees it.
#[derive(Clone, Copy, Debug)]
pub struct StepEvent<'a> {
    /// The step.
    pub step: &'a Step,
    /// The device it ran on.
    pub device: &'a str,
    /// Its outputs.
    pub outputs: &'a [HostTensor],
}

impl<'a> RunContext<'a> {
    /// A context with `variables`, no checkpoint backend and no observer.
    pub fn new(variables: &'a VariableStore) -> RunContext<'a> {
        RunContext {
            variables,
            io: None,
            observer: None,
            cluster: None,
        }
    }

    /// The same context with checkpoint backend `io`.
    pub fn with_io(self, io: &'a dyn CheckpointIo) -> RunContext<'a> {
        RunContext {
            io: Some(io),
            ..self
        }
    }

    /// The same context running one task's partition in `cluster`.
    pub fn with_cluster(self, cluster: ClusterRun<'a>) -> RunContext<'a> {
        RunContext {
            cluster: Some(cluster),
            ..self
        }
    }

    /// The same context with an observer called after every step.
    pub fn with_observer(self, observer: &'a (dyn Fn(&StepEvent<'_>) + Sync)) -> RunContext<'a> {
        RunContext {
            observer: Some(observer),
            ..self
        }
    }
}

/// The inputs of a step, read in place from the run's slot table. A step's kernel gets them
/// cloned ([`StepInputs::to_vec`]); a fused save reads only the few it uses, since it has one
/// input per saved tensor and saves the variables it borrows instead of most of them.
#[derive(Clone, Copy)]
pub(crate) struct StepInputs<'a> {
    step: &'a Step,
    slots: &'a [OnceLock<HostTensor>],
}

impl<'a> StepInputs<'a> {
    /// The inputs of `step` in `slots`, whose producers must all have run.
    pub(crate) fn new(step: &'a Step, slots: &'a [OnceLock<HostTensor>]) -> StepInputs<'a> {
        StepInputs { step, slots }
    }

    /// How many inputs the step has.
    pub(crate) fn len(self) -> usize {
        self.step.inputs.len()
    }

    /// Input `index`.
    pub(crate) fn get(self, index: usize) -> &'a HostTensor {
        self.slots[self.step.inputs[index].0 as usize]
            .get()
            .expect("a step runs after the producers of its inputs")
    }

    /// Inputs `range`, cloned (their storage is shared).
    pub(crate) fn to_vec(self, range: std::ops::Range<usize>) -> Vec<HostTensor> {
        range.map(|index| self.get(index).clone()).collect()
    }

    /// Every input, cloned.
    pub(crate) fn all(self) -> Vec<HostTensor> {
        self.to_vec(0..self.len())
    }
}

/// Checks `feeds` against the plan and returns the slot table with the feeds stored.
pub(crate) fn prepare_slots(
    plan: &CompiledPlan,
    feeds: Vec<HostTensor>,
) -> Result<Vec<OnceLock<HostTensor>>, ExecError> {
    if feeds.len() != plan.feeds().len() {
        return Err(ExecError::FeedCount {
            expected: plan.feeds().len(),
            got: feeds.len(),
        });
    }
    let slots: Vec<OnceLock<HostTensor>> =
        (0..plan.n_run_slots()).map(|_| OnceLock::new()).collect();
    for (feed, value) in plan.feeds().iter().zip(feeds) {
        if let Some(expected) = feed.dtype.filter(|&dtype| dtype != value.dtype()) {
            return Err(ExecError::FeedDType {
                name: feed.name.clone(),
                expected,
                got: value.dtype(),
            });
        }
        let _ = slots[feed.slot.0 as usize].set(value);
    }
    Ok(slots)
}

/// The fetched tensors of a finished run, in target order.
pub(crate) fn fetch(plan: &CompiledPlan, slots: &[OnceLock<HostTensor>]) -> Vec<HostTensor> {
    plan.fetches()
        .iter()
        .map(|slot| {
            slots[slot.0 as usize]
                .get()
                .cloned()
                .expect("compile gives every fetched slot a producer or a feed")
        })
        .collect()
}

/// Runs `kernel`, the work of `step` (on `device`), on `inputs`: everything about a step
/// except where its values live.
pub(crate) fn run_kernel(
    run: &RunContext<'_>,
    step: &Step,
    device: &str,
    kernel: &Kernel,
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>, ExecError> {
    let result = kernel.run(&kernel_cx(run, step, device), inputs);
    finish_step(run, step, device, result, step.outputs.len())
}

/// What the kernel of `step` (on `device`) sees of the run.
pub(crate) fn kernel_cx<'a>(run: &RunContext<'a>, step: &'a Step, device: &'a str) -> KernelCx<'a> {
    KernelCx {
        variables: run.variables,
        io: run.io,
        cluster: run.cluster,
        name: &step.name,
        device,
    }
}

/// Turns what running the body of `function` (the work of call step `step`) returned into the
/// step's result, as [`finish_step`] does for a kernel.
pub(crate) fn finish_call(
    run: &RunContext<'_>,
    step: &Step,
    device: &str,
    function: &str,
    result: Result<Vec<HostTensor>, ExecError>,
) -> Result<Vec<HostTensor>, ExecError> {
    let result = result.map_err(|err| KernelError::Call {
        function: function.to_owned(),
        source: Box::new(err),
    });
    finish_step(run, step, device, result, step.outputs.len())
}

/// Turns what the kernel of `step` returned into the step's result: a kernel error gets the
/// op's name and device, the number of outputs (`n_outputs`: a fused step's own op produces
/// more than the step's slots hold) is checked, and the observer is told.
pub(crate) fn finish_step(
    run: &RunContext<'_>,
    step: &Step,
    device: &str,
    result: Result<Vec<HostTensor>, KernelError>,
    n_outputs: usize,
) -> Result<Vec<HostTensor>, ExecError> {
    let outputs = result.map_err(|source| op_error(step, device, source))?;
    if outputs.len() != n_outputs {
        return Err(op_error(
            step,
            device,
            KernelError::invalid(format!(
                "produced {} outputs instead of {n_outputs}",
                outputs.len(),
            )),
        ));
    }
    notify(run, step, device, &outputs);
    Ok(outputs)
}

/// The error of `step` (on `device`) failing with `source`.
pub(crate) fn op_error(step: &Step, device: &str, source: KernelError) -> ExecError {
    ExecError::Op {
        name: step.name.clone(),
        device: device.to_owned(),
        source: Box::new(source),
    }
}

/// Tells the run's observer, if any, that `step` finished on `device` with `outputs`.
pub(crate) fn notify(run: &RunContext<'_>, step: &Step, device: &str, outputs: &[HostTensor]) {
    if let Some(observer) = run.observer {
        observer(&StepEvent {
            step,
            device,
            outputs,
        });
    }
}
