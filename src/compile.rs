//! The compile driver: a spec file in, a verified plan and the `MetaGraphDef` TensorFlow's
//! `tf.compat.v1.train.import_meta_graph` loads out (what `saveplan compile` writes).
//!
//! The steps are: trace ([`crate::trace`]), add the saver entry points the chosen [`Form`]
//! needs, verify ([`saveplan_ir::verify::verify_module`]), then have the exporter assemble the
//! [`MetaGraph`] ([`export::assemble_meta_graph`]: stripped op list, versions, collections)
//! from IR-level parts:
//!
//! * the [`SaverDef`]: version `V2`, the names below, everything else left at its default as
//!   `MultiDeviceSaver.to_proto()` leaves it;
//! * one [`VariableEntry`] per traced variable (handle, `<name>/Assign`,
//!   `<name>/Read/ReadVariableOp`, initial value; the slice of a partitioned variable), for the
//!   `variables` and `trainable_variables` collections. They make
//!   `tf.compat.v1.global_variables()` and `global_variables_initializer()` work after the
//!   import.
//!
//! # Forms
//!
//! * [`Form::Flat`]: the flat graph of [`crate::trace::trace_flat`]. `SaverDef` needs a
//!   *tensor* to run for saving, and the flat plan ends in the `MergeV2Checkpoints` op, so the
//!   driver adds `save/Identity`, an `Identity` of the prefix with a control input on the merge
//!   (on the merge's device), as the function form's save body does. Restoring is one op in a
//!   `SaverDef`, so it adds `save/restore_all`, a `NoOp` with a control input on every
//!   `AssignVariableOp` fed by a `RestoreV2` (TensorFlow 1's `Saver` names them the same way).
//! * [`Form::Function`]: [`crate::trace::trace_functions`] with fixed function names
//!   ([`SAVE_FUNCTION`], [`RESTORE_FUNCTION`]) and a `config_proto` that only sets
//!   `allow_soft_placement` ([`CONFIG_PROTO`]), so the calls run in any session.

use rayon::prelude::*;
use saveplan_ir::slice::ShapeAndSlice;
use saveplan_ir::verify::{VerifyErrors, verify_module};
use saveplan_ir::{AttrValue, Attrs, DType, Graph, GraphError, Module, Op, OpId, Port, SaverDef};

use crate::export::{self, MetaGraph, SaveSlice, VariableEntry};
use crate::trace::spec::SpecFile;
use crate::trace::{FunctionOptions, SaveableTensor, TraceError, trace_flat, trace_functions};

/// The name of the save function of the function form.
pub const SAVE_FUNCTION: &str = "__inference__traced_save_1";
/// The name of the restore function of the function form.
pub const RESTORE_FUNCTION: &str = "__inference__traced_restore_2";
/// The serialized `ConfigProto` of the function form's calls: `allow_soft_placement: true`
/// (field 7, varint 1) and nothing else.
pub const CONFIG_PROTO: &[u8] = &[0x38, 0x01];
pub use crate::export::{TENSORFLOW_VERSION, op_types};

/// Which graph form to compile to.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Form {
    /// Variables and the save and restore ops in one graph (`saver.save` in a `tf.Graph`).
    #[default]
    Flat,
    /// The plan inside two library functions called from the graph (`saver.to_proto()`).
    Function,
}

/// A compiled plan: the verified module with its saver, ready to export.
#[derive(Clone, Debug)]
pub struct Compilation {
    /// The form compiled to.
    pub form: Form,
    /// The `MetaGraphDef` contents; `meta_graph.module` is the verified plan.
    pub meta_graph: MetaGraph,
}

/// Errors from compiling a spec.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The spec is invalid or does not trace.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The traced module fails verification (a tracer bug).
    #[error("the traced plan does not verify: {0}")]
    Verify(VerifyErrors),
    /// Adding the saver entry points failed (a name is taken).
    #[error("cannot add the saver entry points")]
    Graph(#[from] GraphError),
    /// The flat plan has no `MergeV2Checkpoints` to order the save tensor after.
    #[error("the traced plan has no op `{name}`")]
    MissingOp {
        /// The op name the tracer reported.
        name: String,
    },
    /// A traced variable lacks one of the ops its `VariableDef` names.
    #[error("variable `{name}`: no `{what}` op")]
    Variable {
        /// The variable's handle op.
        name: String,
        /// The op that is missing.
        what: &'static str,
    },
}

/// Traces `spec` in `form`, adds the saver entry points, verifies, and assembles the
/// `MetaGraphDef` contents.
pub fn compile(spec: &SpecFile, form: Form) -> Result<Compilation, CompileError> {
    let trackables = spec.trackables()?;
    let (module, saver_def) = match form {
        Form::Flat => flat_plan(spec, &trackables)?,
        Form::Function => function_plan(&trackables)?,
    };
    verify_module(&module).map_err(CompileError::Verify)?;
    let tensors: Vec<&SaveableTensor> = trackables.iter().flat_map(|t| &t.tensors).collect();
    let variables = variable_entries(&module.graph, &tensors)?;
    let meta_graph = export::assemble_meta_graph(module, saver_def, &variables);
    Ok(Compilation { form, meta_graph })
}

