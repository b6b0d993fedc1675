//! The flat form: what `saver.save(prefix)` and `saver.restore(prefix)` add to a fresh
//! `tf.Graph`, preceded by the creation of the variables (FORMATS.md §8.2), and the entry
//! point that traces parts of the flat plan through any builder ([`trace_flat_with`]).

use saveplan_ir::{Module, OpId, Versions};

use super::builder::{Builder, out};
use super::plan::{Initializers, Inputs, PRODUCER, Tracer, VarSource, Variable, zeros_fill};
use saveplan_ir::SaverNames;
use saveplan_ir::saver_ops;

use super::{FlatTrace, ReadKind, TraceError, TraceOptions, TracedKeys, TracedVariable, Trackable};

/// Traces the flat save and restore plan of `trackables` into a fresh graph.
///
/// The graph first creates every variable (in input order), then holds the `saver_filename`
/// placeholder, the save plan and the restore plan, named exactly as TensorFlow names them.
pub fn trace_flat(
    trackables: &[Trackable],
    options: &TraceOptions,
) -> Result<FlatTrace, TraceError> {
    trace_flat_as(trackables, options, VariableOps::Create)
}

/// [`trace_flat`] with the variables reached as `variables` says. With
/// [`VariableOps::Handles`] the save and restore plans are op for op, name for name, what
/// [`trace_flat`] traces, without the variables' initializers that no plan reaches.
pub fn trace_flat_as(
    trackables: &[Trackable],
    options: &TraceOptions,
    variables: VariableOps,
) -> Result<FlatTrace, TraceError> {
    trace_flat_plans(trackables, options, variables, Traced::SaveRestore)
}

/// [`trace_flat_as`] without the restore plan: the variables, the `saver_filename`
/// placeholder and the save plan, each op named as [`trace_flat_as`] names it (the restore
/// plan comes last, so leaving it out renames nothing). The saver's `restore_targets` and the
/// trace's `restore_ops` are empty. What a session that only saves traces: half the ops.
pub fn trace_flat_save_as(
    trackables: &[Trackable],
    options: &TraceOptions,
    variables: VariableOps,
) -> Result<FlatTrace, TraceError> {
    trace_flat_plans(trackables, options, variables, Traced::Save)
}

/// [`trace_flat`] with room in its graph for the saver entry points `compile` adds: a
/// `save/Identity`, and a `save/restore_all` with a control input on every restore target.
pub(crate) fn trace_flat_with_entry_points(
    trackables: &[Trackable],
    options: &TraceOptions,
) -> Result<FlatTrace, TraceError> {
    trace_flat_plans(
        trackables,
        options,
        VariableOps::Create,
        Traced::WithEntryPoints,
    )
}

/// Which plans a flat trace holds after the variables.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Traced {
    /// The save plan.
    Save,
    /// The save and restore plans.
    SaveRestore,
    /// Both, with room for the saver entry points ([`trace_flat_with_entry_points`]).
    WithEntryPoints,
}

