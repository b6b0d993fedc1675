//! The `MetaGraphDef` of a compiled plan, assembled from IR-level parts: the module, its
//! [`SaverDef`] and its variables ([`VariableEntry`]).
//!
//! * `meta_info_def`: `stripped_op_list` holds TensorFlow 2.21's `OpDef` of every op type the
//!   graph and its functions use (sorted by name, as TensorFlow writes it), taken from
//!   `op_defs.pbtxt` next to this file (a copy of the `OpList` TensorFlow generated for
//!   `tests/fixtures/tf-2.21/meta/`); `tensorflow_version` is [`TENSORFLOW_VERSION`];
//!   `tensorflow_git_version` says who wrote the file, `saveplan <version>`, since no
//!   TensorFlow build did.
//! * `saver_def`: as given (none for an object-based plan).
//! * `collection_def`: `variables` and `trainable_variables`, one serialized `VariableDef` per
//!   variable (resource, trainable), as TensorFlow's own `export_meta_graph` writes them.

use std::collections::{BTreeMap, BTreeSet};

use prost::Message as _;
use rayon::prelude::*;
use saveplan_ir::{Module, Op, SaverDef};
use saveplan_proto::tensorflow as pb;

use super::meta_graph::MetaGraph;

/// The `tensorflow_version` written into `meta_info_def`: the TensorFlow release whose op set
/// and graph producer version (2474) plans target.
pub const TENSORFLOW_VERSION: &str = "2.21.0";

/// TensorFlow 2.21's `OpDef`s of the op types a plan uses, as an `OpList` in text format.
const OP_DEFS: &str = include_str!("op_defs.pbtxt");

/// A variable of a plan as its `VariableDef` in the `variables` collection names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VariableEntry {
    /// `variable_name`: the handle's output, `<handle>:0`.
    pub variable_name: String,
    /// `initial_value_name`: the tensor the initializer assigns.
    pub initial_value_name: String,
    /// `initializer_name`: the initializing op, `<handle>/Assign`.
    pub initializer_name: String,
    /// `snapshot_name`: the graph-mode read, `<handle>/Read/ReadVariableOp:0`.
    pub snapshot_name: String,
    /// `save_slice_info_def`, for a slice of a partitioned variable.
    pub save_slice: Option<SaveSlice>,
}

/// Where a slice sits in its partitioned variable (`SaveSliceInfoDef`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SaveSlice {
    /// `full_name`: the checkpoint key of the whole variable.
    pub full_name: String,
    /// `full_shape`: the shape of the whole variable.
    pub full_shape: Vec<i64>,
    /// `var_offset`: the slice's offset in each dimension.
    pub var_offset: Vec<i64>,
    /// `var_shape`: the slice's shape.
    pub var_shape: Vec<i64>,
}

/// The [`MetaGraph`] of a compiled plan: `module` with its stripped op list and versions, the
/// `saver_def` (none for an object-based plan, which makes no `tf.train.Saver`), and the `variables` and `trainable_variables` collections of `variables` (in
/// the given order).
pub fn assemble_meta_graph(
    module: Module,
    saver_def: Option<SaverDef>,
    variables: &[VariableEntry],
) -> MetaGraph {
    // Every variable is trainable: both collections list them all, encoded once. The op
    // types are collected meanwhile.
    let (meta_info_def, (variables, trainable)) = rayon::join(
        || meta_info_def(&module),
        || {
            let variables = bytes_collection(variables);
            let trainable = variables.clone();
            (variables, trainable)
        },
    );
    let collection_def = BTreeMap::from([
        ("trainable_variables".to_owned(), trainable),
        ("variables".to_owned(), variables),
    ]);
    MetaGraph {
        meta_info_def: Some(meta_info_def),
        saver_def,
        collection_def,
        module,
        ..MetaGraph::default()
    }
}

/// The op types `module` uses (graph and function bodies, without `_Arg`), sorted.
pub fn op_types(module: &Module) -> BTreeSet<String> {
    let graphs =
        std::iter::once(&module.graph).chain(module.library.functions.iter().map(|f| &f.body));
    // Borrowed while collecting: a plan has hundreds of thousands of ops and a few types.
    let mut types: BTreeSet<&str> = BTreeSet::new();
    for graph in graphs {
        for id in graph.ops() {
            let op = &graph.op(id).op;
            if *op != Op::Arg {
                types.insert(op.type_name());
            }
        }
    }
    types.into_iter().map(str::to_owned).collect()
}

/// The `VariableDef` of one variable: a trainable resource variable.
fn variable_def(variable: &VariableEntry) -> pb::VariableDef {
    pb::VariableDef {
        variable_name: variable.variable_name.clone(),
        initial_value_name: variable.initial_value_name.clone(),
        initializer_name: variable.initializer_name.clone(),
        snapshot_name: variable.snapshot_name.clone(),
        save_slice_info_def: variable
            .save_slice
            .as_ref()
            .map(|slice| pb::SaveSliceInfoDef {
                full_name: slice.full_name.clone(),
                full_shape: slice.full_shape.clone(),
                var_offset: slice.var_offset.clone(),
                var_shape: slice.var_shape.clone(),
            }),
        is_resource: true,
        trainable: true,
        ..pb::VariableDef::default()
    }
}

/// A `bytes_list` collection of serialized `VariableDef`s.
fn bytes_collection(variables: &[VariableEntry]) -> pb::CollectionDef {
    pb::CollectionDef {
        kind: Some(pb::collection_def::Kind::BytesList(
            pb::collection_def::BytesList {
                value: variables
                    .par_iter()
                    .map(|v| variable_def(v).encode_to_vec())
                    .collect(),
            },
        )),
    }
}

/// `meta_info_def`: the stripped op list of `module`, and the versions.
fn meta_info_def(module: &Module) -> pb::meta_graph_def::MetaInfoDef {
    let all = op_defs();
    let used = op_types(module);
    let mut op: Vec<pb::OpDef> = all
        .op
        .into_iter()
        .filter(|def| used.contains(&def.name))
        .collect();
    op.sort_by(|a, b| a.name.cmp(&b.name));
    pb::meta_graph_def::MetaInfoDef {
        stripped_op_list: Some(pb::OpList { op }),
        tensorflow_version: TENSORFLOW_VERSION.to_owned(),
        tensorflow_git_version: format!("saveplan {}", env!("CARGO_PKG_VERSION")),
        ..pb::meta_graph_def::MetaInfoDef::default()
    }
}

/// Every `OpDef` of [`OP_DEFS`].
fn op_defs() -> pb::OpList {
    saveplan_proto::from_text(OP_DEFS).expect("the op definitions embedded at build time parse")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `OpList` TensorFlow 2.21 generated (`tests/fixtures/tf-2.21/meta/`).
    const FIXTURE_OP_DEFS: &str = include_str!("../../tests/fixtures/tf-2.21/meta/op_defs.pbtxt");

    #[test]
    fn op_defs_agree_with_tensorflow() {
        let ours = op_defs();
        let theirs: pb::OpList = saveplan_proto::from_text(FIXTURE_OP_DEFS).unwrap();
        assert!(!ours.op.is_empty());
        for def in &ours.op {
            let matching: Vec<&pb::OpDef> =
                theirs.op.iter().filter(|t| t.name == def.name).collect();
            assert_eq!(matching, [def], "OpDef of `{}`", def.name);
        }
    }
}
