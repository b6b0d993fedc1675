//! Reading the checkpoint ops of a plan: the roles of the data inputs of `SaveV2`,
//! `RestoreV2` and `MergeV2Checkpoints` ([`save_v2`], [`merge_v2`]), their `dtypes`, and the
//! string constants that name checkpoint keys and slice specs ([`const_strings`]).
//!
//! Binding values to variables, finding the entry points of a graph without a `SaverDef`,
//! `saveplan check` and the kernels all read these ops; they name inputs through this module,
//! not by number.

use crate::attr::AttrValue;
use crate::dtype::DType;
use crate::graph::OpNode;

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
    if node.op != crate::Op::Const {
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
