//! Graph mode: [`CompiledPlan`], a graph pruned to what some targets need and compiled once
//! into plain data (a topological list of steps with resolved kernels, value slots and
//! per-device queues) that can run many times with different feeds, as a TensorFlow session
//! runs a SaverDef's save tensor.
//!
//! # Compilation
//!
//! 1. Feeds (`op:N`, or `op` for `op:0`) and targets (`op:N` to fetch a tensor, `op` to only
//!    run an op) are looked up.
//! 2. Pruning walks back from the targets over data and control inputs. A fed tensor cuts the
//!    walk: its producer runs only if something else needs it, and an op whose outputs are all
//!    fed (a fed `Placeholder`) never runs, so control edges from it are dropped.
//! 3. The needed ops are ordered topologically, ties broken by creation order, so the schedule
//!    is the same on every compile.
//! 4. Each op gets its kernel ([`Kernel::resolve`]; calls compile their function body into a
//!    sub-plan), one slot per output, the slots of its inputs, and the queue of its device.
//!    Devices are resolved against `/job:localhost/replica:0/task:0/device:CPU:0` (a function
//!    body against its call's device); an index `*` becomes 0.
//!
//! Slots `0..feeds().len()` hold the feeds in order; every other slot is written by exactly one
//! step before any step reading it runs. A run holds slots `0..n_run_slots()`, those of the
//! steps in queues; the fusion pass numbers the slots only folded steps use after them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use rayon::prelude::*;
use rustc_hash::FxHashMap;
use saveplan_ir::device::{DeviceIndex, DeviceSpec};
use saveplan_ir::signature::{self, PortError};
use saveplan_ir::{
    AttrValue, DType, Function, Graph, Input, Module, Op, OpId, OpNode, OutputRef, Port, Stride,
    TensorName, Verified,
};
use smallvec::SmallVec;

use super::error::ExecError;
use super::kernels::{Kernel, NamesCache};
use super::variables::SlotCache;

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

/// A target or feed, looked up in a graph.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum Target {
    /// Output `1` of op `0`.
    Tensor(OpId, u32),
    /// Run op `0` only.
    Op(OpId),
}

impl Target {
    /// The op of the target.
    fn op(&self) -> OpId {
        match *self {
            Target::Tensor(op, _) | Target::Op(op) => op,
        }
    }
}

/// What compiling a graph needs besides the graph.
struct Compiler<'m> {
    module: &'m Module,
    /// The device empty or partial device strings are resolved against.
    default_device: DeviceSpec,
    /// The functions being compiled, outermost first (to reject recursion).
    stack: Vec<String>,
}

impl CompiledPlan {
    /// [`CompiledPlan::compile`] without the fusion pass: one step per op (what fused plans
    /// are compared with).
    pub fn compile_unfused(
        module: Verified<'_>,
        targets: &[&str],
        feeds: &[&str],
    ) -> Result<CompiledPlan, ExecError> {
        let module = module.module();
        let compiler = Compiler {
            module,
            default_device: parse_device("", DEFAULT_DEVICE)?,
            stack: Vec::new(),
        };
        let graph = &module.graph;
        // A long target list (a restore's assigns) is usually in creation order at a steady
        // stride: each target is looked for where the ones before it put it first.
        let mut stride = Stride::default();
        let targets = targets
            .iter()
            .map(|text| {
                let target = parse_target(graph, text, true, stride)?;
                stride.record(target.op());
                Ok(target)
            })
            .collect::<Result<Vec<_>, ExecError>>()?;
        let feeds = feeds
            .iter()
            .map(|text| {
                let target = parse_target(graph, text, false, Stride::default())?;
                Ok((text.to_string(), target))
            })
            .collect::<Result<Vec<_>, ExecError>>()?;
        compiler.compile_graph(graph, &targets, &feeds)
    }

    /// [`CompiledPlan::compile_function`] without the fusion pass.
    pub(super) fn compile_function_unfused(
        module: Verified<'_>,
        function: &str,
    ) -> Result<CompiledPlan, ExecError> {
        let module = module.module();
        let found = module
            .library
            .find(function)
            .ok_or_else(|| ExecError::NoSuchFunction {
                function: function.to_owned(),
            })?;
        let compiler = Compiler {
            module,
            default_device: parse_device("", DEFAULT_DEVICE)?,
            stack: vec![function.to_owned()],
        };
        let n_args = found
            .body
            .ops()
            .into_iter()
            .filter(|&id| found.body.op(id).op == Op::Arg)
            .count();
        compiler.compile_function(found, n_args)
    }

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

impl fmt::Display for CompiledPlan {
    /// Prints feeds, then each queue with its steps (`s3, s4 = SaveV2 "name"(s0, s1) after
    /// #2`), then fetches, then the sub-plan of every call, indented: a stable text form for
    /// tests and debugging.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_indented(f, "")
    }
}