/// [`trace_flat_as`] of what `traced` says.
fn trace_flat_plans(
    trackables: &[Trackable],
    options: &TraceOptions,
    variables: VariableOps,
    traced: Traced,
) -> Result<FlatTrace, TraceError> {
    let restore = traced != Traced::Save;
    let inputs = Inputs::collect(trackables, options)?;
    let (n_ops, n_edges) = flat_size(&inputs, variables, traced);
    let mut tracer = Tracer::in_background(
        VarSource::Local(Vec::new()),
        inputs.tensors.len(),
        n_ops,
        n_edges,
    );
    // In a session's form (`Handles`) the tracer records what each `SaveV2` and `RestoreV2`
    // binds, unless the plan holds a tensor that is not a variable (a saved constant) or ops
    // it does not make itself (a registered saver's). No other caller reads the record: at
    // 100,000 variables it would be 30 MB of `compile`'s memory.
    let binds_all = variables == VariableOps::Handles
        && options.registered_savers.is_empty()
        && inputs
            .tensors
            .iter()
            .all(|tensor| tensor.variable.read != ReadKind::Constant);
    tracer.keys = binds_all.then(TracedKeys::default);
    let traced = (|| {
        let variables = (0..inputs.tensors.len())
            .map(|index| variable_as(&mut tracer, &inputs, index, variables, true))
            .collect::<Result<Vec<_>, _>>()?;
        tracer.vars = VarSource::Local(variables);
        let prefix = tracer.placeholder("saver_filename")?;
        let save_op = tracer.save(&inputs, out(prefix), options)?;
        if !restore {
            return Ok::<_, TraceError>((prefix, save_op, None));
        }
        let restored = tracer.restore(&inputs, out(prefix))?;
        tracer.restore_registered(options, out(prefix))?;
        Ok((prefix, save_op, Some(restored)))
    })();
    // An op the graph refused came before anything the tracer met after it.
    let graph = tracer.graph.finish()?;
    let (prefix, save_op, restored) = traced?;
    let variables = match tracer.vars {
        VarSource::Local(variables) => variables,
        VarSource::Captured(_) => Vec::new(),
    };
    let variable_ops = variables.iter().map(Variable::ids).collect();
    let keys = tracer.keys.map(|mut keys| {
        keys.variables = variables
            .into_iter()
            .zip(&inputs.tensors)
            .map(|(variable, tensor)| TracedVariable {
                shared_name: variable.handle_name,
                dtype: tensor.dtype,
                shape: tensor.shape.clone(),
            })
            .collect();
        keys
    });
    // The restore targets are every assign of a `RestoreV2` output: without registered
    // savers, exactly the assigns `restore` made (in creation order), so the graph need not
    // be searched for them.
    let restore_target_ops = match &restored {
        None => Vec::new(),
        Some(restored) if options.registered_savers.is_empty() => restored.assigns.clone(),
        Some(_) => saver_ops::restore_assigns(&graph),
    };
    let restore_targets = restore_target_ops
        .iter()
        .map(|&assign| graph.op(assign).name.clone())
        .collect();
    let saver = SaverNames {
        filename_tensor_name: format!("{}:0", graph.op(prefix).name),
        save_target: graph.op(save_op).name.clone(),
        restore_targets,
    };
    let restore_ops = restored
        .into_iter()
        .flat_map(|restored| restored.ops)
        .map(|(key, op)| (key, graph.op(op).name.clone()))
        .collect();
    let module = Module {
        graph,
        versions: Some(Versions {
            producer: PRODUCER,
            ..Versions::default()
        }),
        ..Module::default()
    };
    Ok(FlatTrace {
        module,
        saver,
        restore_ops,
        variables: variable_ops,
        restore_targets: restore_target_ops,
        keys,
    })
}

