//! The fusion pass run at the end of plan compilation, and how a fused step runs. The
//! compiler ([`CompiledPlan::compile`], [`CompiledPlan::compile_function`]) compiles one step
//! per op, then runs this pass; the plan types ([`super::plan`]) know nothing of it.
//!
//! A checkpoint plan of N variables is mostly per-variable steps: a save reads each variable
//! (`ReadVariableOp`, maybe through `Identity`) only to feed one `SaveV2`, a restore hands each
//! output of one `RestoreV2` (maybe through `Identity`) to one `AssignVariableOp`. Run one by
//! one, each of those steps costs a scheduler entry, dependency counting and an output slot,
//! which is more than the bundle code spends on a small tensor. The pass folds such chains into
//! the `SaveV2`/`RestoreV2` step ([`Work::Fused`]), which then reads the variables, saves,
//! restores and assigns in one step.
//!
//! # When a chain is folded
//!
//! * Restore: output `i` of a `RestoreV2` is used by exactly one step, an `Identity` (one input,
//!   one output) or the value input of an `AssignVariableOp`; an `Identity`'s output likewise,
//!   until an `AssignVariableOp` ends the chain. Every step of the chain is on the
//!   `RestoreV2`'s device, no slot of it is fetched, and every other dependency of the chain
//!   (the variable handle, control inputs) comes before the `RestoreV2` in the schedule, so
//!   the fused step can run where the `RestoreV2` ran.
//! * Save: tensor input `i` of a `SaveV2` is the output of an `Identity` or `ReadVariableOp`
//!   on the same device, used by nothing else (no other data or control user, not fetched);
//!   `Identity`s are followed back until a `ReadVariableOp` starts the chain.
//!
//! Outputs of a `RestoreV2` and inputs of a `SaveV2` that do not qualify stay ordinary slots;
//! a `RestoreV2` or `SaveV2` with no chain to fold is left alone. Control edges to and from a
//! folded step move to the fused step. The pass is linear in the plan's steps and edges.
//!
//! # What stays the same
//!
//! The fused step runs the same kernels in the same order as the interpreter ran the chain
//! (restore: the `RestoreV2`, then each chain in the order of its `AssignVariableOp`; save:
//! each chain in the order of its `ReadVariableOp`, then the `SaveV2`), so values, files and
//! the first error (named after the op that failed, on its device) are those of the unfused
//! plan. Ops of one device that do not depend on each other have no defined order, so a
//! folded read or assignment may move past such an op. When a run fails, a fused step of
//! another device that already started finishes all its chains (an op already running
//! finishes; unfused, that device might have stopped between two assignments). The observer still sees one
//! [`super::StepEvent`] per folded op, with that op's step and outputs (the `RestoreV2` event
//! carries every restored tensor), so progress counted from events is unchanged. A folded
//! step is no longer in any queue, and its `deps` and `users` are empty.
//!
//! # How a fused step runs
//!
//! Without an observer, a fused step works under one lock of the variable store; with one, it
//! runs op by op, one observer event per folded op. A fused save borrows the variables under
//! the store's read lock and holds it while its `SaveV2` writes them
//! (`VariableReader::value_as_at`, `kernels::run_save_of`): no reference count is touched
//! per variable, and an assignment from another thread waits for the write. Its inputs (one
//! per tensor, mostly placeholders for the variables it lends) are read in place from the
//! run's slots (`StepInputs`), not cloned. A fused restore moves each restored tensor into
//! its variable or out of the step in one pass. Each folded chain keeps its variable op's
//! dtype (`Chain::dtype`), so neither reads a folded step unless it fails. A fused
//! `SaveV2`/`RestoreV2` checks its names for UTF-8 once and keeps them in one buffer while they
//! are the same tensors (`NamesCache`).
//!
//! After folding, the slots the queued steps use are numbered first
//! (`CompiledPlan::number_run_slots_first`), so a run's slot table holds only those, a
//! handful where the plan has one per variable. The pass reads each folded step once, as its
//! chain is found (`Gathered`: the chain's edges and handle slots), and `relink` empties the
//! folded steps' edges in one sequential pass.

use std::sync::Arc;

use rustc_hash::FxHashSet;

