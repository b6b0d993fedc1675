//! The TF1 graph-mode form of an object-based write: what `tf.train.Checkpoint.write(prefix)`
//! and then `read(prefix).run_restore_ops()` add to a `tf.Graph` whose variables were created
//! and initialized there (FORMATS.md 13.6, fixture `obj/o9_write_graphs/graph_mode`).
//!
//! In order: every variable as [`trace_flat`](super::trace_flat) creates it, the `init` group
//! of their `Assign`s (`global_variables_initializer()`, control inputs sorted by name as in
//! every `GraphDef` TensorFlow writes), the saved constants (the object
//! graph: a `Const` fed at run time), the prefix `Const` on `/device:CPU:0` (fed), the
//! `MultiDeviceSaver` save plan, `Identity(prefix, ^merge)` (what `write` returns), then the
//! restore's prefix `Const "model"` on `/device:CPU:0` (fed) and its restore plan, each task's
//! keys in key order (`read()` restores sorted keys; the write saves in trackable order).

use std::collections::BTreeMap;

use saveplan_ir::{Attrs, DType, Module, Op, OpId, Tensor, Versions};

use super::builder::{Builder, out};
use super::plan::{Initializers, Inputs, PRODUCER, Tracer, VarSource};
use super::{ReadKind, TraceError, TraceOptions, Trackable};

/// The device `write` and `read` place their prefix tensors on (`/cpu:0`).
const CPU0: &str = "/device:CPU:0";

/// The value of the restore's prefix constant before it is fed.
const READ_PREFIX_VALUE: &str = "model";

/// A traced graph-mode object write and read, and the names that run it.
#[derive(Clone, Debug)]
pub struct GraphModeTrace {
    /// The graph, with TensorFlow's version stamp.
    pub module: Module,
    /// The `init` op (`global_variables_initializer()`): assigns every initial value.
    pub init: String,
    /// Per saved constant ([`ReadKind::Constant`], the object graph), its checkpoint key and
    /// the tensor to feed its value through (`Const:0`).
    pub constants: Vec<(String, String)>,
    /// The write's prefix tensor, fed with the path (`Const_1:0`).
    pub prefix: String,
    /// The tensor `write` returns, the prefix after the merge (`Identity_4:0`).
    pub save: String,
    /// The read's prefix tensor, fed with the path (`Const_4:0`).
    pub restore_prefix: String,
    /// TensorFlow's `restore_ops`: per checkpoint key, the last restore op of its trackable.
    pub restore_ops: BTreeMap<String, String>,
}

/// Traces `Checkpoint.write` then `read().run_restore_ops()` in TF1 graph mode for
/// `trackables` (variables, then [`ReadKind::Constant`] tensors such as the object graph).
pub fn trace_graph_mode_write(
    trackables: &[Trackable],
    options: &TraceOptions,
) -> Result<GraphModeTrace, TraceError> {
    let mut inputs = Inputs::collect(trackables, options)?;
    let n_tensors = inputs.tensors.len();
    let mut tracer = Tracer::with_capacity(VarSource::Local(Vec::new()), n_tensors);
    let is_constant = |index: usize| inputs.tensors[index].variable.read == ReadKind::Constant;
    let mut created = Vec::with_capacity(n_tensors);
    for index in (0..n_tensors).filter(|&index| !is_constant(index)) {
        created.push((
            index,
            tracer.create_variable(&inputs, index, Initializers::Build)?,
        ));
    }
    let assigns: Vec<OpId> = created.iter().filter_map(|(_, v)| v.assign).collect();
    let init = group(&mut tracer, "init", &assigns)?;
    let mut constants = Vec::new();
    for index in (0..n_tensors).filter(|&index| is_constant(index)) {
        let variable = tracer.create_variable(&inputs, index, Initializers::Build)?;
        constants.push((
            inputs.tensors[index].checkpoint_key.clone(),
            format!("{}:0", variable.handle_name),
        ));
        created.push((index, variable));
    }
    created.sort_by_key(|(index, _)| *index);
    tracer.vars = VarSource::Local(created.into_iter().map(|(_, v)| v).collect());
    let prefix = string_constant(&mut tracer, "")?;
    let merge = tracer.save(&inputs, out(prefix), options)?;
    let returned = tracer.identity(CPU0, DType::String, out(prefix))?;
    // `with ops.control_dependencies([save]): identity(prefix)`, which marks the merge.
    tracer.graph.mark_manual_control(merge);
    tracer.graph.control(merge, returned);
    let restore_prefix = string_constant(&mut tracer, READ_PREFIX_VALUE)?;
    inputs.sort_tasks_by_key();
    let restore_ops = tracer.restore(&inputs, out(restore_prefix))?.ops;
    tracer.restore_registered(options, out(restore_prefix))?;
    let graph = tracer.graph;
    let tensor = |op: OpId| format!("{}:0", graph.op(op).name);
    let trace = GraphModeTrace {
        init: graph.op(init).name.clone(),
        constants,
        prefix: tensor(prefix),
        save: tensor(returned),
        restore_prefix: tensor(restore_prefix),
        restore_ops: restore_ops
            .into_iter()
            .map(|(key, op)| (key, graph.op(op).name.clone()))
            .collect(),
        module: Module {
            graph,
            versions: Some(Versions {
                producer: PRODUCER,
                ..Versions::default()
            }),
            ..Module::default()
        },
    };
    Ok(trace)
}

/// A string scalar `Const` on `/device:CPU:0`, named `Const` (uniqued).
fn string_constant(tracer: &mut Tracer, value: &str) -> Result<OpId, TraceError> {
    let name = tracer.names.unique("Const");
    tracer.constant(name, CPU0, Tensor::string_scalar(value))
}

/// `tf.group(*ops, name=name)`: ops on one device get one `NoOp` named `name` on it; ops on
/// several devices get a `<name>/NoOp` per device (sorted by device) and a device-less
/// `NoOp` named `name` after them all. Every grouped op is marked as a manual control input.
fn group(tracer: &mut Tracer, name: &str, ops: &[OpId]) -> Result<OpId, TraceError> {
    let scope = tracer.names.unique(name);
    let mut by_device: BTreeMap<String, Vec<OpId>> = BTreeMap::new();
    for &op in ops {
        let device = tracer.graph.op(op).device.to_string();
        by_device.entry(device).or_default().push(op);
    }
    let no_op = |tracer: &mut Tracer, name: String, device: &str, deps: &[OpId]| {
        let id = tracer.op(name, Op::NoOp, device, Attrs::new(), [])?;
        // A `GraphDef` TensorFlow writes lists control inputs sorted by name.
        let mut deps = deps.to_vec();
        deps.sort_by(|&a, &b| tracer.graph.op(a).name.cmp(&tracer.graph.op(b).name));
        for dep in deps {
            tracer.graph.mark_manual_control(dep);
            tracer.graph.control(dep, id);
        }
        Ok::<OpId, TraceError>(id)
    };
    if by_device.len() <= 1 {
        let (device, deps) = by_device.pop_first().unwrap_or_default();
        return no_op(tracer, scope, &device, &deps);
    }
    let mut per_device = Vec::with_capacity(by_device.len());
    for (device, deps) in &by_device {
        let inner = tracer.names.unique_in(&scope, "NoOp");
        per_device.push(no_op(tracer, inner, device, deps)?);
    }
    no_op(tracer, scope, "", &per_device)
}
