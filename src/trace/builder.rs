//! The one interface through which the tracer adds ops ([`Builder`]), its graph
//! implementation ([`GraphBuilder`], today's tracing into a [`Graph`]) and the entry point that
//! traces parts of the flat plan through any builder ([`trace_flat_with`]).
//!
//! The tracer names every op, picks its device and attributes and hands it to a builder
//! together with its data inputs and control inputs; the builder returns a handle ([`OpId`])
//! that later ops use as an input. The graph builder only records the op. An eager builder
//! (`crate::exec::EagerBuilder`) records it too and runs it at once, so the same tracing code
//! either builds a plan to run many times (graph mode) or runs it as it goes (eager mode).
//!
//! Ops are emitted in an order where every input and every control input already exists; an
//! eager builder can therefore run each op when it is added. The tracer adds a few control
//! edges after both ends exist ([`Builder::control`]); for an eager builder both ends have then
//! already run, in the right order.

use saveplan_ir::{AttrValue, Attrs, Graph, Op, OpId, Port};

use super::plan::{Inputs, Tracer, VarSource, out};
use super::{TraceError, TraceOptions, Trackable};

/// The attribute a `tf.Graph` sets on ops used in a `control_dependencies` block.
pub(crate) const MANUAL_CONTROL: &str = "_has_manual_control_dependencies";

/// Where the tracer puts the ops it emits.
pub trait Builder {
    /// Adds op `name` (already unique) with data `inputs` in slot order and `controls` that
    /// must run first; returns its handle. An eager builder also runs it, and reports a failure
    /// as [`TraceError::Builder`] naming the op and its device.
    fn emit(
        &mut self,
        name: String,
        op: Op,
        device: &str,
        attrs: Attrs,
        inputs: &mut dyn Iterator<Item = (OpId, Port)>,
        controls: &[OpId],
    ) -> Result<OpId, TraceError>;

    /// Adds a control edge between two ops already emitted: `dst` runs after `src`.
    fn control(&mut self, src: OpId, dst: OpId);

    /// Marks an emitted op with `_has_manual_control_dependencies = true`, as a `tf.Graph`
    /// marks every op passed to `control_dependencies`.
    fn mark_manual_control(&mut self, op: OpId);

    /// The ops emitted so far.
    fn graph(&self) -> &Graph;
}

/// The graph builder: a [`Graph`] itself, which records each op and runs nothing.
pub type GraphBuilder = Graph;

impl Builder for Graph {
    fn emit(
        &mut self,
        name: String,
        op: Op,
        device: &str,
        attrs: Attrs,
        inputs: &mut dyn Iterator<Item = (OpId, Port)>,
        controls: &[OpId],
    ) -> Result<OpId, TraceError> {
        let id = self.add_op(name, op, device, attrs)?;
        self.push_inputs(id, inputs);
        for &src in controls {
            self.add_control(src, id);
        }
        Ok(id)
    }

    fn control(&mut self, src: OpId, dst: OpId) {
        self.add_control(src, dst);
    }

    fn mark_manual_control(&mut self, op: OpId) {
        self.op_mut(op)
            .attrs()
            .insert(MANUAL_CONTROL, AttrValue::B(true));
    }

    fn graph(&self) -> &Graph {
        self
    }
}

/// How a partial flat trace gets at the variables.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum VariableOps {
    /// Create them as [`super::trace_flat`] does: initial value, handle, `IsInitialized`,
    /// `Assign` and `Read` (eagerly: `tf.Variable(...)`, which assigns the initial value).
    Create,
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
/// back. With [`GraphBuilder`] and every part this emits what [`super::trace_flat`] emits.
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
        .map(|index| match parts.variables {
            VariableOps::Create => tracer.create_variable(&inputs, index),
            VariableOps::Attach => tracer.attach_variable(&inputs, index, parts.save),
        })
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
            ops.restore = tracer.restore(&inputs, out(prefix))?;
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