use super::error::ExecError;
use super::kernels::{self, Kernel, NamesCache, state};

use super::plan::{
    Chain, CompiledPlan, Fused, Handle, Kind, Queue, SlotId, Step, StepId, Steps, Work,
};
use super::step::{RunContext, StepInputs, finish_step, kernel_cx, notify, op_error};
use super::tensor::HostTensor;
use super::variables::{SlotCache, VarKeyRef, VarSlot, VariableReader};

/// The first saved tensor among a `SaveV2`'s inputs (after prefix, names and slices).
const FIRST_TENSOR: usize = saveplan_ir::saver_ops::save_v2::FIRST_TENSOR as usize;

/// Slot and step facts the pass looks up, each a vector indexed by slot or step.
struct Facts {
    /// Per slot: how many step inputs read it.
    uses: Vec<u32>,
    /// Per slot: the last step reading it.
    user: Vec<u32>,
    /// Per slot: the step writing it, or `u32::MAX` for a feed.
    producer: Vec<u32>,
    /// The fetched slots.
    fetched: FxHashSet<SlotId>,
}

impl Facts {
    /// Whether `slot` has exactly one reader and is not fetched.
    fn private(&self, slot: SlotId) -> bool {
        self.uses[slot.0 as usize] == 1 && !self.fetched.contains(&slot)
    }
}

/// Folds the variable chains of every `RestoreV2` and `SaveV2` of `plan` into them.
pub(super) fn fuse(plan: &mut CompiledPlan) {
    let n_slots = plan.n_slots();
    let (steps, queues, fetches) = plan.parts_mut();
    // One pass over the steps (a large plan's do not fit in cache) finds the heads and the
    // facts.
    let mut heads = Vec::new();
    let mut facts = Facts {
        uses: vec![0; n_slots],
        user: vec![u32::MAX; n_slots],
        producer: vec![u32::MAX; n_slots],
        fetched: fetches.iter().copied().collect(),
    };
    for (index, step) in steps.iter().enumerate() {
        if matches!(
            step.work,
            Work::Kernel(Kernel::RestoreV2 { .. } | Kernel::SaveV2 { .. })
        ) {
            heads.push(index);
        }
        for slot in &step.inputs {
            facts.uses[slot.0 as usize] += 1;
            facts.user[slot.0 as usize] = index as u32;
        }
        for slot in &step.outputs {
            facts.producer[slot.0 as usize] = index as u32;
        }
    }
    if heads.is_empty() {
        return;
    }
    // Per step: the fused step it was folded into (itself if none).
    let mut rep: Vec<u32> = (0..steps.len() as u32).collect();
    let mut changed = false;
    for head in heads {
        let fused = match &steps[head].work {
            Work::Kernel(Kernel::RestoreV2 { .. }) => plan_restore(steps, &facts, head),
            Work::Kernel(Kernel::SaveV2 { .. }) => plan_save(steps, &facts, head),
            _ => unreachable!("a head is a RestoreV2 or SaveV2 step"),
        };
        if let Some(group) = fused {
            apply(steps, &mut rep, head, group);
            changed = true;
        }
    }
    if changed {
        relink(steps, queues, &rep);
        plan.number_run_slots_first();
    }
}

/// The chains a step folds, before the step is rewritten.
struct Group {
    kind: Kind,
    chains: Vec<Chain>,
    members: Vec<StepId>,
    gathered: Gathered,
}

/// What the folded steps bring to the fused step, read from each chain's steps as the chain
/// is found. A large plan's chains lie far apart in memory; read again when the step is
/// rewritten, each chain's steps would be a cache miss more.
struct Gathered {
    /// The folded steps' dependencies.
    deps: Steps,
    /// The folded steps' users.
    users: Steps,
    /// Save only: the handle slot each folded chain's tensor input takes (see [`apply`]).
    handle_inputs: Vec<(usize, SlotId)>,
}

impl Gathered {
    fn new() -> Gathered {
        Gathered {
            deps: Steps::new(),
            users: Steps::new(),
            handle_inputs: Vec::new(),
        }
    }