impl CompiledPlan {
    /// Writes the text form with every line prefixed by `indent`.
    fn write_indented(&self, f: &mut fmt::Formatter<'_>, indent: &str) -> fmt::Result {
        let slots = |slots: &[SlotId]| {
            slots
                .iter()
                .map(|slot| format!("s{}", slot.0))
                .collect::<Vec<_>>()
                .join(", ")
        };
        for feed in &self.feeds {
            writeln!(f, "{indent}feed s{} = {}", feed.slot.0, feed.name)?;
        }
        for queue in &self.queues {
            writeln!(f, "{indent}queue {}", queue.device)?;
            for &id in &queue.steps {
                let step = self.step(id);
                write!(f, "{indent}  #{} ", id.0)?;
                if !step.outputs.is_empty() {
                    write!(f, "{} = ", slots(&step.outputs))?;
                }
                let inputs = slots(&step.inputs);
                write!(f, "{} {:?}({inputs})", step.op.type_name(), step.name)?;
                if !step.deps.is_empty() {
                    let deps: Vec<String> = step.deps.iter().map(|d| format!("#{}", d.0)).collect();
                    write!(f, " after {}", deps.join(", "))?;
                }
                if let Work::Fused(fused) = &step.work {
                    let members: Vec<String> = fused
                        .members()
                        .map(|member| format!("#{}", member.0))
                        .collect();
                    write!(f, " fuses {}", members.join(", "))?;
                }
                writeln!(f)?;
            }
        }
        writeln!(f, "{indent}fetch {}", slots(&self.fetches))?;
        for (index, step) in self.steps.iter().enumerate() {
            if let Work::Call { function, plan } = &step.work {
                writeln!(f, "{indent}call #{index} {function} {{")?;
                plan.write_indented(f, &format!("{indent}  "))?;
                writeln!(f, "{indent}}}")?;
            }
        }
        Ok(())
    }
}

