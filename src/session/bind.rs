//! Binds checkpoint keys to variables by reading a plan's `SaveV2` and `RestoreV2` ops.
//!
//! # How a key finds its variable
//!
//! * **Save side.** Every `SaveV2` the save target needs (in the top-level graph, or in the
//!   body of a function a needed call op calls, at any depth) lists checkpoint keys in its
//!   `tensor_names` constant and slice specs in its `shape_and_slices` constant. Saved tensor
//!   `i` is followed backwards through `Identity`/`IdentityN` to a
//!   `ReadVariableOp`, and that op's handle through `Identity` to a `VarHandleOp`, whose
//!   `container` and `shared_name` (the op name when empty) name the variable. A TF1 graph
//!   saves a `VariableV2` (a reference variable, keyed the same way) directly or through
//!   `Identity`. A function argument is followed into the call op's input of the same index.
//! * **Restore side.** Every `RestoreV2` the restore targets need lists keys and slice specs
//!   the same way. Each output is followed forwards through `Identity` ops to the
//!   `AssignVariableOp`s (TF1: `Assign`s) that take it as their value; their handle (or
//!   reference, input 0) is resolved as above.
//!
//! A saved tensor that does not come from a variable (a constant, a computed value) cannot be
//! bound and is an error: the session would have nowhere to put the user's value.
//!
//! A plan the tracer made need not be walked: the tracer records each `SaveV2` and
//! `RestoreV2` it makes with its entries' variables ([`crate::trace::TracedKeys`]), and
//! [`traced_bindings`] reads the bindings the walk would find, in the walk's order, off that
//! record (a test checks the two agree on every traced input).

use saveplan_ir::saver_ops::{self, save_v2};
use saveplan_ir::signature;
use saveplan_ir::{AttrValue, DType, Graph, Module, Op, OpId, OpNode, Port, TensorName};

use super::error::{BadCheckpointOp, SessionError, Unbound};
use crate::exec::VarKey;
use crate::trace::{TracedOp, TracedVariable};

/// One checkpoint tensor (or slice) and the variable it is saved from or restored into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The checkpoint key.
    pub checkpoint_key: String,
    /// The slice spec (`"4 3 0,2:0,3"`); empty for a whole tensor.
    pub slice_spec: String,
    /// The variable.
    pub variable: VarKey,
    /// The dtype the `SaveV2`/`RestoreV2` op declares.
    pub dtype: DType,
    /// The variable's shape from its `VarHandleOp`, when fully known.
    pub shape: Option<Vec<u64>>,
    /// The `SaveV2` or `RestoreV2` op that names it.
    pub op: String,
    /// Whether the plan cuts the slice out of the variable's value with `Slice` ops
    /// (`MaxShardSizePolicy`): then the variable holds the whole tensor, not the slice.
    pub sliced_by_plan: bool,
}

/// A graph being walked: the top level (`caller` is `None`) or a function body called by
/// op `caller.1` of frame `caller.0`.
struct Frame<'m> {
    graph: &'m Graph,
    function: Option<String>,
    caller: Option<(usize, OpId)>,
}

/// Walks a module's graphs across function calls.
struct Walker<'m> {
    module: &'m Module,
    frames: Vec<Frame<'m>>,
}

/// The bindings of every `SaveV2` that running `targets` (op or tensor names) executes.
pub fn bind_save(module: &Module, targets: &[&str]) -> Result<Vec<Binding>, SessionError> {
    let mut walker = Walker::new(module);
    let mut bindings = Vec::new();
    for (frame, id) in walker.find_ops(targets, Op::SaveV2)? {
        let node = walker.frames[frame].graph.op(id);
        let (keys, slices) = walker.names_and_slices(frame, id)?;
        let dtypes = dtype_list(node)?;
        for (position, (key, slice_spec)) in keys.into_iter().zip(slices).enumerate() {
            let dtype = dtypes
                .get(position)
                .copied()
                .ok_or_else(|| bad_op(node, BadCheckpointOp::FewerDTypes))?;
            let (variable, shape, sliced_by_plan) = walker
                .value_variable(frame, id, save_v2::FIRST_TENSOR + position as u32)
                .map_err(|reason| SessionError::Unbound {
                    key: key.clone(),
                    op: node.name.clone(),
                    reason,
                })?;
            bindings.push(Binding {
                checkpoint_key: key,
                slice_spec,
                variable,
                dtype,
                shape,
                op: node.name.clone(),
                sliced_by_plan,
            });
        }
    }
    Ok(bindings)
}