    /// Takes in the edges of a chain found of `members`.
    fn chain(&mut self, steps: &[Step], members: &[StepId]) {
        for &member in members {
            let step = &steps[member.0 as usize];
            self.deps.extend_from_slice(&step.deps);
            self.users.extend_from_slice(&step.users);
        }
    }
}

/// The chains of `RestoreV2` step `head` that can be folded.
fn plan_restore(steps: &[Step], facts: &Facts, head: usize) -> Option<Group> {
    let step = &steps[head];
    let mut chains = Vec::new();
    let mut members = Vec::new();
    let mut gathered = Gathered::new();
    'outputs: for (position, &slot) in step.outputs.iter().enumerate() {
        let start = members.len();
        let mut current = slot;
        let mut previous = head;
        loop {
            if !facts.private(current) {
                break;
            }
            let user = facts.user[current.0 as usize] as usize;
            let candidate = &steps[user];
            if candidate.queue != step.queue
                || !candidate
                    .deps
                    .iter()
                    .all(|dep| dep.0 as usize == previous || (dep.0 as usize) < head)
            {
                break;
            }
            match &candidate.work {
                Work::Kernel(Kernel::Identity)
                    if candidate.inputs.len() == 1 && candidate.outputs.len() == 1 =>
                {
                    members.push(StepId(user as u32));
                    current = candidate.outputs[0];
                    previous = user;
                }
                &Work::Kernel(Kernel::AssignVariableOp {
                    dtype,
                    validate_shape,
                }) if candidate.inputs.len() == 2
                    && candidate.inputs[1] == current
                    && earlier(facts, candidate.inputs[0], head) =>
                {
                    members.push(StepId(user as u32));
                    let handle = match var_handle(steps, facts, candidate.inputs[0], user) {
                        Some(producer) => {
                            members.insert(start, producer);
                            Handle::Member
                        }
                        None => Handle::Input(candidate.inputs[0].0),
                    };
                    gathered.chain(steps, &members[start..]);
                    chains.push(Chain {
                        position: position as u32,
                        handle,
                        members: start as u32..members.len() as u32,
                        dtype,
                        validate_shape,
                    });
                    continue 'outputs;
                }
                _ => break,
            }
        }
        members.truncate(start);
    }
    if chains.is_empty() {
        return None;
    }
    // The assignments (what can fail) run in schedule order.
    chains.sort_by_key(|chain| members[chain.members.end as usize - 1]);
    Some(reorder(Kind::Restore, chains, &members, gathered))
}

/// The `VarHandleOp` step writing `slot` when it can be folded with its only user `user`:
/// on the same device, with no other user, its output not fetched.
fn var_handle(steps: &[Step], facts: &Facts, slot: SlotId, user: usize) -> Option<StepId> {
    let producer = facts.producer[slot.0 as usize];
    let step = steps.get(producer as usize)?;
    let folds = matches!(step.work, Work::Kernel(Kernel::VarHandleOp(_)))
        && facts.private(slot)
        && step.queue == steps[user].queue
        && step.users.as_slice() == [StepId(user as u32)];
    folds.then_some(StepId(producer))
}

/// Whether `slot` is fed or written by a step before `head`.
fn earlier(facts: &Facts, slot: SlotId, head: usize) -> bool {
    let producer = facts.producer[slot.0 as usize];
    producer == u32::MAX || (producer as usize) < head
}

