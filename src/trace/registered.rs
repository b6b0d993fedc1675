//! Registered savers: user-provided save and restore functions that `MultiDeviceSaver` runs
//! besides its own `SaveV2` shards (`tf.saved_model.experimental.register_checkpoint_saver`).
//!
//! For each registered saver, `save` first builds the saver's own prefix
//! `StringJoin(prefix, Const("-<name>"))` on `/device:CPU:*` (right after the temporary prefix),
//! then calls the saver's save function before any default shard is traced. The string tensors
//! it returns join the `MergeV2Checkpoints` prefixes ahead of the default shards, and are not
//! counted in `num_shards`. `restore` calls each restore function with the user's prefix after
//! every default restore op.

use saveplan_ir::{Attrs, Graph, Op, OpId, Port};

use super::TraceError;
use super::builder::Builder;
use super::names::UniqueNames;

/// A registered saver: a name and two functions that add their ops to the traced graph.
///
/// The functions receive a [`SaverCx`] to add ops with TensorFlow-unique names, and the prefix
/// tensor they work on.
pub trait RegisteredSaver {
    /// The registered name (`<package>.<name>`); the saver's prefix is `<prefix>-<name>`.
    fn name(&self) -> &str;

    /// Traces the save function given the saver's own prefix; returns the string tensors
    /// (usually prefixes the function wrote) that `MergeV2Checkpoints` merges.
    fn save(
        &self,
        cx: &mut SaverCx<'_>,
        prefix: (OpId, Port),
    ) -> Result<Vec<(OpId, Port)>, TraceError>;

    /// Traces the restore function given the checkpoint's (merged) prefix.
    fn restore(&self, cx: &mut SaverCx<'_>, prefix: (OpId, Port)) -> Result<(), TraceError>;
}

/// What a registered saver's functions can do to the graph being traced.
pub struct SaverCx<'a> {
    names: &'a mut UniqueNames,
    builder: &'a mut dyn Builder,
}

impl<'a> SaverCx<'a> {
    /// The context of a registered saver adding ops through `builder`, named with `names`
    /// (the tracer's own name table, so names stay unique across the whole graph).
    pub(super) fn new(names: &'a mut UniqueNames, builder: &'a mut dyn Builder) -> SaverCx<'a> {
        SaverCx { names, builder }
    }

    /// Adds an op named `name` (made unique the way a `tf.Graph` does) with data inputs in
    /// order; returns its id.
    pub fn add_op(
        &mut self,
        name: &str,
        op: Op,
        device: &str,
        attrs: Attrs,
        inputs: &[(OpId, Port)],
    ) -> Result<OpId, TraceError> {
        let name = self.names.unique(name);
        self.builder
            .emit(name, op, device, attrs, &mut inputs.iter().cloned(), &[])
    }

    /// Adds a control edge: `dst` runs after `src`. Like `tf.control_dependencies([src])`
    /// around `dst` in a `tf.Graph`, this also marks `src` with
    /// `_has_manual_control_dependencies = true`.
    pub fn add_control(&mut self, src: OpId, dst: OpId) {
        self.builder.mark_manual_control(src);
        self.builder.control(src, dst);
    }

    /// Reserves a unique name (for a name scope) without adding an op.
    pub fn unique_name(&mut self, name: &str) -> String {
        self.names.unique(name)
    }

    /// The graph traced so far.
    pub fn graph(&self) -> &Graph {
        self.builder.graph()
    }
}
