//! Graph mode: [`CompiledPlan`], a graph pruned to what some targets need and compiled once
//! into plain data (a topological list of steps with resolved kernels, value slots and
//! per-device queues) that can run many times with different feeds, as a TensorFlow session
//! runs a SaverDef's save tensor.
//!
//! This file holds the plan's types; the compiler that makes one is `compile.rs` (its steps
//! then folded by [`super::fuse`]), the lookup of feeds, targets and ports `target.rs`, and
//! the plan's text form (its [`Display`](std::fmt::Display)) `print.rs`.
//!
//! Slots `0..feeds().len()` hold the feeds in order; every other slot is written by exactly one
//! step before any step reading it runs. A run holds slots `0..n_run_slots()`, those of the
//! steps in queues; the fusion pass numbers the slots only folded steps use after them.

mod compile;
mod print;
mod target;

use std::ops::Range;
use std::sync::Arc;

use saveplan_ir::{DType, Op};
use smallvec::SmallVec;

use super::kernels::{Kernel, NamesCache};
use super::variables::SlotCache;

pub use compile::resolve_device;

/// The device ops without one (or with a partial one) are resolved against.
pub const DEFAULT_DEVICE: &str = "/job:localhost/replica:0/task:0/device:CPU:0";

/// A compiled graph: steps in topological order, value slots, device queues, feeds, fetches.
#[derive(Clone, Debug)]
pub struct CompiledPlan {
    steps: Vec<Step>,
    queues: Vec<Queue>,
    feeds: Vec<Feed>,
    fetches: Vec<SlotId>,
    n_slots: usize,
    /// Slots `0..n_run_slots` are those a run holds; the others are read and written only by
    /// steps folded into a fused step ([`CompiledPlan::number_run_slots_first`]).
    n_run_slots: usize,
}

/// A value slot of a plan.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct SlotId(pub u32);

/// A step of a plan (its position in [`CompiledPlan::steps`]).
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct StepId(pub u32);

/// A device queue of a plan (its position in [`CompiledPlan::queues`]).
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct QueueId(pub u32);

/// One op of the plan, ready to run.
#[derive(Clone, Debug)]
pub struct Step {
    /// The op's name.
    pub name: String,
    /// The op (`op.type_name()` is `SaveV2`, …).
    pub op: Op,
    /// The queue (device) it runs on.
    pub queue: QueueId,
    /// What it does.
    pub work: Work,
    /// The slots of its data inputs, in signature order.
    pub inputs: Slots,
    /// The slots its outputs are written to, in signature order.
    pub outputs: Slots,
    /// The steps that must finish first (data producers and control inputs), sorted.
    pub deps: Steps,
    /// The steps that list this one in their `deps`, sorted.
    pub users: Steps,
}

/// Slots of a step: most steps have a few, kept inline (a plan of N variables has O(N)
/// steps, and four allocations per step would dominate compiling it).
pub type Slots = SmallVec<[SlotId; 4]>;

/// Steps a step waits for or wakes, kept inline when few (see [`Slots`]).
pub type Steps = SmallVec<[StepId; 4]>;

/// What a step does.
#[derive(Clone, Debug)]
pub enum Work {
    /// Runs a kernel on its inputs.
    Kernel(Kernel),
    /// `StatefulPartitionedCall` / `PartitionedCall`: runs a compiled function body with the
    /// call's inputs as its feeds; its fetches are the call's outputs. Each backend runs the
    /// body its own way (the interpreter as a nested plan, the JIT as nested native code).
    Call {
        /// The called function's name.
        function: String,
        /// Its body, compiled with the call's inputs as feeds and outputs as fetches.
        plan: Arc<CompiledPlan>,
    },
    /// A `RestoreV2` or `SaveV2` with the variable ops around it folded in by
    /// [`super::fuse`]: run as one step, still reporting every folded op to the observer.
    Fused(Box<Fused>),
}

/// What a fused step runs: its own kernel and the chains folded into it (made by the fusion
/// pass, [`super::fuse`], which also runs it).
#[derive(Clone, Debug)]
pub struct Fused {
    /// The kernel of the `RestoreV2` or `SaveV2` itself.
    pub(super) kernel: Kernel,
    /// Which of the two it is.
    pub(super) kind: Kind,
    /// The number of inputs of the op itself (the step's first inputs).
    pub(super) n_head_inputs: usize,
    /// The number of outputs the op itself produces.
    pub(super) n_head_outputs: usize,
    /// Restore: the positions of the outputs that are not folded, which the step still writes
    /// (its `outputs`, in order).
    pub(super) kept: Vec<u32>,
    /// The folded chains, in the order they run.
    pub(super) chains: Vec<Chain>,
    /// The folded steps of every chain, each chain's in run order.
    pub(super) members: Vec<StepId>,
    /// The chains' variables as slots of the store last run with, when every chain's handle
    /// is a folded resource `VarHandleOp` (the keys are then the plan's own).
    pub(super) slots: Option<SlotCache>,
    /// The names and specs of its `SaveV2` or `RestoreV2`, checked once.
    pub(super) names: NamesCache,
}

/// Whether a fused step restores or saves.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Restore,
    Save,
}

/// One folded chain.
#[derive(Clone, Debug)]
pub(super) struct Chain {
    /// The output (restore) or tensor input (save) of the op it belongs to.
    pub(super) position: u32,
    /// Where the variable handle comes from.
    pub(super) handle: Handle,
    /// Its steps in [`Fused::members`].
    pub(super) members: Range<u32>,
    /// The dtype of its variable op: the `ReadVariableOp` of a save chain, the
    /// `AssignVariableOp` of a restore chain. Kept here with `validate_shape` (the
    /// assignment's; false for a save) so that a run under one lock reads no step.
    pub(super) dtype: DType,
    /// Whether the assignment of a restore chain validates the shape.
    pub(super) validate_shape: bool,
}