/// The chains of `SaveV2` step `head` that can be folded.
fn plan_save(steps: &[Step], facts: &Facts, head: usize) -> Option<Group> {
    let step = &steps[head];
    let mut chains = Vec::new();
    let mut members = Vec::new();
    let mut gathered = Gathered::new();
    'inputs: for (offset, &slot) in step.inputs.iter().enumerate().skip(FIRST_TENSOR) {
        let start = members.len();
        let mut current = slot;
        let mut next = head;
        loop {
            let producer = facts.producer[current.0 as usize];
            if !facts.private(current) || producer == u32::MAX {
                break;
            }
            let candidate = &steps[producer as usize];
            if candidate.queue != step.queue
                || candidate.users.as_slice() != [StepId(next as u32)]
                || candidate.inputs.len() != 1
                || candidate.outputs.len() != 1
            {
                break;
            }
            match &candidate.work {
                Work::Kernel(Kernel::Identity) => {
                    members.push(StepId(producer));
                    current = candidate.inputs[0];
                    next = producer as usize;
                }
                &Work::Kernel(Kernel::ReadVariableOp { dtype }) => {
                    members.push(StepId(producer));
                    let handle =
                        match var_handle(steps, facts, candidate.inputs[0], producer as usize) {
                            Some(handle_step) => {
                                members.push(handle_step);
                                Handle::Member
                            }
                            None => Handle::Input(offset as u32),
                        };
                    members[start..].reverse();
                    gathered.chain(steps, &members[start..]);
                    // The tensor input reads the handle: the read's input, or the prefix
                    // as a placeholder when the handle is folded too.
                    let handle_slot = match handle {
                        Handle::Input(_) => candidate.inputs[0],
                        Handle::Member => step.inputs[0],
                    };
                    gathered.handle_inputs.push((offset, handle_slot));
                    chains.push(Chain {
                        position: (offset - FIRST_TENSOR) as u32,
                        handle,
                        members: start as u32..members.len() as u32,
                        dtype,
                        validate_shape: false,
                    });
                    continue 'inputs;
                }
                _ => break,
            }
        }
        members.truncate(start);
    }
    if chains.is_empty() {
        return None;
    }
    // The reads (what can fail) run in schedule order.
    chains.sort_by_key(|chain| members[chain.members.start as usize]);
    Some(reorder(Kind::Save, chains, &members, gathered))
}

/// The group with `members` laid out in the order of `chains`.
fn reorder(kind: Kind, chains: Vec<Chain>, members: &[StepId], gathered: Gathered) -> Group {
    let mut ordered = Vec::with_capacity(members.len());
    let chains = chains
        .into_iter()
        .map(|chain| {
            let start = ordered.len() as u32;
            ordered.extend_from_slice(
                &members[chain.members.start as usize..chain.members.end as usize],
            );
            Chain {
                members: start..ordered.len() as u32,
                ..chain
            }
        })
        .collect();
    Group {
        kind,
        chains,
        members: ordered,
        gathered,
    }
}

/// Rewrites step `head` into a fused step folding `group`. The folded steps are not read:
/// what the fused step needs of them was gathered when their chains were found, and
/// [`relink`] empties their edges.
fn apply(steps: &mut [Step], rep: &mut [u32], head: usize, group: Group) {
    let Group {
        kind,
        chains,
        members,
        gathered,
    } = group;
    for &member in &members {
        rep[member.0 as usize] = head as u32;
    }
    let step = &mut steps[head];
    step.deps.extend_from_slice(&gathered.deps);
    step.users.extend_from_slice(&gathered.users);
    let n_head_inputs = step.inputs.len();
    let n_head_outputs = step.outputs.len();
    let mut kept = Vec::new();
    match kind {
        Kind::Restore => {
            let mut folded = vec![false; n_head_outputs];
            for chain in &chains {
                folded[chain.position as usize] = true;
            }
            let outputs = std::mem::take(&mut step.outputs);
            for (position, slot) in outputs.into_iter().enumerate() {
                if !folded[position] {
                    kept.push(position as u32);
                    step.outputs.push(slot);
                }
            }
        }
        Kind::Save => {}
    }
    // Restore chains read an unfolded handle from a new input. Save chains read it from the
    // tensor's input, which holds the prefix as a placeholder when the handle is folded too
    // (the step keeps one input per saved tensor).
    let mut chains = chains;
    if kind == Kind::Restore {
        for chain in &mut chains {
            if let Handle::Input(slot) = chain.handle {
                step.inputs.push(SlotId(slot));
                chain.handle = Handle::Input((step.inputs.len() - 1) as u32);
            }
        }
    }
    let Work::Kernel(kernel) = std::mem::replace(&mut step.work, Work::Kernel(Kernel::NoOp)) else {
        unreachable!("only kernel steps are fused");
    };
    for &(input, slot) in &gathered.handle_inputs {
        step.inputs[input] = slot;
    }
    // Keys fixed by the plan (folded handles: the variable is the plan's own) are resolved to
    // slots once per store. A TF1 reference has none to cache: [`keys`] gives none for it, so
    // its step's cache stays empty.
    let constant_keys = chains
        .iter()
        .all(|chain| matches!(chain.handle, Handle::Member));
    step.work = Work::Fused(Box::new(Fused {
        kernel,
        kind,
        n_head_inputs,
        n_head_outputs,
        kept,
        chains,
        members,
        slots: constant_keys.then(SlotCache::default),
        names: NamesCache::default(),
    }));
}

