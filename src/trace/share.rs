//! One task's share of a save plan (and its restore plan): what a process that runs one task
//! of a cluster needs to trace, when the plan's shape lets it leave the other tasks'
//! variables out.
//!
//! Every process of a cluster run builds its own partition of the same plan
//! ([`crate::partition`]), and the edges between partitions are named after the ops at their
//! ends and numbered in the order they are cut, so every process must see the same saver ops
//! under the same names. In a plain save plan (every variable whole, read by its own
//! `ReadVariableOp` on its own task, one shard per task, no I/O device, no registered saver)
//! no edge from a variable's ops leaves its task: a task's partition holds its own variables
//! and the saver's ops, and the saver's ops depend on the other tasks only through which
//! groups the tracer makes (one shard per task as its devices spell it), in which order. So
//! the share keeps the task's own tensors and the first tensor of every other group (which
//! keeps the groups, in order of first appearance, and so the shards, their numbers and
//! `num_shards`), in input order. The restore plan's only edges between tasks carry the
//! prefix to each task's `RestoreV2`, one per group, so the same share keeps them; its
//! `Identity` and `AssignVariableOp` ops are numbered from one counter, so a task's own are
//! named differently in its share, which no other task sees (`tests/it/trace_share.rs` checks
//! that the edges between tasks are the whole plan's). Each tensor left out comes with its
//! variable as the whole trace names it and its task ([`LeftOut`]), so a process restoring its
//! share still knows every tensor the whole restore reads and who reads it.
//!
//! Names must not move either: TensorFlow's names are unique case-insensitively, by `/`
//! scope, with `_<n>` suffixes for later uses, so a variable left out could have taken a name
//! that a kept op would otherwise get. The share is refused (the caller traces the whole
//! plan) unless every variable's name is unique, none is the scope of another, and, once the
//! share is traced, no saver op's name meets a variable's first component (suffixes
//! ignored). `tests/it/trace_share.rs` checks, for every plan of the partition fixtures and
//! more, that the partition built from a share is the one built from the whole plan.

use std::borrow::Cow;
use std::collections::BTreeMap;

use rustc_hash::FxHashSet;

use super::flat::{VariableOps, trace_flat_as, trace_flat_save_as};
use super::plan::{InitialValueCheck, Inputs, handle_base_name};
use super::{
    FlatTrace, ReadKind, ShardByTask, ShardingPolicy, TraceError, TraceOptions, TracedVariable,
    Trackable,
};

/// The plans of `trackables` as one task of its cluster needs them, and the tensors they
/// leave out (every other task's but one per group).
#[derive(Debug)]
pub struct TaskShare {
    /// The share's trace.
    pub trace: FlatTrace,
    /// The tensors left out, by checkpoint key.
    pub left_out: BTreeMap<String, LeftOut>,
}

/// A tensor a [`TaskShare`] leaves out: a whole variable of another task.
#[derive(Clone, Debug, PartialEq)]
pub struct LeftOut {
    /// Its variable, as the whole trace makes it (the same `shared_name`, dtype and shape).
    pub variable: TracedVariable,
    /// The task that saves and restores it, numbered as [`trace_flat_save_share`]'s `task`.
    pub task: usize,
}

/// The save plan of `trackables` as task `task` of its cluster needs it (the index of the
/// task in `(job, replica, task)` order among the tasks of the variables): see the module
/// docs. `None` when the plan's shape does not allow leaving anything out, or there is
/// nothing to leave out: the caller traces the whole plan then. The input is checked whole,
/// as the whole trace checks it (keys, devices, shapes, initial values), whatever is left out.
pub fn trace_flat_save_share(
    trackables: &[Trackable],
    options: &TraceOptions,
    task: usize,
) -> Result<Option<TaskShare>, TraceError> {
    trace_share(trackables, options, task, trace_flat_save_as)
}

/// [`trace_flat_save_share`] of the save and the restore plan ([`trace_flat_as`]): the
/// restore plan reads the task's own tensors and the first of every other group. The names
/// of the ops restoring the task's own tensors are not the whole plan's (module docs).
pub fn trace_flat_share(
    trackables: &[Trackable],
    options: &TraceOptions,
    task: usize,
) -> Result<Option<TaskShare>, TraceError> {
    trace_share(trackables, options, task, trace_flat_as)
}