impl Compiler<'_> {
    /// Compiles `graph` (the top level or a function body) for `targets` with `feeds`.
    fn compile_graph(
        &self,
        graph: &Graph,
        targets: &[Target],
        feeds: &[(String, Target)],
    ) -> Result<CompiledPlan, ExecError> {
        let mut fed: BTreeMap<(OpId, u32), SlotId> = BTreeMap::new();
        let mut plan_feeds = Vec::with_capacity(feeds.len());
        for (position, (name, target)) in feeds.iter().enumerate() {
            let Target::Tensor(op, output) = *target else {
                return Err(ExecError::BadTensorName { name: name.clone() });
            };
            let slot = SlotId(position as u32);
            if fed.insert((op, output), slot).is_some() {
                return Err(ExecError::DuplicateFeed { name: name.clone() });
            }
            plan_feeds.push(Feed {
                name: name.clone(),
                slot,
                dtype: declared_dtype(graph.op(op)),
            });
        }
        let fully_fed = self.fully_fed_ops(graph, &fed)?;
        let needed = self.needed_ops(graph, targets, &fed, &fully_fed)?;
        let order = graph
            .topo_order_of(needed, |id| fully_fed.contains(&id))
            .expect("verified: the graph has no cycle");
        let mut builder = PlanBuilder {
            plan: CompiledPlan {
                steps: Vec::with_capacity(order.len()),
                queues: Vec::new(),
                feeds: plan_feeds,
                fetches: Vec::new(),
                n_slots: feeds.len(),
                n_run_slots: feeds.len(),
            },
            step_of: vec![None; graph.id_bound()],
            devices: FxHashMap::default(),
        };
        // The ops join the plan in order, a chunk at a time. What a step takes from its op
        // alone (its kernel, its name) is made for the next chunk on other cores meanwhile:
        // reading every op's attributes is most of compiling a large plan.
        let mut chunks = order.chunks(OPS_PER_CHUNK);
        let mut chunk = chunks.next().unwrap_or_default();
        let (mut ahead, mut next_ahead) = (Vec::new(), Vec::new());
        make_ahead(graph, chunk, &mut ahead);
        loop {
            let next = chunks.next();
            let mut add = || {
                chunk
                    .iter()
                    .zip(ahead.drain(..))
                    .try_for_each(|(&id, ahead)| {
                        self.add_step(graph, id, ahead, &fed, &fully_fed, &mut builder)
                    })
            };
            match next {
                None => break add()?,
                Some(next) => {
                    let (added, ()) = rayon::join(add, || make_ahead(graph, next, &mut next_ahead));
                    added?;
                    std::mem::swap(&mut ahead, &mut next_ahead);
                    chunk = next;
                }
            }
        }
        for target in targets {
            if let Target::Tensor(op, output) = *target {
                let slot = match fed.get(&(op, output)) {
                    Some(&slot) => slot,
                    None => builder.output_slot(op, output),
                };
                builder.plan.fetches.push(slot);
            }
        }
        Ok(builder.plan)
    }

    /// The ops with at least one output, all of them fed.
    fn fully_fed_ops(
        &self,
        graph: &Graph,
        fed: &BTreeMap<(OpId, u32), SlotId>,
    ) -> Result<BTreeSet<OpId>, ExecError> {
        let mut ops = BTreeSet::new();
        for &(op, _) in fed.keys() {
            let n_outputs = n_outputs(graph.op(op))?;
            if (0..n_outputs as u32).all(|output| fed.contains_key(&(op, output))) {
                ops.insert(op);
            }
        }
        Ok(ops)
    }

    /// The ops that must run to compute `targets`.
    fn needed_ops(
        &self,
        graph: &Graph,
        targets: &[Target],
        fed: &BTreeMap<(OpId, u32), SlotId>,
        fully_fed: &BTreeSet<OpId>,
    ) -> Result<Vec<OpId>, ExecError> {
        let mut is_needed = vec![false; graph.id_bound()];
        let mut needed = Vec::new();
        let mut work: Vec<OpId> = Vec::new();
        for target in targets {
            match *target {
                Target::Tensor(op, output) if !fed.contains_key(&(op, output)) => work.push(op),
                Target::Op(op) if !fully_fed.contains(&op) => work.push(op),
                Target::Tensor(..) | Target::Op(_) => {}
            }
        }
        // Walked from the first-made target up (the stack pops its end): an op's inputs are
        // usually made just before it, so the walk reads the graph in memory order. In the
        // order given (a restore's assignments grouped by device) each op read is a cache miss.
        work.sort_unstable_by_key(|id| std::cmp::Reverse(id.index()));
        while let Some(id) = work.pop() {
            if std::mem::replace(&mut is_needed[id.index()], true) {
                continue;
            }
            needed.push(id);
            for (_, input) in graph.inputs_iter(id) {
                let output = input_output(graph, &input)?;
                if !fed.contains_key(&(input.src, output)) {
                    work.push(input.src);
                }
            }
            work.extend(
                graph
                    .control_inputs(id)
                    .into_iter()
                    .filter(|src| !fully_fed.contains(src)),
            );
        }
        Ok(needed)
    }

    /// Resolves op `id` into a step of `builder`, with what [`make_ahead`] made of it.
    fn add_step<'g>(
        &self,
        graph: &'g Graph,
        id: OpId,
        ahead: Ahead,
        fed: &BTreeMap<(OpId, u32), SlotId>,
        fully_fed: &BTreeSet<OpId>,
        builder: &mut PlanBuilder<'g>,
    ) -> Result<(), ExecError> {
        let node = graph.op(id);
        // Ops share a few device strings: each is resolved to its queue once.
        let queue = match builder.devices.get(&*node.device) {
            Some(&queue) => queue,
            None => {
                let device = resolve_device(&node.name, &node.device, &self.default_device)?;
                let queue = builder.queue(device);
                builder.devices.insert(&node.device, queue);
                queue
            }
        };
        let n_inputs = n_inputs(node)?;
        let mut inputs = Slots::with_capacity(n_inputs);
        let mut deps = Steps::new();
        // Verified: the slots are dense and as many as the signature gives.
        for (_, input) in graph.inputs_iter(id) {
            let output = input_output(graph, &input)?;
            if let Some(&slot) = fed.get(&(input.src, output)) {
                inputs.push(slot);
                continue;
            }
            let (step, first) = builder.compiled(input.src);
            inputs.push(SlotId(first.0 + output));
            deps.push(step);
        }
        debug_assert_eq!(
            inputs.len(),
            n_inputs,
            "verified: every input slot is connected"
        );
        for src in graph.control_inputs(id) {
            if !fully_fed.contains(&src) {
                deps.push(builder.compiled(src).0);
            }
        }
        deps.sort_unstable();
        deps.dedup();
        let device = &builder.plan.queues[queue.0 as usize].device;
        let work = self.resolve_work(node, device, n_inputs, ahead.kernel)?;
        let n_outputs = n_outputs(node)?;
        builder.push(id, ahead.name, node, work, queue, inputs, n_outputs, deps);
        Ok(())
    }

    /// What `node` does: its kernel (`kernel`, resolved ahead; refused for the ops below,
    /// which are not run by one), or a call of a compiled function body.
    fn resolve_work(
        &self,
        node: &OpNode,
        device: &str,
        n_inputs: usize,
        kernel: Result<Kernel, ExecError>,
    ) -> Result<Work, ExecError> {
        match node.op {
            Op::Placeholder | Op::Arg => Err(ExecError::Unfed {
                name: node.name.clone(),
            }),
            Op::StatefulPartitionedCall | Op::PartitionedCall => {
                self.compile_call(node, device, n_inputs)
            }
            _ => kernel.map(Work::Kernel),
        }
    }

    /// Compiles the function a call op names into a [`Work::Call`].
    fn compile_call(
        &self,
        node: &OpNode,
        device: &str,
        n_inputs: usize,
    ) -> Result<Work, ExecError> {
        let name = match node.attrs.get("f") {
            Some(AttrValue::Func(func)) => func.name.clone(),
            _ => {
                return Err(ExecError::BadAttr {
                    name: node.name.clone(),
                    attr: "f".to_owned(),
                    reason: "must be a function".to_owned(),
                });
            }
        };
        let function = self
            .module
            .library
            .find(&name)
            .expect("verified: a call names a library function");
        if self.stack.contains(&name) {
            return Err(ExecError::RecursiveFunction { function: name });
        }
        let mut stack = self.stack.clone();
        stack.push(name.clone());
        let body_compiler = Compiler {
            module: self.module,
            default_device: parse_device(&node.name, device)?,
            stack,
        };
        let plan = body_compiler
            .compile_function(function, n_inputs)
            .map_err(|err| ExecError::InFunction {
                name: node.name.clone(),
                function: name.clone(),
                source: Box::new(err),
            })?;
        Ok(Work::Call {
            function: name,
            plan: Arc::new(plan),
        })
    }

    /// Compiles a function body: its arguments are the feeds, its outputs the fetches, and its
    /// control outputs and stateful ops extra targets.
    fn compile_function(
        &self,
        function: &Function,
        n_inputs: usize,
    ) -> Result<CompiledPlan, ExecError> {
        let body = &function.body;
        let mut args: Vec<(i64, OpId)> = Vec::new();
        for id in body.ops() {
            let node = body.op(id);
            if node.op == Op::Arg {
                let index = match node.attrs.get("index") {
                    Some(AttrValue::I(index)) => *index,
                    _ => -1,
                };
                args.push((index, id));
            }
        }
        args.sort();
        if args.len() != n_inputs {
            return Err(ExecError::MissingInput {
                name: function.signature.name.clone(),
                input: args.len().min(n_inputs) as u32,
            });
        }
        let feeds: Vec<(String, Target)> = args
            .iter()
            .map(|&(_, id)| (format!("{}:0", body.op(id).name), Target::Tensor(id, 0)))
            .collect();
        let mut targets = Vec::new();
        for output in &function.signature.output_args {
            let ret = function.ret.get(&output.name);
            let target = ret.and_then(|ret| parse_ret(body, ret));
            targets.push(target.ok_or_else(|| ExecError::BadReturn {
                function: function.signature.name.clone(),
                output: output.name.clone(),
                ret: ret.cloned().unwrap_or_default(),
            })?);
        }
        for node_name in function.control_ret.values() {
            let id = body.find(node_name).ok_or_else(|| ExecError::UnknownOp {
                name: node_name.clone(),
            })?;
            targets.push(Target::Op(id));
        }
        for id in body.ops() {
            let op = &body.op(id).op;
            if signature::of_op(op).is_some_and(|sig| sig.is_stateful) {
                targets.push(Target::Op(id));
            }
        }
        self.compile_graph(body, &targets, &feeds)
    }
}

