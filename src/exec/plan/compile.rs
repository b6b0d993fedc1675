//! The plan compiler: a verified graph pruned to what some targets need and compiled into a
//! [`CompiledPlan`], one step per op, then (except through the `_unfused` entry points) its
//! variable ops folded by the fusion pass ([`crate::exec::fuse`]).
//!
//! 1. Feeds (`op:N`, or `op` for `op:0`) and targets (`op:N` to fetch a tensor, `op` to only
//!    run an op) are looked up.
//! 2. Pruning walks back from the targets over data and control inputs. A fed tensor cuts the
//!    walk: its producer runs only if something else needs it, and an op whose outputs are all
//!    fed (a fed `Placeholder`) never runs, so control edges from it are dropped.
//! 3. The needed ops are ordered topologically, ties broken by creation order, so the schedule
//!    is the same on every compile; then each `_Send` moves up to just after the last op it
//!    depends on, so that it leaves as soon as its value exists.
//! 4. Each op gets its kernel ([`Kernel::resolve`]; calls compile their function body into a
//!    sub-plan), one slot per output, the slots of its inputs, and the queue of its device.
//!    Devices are resolved against `/job:localhost/replica:0/task:0/device:CPU:0` (a function
//!    body against its call's device); an index `*` becomes 0.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rayon::prelude::*;
use rustc_hash::FxHashMap;
use saveplan_ir::device::{DeviceIndex, DeviceSpec};
use saveplan_ir::{
    AttrValue, DType, Function, Graph, Module, Op, OpId, OpNode, Stride, Verified, signature,
};

use super::target::{Target, input_output, n_inputs, n_outputs, parse_ret, parse_target};
use super::{
    CompiledPlan, DEFAULT_DEVICE, Feed, Queue, QueueId, SlotId, Slots, Step, StepId, Steps, Work,
};
use crate::exec::error::ExecError;
use crate::exec::fuse::fuse;
use crate::exec::kernels::Kernel;

/// What compiling a graph needs besides the graph.
struct Compiler<'m> {
    module: &'m Module,
    /// The device empty or partial device strings are resolved against.
    default_device: DeviceSpec,
    /// The functions being compiled, outermost first (to reject recursion).
    stack: Vec<String>,
}

impl CompiledPlan {
    /// Compiles the top-level graph of `module` for `targets` (`op:N` fetches a tensor, `op`
    /// only runs the op), with `feeds` (`op:N` or `op`) given at each run. The module was
    /// verified where it entered ([`saveplan_ir::verify_module`]); compiling relies on the
    /// verifier's invariants (dense input slots, outputs that exist, no cycle, called
    /// functions in the library) instead of checking them again.
    ///
    /// The variable ops around each `SaveV2` and `RestoreV2` are folded into it
    /// ([`crate::exec::fuse`]'s pass); [`CompiledPlan::compile_unfused`] leaves them as steps.
    pub fn compile(
        module: Verified<'_>,
        targets: &[&str],
        feeds: &[&str],
    ) -> Result<CompiledPlan, ExecError> {
        let mut plan = CompiledPlan::compile_unfused(module, targets, feeds)?;
        fuse(&mut plan);
        Ok(plan)
    }

    /// Compiles the library function `function` of `module` on its own, as a concrete function
    /// is called eagerly: the feeds are its arguments in order, the fetches its outputs in
    /// order, and its control outputs and stateful ops always run.
    pub fn compile_function(
        module: Verified<'_>,
        function: &str,
    ) -> Result<CompiledPlan, ExecError> {
        let mut plan = CompiledPlan::compile_function_unfused(module, function)?;
        fuse(&mut plan);
        Ok(plan)
    }

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
    fn compile_function_unfused(
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
        let order = sends_early(graph, order);
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

/// `order` (topological) with each `_Send`/`_HostSend` moved up to just after the last op it
/// depends on. A queue runs its ready steps in step order, so a send then leaves as soon as
/// its value exists, as TensorFlow's asynchronous sends do: the prefix a task sends the
/// others is not held back behind that task's own `SaveV2`, which would make the tasks write
/// their shards one after the other. Still topological: a send is used by nothing in its
/// partition. Linear in the ops and their inputs; the same order on every compile.
fn sends_early(graph: &Graph, order: Vec<OpId>) -> Vec<OpId> {
    let is_send = |id: OpId| matches!(&graph.op(id).op, Op::Other(op_type) if matches!(&**op_type, "_Send" | "_HostSend"));
    if !order.iter().any(|&id| is_send(id)) {
        return order;
    }
    // Position in `order` plus one of each op (0: not ordered, a fed or cut input).
    let mut position = vec![0usize; graph.id_bound()];
    for (index, &id) in order.iter().enumerate() {
        position[id.index()] = index + 1;
    }
    // The sends to place after each position (0: before every op).
    let mut after: Vec<Vec<OpId>> = vec![Vec::new(); order.len() + 1];
    for &id in order.iter().filter(|&&id| is_send(id)) {
        let last = (graph.inputs_iter(id).map(|(_, input)| input.src))
            .chain(graph.control_inputs(id))
            .map(|src| position[src.index()])
            .max()
            .unwrap_or(0);
        after[last].push(id);
    }
    let mut early = Vec::with_capacity(order.len());
    early.append(&mut after[0]);
    for (index, &id) in order.iter().enumerate() {
        if !is_send(id) {
            early.push(id);
        }
        early.append(&mut after[index + 1]);
    }
    early
}

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