/// [`trace_flat_save_share`] with the share traced by `trace`.
fn trace_share(
    trackables: &[Trackable],
    options: &TraceOptions,
    task: usize,
    trace: fn(&[Trackable], &TraceOptions, VariableOps) -> Result<FlatTrace, TraceError>,
) -> Result<Option<TaskShare>, TraceError> {
    let inputs = Inputs::collect(trackables, options)?;
    let Some(owner) = task_share(trackables, &inputs, options, task) else {
        return Ok(None);
    };
    let n_left_out = owner.iter().filter(|owner| owner.is_some()).count();
    let mut share = Vec::with_capacity(trackables.len() - n_left_out);
    let mut left_out = Vec::with_capacity(n_left_out);
    let mut initial = InitialValueCheck::default();
    for (trackable, owner) in trackables.iter().zip(owner) {
        let tensor = &trackable.tensors[0];
        // Every initial value checked in input order, kept or not, so that the first bad one
        // is the one the whole trace reports.
        initial.check(tensor)?;
        let Some(task) = owner else {
            share.push(trackable.clone());
            continue;
        };
        let variable = TracedVariable {
            shared_name: handle_base_name(tensor).to_owned(),
            dtype: tensor.dtype,
            shape: tensor.shape.clone(),
        };
        left_out.push((tensor.checkpoint_key.clone(), LeftOut { variable, task }));
    }
    let trace = trace(&share, options, VariableOps::Handles)?;
    if !saver_names_clear(trackables, &trace) {
        return Ok(None);
    }
    // Keys come sorted more often than not: collected, not inserted one by one.
    let left_out = left_out.into_iter().collect();
    Ok(Some(TaskShare { trace, left_out }))
}

/// Per trackable, `None` when task `task` keeps it, else the task (numbered as `task` is)
/// that does; `None` as a whole when nothing can be left out (see [`trace_flat_save_share`]).
fn task_share(
    trackables: &[Trackable],
    inputs: &Inputs<'_>,
    options: &TraceOptions,
    task: usize,
) -> Option<Vec<Option<usize>>> {
    let plain_options = options.io_device.is_none()
        && options.registered_savers.is_empty()
        && options.sharding.cache_key() == ShardByTask.cache_key();
    if !plain_options {
        return None;
    }
    // Each trackable one whole variable read by its own read (so tensor `i` of the input is
    // trackable `i`), its name clear of every other's.
    let mut lowered: Vec<Cow<'_, str>> = Vec::with_capacity(trackables.len());
    for trackable in trackables {
        let [tensor] = &trackable.tensors[..] else {
            return None;
        };
        if !tensor.slice_spec.trim().is_empty() || tensor.variable.read != ReadKind::Graph {
            return None;
        }
        lowered.push(lower(variable_name(trackable)));
    }
    if !names_clear(&lowered) {
        return None;
    }
    // Each of the tracer's groups on a device naming its job, and so on a task of the
    // cluster (its replica and task 0 when missing, as the partitioner places it).
    let mut tasks: Vec<(&str, u32, u32)> = Vec::new();
    let mut group_task: Vec<usize> = Vec::new();
    for (spec, _) in inputs.groups() {
        let of = (
            spec.job.as_deref()?,
            spec.replica.unwrap_or(0),
            spec.task.unwrap_or(0),
        );
        group_task.push(match tasks.iter().position(|&seen| seen == of) {
            Some(index) => index,
            None => {
                tasks.push(of);
                tasks.len() - 1
            }
        });
    }
    if tasks.len() < 2 {
        return None;
    }
    if task >= tasks.len() {
        return None;
    }
    // Each task's number: its place in `(job, replica, task)` order (the tasks are distinct).
    let mut sorted = tasks.clone();
    sorted.sort_unstable();
    let number: Vec<usize> = (tasks.iter())
        .map(|of| sorted.binary_search(of).expect("a task of the sorted copy"))
        .collect();
    // The task's own tensors, and the first of every other group.
    let mut owner = vec![None; trackables.len()];
    for ((_, tensors), &of) in inputs.groups().zip(&group_task) {
        let kept = number[of] == task;
        for (nth, &index) in tensors.iter().enumerate() {
            owner[index] = (!kept && nth > 0).then_some(number[of]);
        }
    }
    owner.iter().any(Option::is_some).then_some(owner)
}

/// Whether the (lower-cased) `names` are distinct and none is the scope of another (`a` of
/// `a/b`, `a/b` of `a/b/c`): sorted (at once when they come sorted, as names made of
/// checkpoint keys do), then checked in one pass, without a set of them, which would cost
/// every process of a cluster a cache miss per name.
///
/// A name between `p` and `s` in sorted order, when `p` is a prefix of `s`, has `p` as a
/// prefix too. So the names seen that are prefixes of the current one are those of a stack
/// of the names seen, popped of each that is not a prefix of the next; each is a prefix of
/// the next one up, so their lengths increase. The same name twice is the top of the stack
/// when it comes again, and a scope of the name is the one whose length is that of the name
/// up to one of its `/` (a binary search per `/`, so that no input, however nested, costs
/// more than that).
fn names_clear(names: &[Cow<'_, str>]) -> bool {
    let mut sorted: Vec<&str> = names.iter().map(AsRef::as_ref).collect();
    sorted.sort_unstable();
    let mut prefixes: Vec<&str> = Vec::new();
    for name in sorted {
        while prefixes.last().is_some_and(|top| !name.starts_with(top)) {
            prefixes.pop();
        }
        if prefixes.last() == Some(&name) {
            return false;
        }
        let mut slashes =
            (name.bytes().enumerate()).filter_map(|(at, byte)| (byte == b'/').then_some(at));
        if slashes.any(|at| {
            prefixes
                .binary_search_by_key(&at, |prefix| prefix.len())
                .is_ok()
        }) {
            return false;
        }
        prefixes.push(name);
    }
    true
}

/// The name of a one-tensor trackable's variable: its `VarHandleOp`'s before uniquing.
fn variable_name(trackable: &Trackable) -> &str {
    handle_base_name(&trackable.tensors[0])
}

/// `name` lower-cased as the tracer's unique names compare it (`names.rs`: ASCII lower-cased,
/// anything else through `to_lowercase`); borrowed when that changes nothing.
fn lower(name: &str) -> Cow<'_, str> {
    let changes = match name.is_ascii() {
        true => name.bytes().any(|byte| byte.is_ascii_uppercase()),
        false => name.to_lowercase() != name,
    };
    match changes {
        true if name.is_ascii() => Cow::Owned(name.to_ascii_lowercase()),
        true => Cow::Owned(name.to_lowercase()),
        false => Cow::Borrowed(name),
    }
}