/// Accumulates steps, slots and queues during compilation.
struct PlanBuilder<'g> {
    plan: CompiledPlan,
    /// Each op's step and the first of its output slots (an op's outputs take consecutive
    /// slots), in one table so that an input costs one lookup and no op a vector.
    step_of: Vec<Option<(StepId, SlotId)>>,
    /// The queue of each requested device string met so far.
    devices: FxHashMap<&'g str, QueueId>,
}

impl PlanBuilder<'_> {
    /// The queue of the resolved `device`, added when it is new (several requested device
    /// strings can resolve to one device).
    fn queue(&mut self, device: String) -> QueueId {
        let position = match self.plan.queues.iter().position(|q| q.device == device) {
            Some(position) => position,
            None => {
                self.plan.queues.push(Queue {
                    device,
                    steps: Vec::new(),
                });
                self.plan.queues.len() - 1
            }
        };
        QueueId(position as u32)
    }

    /// The slot output `output` of the already compiled op `id` is written to.
    fn output_slot(&self, id: OpId, output: u32) -> SlotId {
        SlotId(self.compiled(id).1.0 + output)
    }

    /// The step of the already compiled op `id` and its first output slot.
    fn compiled(&self, id: OpId) -> (StepId, SlotId) {
        self.step_of[id.index()].expect("ops are compiled after their inputs")
    }

    /// Appends the step of `id`; `deps` are sorted and distinct.
    #[expect(
        clippy::too_many_arguments,
        reason = "one call site, all parts of a step"
    )]
    fn push(
        &mut self,
        id: OpId,
        name: String,
        node: &OpNode,
        work: Work,
        queue: QueueId,
        inputs: Slots,
        n_outputs: usize,
        deps: Steps,
    ) {
        let step_id = StepId(self.plan.steps.len() as u32);
        self.plan.queues[queue.0 as usize].steps.push(step_id);
        let first = self.plan.n_slots;
        self.plan.n_slots += n_outputs;
        self.plan.n_run_slots = self.plan.n_slots;
        let outputs: Slots = (first..first + n_outputs)
            .map(|slot| SlotId(slot as u32))
            .collect();
        for dep in &deps {
            self.plan.steps[dep.0 as usize].users.push(step_id);
        }
        self.plan.steps.push(Step {
            name,
            op: node.op.clone(),
            queue,
            work,
            inputs,
            outputs,
            deps,
            users: Steps::new(),
        });
        self.step_of[id.index()] = Some((step_id, SlotId(first as u32)));
    }
}