/// Points every edge at the fused steps, sorts and dedups it, empties the folded steps'
/// edges, and takes folded steps out of their queues.
fn relink(steps: &mut [Step], queues: &mut [Queue], rep: &[u32]) {
    for (index, step) in steps.iter_mut().enumerate() {
        if rep[index] != index as u32 {
            step.deps.clear();
            step.users.clear();
            continue;
        }
        for edges in [&mut step.deps, &mut step.users] {
            let moved = |id: &StepId| rep[id.0 as usize] != id.0 || id.0 as usize == index;
            if edges.iter().any(moved) {
                for id in edges.iter_mut() {
                    id.0 = rep[id.0 as usize];
                }
                edges.retain(|id| id.0 as usize != index);
                edges.sort_unstable();
                edges.dedup();
            }
        }
    }
    for queue in queues {
        queue.steps.retain(|id| rep[id.0 as usize] == id.0);
    }
}

/// Runs fused step `step` (on `device`) of `plan` on `inputs`, returning the outputs the step
/// still writes. Errors and observer events are those of the folded ops.
///
/// Without an observer the variables are assigned (restore) under one lock, or borrowed
/// (save) under the store's read lock, which is held until the `SaveV2` has written them: a
/// save clones no value (two reference counts per variable, touched twice, cost as much as the
/// bundle code spends on a small tensor), and an assignment from another thread waits for the
/// file instead. The bytes are those of a read followed by the write. The step's inputs are
/// read in place: a save has one per tensor, mostly placeholders for the variables it lends,
/// and cloning them was a reference count touched twice per variable too. With an observer,
/// each folded op runs on its own and is reported, so that the observer may use the variables.
pub(crate) fn run_fused(
    run: &RunContext<'_>,
    plan: &CompiledPlan,
    step: &Step,
    device: &str,
    fused: &Fused,
    inputs: StepInputs<'_>,
) -> Result<Vec<HostTensor>, ExecError> {
    let slots = match run.observer {
        None => slots(run, plan, fused, inputs),
        Some(_) => None,
    };
    match fused.kind {
        Kind::Restore => {
            let head_inputs = inputs.to_vec(0..fused.n_head_inputs);
            let Kernel::RestoreV2 { dtypes } = &fused.kernel else {
                unreachable!("a fused restore's kernel is its RestoreV2");
            };
            let cx = kernel_cx(run, step, device);
            let result = kernels::run_restore_of(&cx, dtypes, &head_inputs, &fused.names);
            let tensors = finish_step(run, step, device, result, fused.n_head_outputs)?;
            match slots {
                Some(slots) => assign_all(run, plan, device, fused, &slots, tensors),
                None => {
                    restore_op_by_op(run, plan, device, fused, inputs, &tensors)?;
                    Ok(fused
                        .kept
                        .iter()
                        .map(|&position| tensors[position as usize].clone())
                        .collect())
                }
            }
        }
        Kind::Save => match slots {
            Some(slots) => {
                // Held until the file is written: the values are saved where they are.
                let Kernel::SaveV2 { dtypes } = &fused.kernel else {
                    unreachable!("a fused save's kernel is its SaveV2");
                };
                // The tensors are borrowed where they are: the inputs of the positions no
                // chain folds, the variables of the others (their inputs are placeholders).
                let head = inputs.to_vec(0..FIRST_TENSOR.min(inputs.len()));
                let mut tensors: Vec<&HostTensor> = (FIRST_TENSOR..inputs.len())
                    .map(|index| inputs.get(index))
                    .collect();
                let reader = run.variables.reader();
                lend_all(&reader, plan, device, fused, &slots, &mut tensors)?;
                let cx = kernel_cx(run, step, device);
                let result = kernels::run_save_of(&cx, dtypes, &head, tensors, &fused.names);
                finish_step(run, step, device, result, fused.n_head_outputs)
            }
            None => {
                let mut inputs = inputs.all();
                let values = read_op_by_op(run, plan, device, fused, &inputs)?;
                for (chain, value) in fused.chains.iter().zip(values) {
                    inputs[FIRST_TENSOR + chain.position as usize] = value;
                }
                let result = fused.kernel.run(&kernel_cx(run, step, device), &inputs);
                finish_step(run, step, device, result, fused.n_head_outputs)
            }
        },
    }
}

