//! The names a session runs ([`SaverNames`]): from a meta graph's `SaverDef`
//! ([`meta_graph_targets`]) or, without one, inferred from a flat graph ([`infer_targets`]).

use saveplan_ir::{DType, Module, Op, SaverNames, saver_ops};

use super::error::{MissingSavePlan, SessionError};
use crate::export::MetaGraph;

/// The names a `SaverDef`-carrying meta graph runs.
pub fn meta_graph_targets(meta: &MetaGraph) -> Result<SaverNames, SessionError> {
    let saver = meta.saver_def.as_ref().ok_or(SessionError::NoSaverDef)?;
    Ok(saver.names())
}

/// Finds the targets of a flat graph without a `SaverDef` (TensorFlow's `flat_graph`, or
/// ours): the save target is the one top-level `MergeV2Checkpoints` (or, without one, the
/// one `SaveV2`), the prefix is the one string `Placeholder` it depends on, and the restore
/// targets are the `AssignVariableOp`s (TF1: `Assign`s) fed by a top-level `RestoreV2`.
pub fn infer_targets(module: &Module) -> Result<SaverNames, SessionError> {
    let graph = &module.graph;
    let find_all = |op: Op| -> Vec<_> {
        graph
            .ops()
            .into_iter()
            .filter(|&id| graph.op(id).op == op)
            .collect()
    };
    let merges = find_all(Op::MergeV2Checkpoints);
    let candidates = if merges.is_empty() {
        find_all(Op::SaveV2)
    } else {
        merges
    };
    let save = match candidates.as_slice() {
        [one] => *one,
        [] => {
            return Err(SessionError::NoSavePlan(MissingSavePlan::NoSaveOp));
        }
        _ => {
            return Err(SessionError::NoSavePlan(MissingSavePlan::SeveralSaves));
        }
    };
    let string_placeholder = |id| {
        let node = graph.op(id);
        node.op == Op::Placeholder
            && node.attrs.get("dtype") == Some(&saveplan_ir::AttrValue::Type(DType::String))
    };
    let mut placeholders: Vec<String> = graph
        .ancestors([save])
        .into_iter()
        .filter(|&id| string_placeholder(id))
        .map(|id| graph.op(id).name.clone())
        .collect();
    placeholders.sort();
    let [filename] = placeholders.as_slice() else {
        return Err(SessionError::NoSavePlan(MissingSavePlan::Placeholders {
            count: placeholders.len(),
        }));
    };
    Ok(SaverNames {
        filename_tensor_name: format!("{filename}:0"),
        save_target: graph.op(save).name.clone(),
        restore_targets: saver_ops::restore_targets(graph),
    })
}
