//! The one interface through which the tracer adds ops ([`Builder`]), its graph
//! implementation ([`GraphBuilder`], today's tracing into a [`Graph`]) and the small helpers
//! every emitting file shares ([`attrs`], [`out`]). The bottom layer of the tracer: it imports
//! nothing else from it but [`TraceError`].
//!
//! The tracer names every op, picks its device and attributes and hands it to a builder
//! together with its data inputs and control inputs; the builder returns a handle ([`OpId`])
//! that later ops use as an input. The graph builder only records the op. An eager builder
//! (`crate::session::EagerBuilder`) records it too and runs it at once, so the same tracing code
//! either builds a plan to run many times (graph mode) or runs it as it goes (eager mode).
//!
//! Ops are emitted in an order where every input and every control input already exists; an
//! eager builder can therefore run each op when it is added. The tracer adds a few control
//! edges after both ends exist ([`Builder::control`]); for an eager builder both ends have then
//! already run, in the right order.

use saveplan_ir::{AttrValue, Attrs, Graph, Op, OpId, Port};

use super::TraceError;

/// The attribute a `tf.Graph` sets on ops used in a `control_dependencies` block.
pub(crate) const MANUAL_CONTROL: &str = "_has_manual_control_dependencies";

/// Where the tracer puts the ops it emits.
pub trait Builder {
    /// Adds op `name` (already unique) with data `inputs` in slot order and `controls` that
    /// must run first; returns its handle. An eager builder also runs it; when that fails it
    /// keeps the failure and returns [`TraceError::Stopped`].
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

/// A builder lent out: the tracer emits through it and the caller keeps the builder, with
/// whatever it recorded, even when tracing fails.
impl<B: Builder + ?Sized> Builder for &mut B {
    fn emit(
        &mut self,
        name: String,
        op: Op,
        device: &str,
        attrs: Attrs,
        inputs: &mut dyn Iterator<Item = (OpId, Port)>,
        controls: &[OpId],
    ) -> Result<OpId, TraceError> {
        (**self).emit(name, op, device, attrs, inputs, controls)
    }

    fn control(&mut self, src: OpId, dst: OpId) {
        (**self).control(src, dst);
    }

    fn mark_manual_control(&mut self, op: OpId) {
        (**self).mark_manual_control(op);
    }

    fn graph(&self) -> &Graph {
        (**self).graph()
    }
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

/// An attribute map from `(name, value)` pairs.
pub(super) fn attrs<const N: usize>(pairs: [(&'static str, AttrValue); N]) -> Attrs {
    Attrs::from(pairs)
}

/// Output 0 of `op`, as a data input.
pub(super) fn out(op: OpId) -> (OpId, Port) {
    (op, Port::Index(0))
}