/// The bindings of every `RestoreV2` that running `targets` executes; with no targets, of every
/// `RestoreV2` of the top-level graph and the functions it calls.
pub fn bind_restore(module: &Module, targets: &[&str]) -> Result<Vec<Binding>, SessionError> {
    let mut walker = Walker::new(module);
    let mut bindings = Vec::new();
    for (frame, id) in walker.find_ops(targets, Op::RestoreV2)? {
        let graph = walker.frames[frame].graph;
        let node = graph.op(id);
        let (keys, slices) = walker.names_and_slices(frame, id)?;
        let dtypes = dtype_list(node)?;
        let mut assignments = saver_ops::restore_assignments(graph, id);
        for (position, (key, slice_spec)) in keys.into_iter().zip(slices).enumerate() {
            let dtype = dtypes
                .get(position)
                .copied()
                .ok_or_else(|| bad_op(node, BadCheckpointOp::FewerDTypes))?;
            let assigns = assignments.remove(&(position as u32)).unwrap_or_default();
            if assigns.is_empty() {
                return Err(SessionError::Unbound {
                    key,
                    op: node.name.clone(),
                    reason: Unbound::NotAssigned,
                });
            }
            for assign in assigns {
                let (variable, shape) =
                    walker.handle_variable(frame, assign, 0).map_err(|reason| {
                        SessionError::Unbound {
                            key: key.clone(),
                            op: node.name.clone(),
                            reason,
                        }
                    })?;
                bindings.push(Binding {
                    checkpoint_key: key.clone(),
                    slice_spec: slice_spec.clone(),
                    variable,
                    dtype,
                    shape,
                    op: node.name.clone(),
                    sliced_by_plan: false,
                });
            }
        }
    }
    Ok(bindings)
}

/// The bindings of the traced `SaveV2`s or `RestoreV2`s `ops` of a plan whose variables are
/// `variables` ([`crate::trace::TracedKeys`]): what [`bind_save`] and [`bind_restore`] find
/// by walking the traced graph, in the same order, without the walk.
pub fn traced_bindings(
    ops: &[TracedOp],
    variables: &[TracedVariable],
) -> Result<Vec<Binding>, SessionError> {
    let mut bindings = Vec::with_capacity(ops.iter().map(|op| op.entries.len()).sum());
    for op in ops {
        for entry in &op.entries {
            let Some(variable) = variables.get(entry.variable as usize) else {
                return Err(SessionError::Unbound {
                    key: entry.checkpoint_key.clone(),
                    op: op.name.clone(),
                    reason: Unbound::NoTracedVariable {
                        index: entry.variable,
                    },
                });
            };
            bindings.push(Binding {
                checkpoint_key: entry.checkpoint_key.clone(),
                slice_spec: entry.slice_spec.clone(),
                variable: VarKey::new("", variable.shared_name.as_str()),
                dtype: variable.dtype,
                shape: known_dims(variable.shape.iter().copied()),
                op: op.name.clone(),
                sliced_by_plan: entry.cut,
            });
        }
    }
    Ok(bindings)
}