/// The ops and edges a flat trace of `inputs` makes, at most, so that its graph is reserved at
/// the size it grows to: a table that grows is copied whole (at 100,000 variables the op table
/// alone is 90 MB), and room reserved but never touched is heap the allocator hands out to
/// nothing else. Counted for graph variables, saved constants and the reads a saveable makes
/// at save time (an object-based write's variables, partitioned ones, parallel components).
fn flat_size(inputs: &Inputs<'_>, variables: VariableOps, traced: Traced) -> (usize, usize) {
    let (mut n_ops, mut n_edges) = (0, 0);
    for tensor in &inputs.tensors {
        // The save reads every tensor: one `SaveV2` input each.
        n_edges += 1;
        if tensor.variable.read == ReadKind::Constant {
            n_ops += 1;
            continue;
        }
        let (ops, edges) = match variables {
            // Initial value, handle, `IsInitialized`, `Assign`, `Read`; zeros as a `Fill` of
            // two constants is two ops and two edges more.
            VariableOps::Create if zeros_fill(tensor) => (7, 6),
            VariableOps::Create => (5, 4),
            // Handle and read.
            VariableOps::Handles | VariableOps::Attach => (2, 1),
        };
        n_ops += ops;
        n_edges += edges;
        // A read at save time: a saveable's `DisableCopyOnRead` and `ReadVariableOp` of the
        // handle and two `Identity`s after the read; a parallel component's bare read.
        (n_ops, n_edges) = match tensor.variable.read {
            ReadKind::Saveable => (n_ops + 4, n_edges + 4),
            ReadKind::ParallelComponent => (n_ops + 1, n_edges + 1),
            ReadKind::Graph | ReadKind::Constant => (n_ops, n_edges),
        };
        match traced {
            Traced::Save => {}
            // An `Identity` of the `RestoreV2` output, and the `AssignVariableOp` of it.
            Traced::SaveRestore => (n_ops, n_edges) = (n_ops + 2, n_edges + 3),
            // And the control edge from that assign to `save/restore_all`.
            Traced::WithEntryPoints => (n_ops, n_edges) = (n_ops + 2, n_edges + 4),
        }
    }
    // Per task a `SaveV2` with its constants, its shard's name and device copies, and a
    // `RestoreV2` with its constants; once the prefix, the temporary prefix and the merge (and
    // the saver entry points with their three other edges).
    let per_task = PER_TASK * inputs.n_tasks() + PER_TASK;
    (n_ops + per_task, n_edges + per_task)
}

/// The most ops, and the most edges, a flat trace makes per task besides its tensors'.
const PER_TASK: usize = 16;

/// Variable `index` reached as `ops` says; `read` asks [`VariableOps::Attach`] for a read.
fn variable_as<B: Builder>(
    tracer: &mut Tracer<B>,
    inputs: &Inputs<'_>,
    index: usize,
    ops: VariableOps,
    read: bool,
) -> Result<Variable, TraceError> {
    match ops {
        VariableOps::Create => tracer.create_variable(inputs, index, Initializers::Build),
        VariableOps::Handles => tracer.create_variable(inputs, index, Initializers::NamesOnly),
        VariableOps::Attach => tracer.attach_variable(inputs, index, read),
    }
}

/// How a partial flat trace gets at the variables.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum VariableOps {
    /// Create them as [`trace_flat`] does: initial value, handle, `IsInitialized`,
    /// `Assign` and `Read` (eagerly: `tf.Variable(...)`, which assigns the initial value).
    Create,
    /// What [`Self::Create`] builds that a save or restore plan reaches: each variable's
    /// handle and `Read`, named exactly as `Create` names them. The initializer ops' names
    /// are taken and the initial values checked, but those ops are not built. This is what a
    /// session traces: it never runs an initializer, and a plan of N variables then has 4N
    /// ops instead of 7N.
    Handles,
    /// Only look them up: the handle (`VarHandleOp`, same shared name as [`Self::Create`]) and,
    /// when the save is traced, a `Read/ReadVariableOp`, which eagerly reads the current value.
    Attach,
}

/// Which parts of the flat plan [`trace_flat_with`] traces, in this order.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlatParts {
    /// How the variables are reached (always traced first).
    pub variables: VariableOps,
    /// Trace `saver.save(prefix)` (after the `saver_filename` placeholder).
    pub save: bool,
    /// Trace `saver.restore(prefix)`, registered savers' restores included.
    pub restore: bool,
}

/// The handles of what [`trace_flat_with`] traced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlatOps {
    /// The `saver_filename` placeholder, when save or restore was traced.
    pub prefix: Option<OpId>,
    /// The `MergeV2Checkpoints` of the save.
    pub save: Option<OpId>,
    /// Per checkpoint key, the last restore op of its trackable.
    pub restore: Vec<(String, OpId)>,
}