/// Assigns the restored `tensors` to the variables `slots` of the chains under one lock and
/// returns the others, the outputs the step keeps. Each tensor moves to its variable or out of
/// the step: the chains come in output order, and every output no chain folds is kept.
fn assign_all(
    run: &RunContext<'_>,
    plan: &CompiledPlan,
    device: &str,
    fused: &Fused,
    slots: &[VarSlot],
    tensors: Vec<HostTensor>,
) -> Result<Vec<HostTensor>, ExecError> {
    let mut kept = Vec::with_capacity(fused.kept.len());
    let mut chains = fused.chains.iter().zip(slots).peekable();
    let mut writer = run.variables.writer();
    for (position, value) in tensors.into_iter().enumerate() {
        let Some((chain, &slot)) = chains.next_if(|(chain, _)| chain.position as usize == position)
        else {
            kept.push(value);
            continue;
        };
        writer
            .assign_at(slot, chain.dtype, value, chain.validate_shape)
            .map_err(|err| {
                let members = fused.chain_members(chain);
                let assign = plan.step(members[members.len() - 1]);
                op_error(assign, device, err.into())
            })?;
    }
    debug_assert!(chains.next().is_none(), "every chain's output is assigned");
    Ok(kept)
}

/// Runs the folded ops of every restore chain one by one, reporting each.
fn restore_op_by_op(
    run: &RunContext<'_>,
    plan: &CompiledPlan,
    device: &str,
    fused: &Fused,
    inputs: StepInputs<'_>,
    tensors: &[HostTensor],
) -> Result<(), ExecError> {
    for chain in &fused.chains {
        let mut members = fused.chain_members(chain);
        let handle = match chain.handle {
            Handle::Input(input) => inputs.get(input as usize).clone(),
            Handle::Member => {
                let handle_step = plan.step(members[0]);
                members = &members[1..];
                run_member(run, handle_step, device, &[])?.expect("a VarHandleOp has an output")
            }
        };
        let mut value = tensors[chain.position as usize].clone();
        for &member in members {
            let member = plan.step(member);
            let output = match member.work {
                Work::Kernel(Kernel::AssignVariableOp { .. }) => {
                    run_member(run, member, device, &[handle.clone(), value.clone()])?
                }
                _ => run_member(run, member, device, std::slice::from_ref(&value))?,
            };
            if let Some(output) = output {
                value = output;
            }
        }
    }
    Ok(())
}

/// Puts the variables `slots` of the save chains, borrowed from `reader` in chain order, in
/// their positions among the `SaveV2`'s `tensors`.
fn lend_all<'r>(
    reader: &'r VariableReader<'_>,
    plan: &CompiledPlan,
    device: &str,
    fused: &Fused,
    slots: &[VarSlot],
    tensors: &mut [&'r HostTensor],
) -> Result<(), ExecError> {
    for (chain, &slot) in fused.chains.iter().zip(slots) {
        let value = reader.value_as_at(slot, chain.dtype).map_err(|err| {
            let members = fused.chain_members(chain);
            let read = match chain.handle {
                Handle::Input(_) => members[0],
                Handle::Member => members[1],
            };
            op_error(plan.step(read), device, err.into())
        })?;
        tensors[chain.position as usize] = value;
    }
    Ok(())
}