impl<'m> Walker<'m> {
    fn new(module: &'m Module) -> Walker<'m> {
        Walker {
            module,
            frames: vec![Frame {
                graph: &module.graph,
                function: None,
                caller: None,
            }],
        }
    }

    /// The ops of type `wanted` that running `targets` executes, as (frame, op), in graph
    /// order. Empty `targets` means every op of the top-level graph.
    fn find_ops(
        &mut self,
        targets: &[&str],
        wanted: Op,
    ) -> Result<Vec<(usize, OpId)>, SessionError> {
        let graph = &self.module.graph;
        let needed: Vec<OpId> = if targets.is_empty() {
            graph.ops()
        } else {
            let mut roots = Vec::with_capacity(targets.len());
            for target in targets {
                let name = TensorName::parse(target).map_or(*target, |name| name.op);
                roots.push(
                    graph
                        .find(name)
                        .ok_or_else(|| SessionError::UnknownTarget {
                            name: (*target).to_owned(),
                        })?,
                );
            }
            graph.ancestors(roots).into_iter().collect()
        };
        let mut found = Vec::new();
        self.scan(0, &needed, &wanted, &mut found)?;
        Ok(found)
    }

    /// Collects ops of type `wanted` among `ops` of frame `frame`, descending into calls.
    fn scan(
        &mut self,
        frame: usize,
        ops: &[OpId],
        wanted: &Op,
        found: &mut Vec<(usize, OpId)>,
    ) -> Result<(), SessionError> {
        let graph = self.frames[frame].graph;
        let mut ops = ops.to_vec();
        ops.sort_by_key(|&id| graph.seq(id));
        for id in ops {
            let node = graph.op(id);
            if node.op == *wanted {
                found.push((frame, id));
            }
            if !matches!(node.op, Op::StatefulPartitionedCall | Op::PartitionedCall) {
                continue;
            }
            let Some(AttrValue::Func(func)) = node.attrs.get("f") else {
                continue;
            };
            let recursive = self.chain(frame).any(|name| name == func.name);
            let Some(function) = self.module.library.find(&func.name) else {
                continue;
            };
            if recursive {
                continue;
            }
            self.frames.push(Frame {
                graph: &function.body,
                function: Some(func.name.clone()),
                caller: Some((frame, id)),
            });
            let body = self.frames.len() - 1;
            self.scan(body, &function.body.ops(), wanted, found)?;
        }
        Ok(())
    }

    /// The function names from `frame` up to the top level.
    fn chain(&self, mut frame: usize) -> impl Iterator<Item = &str> {
        let mut names = Vec::new();
        loop {
            if let Some(name) = &self.frames[frame].function {
                names.push(name.as_str());
            }
            match self.frames[frame].caller {
                Some((parent, _)) => frame = parent,
                None => break,
            }
        }
        names.into_iter()
    }

    /// The `tensor_names` and `shape_and_slices` constants (inputs 1 and 2) of a `SaveV2` or
    /// `RestoreV2`.
    fn names_and_slices(
        &self,
        frame: usize,
        id: OpId,
    ) -> Result<(Vec<String>, Vec<String>), SessionError> {
        let graph = self.frames[frame].graph;
        let node = graph.op(id);
        let limit = dtype_list(node)?.len();
        // Input `input` as at most `limit` UTF-8 strings, if it is a constant (through
        // `Identity`).
        let strings = |input| {
            let (frame, src, _) = self.source(frame, id, input).ok()?;
            saver_ops::const_strings(self.frames[frame].graph.op(src), limit)
        };
        let names = strings(save_v2::TENSOR_NAMES)
            .ok_or_else(|| bad_op(node, BadCheckpointOp::NamesNotConstant))?;
        let slices = strings(save_v2::SHAPE_AND_SLICES)
            .ok_or_else(|| bad_op(node, BadCheckpointOp::SlicesNotConstant))?;
        if names.len() != slices.len() {
            return Err(bad_op(node, BadCheckpointOp::LengthsDiffer));
        }
        Ok((names, slices))
    }

    /// The op producing input `input` of `id`, looking through `Identity`-like ops and
    /// function arguments: (frame, op, output).
    fn source(
        &self,
        mut frame: usize,
        mut id: OpId,
        mut input: u32,
    ) -> Result<(usize, OpId, u32), Unbound> {
        loop {
            let graph = self.frames[frame].graph;
            let node = graph.op(id);
            // O(1) whatever the op's number of inputs (`SaveV2` and call ops have one per
            // variable).
            let Some(edge) = graph.input_at(id, input) else {
                return Err(Unbound::NoInput {
                    op: node.name.clone(),
                    input,
                });
            };
            let src = graph.op(edge.src);
            let output = output_index(src, &edge.output).ok_or_else(|| Unbound::NoOutput {
                op: src.name.clone(),
                port: edge.output.clone(),
            })?;
            match src.op {
                Op::Identity => {
                    id = edge.src;
                    input = 0;
                }
                Op::IdentityN => {
                    id = edge.src;
                    input = output;
                }
                Op::Arg => {
                    let Some((parent, call)) = self.frames[frame].caller else {
                        return Ok((frame, edge.src, output));
                    };
                    let index = match src.attrs.get("index") {
                        Some(AttrValue::I(index)) => {
                            u32::try_from(*index).map_err(|_| Unbound::BadArgIndex {
                                arg: src.name.clone(),
                            })?
                        }
                        _ => {
                            return Err(Unbound::NoArgIndex {
                                arg: src.name.clone(),
                            });
                        }
                    };
                    frame = parent;
                    id = call;
                    input = index;
                }
                _ => return Ok((frame, edge.src, output)),
            }
        }
    }

    /// The variable whose value input `input` of `id` is (a `ReadVariableOp` of a handle,
    /// possibly cut by `Slice` ops), and whether it was cut.
    fn value_variable(
        &self,
        frame: usize,
        id: OpId,
        input: u32,
    ) -> Result<(VarKey, Option<Vec<u64>>, bool), Unbound> {
        let (mut frame, mut src, _) = self.source(frame, id, input)?;
        let mut sliced = false;
        while self.frames[frame].graph.op(src).op == Op::Slice {
            sliced = true;
            (frame, src, _) = self.source(frame, src, 0)?;
        }
        let node = self.frames[frame].graph.op(src);
        if node.op == Op::VariableV2 {
            return Ok((var_key(node), known_shape(node), sliced));
        }
        if node.op != Op::ReadVariableOp {
            return Err(Unbound::NotAVariableRead {
                op: node.name.clone(),
                op_type: node.op.type_name().to_owned(),
            });
        }
        let (variable, shape) = self.handle_variable(frame, src, 0)?;
        Ok((variable, shape, sliced))
    }

    /// The variable the resource handle at input `input` of `id` points to.
    fn handle_variable(
        &self,
        frame: usize,
        id: OpId,
        input: u32,
    ) -> Result<(VarKey, Option<Vec<u64>>), Unbound> {
        let (frame, src, _) = self.source(frame, id, input)?;
        let node = self.frames[frame].graph.op(src);
        if !matches!(node.op, Op::VarHandleOp | Op::VariableV2) {
            return Err(Unbound::NotAVarHandle {
                op: node.name.clone(),
                op_type: node.op.type_name().to_owned(),
            });
        }
        Ok((var_key(node), known_shape(node)))
    }
}

/// The flat output index a port of `node` names.
fn output_index(node: &OpNode, port: &Port) -> Option<u32> {
    signature::flat_output(node, port).ok()
}

/// The `dtypes` attribute of a `SaveV2` or `RestoreV2`.
fn dtype_list(node: &OpNode) -> Result<&[DType], SessionError> {
    saver_ops::dtypes(node).ok_or_else(|| bad_op(node, BadCheckpointOp::NoDTypes))
}

/// The variable a `VarHandleOp` or `VariableV2` names: `container` and `shared_name`, the op
/// name if empty.
fn var_key(node: &OpNode) -> VarKey {
    let text = |attr: &str| match node.attrs.get(attr) {
        Some(AttrValue::S(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        _ => String::new(),
    };
    let shared_name = match text("shared_name") {
        name if name.is_empty() => node.name.clone(),
        name => name,
    };
    VarKey::new(text("container"), shared_name)
}

/// A `VarHandleOp`'s (or `VariableV2`'s) `shape` attribute, when every dimension is known.
fn known_shape(node: &OpNode) -> Option<Vec<u64>> {
    let Some(AttrValue::Shape(shape)) = node.attrs.get("shape") else {
        return None;
    };
    if shape.unknown_rank {
        return None;
    }
    known_dims(shape.dims.iter().map(|dim| dim.size))
}

/// `dims` as sizes, when every one is known (none is negative).
pub(super) fn known_dims(dims: impl IntoIterator<Item = i64>) -> Option<Vec<u64>> {
    dims.into_iter()
        .map(|dim| u64::try_from(dim).ok())
        .collect()
}

fn bad_op(node: &OpNode, reason: BadCheckpointOp) -> SessionError {
    SessionError::BadCheckpointOp {
        op: node.name.clone(),
        reason,
    }
}