/// The first component of `name`, without a `_<n>` suffix, lower-cased: what TensorFlow's
/// unique names compare when the op is named at the top level.
fn base(name: &str) -> Cow<'_, str> {
    let component = name.split('/').next().unwrap_or(name);
    let stem = match component.rsplit_once('_') {
        Some((stem, digits))
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) =>
        {
            stem
        }
        _ => component,
    };
    lower(stem)
}

/// Whether no op of `trace` other than the variables' own, and no name a variable takes
/// without building it (`zeros`), has a base ([`base`]) that a variable's name in
/// `trackables` has: then leaving variables out renamed nothing kept, the saver's ops being
/// named after the variables.
fn saver_names_clear(trackables: &[Trackable], trace: &FlatTrace) -> bool {
    let graph = &trace.module.graph;
    let mut variable_op = vec![false; graph.id_bound()];
    for ops in &trace.variables {
        for id in [Some(ops.handle), Some(ops.read), ops.assign]
            .into_iter()
            .flatten()
        {
            variable_op[id.index()] = true;
        }
    }
    let mut saver_bases: FxHashSet<Cow<'_, str>> = (graph.ops().into_iter())
        .filter(|id| !variable_op[id.index()])
        .map(|id| base(&graph.op(id).name))
        .collect();
    // Every variable also takes a `zeros` name for its initializer, built or not, so the
    // variables left out took some that kept ones would otherwise get.
    saver_bases.insert(Cow::Borrowed("zeros"));
    (trackables.iter()).all(|trackable| !saver_bases.contains(&base(variable_name(trackable))))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn names(names: &[&str]) -> Vec<Cow<'static, str>> {
        names
            .iter()
            .map(|name| Cow::Owned((*name).to_owned()))
            .collect()
    }

    /// What [`names_clear`] answers, by its definition: every pair of names compared.
    fn clear_by_pairs(names: &[Cow<'_, str>]) -> bool {
        names.iter().enumerate().all(|(i, a)| {
            names.iter().enumerate().all(|(j, b)| {
                let scope =
                    b.len() > a.len() && b.starts_with(&**a) && b.as_bytes()[a.len()] == b'/';
                i == j || (a != b && !scope)
            })
        })
    }

    /// The one-pass check finds the same names and the scopes the definition finds, `/`
    /// after a prefix only, through names in between that share the prefix, in any order.
    #[test]
    fn names_are_checked_as_their_pairs_say() {
        let cases: [(&[&str], bool); 11] = [
            (&["a", "a/b"], false),
            (&["a/b", "a/b-x", "a/b/c"], false),
            (&["a/b", "a/bc", "a/bc/d"], false),
            (&["a", "a-b", "a.c/d", "a0/a"], true),
            (&["a-b", "a/b"], true),
            (&["a/b/c", "a/b/d", "b"], true),
            (&["x", "x/", "y"], false),
            (&["/", "//"], false),
            (&["b", "a", "b"], false),
            (&["a/b/c", "b", "a/b"], false),
            (&["b", "a/c", "a-c", "a"], false),
        ];
        for (given, clear) in cases {
            let given = names(given);
            assert_eq!(names_clear(&given), clear, "{given:?}");
            assert_eq!(clear_by_pairs(&given), clear, "{given:?}");
        }
        // A chain of names each a prefix of the next (the deepest stack the pass can hold):
        // clear, and a scoped name after it is still found.
        let chain: Vec<Cow<'_, str>> = (1..=3_000).map(|n| Cow::Owned("a".repeat(n))).collect();
        assert!(names_clear(&chain));
        let mut scoped = chain.clone();
        scoped.push(Cow::Owned(format!("{}/b", "a".repeat(3_000))));
        assert!(!names_clear(&scoped));
    }

    proptest! {
        /// For any list of names over an alphabet of `/` and a few characters before and
        /// after it, repeats and any order included, the check answers what the pairs say.
        #[test]
        fn the_check_answers_what_the_pairs_say(
            given in proptest::collection::vec("[ab/.0-]{1,5}", 0..40)
        ) {
            let given: Vec<Cow<'_, str>> = given.into_iter().map(Cow::Owned).collect();
            prop_assert_eq!(names_clear(&given), clear_by_pairs(&given), "{:?}", given);
        }
    }
}