/// Runs the folded ops of every save chain one by one, reporting each; returns the tensors
/// to save, in chain order.
fn read_op_by_op(
    run: &RunContext<'_>,
    plan: &CompiledPlan,
    device: &str,
    fused: &Fused,
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>, ExecError> {
    let mut values = Vec::with_capacity(fused.chains.len());
    for chain in &fused.chains {
        let mut value = inputs[FIRST_TENSOR + chain.position as usize].clone();
        for &member in fused.chain_members(chain) {
            let member = plan.step(member);
            let inputs: &[HostTensor] = match member.work {
                Work::Kernel(Kernel::VarHandleOp(_)) => &[],
                _ => std::slice::from_ref(&value),
            };
            if let Some(output) = run_member(run, member, device, inputs)? {
                value = output;
            }
        }
        values.push(value);
    }
    Ok(values)
}

/// The variable of every chain as a slot of the run's store, in chain order: from the step's
/// cache when its keys are the plan's own and were resolved in this store, otherwise resolved
/// now (and cached when they can be). `None` as for [`keys`].
fn slots(
    run: &RunContext<'_>,
    plan: &CompiledPlan,
    fused: &Fused,
    inputs: StepInputs<'_>,
) -> Option<Arc<[VarSlot]>> {
    if let Some(slots) = fused
        .slots
        .as_ref()
        .and_then(|cache| cache.get(run.variables))
    {
        return Some(slots);
    }
    let keys = keys(plan, fused, inputs)?;
    let slots: Arc<[VarSlot]> = run.variables.slots(keys.iter().copied()).into();
    if let Some(cache) = &fused.slots {
        cache.set(Arc::clone(&slots));
    }
    Some(slots)
}

/// The variable of every chain, in chain order, or `None` when a handle is not a plain
/// resource handle (a TF1 reference, whose ops read the variable, or a bad input whose error
/// must come in schedule order): then the chains run op by op.
fn keys<'a>(
    plan: &'a CompiledPlan,
    fused: &Fused,
    inputs: StepInputs<'a>,
) -> Option<Vec<VarKeyRef<'a>>> {
    let mut keys = Vec::with_capacity(fused.chains.len());
    for chain in &fused.chains {
        let key = match chain.handle {
            Handle::Input(input) => {
                let handle = inputs.get(input as usize);
                if state::is_ref(handle) {
                    return None;
                }
                state::handle(std::slice::from_ref(handle), 0).ok()?
            }
            Handle::Member => member_key(plan.step(fused.chain_members(chain)[0]))?,
        };
        keys.push(key);
    }
    Some(keys)
}

/// The variable the folded `VarHandleOp` `handle_step` names, or `None` for a TF1 reference
/// (whose chain reads the variable through its ops, so it runs op by op).
fn member_key(handle_step: &Step) -> Option<VarKeyRef<'_>> {
    let Work::Kernel(Kernel::VarHandleOp(var)) = &handle_step.work else {
        unreachable!("a folded handle comes from a VarHandleOp");
    };
    (!var.dtype.is_ref()).then_some(VarKeyRef {
        container: &var.container,
        shared_name: &var.shared_name,
    })
}

/// Runs folded step `member` on `inputs` (a `VarHandleOp` on none, an `AssignVariableOp` on
/// the handle and the value, others on one tensor), reports it and returns its output (`None`
/// for an `AssignVariableOp`).
fn run_member(
    run: &RunContext<'_>,
    member: &Step,
    device: &str,
    inputs: &[HostTensor],
) -> Result<Option<HostTensor>, ExecError> {
    let Work::Kernel(kernel) = &member.work else {
        unreachable!("only kernel steps are folded");
    };
    let output = kernel
        .run_folded(&kernel_cx(run, member, device), inputs)
        .map_err(|err| op_error(member, device, err))?;
    notify(run, member, device, output.as_slice());
    Ok(output)
}

#[cfg(test)]
mod tests {
    use saveplan_ir::Verified;

    use super::*;
    use crate::trace::spec::SpecFile;
    use crate::trace::trace_flat;

    /// Whether each fused step of `plan` keeps a slot cache, in step order.
    fn caches(plan: &CompiledPlan) -> Vec<bool> {
        plan.steps()
            .iter()
            .filter_map(|step| match &step.work {
                Work::Fused(fused) => Some(fused.slots.is_some()),
                _ => None,
            })
            .collect()
    }