/// Traces `parts` of the flat plan of `trackables` through `builder` and gives the builder
/// back. With [`GraphBuilder`](super::GraphBuilder) and every part this emits what [`trace_flat`] emits.
pub fn trace_flat_with<B: Builder>(
    builder: B,
    trackables: &[Trackable],
    options: &TraceOptions,
    parts: FlatParts,
) -> Result<(B, FlatOps), TraceError> {
    let inputs = Inputs::collect(trackables, options)?;
    let n_tensors = inputs.tensors.len();
    let mut tracer = Tracer::with_builder(builder, VarSource::Local(Vec::new()), n_tensors);
    let variables = (0..n_tensors)
        .map(|index| variable_as(&mut tracer, &inputs, index, parts.variables, parts.save))
        .collect::<Result<Vec<_>, _>>()?;
    tracer.vars = VarSource::Local(variables);
    let mut ops = FlatOps {
        prefix: None,
        save: None,
        restore: Vec::new(),
    };
    if parts.save || parts.restore {
        let prefix = tracer.placeholder("saver_filename")?;
        ops.prefix = Some(prefix);
        if parts.save {
            ops.save = Some(tracer.save(&inputs, out(prefix), options)?);
        }
        if parts.restore {
            ops.restore = tracer.restore(&inputs, out(prefix))?.ops;
            tracer.restore_registered(options, out(prefix))?;
        }
    }
    Ok((tracer.graph, ops))
}

/// The number of distinct tasks (devices with `CPU:0`) the tensors of `trackables` live on,
/// as `MultiDeviceSaver` counts them (`_num_unique_tasks`).
pub fn count_tasks(trackables: &[Trackable]) -> Result<usize, TraceError> {
    Ok(Inputs::collect(trackables, &TraceOptions::default())?.n_tasks())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::spec::SpecFile;

    /// A plan's graph is reserved at the size it grows to: `flat_size` counts every op and
    /// edge a flat trace of graph variables, saved constants and variables a saveable reads at
    /// save time (as an object-based write's) makes, with a little to spare
    /// for the few per task, in every form, with zeros built as a `Fill` too, and the saver
    /// entry points `compile` adds when asked to.
    #[test]
    fn the_graph_is_reserved_at_its_size() {
        let variables: Vec<serde_json::Value> = (0..60)
            .map(|index| {
                let shape = if index % 3 == 0 {
                    vec![40, 40]
                } else {
                    vec![8]
                };
                serde_json::json!({
                    "checkpoint_key": format!("v{index}"),
                    "dtype": "float32",
                    "shape": shape,
                    "device": format!("/job:w/task:{}/device:CPU:0", index % 8),
                })
            })
            .collect();
        let text = serde_json::json!({ "variables": variables }).to_string();
        let spec = SpecFile::parse(&text).unwrap();
        let mut trackables = spec.trackables().unwrap();
        trackables[7].tensors[0].variable.read = ReadKind::Constant;
        for trackable in &mut trackables[20..40] {
            trackable.tensors[0].variable.read = ReadKind::Saveable;
        }
        let options = spec.options().unwrap();
        let inputs = Inputs::collect(&trackables, &options).unwrap();
        for variables in [
            VariableOps::Create,
            VariableOps::Handles,
            VariableOps::Attach,
        ] {
            for traced in [Traced::Save, Traced::SaveRestore, Traced::WithEntryPoints] {
                let trace = trace_flat_plans(&trackables, &options, variables, traced).unwrap();
                let (n_ops, n_edges) = flat_size(&inputs, variables, traced);
                let graph = &trace.module.graph;
                let what = format!("{variables:?}, {traced:?}");
                let (mut ops, mut edges) = (graph.len(), graph.edges().len());
                if traced == Traced::WithEntryPoints {
                    // `save/Identity` (the prefix, after the merge) and `save/restore_all`.
                    ops += 2;
                    edges += 2 + trace.restore_targets.len();
                }
                assert!(
                    ops <= n_ops && n_ops - ops <= PER_TASK * 9,
                    "{what}: {ops} ops, {n_ops} reserved"
                );
                assert!(
                    edges <= n_edges && n_edges - edges <= PER_TASK * 9,
                    "{what}: {edges} edges, {n_edges} reserved"
                );
            }
        }
    }
}