/// How many ops [`make_ahead`] takes at a time: enough to share among the cores, and few
/// enough that what it made is still in cache when the ops join the plan.
const OPS_PER_CHUNK: usize = 1 << 12;

/// What a step takes from its op alone, made before the op joins the plan.
struct Ahead {
    /// The op's name.
    name: String,
    /// Its kernel, or why it has none (a call, whose body is compiled in order, and an unfed
    /// placeholder have none either: [`Compiler::resolve_work`] does not ask for it then).
    kernel: Result<Kernel, ExecError>,
}

/// The fewest ops [`make_ahead`] shares among threads: a small plan (a function body, an
/// eager call's) is made on the calling thread, without a hop to the pool and back.
const AHEAD_IN_PARALLEL_FROM: usize = 1 << 10;

/// Makes the [`Ahead`] of each op of `ops` into `made`, in order, on the current rayon pool
/// when they are many.
fn make_ahead(graph: &Graph, ops: &[OpId], made: &mut Vec<Ahead>) {
    let ahead = |&id: &OpId| {
        let node = graph.op(id);
        Ahead {
            name: node.name.clone(),
            kernel: Kernel::resolve(node),
        }
    };
    if ops.len() < AHEAD_IN_PARALLEL_FROM {
        made.clear();
        made.extend(ops.iter().map(ahead));
    } else {
        ops.par_iter()
            .with_min_len(256)
            .map(ahead)
            .collect_into_vec(made);
    }
}

/// Looks up `text` (`op:N`, or `op`: an op target when `op_allowed`, else `op:0`), its op
/// looked for where `stride` guesses first (see [`Graph::find_near`]).
fn parse_target(
    graph: &Graph,
    text: &str,
    op_allowed: bool,
    stride: Stride,
) -> Result<Target, ExecError> {
    let bad = || ExecError::BadTensorName {
        name: text.to_owned(),
    };
    let parsed = TensorName::parse(text).map_err(|_| bad())?;
    let name = parsed.op;
    let output = match parsed.output {
        None => None,
        Some(OutputRef::Index(index)) => Some(index),
        Some(OutputRef::Named { .. }) => return Err(bad()),
    };
    let id = graph
        .find_near(name, stride.guesses())
        .ok_or_else(|| ExecError::UnknownOp {
            name: name.to_owned(),
        })?;
    let output = match output {
        Some(output) => output,
        None if op_allowed => return Ok(Target::Op(id)),
        None => 0,
    };
    let n_outputs = n_outputs(graph.op(id))?;
    if output as usize >= n_outputs {
        return Err(ExecError::NoSuchOutput {
            name: name.to_owned(),
            output,
            n_outputs,
        });
    }
    Ok(Target::Tensor(id, output))
}

