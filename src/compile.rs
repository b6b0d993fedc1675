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
use crate::trace::{
    FunctionOptions, SaveableTensor, TraceError, VariableOpIds, trace_flat_with_entry_points,
    trace_functions,
};

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

/// Heap [`compile`] writes per variable, measured at 100,000 float32[64] variables on 1 and 8
/// tasks: the trace (seven ops each), the variables' entries and the encoded `MetaGraphDef`.
const HEAP_PER_VARIABLE: usize = 4500;

/// About how many bytes of heap [`compile`] and the encoding of its `MetaGraphDef` write for
/// a spec of `n_variables` variables. For a program that has that much heap populated ahead
/// on another core ([`crate::process::prefault_heap`]), as the `saveplan` binary does.
pub fn heap_estimate(n_variables: usize) -> usize {
    n_variables.saturating_mul(HEAP_PER_VARIABLE)
}

/// Traces `spec` in `form`, adds the saver entry points, verifies, and assembles the
/// `MetaGraphDef` contents.
pub fn compile(spec: &SpecFile, form: Form) -> Result<Compilation, CompileError> {
    let trackables = spec.trackables()?;
    let (module, saver_def, variables) = match form {
        Form::Flat => flat_plan(spec, &trackables)?,
        Form::Function => function_plan(&trackables)?,
    };
    let tensors: Vec<&SaveableTensor> = trackables.iter().flat_map(|t| &t.tensors).collect();
    // Verified while the variables' entries are made (both only read the module), a failed
    // verification reported first.
    let (verified, variables) = rayon::join(
        || verify_module(&module),
        || variable_entries(&module.graph, &variables, &tensors),
    );
    verified.map_err(CompileError::Verify)?;
    let variables = variables?;
    let meta_graph = export::assemble_meta_graph(module, Some(saver_def), &variables);
    Ok(Compilation { form, meta_graph })
}

/// A traced plan with its saver entry points, its `SaverDef`, and the ops of each input
/// tensor's variable.
type Plan = (Module, SaverDef, Vec<VariableOpIds>);

/// The flat plan with `save/Identity` and `save/restore_all`, and its `SaverDef`.
fn flat_plan(
    spec: &SpecFile,
    trackables: &[crate::trace::Trackable],
) -> Result<Plan, CompileError> {
    let mut trace = trace_flat_with_entry_points(trackables, &spec.options()?)?;
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
    let save_name = graph.unused_name("save/Identity");
    let save = graph.add_op(save_name.clone(), Op::Identity, device, attrs)?;
    graph.push_input(save, prefix, Port::Index(0));
    graph.add_control(merge, save);

    let restore_name = graph.unused_name("save/restore_all");
    let restore = graph.add_op(restore_name.clone(), Op::NoOp, "", Attrs::new())?;
    // The trace's restore targets are the assigns of its restored values, in creation order
    // (`saver_ops::restore_assigns`).
    for &assign in &trace.restore_targets {
        graph.add_control(assign, restore);
    }
    let saver_def = SaverDef::v2(filename.clone(), format!("{save_name}:0"), restore_name);
    Ok((trace.module, saver_def, trace.variables))
}

/// The function-form plan and the `SaverDef` `to_proto()` returns for it.
fn function_plan(trackables: &[crate::trace::Trackable]) -> Result<Plan, CompileError> {
    let options = FunctionOptions {
        save_function: SAVE_FUNCTION.to_owned(),
        restore_function: RESTORE_FUNCTION.to_owned(),
        config_proto: CONFIG_PROTO.to_vec(),
    };
    let trace = trace_functions(trackables, &options)?;
    Ok((trace.module, trace.saver_def, trace.variables))
}

/// One [`VariableEntry`] per `VarHandleOp` the trace made, in creation order: `variables`
/// are the ops of `tensors`' variables, in the same order (a saved constant has none).
fn variable_entries(
    graph: &Graph,
    variables: &[VariableOpIds],
    tensors: &[&SaveableTensor],
) -> Result<Vec<VariableEntry>, CompileError> {
    // Each entry is made on its own: in parallel, in order, the first error reported.
    let entries: Vec<Option<Result<VariableEntry, CompileError>>> = variables
        .par_iter()
        .zip(tensors)
        .map(|(ops, tensor)| {
            (graph.op(ops.handle).op == Op::VarHandleOp).then(|| variable_entry(graph, ops, tensor))
        })
        .collect();
    entries.into_iter().flatten().collect()
}

/// The [`VariableEntry`] of the variable with the ops `ops`, traced from `tensor`.
fn variable_entry(
    graph: &Graph,
    ops: &VariableOpIds,
    tensor: &SaveableTensor,
) -> Result<VariableEntry, CompileError> {
    let name = &graph.op(ops.handle).name;
    let missing = |what| CompileError::Variable {
        name: name.clone(),
        what,
    };
    let assign = ops.assign.ok_or_else(|| missing("Assign"))?;
    let initial_value = graph
        .input_at(assign, 1)
        .ok_or_else(|| missing("initial value"))?;
    if ops.read == ops.handle {
        return Err(missing("Read/ReadVariableOp"));
    }
    let save_slice = (!tensor.slice_spec.is_empty())
        .then(|| save_slice(tensor))
        .flatten();
    Ok(VariableEntry {
        variable_name: format!("{name}:0"),
        initial_value_name: tensor_name(graph, initial_value.src, &initial_value.output),
        initializer_name: graph.op(assign).name.clone(),
        snapshot_name: format!("{}:0", graph.op(ops.read).name),
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
