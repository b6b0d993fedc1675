//! Read-only analyses of save/restore plans: side tables over a [`Module`] and the
//! [`Finding`]s of `saveplan check`.
//!
//! A plan is checked before it runs, with no IO. [`check_module`] looks at the top-level graph
//! and every function body (the function form puts the plan inside library functions) and
//! reports every problem it finds, in a deterministic order:
//!
//! * [`verify`](saveplan_ir::verify::verify_module) errors of the IR itself;
//! * per graph ([`keys`]): a checkpoint key written twice (the same slice twice, or whole and
//!   sliced), slices of one key that overlap, disagree on the full shape or leave part of it
//!   unwritten, slice specs that do not parse, `SaveV2`/`RestoreV2` ops whose names are not
//!   constants;
//! * per graph ([`order`]): a shard prefix (`ShardedFilename`) that is not an input of the
//!   `Pack` feeding a `MergeV2Checkpoints`, and a merge that is not reachable through data and
//!   control edges from every `SaveV2` writing one of its shards;
//! * per module ([`keys`]): a `RestoreV2` of a key that no `SaveV2` of the module writes
//!   (skipped when the module saves nothing, such as a restore function on its own);
//! * per module ([`devices`]): an op whose device lies outside the plan's tasks, the tasks being
//!   the `CPU:0` of every `SaveV2` and `ShardedFilename` device (`ShardedFilename` stays on
//!   the task when an io device moves `SaveV2` away), or whose device does not parse;
//! * for a `MetaGraphDef`'s saver ([`check_saver_names`]): `SaverDef` names that name no op.
//!
//! [`PlanOps`] is the side table every check starts from: the plan's ops per graph with the
//! keys and slices their constant inputs name.

pub mod devices;
pub mod keys;
pub mod order;
pub mod plan_ops;

use std::fmt;

use saveplan_ir::verify::{VerifyError, verify_module};
use saveplan_ir::{Graph, Module, OpId, SaverDef, TensorName};

pub use plan_ops::{KeySlice, PlanOps, SaveOp};

/// Where a finding is: the top-level graph or a library function's body.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// The module's top-level graph.
    Graph,
    /// The body of the named function.
    Function(String),
}

/// One problem of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The graph it is in.
    pub scope: Scope,
    /// What is wrong.
    pub problem: Problem,
}

/// What is wrong with a plan. Variants about an op carry its [`OpId`] (in the graph of the
/// finding's scope) and its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The IR does not verify.
    Invalid(VerifyError),
    /// A `SaveV2` or `RestoreV2` whose names or slices input is not a string constant of the
    /// right length.
    UnresolvedNames {
        /// The op.
        op: OpId,
        /// Its name.
        name: String,
    },
    /// A slice spec that does not parse.
    BadSliceSpec {
        /// The op naming it.
        name: String,
        /// The checkpoint key.
        key: String,
        /// The slice spec.
        spec: String,
        /// What is wrong.
        reason: saveplan_ir::slice::SliceError,
    },
    /// The same key (and slice) is written twice, or written whole and as slices.
    DuplicateKey {
        /// The key.
        key: String,
        /// The slice spec of the second write.
        slice_spec: String,
        /// The op of the first write.
        first: String,
        /// The op of the second write.
        second: String,
    },
    /// Two slices of a key disagree on the full shape.
    FullShapeMismatch {
        /// The key.
        key: String,
        /// One slice spec.
        a: String,
        /// The other.
        b: String,
    },
    /// Two slices of a key overlap.
    OverlappingSlices {
        /// The key.
        key: String,
        /// One slice spec.
        a: String,
        /// The other.
        b: String,
    },
    /// The slices of a key leave elements of the full shape unwritten.
    SliceGap {
        /// The key.
        key: String,
        /// The full shape.
        full_shape: Vec<i64>,
        /// Elements written.
        covered: u128,
        /// Elements of the full shape.
        total: u128,
    },
    /// A shard prefix is not merged.
    UnmergedShard {
        /// The `ShardedFilename`.
        op: OpId,
        /// Its name.
        name: String,
    },
    /// A merge does not run after a save of one of its shards.
    UnorderedMerge {
        /// The `MergeV2Checkpoints`.
        merge: String,
        /// The `SaveV2` it is not ordered after.
        save: String,
    },
    /// A restore of a key no save writes.
    UnknownRestoreKey {
        /// The `RestoreV2`.
        name: String,
        /// The key.
        key: String,
    },
    /// An op placed outside the plan's tasks.
    ForeignDevice {
        /// The op.
        name: String,
        /// Its device string.
        device: String,
    },
    /// A `SaverDef` names a tensor or op the graph does not have.
    MissingSaverEntry {
        /// Which `SaverDef` field.
        field: &'static str,
        /// The name it holds.
        name: String,
    },
    /// An op whose device string does not parse.
    BadDevice {
        /// The op.
        name: String,
        /// Why.
        reason: String,
    },
}

