//! [`PlanOps`]: the side table of a graph's save/restore ops and the checkpoint keys and
//! slices their constant inputs name.

use std::collections::BTreeMap;

use saveplan_ir::saver_ops::{self, merge_v2, save_v2};
use saveplan_ir::{Graph, Op, OpId};

use super::Problem;

/// One (checkpoint key, slice spec) entry of a `SaveV2` or `RestoreV2`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySlice {
    /// The checkpoint key (`tensor_names` element).
    pub key: String,
    /// The slice spec (`shape_and_slices` element), `""` for a whole tensor.
    pub slice_spec: String,
}

/// A `SaveV2` or `RestoreV2` with what it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SaveOp {
    /// The op that produces the prefix (input 0).
    pub prefix: Option<OpId>,
    /// The entries, in input order.
    pub entries: Vec<KeySlice>,
}

/// The plan ops of one graph, keyed by op and sorted by creation order within each table.
#[derive(Clone, Debug, Default)]
pub struct PlanOps {
    /// Every `SaveV2` whose names resolved.
    pub saves: BTreeMap<OpId, SaveOp>,
    /// Every `RestoreV2` whose names resolved.
    pub restores: BTreeMap<OpId, SaveOp>,
    /// Every `MergeV2Checkpoints`, with the ops feeding its `Pack` of shard prefixes.
    pub merges: BTreeMap<OpId, Vec<OpId>>,
    /// Every `ShardedFilename`.
    pub shards: Vec<OpId>,
    /// All of the above ops in creation order, for deterministic reports.
    pub order: Vec<OpId>,
}

impl PlanOps {
    /// Collects the plan ops of `graph`; ops whose names do not resolve are reported.
    pub fn collect(graph: &Graph) -> (PlanOps, Vec<Problem>) {
        let mut ids = graph.ops();
        ids.sort_by_key(|&id| graph.seq(id));
        let mut plan = PlanOps::default();
        let mut problems = Vec::new();
        for id in ids {
            match graph.op(id).op {
                Op::SaveV2 | Op::RestoreV2 => match save_op(graph, id) {
                    Some(save) if graph.op(id).op == Op::SaveV2 => {
                        plan.saves.insert(id, save);
                    }
                    Some(restore) => {
                        plan.restores.insert(id, restore);
                    }
                    None => problems.push(Problem::UnresolvedNames {
                        op: id,
                        name: graph.op(id).name.clone(),
                    }),
                },
                Op::MergeV2Checkpoints => {
                    plan.merges.insert(id, merged_prefixes(graph, id));
                }
                Op::ShardedFilename => plan.shards.push(id),
                _ => continue,
            }
            plan.order.push(id);
        }
        (plan, problems)
    }

    /// The saves in creation order.
    pub fn saves_in_order(&self) -> impl Iterator<Item = (OpId, &SaveOp)> + '_ {
        self.order
            .iter()
            .filter_map(|id| self.saves.get(id).map(|save| (*id, save)))
    }

    /// The restores in creation order.
    pub fn restores_in_order(&self) -> impl Iterator<Item = (OpId, &SaveOp)> + '_ {
        self.order
            .iter()
            .filter_map(|id| self.restores.get(id).map(|restore| (*id, restore)))
    }
}

/// The prefix and the (key, slice spec) entries of a `SaveV2` or `RestoreV2`, when its names
/// are string constants, one per dtype.
fn save_op(graph: &Graph, id: OpId) -> Option<SaveOp> {
    let n_tensors = saver_ops::dtypes(graph.op(id))?.len();
    let strings = |slot| {
        let src = graph.input_at(id, slot)?.src;
        saver_ops::const_strings(graph.op(src), n_tensors)
    };
    let names = strings(save_v2::TENSOR_NAMES)?;
    let slices = strings(save_v2::SHAPE_AND_SLICES)?;
    if names.len() != slices.len() {
        return None;
    }
    Some(SaveOp {
        prefix: input(graph, id, save_v2::PREFIX),
        entries: names
            .into_iter()
            .zip(slices)
            .map(|(key, slice_spec)| KeySlice { key, slice_spec })
            .collect(),
    })
}

/// The data inputs of the `Pack` (through `Identity` ops) feeding a merge's first input.
fn merged_prefixes(graph: &Graph, merge: OpId) -> Vec<OpId> {
    let mut src = input(graph, merge, merge_v2::CHECKPOINT_PREFIXES);
    while let Some(id) = src {
        match graph.op(id).op {
            Op::Identity => src = input(graph, id, 0),
            Op::Pack => {
                return graph
                    .inputs(id)
                    .into_iter()
                    .map(|(_, input)| input.src)
                    .collect();
            }
            _ => return vec![id],
        }
    }
    Vec::new()
}

/// The op feeding data input `slot` of `op`.
fn input(graph: &Graph, op: OpId, slot: u32) -> Option<OpId> {
    graph.input_at(op, slot).map(|input| input.src)
}