/// The flat plan with `save/Identity` and `save/restore_all`, and its `SaverDef`.
fn flat_plan(
    spec: &SpecFile,
    trackables: &[crate::trace::Trackable],
) -> Result<(Module, SaverDef), CompileError> {
    let mut trace = trace_flat(trackables, &spec.options()?)?;
    let graph = &mut trace.module.graph;
    let missing = |name: &str| CompileError::MissingOp {
        name: name.to_owned(),
    };
    let filename = &trace.saver.filename_tensor_name;
    let prefix_name = filename.strip_suffix(":0").unwrap_or(filename);
    let prefix = graph
        .find(prefix_name)
        .ok_or_else(|| missing(prefix_name))?;
    let merge_name = &trace.saver.save_target;
    let merge = graph.find(merge_name).ok_or_else(|| missing(merge_name))?;

    let mut attrs = Attrs::new();
    attrs.insert("T", AttrValue::Type(DType::String));
    let device = graph.op(merge).device.clone();
    let save_name = unused_name(graph, "save/Identity");
    let save = graph.add_op(save_name.clone(), Op::Identity, device, attrs)?;
    graph.push_input(save, prefix, Port::Index(0));
    graph.add_control(merge, save);

    let restore_name = unused_name(graph, "save/restore_all");
    let restore = graph.add_op(restore_name.clone(), Op::NoOp, "", Attrs::new())?;
    // The trace's restore targets are the assigns of its restored values, in creation order
    // (`saver_ops::restore_assigns`): looked up by name, not found again by a walk.
    for target in &trace.saver.restore_targets {
        let assign = graph.find(target).ok_or_else(|| missing(target))?;
        graph.add_control(assign, restore);
    }
    let saver_def = SaverDef::v2(filename.clone(), format!("{save_name}:0"), restore_name);
    Ok((trace.module, saver_def))
}

/// The function-form plan and the `SaverDef` `to_proto()` returns for it.
fn function_plan(
    trackables: &[crate::trace::Trackable],
) -> Result<(Module, SaverDef), CompileError> {
    let options = FunctionOptions {
        save_function: SAVE_FUNCTION.to_owned(),
        restore_function: RESTORE_FUNCTION.to_owned(),
        config_proto: CONFIG_PROTO.to_vec(),
    };
    let trace = trace_functions(trackables, &options)?;
    Ok((trace.module, trace.saver_def))
}

/// `base`, or `base_1`, `base_2`, … whichever is free first.
fn unused_name(graph: &Graph, base: &str) -> String {
    let mut name = base.to_owned();
    let mut suffix = 0;
    while graph.find(&name).is_some() {
        suffix += 1;
        name = format!("{base}_{suffix}");
    }
    name
}

/// One [`VariableEntry`] per `VarHandleOp` of the top-level graph, in creation order;
/// `tensors` are the traced tensors in the same order (the tracer creates one variable per
/// tensor).
fn variable_entries(
    graph: &Graph,
    tensors: &[&SaveableTensor],
) -> Result<Vec<VariableEntry>, CompileError> {
    let mut handles: Vec<OpId> = graph
        .ops()
        .into_iter()
        .filter(|&id| graph.op(id).op == Op::VarHandleOp)
        .collect();
    handles.sort_by_key(|&id| graph.seq(id));
    // Each entry is looked up on its own: in parallel, in order, the first error reported.
    let entries: Vec<Result<VariableEntry, CompileError>> = handles
        .par_iter()
        .enumerate()
        .map(|(pos, &handle)| variable_entry(graph, handle, tensors.get(pos).copied()))
        .collect();
    entries.into_iter().collect()
}

/// The [`VariableEntry`] of the `VarHandleOp` `handle`, traced from `tensor`.
fn variable_entry(
    graph: &Graph,
    handle: OpId,
    tensor: Option<&SaveableTensor>,
) -> Result<VariableEntry, CompileError> {
    let name = &graph.op(handle).name;
    let missing = |what| CompileError::Variable {
        name: name.clone(),
        what,
    };
    let assign_name = format!("{name}/Assign");
    let assign = graph.find(&assign_name).ok_or_else(|| missing("Assign"))?;
    let initial_value = graph
        .inputs(assign)
        .into_iter()
        .find(|(slot, _)| *slot == 1)
        .map(|(_, input)| input)
        .ok_or_else(|| missing("initial value"))?;
    let read_name = format!("{name}/Read/ReadVariableOp");
    graph
        .find(&read_name)
        .ok_or_else(|| missing("Read/ReadVariableOp"))?;
    let save_slice = tensor
        .filter(|tensor| !tensor.slice_spec.is_empty())
        .and_then(save_slice);
    Ok(VariableEntry {
        variable_name: format!("{name}:0"),
        initial_value_name: tensor_name(graph, initial_value.src, &initial_value.output),
        initializer_name: assign_name,
        snapshot_name: format!("{read_name}:0"),
        save_slice,
    })
}

/// Where a slice of a partitioned variable sits (the spec was validated by the tracer).
fn save_slice(tensor: &SaveableTensor) -> Option<SaveSlice> {
    let spec = ShapeAndSlice::parse(&tensor.slice_spec).ok()?;
    let (var_offset, var_shape) = spec.region().ok()?.into_iter().unzip();
    Some(SaveSlice {
        full_name: tensor.checkpoint_key.clone(),
        full_shape: spec.full_shape,
        var_offset,
        var_shape,
    })
}

/// `op:index` for an output.
fn tensor_name(graph: &Graph, op: OpId, port: &Port) -> String {
    let index = match port {
        Port::Index(index) => *index,
        Port::Named { index, .. } => *index,
    };
    format!("{}:{index}", graph.op(op).name)
}