/// Runs every check on `module` and returns the findings: verifier errors first, then per graph
/// (top-level, then functions in library order) the key and order checks, then the
/// module-wide restore and device checks.
pub fn check_module(module: &Module) -> Vec<Finding> {
    let mut findings = Vec::new();
    if let Err(errors) = verify_module(module) {
        findings.extend(errors.0.into_iter().map(|error| Finding {
            scope: Scope::Graph,
            problem: Problem::Invalid(error),
        }));
    }
    let graphs = graphs(module);
    let mut plans = Vec::with_capacity(graphs.len());
    for (scope, graph) in &graphs {
        let (plan, problems) = PlanOps::collect(graph);
        let mut problems = problems;
        problems.extend(keys::check_writes(graph, &plan));
        problems.extend(order::check_merges(graph, &plan));
        findings.extend(problems.into_iter().map(|problem| Finding {
            scope: scope.clone(),
            problem,
        }));
        plans.push(plan);
    }
    let scoped: Vec<(&Scope, &Graph, &PlanOps)> = graphs
        .iter()
        .zip(&plans)
        .map(|((scope, graph), plan)| (scope, *graph, plan))
        .collect();
    findings.extend(keys::check_restores(&scoped));
    findings.extend(devices::check_devices(&scoped));
    findings
}

/// Reports `SaverDef` entries that name no op of the top-level graph (TensorFlow would fail
/// only when the saver runs).
pub fn check_saver_names(module: &Module, saver_def: &SaverDef) -> Vec<Finding> {
    let entries = [
        (
            "filename_tensor_name",
            saver_def.filename_tensor_name.as_str(),
        ),
        ("save_tensor_name", saver_def.save_tensor_name.as_str()),
        ("restore_op_name", saver_def.restore_op_name.as_str()),
    ];
    entries
        .into_iter()
        .filter(|(_, name)| {
            let op = TensorName::parse(name).map_or(*name, |name| name.op);
            module.graph.find(op).is_none()
        })
        .map(|(field, name)| Finding {
            scope: Scope::Graph,
            problem: Problem::MissingSaverEntry {
                field,
                name: name.to_owned(),
            },
        })
        .collect()
}

/// The top-level graph and every function body, with their scopes.
fn graphs(module: &Module) -> Vec<(Scope, &Graph)> {
    std::iter::once((Scope::Graph, &module.graph))
        .chain(module.library.functions.iter().map(|function| {
            (
                Scope::Function(function.signature.name.clone()),
                &function.body,
            )
        }))
        .collect()
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Graph => f.write_str("graph"),
            Scope::Function(name) => write!(f, "function `{name}`"),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.scope, self.problem)
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Invalid(error) => write!(f, "invalid IR: {error}"),
            Problem::UnresolvedNames { name, .. } => write!(
                f,
                "op `{name}`: tensor names and slices are not string constants of equal length"
            ),
            Problem::BadSliceSpec {
                name,
                key,
                spec,
                reason,
            } => write!(
                f,
                "op `{name}`: checkpoint key `{key}` has invalid slice spec `{spec}`: {reason}"
            ),
            Problem::DuplicateKey {
                key,
                slice_spec,
                first,
                second,
            } if first == second => write!(
                f,
                "checkpoint key `{key}` (slice {slice_spec:?}) is written twice by `{first}`"
            ),
            Problem::DuplicateKey {
                key,
                slice_spec,
                first,
                second,
            } => write!(
                f,
                "checkpoint key `{key}` (slice {slice_spec:?}) is written twice: by `{first}` and by `{second}`"
            ),
            Problem::FullShapeMismatch { key, a, b } => write!(
                f,
                "checkpoint key `{key}`: slices `{a}` and `{b}` disagree on the full shape"
            ),
            Problem::OverlappingSlices { key, a, b } => {
                write!(f, "checkpoint key `{key}`: slices `{a}` and `{b}` overlap")
            }
            Problem::SliceGap {
                key,
                full_shape,
                covered,
                total,
            } => write!(
                f,
                "checkpoint key `{key}`: slices cover {covered} of the {total} elements of its full shape {full_shape:?}"
            ),
            Problem::UnmergedShard { name, .. } => write!(
                f,
                "shard prefix `{name}` is never merged (not an input of the Pack feeding a MergeV2Checkpoints)"
            ),
            Problem::UnorderedMerge { merge, save } => write!(
                f,
                "`{merge}` is not ordered after `{save}` (no data or control path from the save to the merge)"
            ),
            Problem::UnknownRestoreKey { name, key } => write!(
                f,
                "op `{name}` restores checkpoint key `{key}`, which no SaveV2 writes"
            ),
            Problem::ForeignDevice { name, device } => write!(
                f,
                "op `{name}` is on device `{device}`, outside the plan's tasks"
            ),
            Problem::MissingSaverEntry { field, name } => {
                write!(f, "saver_def.{field} `{name}` names no op of the graph")
            }
            Problem::BadDevice { name, reason } => write!(f, "op `{name}`: {reason}"),
        }
    }
}