impl Fused {
    /// The folded steps, in the order they run.
    pub fn members(&self) -> impl Iterator<Item = StepId> + '_ {
        self.members.iter().copied()
    }

    /// The steps of `chain`, in run order.
    pub(super) fn chain_members(&self, chain: &Chain) -> &[StepId] {
        &self.members[chain.members.start as usize..chain.members.end as usize]
    }

    /// The number of folded chains (one per variable read or assigned).
    pub fn n_chains(&self) -> usize {
        self.chains.len()
    }
}

/// Where a chain's variable handle comes from.
#[derive(Copy, Clone, Debug)]
pub(super) enum Handle {
    /// This input of the fused step.
    Input(u32),
    /// The chain's first step, a folded `VarHandleOp`.
    Member,
}

/// The steps of one device, in schedule order.
#[derive(Clone, Debug)]
pub struct Queue {
    /// The resolved device (canonical form).
    pub device: String,
    /// Its steps, in topological order.
    pub steps: Vec<StepId>,
}

/// A fed tensor.
#[derive(Clone, Debug)]
pub struct Feed {
    /// The tensor name as given (`saver_filename:0`).
    pub name: String,
    /// Its slot.
    pub slot: SlotId,
    /// The dtype its op declares, when known (placeholders and function arguments).
    pub dtype: Option<DType>,
}

impl CompiledPlan {
    /// The steps and queues, for [`super::fuse`] to rewrite in place.
    pub(super) fn parts_mut(&mut self) -> (&mut Vec<Step>, &mut Vec<Queue>, &[SlotId]) {
        (&mut self.steps, &mut self.queues, &self.fetches)
    }

    /// The steps, in topological order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The step `id`.
    pub fn step(&self, id: StepId) -> &Step {
        &self.steps[id.0 as usize]
    }

    /// The device queues, in order of their first step.
    pub fn queues(&self) -> &[Queue] {
        &self.queues
    }

    /// The feeds, in compile order; feed `i` lives in slot `i`.
    pub fn feeds(&self) -> &[Feed] {
        &self.feeds
    }

    /// The slots of the fetched tensors, in target order.
    pub fn fetches(&self) -> &[SlotId] {
        &self.fetches
    }

    /// The number of value slots.
    pub fn n_slots(&self) -> usize {
        self.n_slots
    }

    /// The number of slots a run holds, `0..n_run_slots()`: the feeds and the inputs and
    /// outputs of the steps in queues. Slots from there to [`CompiledPlan::n_slots`] belong
    /// only to steps folded into a fused step, whose values pass inside that step.
    pub fn n_run_slots(&self) -> usize {
        self.n_run_slots
    }

    /// Whether the plan runs a `_Recv` (`_HostRecv`): a partition of a cluster run, whose
    /// receives wait for other tasks.
    pub fn receives(&self) -> bool {
        (self.queues.iter().flat_map(|queue| &queue.steps)).any(|&id| self.is_receive(id))
    }

    /// Whether step `id` is a `_Recv` (`_HostRecv`).
    pub fn is_receive(&self, id: StepId) -> bool {
        matches!(self.step(id).work, Work::Kernel(Kernel::Recv(_)))
    }

    /// Renumbers the slots so that those a run holds come first, in the order the plan's
    /// builder numbered them (feeds, then the queued steps' slots in step order), and the ones
    /// only folded steps use after them, in their old order. A fused plan of N variables
    /// folds most of its slots away, and a run's slot table (made and dropped at every run)
    /// then holds a handful instead of N. Called by the fusion pass once it has emptied the
    /// folded steps' queues; a plan with no folded step keeps its numbering.
    pub(super) fn number_run_slots_first(&mut self) {
        /// The new numbers given so far (`u32::MAX`: none yet) and the next one.
        struct Numbering {
            new: Vec<u32>,
            next: u32,
        }
        impl Numbering {
            fn number(&mut self, slot: SlotId) {
                let new = &mut self.new[slot.0 as usize];
                if *new == u32::MAX {
                    *new = self.next;
                    self.next += 1;
                }
            }
        }
        let mut numbering = Numbering {
            new: vec![u32::MAX; self.n_slots],
            next: 0,
        };
        let mut queued = vec![false; self.steps.len()];
        for queue in &self.queues {
            for &id in &queue.steps {
                queued[id.0 as usize] = true;
            }
        }
        for feed in &self.feeds {
            numbering.number(feed.slot);
        }
        for (step, _) in self
            .steps
            .iter()
            .zip(&queued)
            .filter(|(_, queued)| **queued)
        {
            for &slot in step.inputs.iter().chain(&step.outputs) {
                numbering.number(slot);
            }
        }
        for &slot in &self.fetches {
            numbering.number(slot);
        }
        let n_run_slots = numbering.next as usize;
        for slot in 0..self.n_slots as u32 {
            numbering.number(SlotId(slot));
        }
        let new = numbering.new;
        let renumber = |slot: &mut SlotId| slot.0 = new[slot.0 as usize];
        for step in &mut self.steps {
            step.inputs
                .iter_mut()
                .chain(&mut step.outputs)
                .for_each(renumber);
        }
        self.feeds
            .iter_mut()
            .for_each(|feed| renumber(&mut feed.slot));
        self.fetches.iter_mut().for_each(renumber);
        self.n_run_slots = n_run_slots;
    }
}
