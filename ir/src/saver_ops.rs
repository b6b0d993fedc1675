//! Reading the checkpoint ops of a plan: the roles of the data inputs of `SaveV2`,
//! `RestoreV2` and `MergeV2Checkpoints` ([`save_v2`], [`merge_v2`]), their `dtypes`, the
//! string constants that name checkpoint keys and slice specs ([`const_strings`]), and the
//! assignments a `RestoreV2` feeds ([`restore_assignments`], [`restore_assigns`]).
//!
//! Binding values to variables, finding the entry points of a graph without a `SaverDef`,
//! `saveplan check` and the kernels all read these ops; they name inputs through this module,
//! not by number.

use std::collections::BTreeMap;

use crate::attr::AttrValue;
use crate::dtype::DType;
use crate::graph::{Edge, Graph, OpId, OpNode};
use crate::op::Op;
use crate::signature::flat_output;

/// The data inputs of `SaveV2` (and of `RestoreV2`, which has the first three).
pub mod save_v2 {
    /// `prefix`: the scalar string path prefix.
    pub const PREFIX: u32 = 0;
    /// `tensor_names`: the checkpoint keys, one per tensor.
    pub const TENSOR_NAMES: u32 = 1;
    /// `shape_and_slices`: the slice specs, one per tensor (`""` for a whole tensor).
    pub const SHAPE_AND_SLICES: u32 = 2;
    /// `tensors`: the saved tensors start here, in `tensor_names` order (`SaveV2` only).
    pub const FIRST_TENSOR: u32 = 3;
}

/// The data inputs of `MergeV2Checkpoints`.
pub mod merge_v2 {
    /// `checkpoint_prefixes`: the shard prefixes to merge.
    pub const CHECKPOINT_PREFIXES: u32 = 0;
    /// `destination_prefix`: the final prefix.
    pub const DESTINATION_PREFIX: u32 = 1;
}

/// The `dtypes` attribute of a `SaveV2` or `RestoreV2`.
pub fn dtypes(node: &OpNode) -> Option<&[DType]> {
    match node.attrs.get("dtypes") {
        Some(AttrValue::List(list)) => Some(&list.types),
        _ => None,
    }
}

/// The elements of a string `Const` op as UTF-8 strings, with TensorFlow's fill rule (a
/// constant with fewer stored values than elements repeats its last one). `None` when `node`
/// is not a string constant, an element is not UTF-8, or it has more than `limit` elements
/// (a checkpoint op never names more keys than it has tensors, so callers bound the work).
pub fn const_strings(node: &OpNode, limit: usize) -> Option<Vec<String>> {
    let Some(AttrValue::Tensor(tensor)) = node.attrs.get("value") else {
        return None;
    };
    if node.op != Op::Const {
        return None;
    }
    let values = tensor.strings()?;
    let n_elements = match &tensor.shape {
        Some(shape) => usize::try_from(shape.num_elements()?).ok()?,
        None => values.len(),
    };
    if n_elements > limit || values.len() > n_elements {
        return None;
    }
    let mut out = values
        .iter()
        .map(|bytes| String::from_utf8(bytes.clone()).ok())
        .collect::<Option<Vec<String>>>()?;
    let last = out.last().cloned().unwrap_or_default();
    out.resize(n_elements, last);
    Some(out)
}

/// The `AssignVariableOp`s of `graph` that assign an output of one of its `RestoreV2`s, in
/// creation order: the ops a flat graph runs to restore.
pub fn restore_assigns(graph: &Graph) -> Vec<OpId> {
    let mut assigns: Vec<OpId> = graph
        .ops()
        .into_iter()
        .filter(|&id| graph.op(id).op == Op::RestoreV2)
        .flat_map(|id| restore_assignments(graph, id).into_values().flatten())
        .collect();
    assigns.sort_by_key(|&id| (graph.seq(id), id));
    assigns.dedup();
    assigns
}

/// The names of [`restore_assigns`]: a flat graph's restore targets.
pub fn restore_targets(graph: &Graph) -> Vec<String> {
    restore_assigns(graph)
        .into_iter()
        .map(|id| graph.op(id).name.clone())
        .collect()
}

/// The `AssignVariableOp`s (or TF1 `Assign`s) assigning each output of the `RestoreV2` `restore` (through
/// `Identity`/`IdentityN` chains), by output index, each list in creation order.
pub fn restore_assignments(graph: &Graph, restore: OpId) -> BTreeMap<u32, Vec<OpId>> {
    let mut found: BTreeMap<u32, Vec<OpId>> = BTreeMap::new();
    let node = graph.op(restore);
    for (user, edge) in graph.users(restore) {
        let Edge::Data {
            output: port,
            input,
        } = edge
        else {
            continue;
        };
        let Ok(output) = flat_output(node, &port) else {
            continue;
        };
        follow_to_assignments(graph, user, input, &mut |assign| {
            found.entry(output).or_default().push(assign);
        });
    }
    for assigns in found.values_mut() {
        assigns.sort_by_key(|&assign| graph.seq(assign));
    }
    found
}

/// Calls `found` for every `AssignVariableOp` or `Assign` whose value is input `input` of `user`, or
/// that it reaches through `Identity`/`IdentityN` ops.
fn follow_to_assignments(graph: &Graph, user: OpId, input: u32, found: &mut dyn FnMut(OpId)) {
    let mut work = vec![(user, input)];
    while let Some((op, input)) = work.pop() {
        let node = graph.op(op);
        let forwarded = match node.op {
            Op::Identity => 0,
            Op::IdentityN => input,
            Op::AssignVariableOp | Op::Assign if input == 1 => {
                found(op);
                continue;
            }
            _ => continue,
        };
        for (next, edge) in graph.users(op) {
            if let Edge::Data {
                output: port,
                input,
            } = edge
                && flat_output(node, &port).ok() == Some(forwarded)
            {
                work.push((next, input));
            }
        }
    }
}