/// Parses a function `ret` value (`node:arg:index`, `node:index` or an argument name).
fn parse_ret(body: &Graph, ret: &str) -> Option<Target> {
    let name = TensorName::parse(ret).ok()?;
    let id = body.find(name.op)?;
    let node = body.op(id);
    let output = resolve_port(node, &name.port()).ok()?;
    (output < n_outputs(node).ok()? as u32).then_some(Target::Tensor(id, output))
}

/// Parses `device` (of op `name`) as a spec.
fn parse_device(name: &str, device: &str) -> Result<DeviceSpec, ExecError> {
    DeviceSpec::parse(device).map_err(|source| ExecError::BadDevice {
        name: name.to_owned(),
        source,
    })
}

/// The canonical device op `name` runs on: `requested` merged over `default`, index `*` → 0.
pub fn resolve_device(
    name: &str,
    requested: &str,
    default: &DeviceSpec,
) -> Result<String, ExecError> {
    let mut spec = default.make_merged_spec(&parse_device(name, requested)?);
    if !matches!(spec.device_index, Some(DeviceIndex::Index(_))) {
        spec.device_index = Some(DeviceIndex::Index(0));
    }
    Ok(spec.to_string())
}

/// The dtype an op declares for its single output (placeholders and arguments).
fn declared_dtype(node: &OpNode) -> Option<DType> {
    let attr = match node.op {
        Op::Placeholder | Op::PlaceholderWithDefault => "dtype",
        Op::Arg => "T",
        _ => return None,
    };
    match node.attrs.get(attr) {
        Some(AttrValue::Type(dtype)) => Some(*dtype),
        _ => None,
    }
}

/// The number of outputs of `node`.
fn n_outputs(node: &OpNode) -> Result<usize, ExecError> {
    arity(node, false)
}

/// The number of data inputs of `node`.
fn n_inputs(node: &OpNode) -> Result<usize, ExecError> {
    arity(node, true)
}

/// The number of inputs or outputs of `node`, from its signature and attrs.
fn arity(node: &OpNode, inputs: bool) -> Result<usize, ExecError> {
    if node.op == Op::Arg {
        return Ok(usize::from(!inputs));
    }
    let sig = signature::of_op(&node.op).ok_or_else(|| ExecError::UnsupportedOp {
        name: node.name.clone(),
        op_type: node.op.type_name().to_owned(),
    })?;
    let lens = |name: &str| signature::attr_len(&node.attrs, name);
    let result = if inputs {
        sig.num_inputs(&lens)
    } else {
        sig.num_outputs(&lens)
    };
    result.map_err(|err| ExecError::BadAttr {
        name: node.name.clone(),
        attr: match &err {
            saveplan_ir::signature::SignatureError::MissingAttr { attr, .. } => (*attr).to_owned(),
            _ => String::new(),
        },
        reason: err.to_string(),
    })
}

/// The flat output of its producer that `input` reads. The producer is read only for a named
/// port: an index (every port of a known op) needs nothing of it, and on a large plan the
/// producers of a step's inputs lie far apart, a cache miss each.
fn input_output(graph: &Graph, input: &Input) -> Result<u32, ExecError> {
    match input.output {
        Port::Index(index) => Ok(index),
        Port::Named { .. } => resolve_port(graph.op(input.src), &input.output),
    }
}

/// The flat output index a port of `node` names.
fn resolve_port(node: &OpNode, port: &Port) -> Result<u32, ExecError> {
    signature::flat_output(node, port).map_err(|err| match (err, port) {
        (PortError::UnknownSignature { op_type }, _) => ExecError::UnsupportedOp {
            name: node.name.clone(),
            op_type,
        },
        (err, Port::Named { arg, index }) => ExecError::BadTensorName {
            name: format!("{}:{arg}:{index}: {err}", node.name),
        },
        (err, Port::Index(index)) => ExecError::BadTensorName {
            name: format!("{}:{index}: {err}", node.name),
        },
    })
}