    /// `with` called on the verified module of the flat trace of `spec`, its save target, its
    /// restore targets and its feed.
    fn traced<R>(spec: &str, with: impl FnOnce(Verified<'_>, &[&str], &[&str], &[&str]) -> R) -> R {
        let spec = SpecFile::parse(spec).unwrap();
        let trace = trace_flat(&spec.trackables().unwrap(), &spec.options().unwrap()).unwrap();
        let module = saveplan_ir::verify_module(&trace.module).unwrap();
        let feeds = [trace.saver.filename_tensor_name.as_str()];
        let restore: Vec<&str> = trace
            .saver
            .restore_targets
            .iter()
            .map(String::as_str)
            .collect();
        with(
            module,
            &[trace.saver.save_target.as_str()],
            &restore,
            &feeds,
        )
    }

    /// The save and restore plans of `n` float variables on one CPU, fused or not.
    fn save_and_restore(n: usize, fused: bool) -> [CompiledPlan; 2] {
        let variables: Vec<String> = (0..n)
            .map(|index| {
                format!(r#"{{"checkpoint_key": "v{index}", "dtype": "float32", "shape": [2]}}"#)
            })
            .collect();
        let spec = format!(r#"{{"variables": [{}]}}"#, variables.join(","));
        traced(&spec, |module, save, restore, feeds| {
            [save, restore].map(|targets| match fused {
                true => CompiledPlan::compile(module, targets, feeds).unwrap(),
                false => CompiledPlan::compile_unfused(module, targets, feeds).unwrap(),
            })
        })
    }

    /// A run of a fused plan holds the slots of its queued steps only, however many variables
    /// the plan folds: they are numbered first, and the folded steps' slots after them. An
    /// unfused plan's run holds them all.
    #[test]
    fn a_fused_plan_runs_with_the_slots_of_its_queued_steps_only() {
        let [save_3, restore_3] = save_and_restore(3, true);
        let [save_30, restore_30] = save_and_restore(30, true);
        for (few, many) in [(&save_3, &save_30), (&restore_3, &restore_30)] {
            assert_eq!(few.n_run_slots(), many.n_run_slots());
            // At least a handle and a value per variable are folded away.
            assert!(many.n_slots() - many.n_run_slots() >= 2 * 30, "{many}");
            let queued: Vec<&Step> = many
                .queues()
                .iter()
                .flat_map(|queue| &queue.steps)
                .map(|&id| many.step(id))
                .collect();
            let run_slots = |step: &Step| {
                step.inputs
                    .iter()
                    .chain(&step.outputs)
                    .all(|slot| (slot.0 as usize) < many.n_run_slots())
            };
            assert!(queued.iter().all(|step| run_slots(step)), "{many}");
            assert!(
                many.fetches()
                    .iter()
                    .chain(many.feeds().iter().map(|feed| &feed.slot))
                    .all(|slot| (slot.0 as usize) < many.n_run_slots())
            );
            // The renumbering is one to one: every slot is still named, by one number.
            let mut named: Vec<u32> = many
                .steps()
                .iter()
                .flat_map(|step| step.inputs.iter().chain(&step.outputs))
                .chain(many.feeds().iter().map(|feed| &feed.slot))
                .map(|slot| slot.0)
                .collect();
            named.sort_unstable();
            named.dedup();
            assert_eq!(named, (0..many.n_slots() as u32).collect::<Vec<_>>());
        }
        for plan in save_and_restore(30, false) {
            assert_eq!(plan.n_run_slots(), plan.n_slots());
        }
    }

    /// A fused step whose chains all fold their `VarHandleOp` resolves its variables once per
    /// store (it keeps a slot cache); one whose handles come from outside (save and restore
    /// compiled into one plan, so each handle has two users) does not.
    #[test]
    fn only_steps_with_folded_handles_cache_their_slots() {
        let spec = r#"{"variables": [
                {"checkpoint_key": "a", "dtype": "float32", "shape": [2]},
                {"checkpoint_key": "b", "dtype": "int64", "shape": []}]}"#;
        traced(spec, |module, save, restore, feeds| {
            let compile = |targets: &[&str]| CompiledPlan::compile(module, targets, feeds).unwrap();
            assert_eq!(caches(&compile(save)), [true]);
            assert_eq!(caches(&compile(restore)), [true]);
            let both: Vec<&str> = save.iter().chain(restore).copied().collect();
            assert_eq!(caches(&compile(&both)), [false, false]);
        });
    }
}
