//! The plan emitter shared by both forms: variable creation, `MultiDeviceSaver.save` and
//! `MultiDeviceSaver.restore`, op by op with TensorFlow's names, devices and attributes
//! (FORMATS.md §8.2).
//!
//! This file owns the [`Tracer`] (one builder, one name table, where the variables are) and the
//! single-op helpers every part uses. One file per job:
//!
//! * `group.rs`: the validated input, tensors grouped by task ([`Inputs`]);
//! * `variables.rs`: creating or attaching the variables;
//! * `save.rs`: `MultiDeviceSaver.save` (temporary prefix, shards, `SaveV2`s, merge);
//! * `restore.rs`: `MultiDeviceSaver.restore` (`RestoreV2` per task, assigns).
//!
//! In the flat form every op lands in one graph. In the function form the save and restore
//! plans are bodies of library functions, and the variables (created in the outer graph)
//! enter them as captured arguments: [`Tracer::var_input`] creates the `_Arg` at the first use,
//! named after the scope of the consuming op as TensorFlow names capture placeholders.

mod group;
mod restore;
mod save;
mod variables;

use std::collections::HashMap;

use saveplan_ir::{AttrValue, Attrs, DType, Graph, Op, OpId, Port, Shape, Tensor};

use super::builder::{BackgroundGraph, Builder, attrs, out};
use super::names::UniqueNames;
use super::{TraceError, TracedKeys, VariableOpIds};

pub(super) use group::Inputs;
pub(super) use variables::{InitialValueCheck, Initializers, handle_base_name, zeros_fill};

/// The `GraphDef.versions.producer` TensorFlow 2.21 writes.
pub(super) const PRODUCER: i32 = 2474;

/// Which op of a variable a plan uses.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
enum VarOp {
    Handle,
    Read,
}

/// A created variable: its handle and its graph-mode read.
#[derive(Clone)]
pub(super) struct Variable {
    pub(super) handle: OpId,
    pub(super) handle_name: String,
    pub(super) read: OpId,
    pub(super) read_name: String,
    /// The `Assign` of its initial value, when the plan created it.
    pub(super) assign: Option<OpId>,
}

impl Variable {
    /// Its ops, as a trace hands them out.
    pub(super) fn ids(&self) -> VariableOpIds {
        VariableOpIds {
            handle: self.handle,
            read: self.read,
            assign: self.assign,
        }
    }
}

/// Emits ops through one builder (a graph, or an eager executor) with one name table.
pub(super) struct Tracer<B = Graph> {
    pub(super) graph: B,
    pub(super) names: UniqueNames,
    pub(super) vars: VarSource,
    /// Stateful ops on resources traced so far (function bodies list them as control outputs).
    pub(super) resource_ops: Vec<OpId>,
    /// The `SaveV2` and `RestoreV2` ops traced so far and what they save and restore, when
    /// asked for (the flat form records them; its variables are filled in at the end).
    pub(super) keys: Option<TracedKeys>,
}

/// Where the plan finds the variables.
pub(super) enum VarSource {
    /// In the same graph (the flat form, and the outer graph of the function form).
    Local(Vec<Variable>),
    /// In an outer graph: captured as function arguments on first use.
    Captured(Captures),
}

/// The captured arguments of a function body.
pub(super) struct Captures {
    pub(super) outer: Vec<Variable>,
    by_var: HashMap<(usize, VarOp), OpId>,
    /// The captures in argument order (argument 0, the prefix, is not among them).
    pub(super) args: Vec<CapturedArg>,
    /// Trace a `FuncGraph` as TensorFlow prints it: captures become `Placeholder`s named
    /// after the capture path, on the variable's device, instead of `_Arg`s.
    pub(super) placeholders: bool,
}

/// One captured outer tensor and the `_Arg` standing for it.
pub(super) struct CapturedArg {
    /// The argument name (lower-cased capture path with `/` → `_`).
    pub(super) name: String,
    /// Its dtype (`resource` for a handle).
    pub(super) dtype: DType,
    /// The outer op whose output 0 is passed in.
    pub(super) outer: OpId,
    /// The outer op's name (`_user_specified_name`).
    pub(super) outer_name: String,
    /// The value's shape (`_output_shapes`), absent for handles.
    pub(super) shape: Option<Shape>,
}

impl Captures {
    pub(super) fn new(outer: Vec<Variable>) -> Captures {
        Captures {
            outer,
            by_var: HashMap::new(),
            args: Vec::new(),
            placeholders: false,
        }
    }
}

impl Tracer {
    /// A tracer for an empty graph sized for about `n_tensors` saved tensors (a flat plan
    /// makes seven ops and eight edges per variable, plus a few per task; an eager save
    /// function eight ops and nine edges). Too small a guess costs a copy of the whole op
    /// table at the end.
    pub(super) fn with_capacity(vars: VarSource, n_tensors: usize) -> Tracer {
        let (n_ops, n_edges) = graph_capacity(n_tensors);
        Tracer::with_builder(Graph::with_capacity(n_ops, n_edges), vars, n_tensors)
    }
}

impl Tracer<BackgroundGraph> {
    /// A tracer for an empty graph of about `n_ops` ops and `n_edges` edges, for `n_tensors`
    /// saved tensors, built on a thread of its own ([`BackgroundGraph`]).
    pub(super) fn in_background(
        vars: VarSource,
        n_tensors: usize,
        n_ops: usize,
        n_edges: usize,
    ) -> Tracer<BackgroundGraph> {
        let graph = BackgroundGraph::with_capacity(n_ops + 64, n_edges + 64);
        Tracer::with_builder(graph, vars, n_tensors)
    }
}

/// The ops and edges to reserve for a plan of `n_tensors` tensors (see
/// [`Tracer::with_capacity`]).
fn graph_capacity(n_tensors: usize) -> (usize, usize) {
    (8 * n_tensors + 64, 10 * n_tensors + 64)
}

impl<B: Builder> Tracer<B> {
    /// A tracer emitting through `builder`, sized for about `n_tensors` saved tensors.
    pub(super) fn with_builder(builder: B, vars: VarSource, n_tensors: usize) -> Tracer<B> {
        Tracer {
            graph: builder,
            // Seven stored names per variable (`v`, `v/Read`, `v/Read/ReadVariableOp`, …; the
            // suffixed `Identity_7` and `AssignVariableOp_7` are not stored), and a key's scope.
            names: UniqueNames::with_capacity(8 * n_tensors + 64),
            vars,
            resource_ops: Vec::new(),
            keys: None,
        }
    }

    fn in_function(&self) -> bool {
        matches!(self.vars, VarSource::Captured(_))
    }

    /// The handle or read of variable `index` as an input of the op named `scope`; in a
    /// function body the first use captures it as an argument named after `scope`.
    fn var_input(
        &mut self,
        inputs: &Inputs<'_>,
        index: usize,
        which: VarOp,
        scope: &str,
    ) -> Result<(OpId, Port), TraceError> {
        let captures = match &mut self.vars {
            VarSource::Local(variables) => {
                let variable = &variables[index];
                return Ok(out(match which {
                    VarOp::Handle => variable.handle,
                    VarOp::Read => variable.read,
                }));
            }
            VarSource::Captured(captures) => captures,
        };
        if let Some(&arg) = captures.by_var.get(&(index, which)) {
            return Ok(out(arg));
        }
        let variable = &captures.outer[index];
        let tensor = inputs.tensors[index];
        let (outer, outer_name, dtype, shape) = match which {
            VarOp::Handle => (
                variable.handle,
                variable.handle_name.clone(),
                DType::Resource,
                None,
            ),
            VarOp::Read => (
                variable.read,
                variable.read_name.clone(),
                tensor.dtype,
                Some(Shape::from_dims(&tensor.shape)),
            ),
        };
        let placeholder = self.names.unique_in(scope, &outer_name);
        let name = placeholder.to_lowercase().replace('/', "_");
        let index_attr = captures.args.len() as i64 + 1;
        let arg_attrs = attrs([
            ("T", AttrValue::Type(dtype)),
            ("index", AttrValue::I(index_attr)),
        ]);
        let arg = if captures.placeholders {
            let mut attrs = attrs([
                ("_user_specified_name", AttrValue::s(outer_name.as_str())),
                ("dtype", AttrValue::Type(dtype)),
            ]);
            let shape = shape.clone().unwrap_or_else(Shape::scalar);
            attrs.insert("shape", AttrValue::Shape(shape));
            let device = inputs.device(index);
            self.graph.emit(
                placeholder,
                Op::Placeholder,
                device,
                attrs,
                &mut None.into_iter(),
                &[],
            )?
        } else {
            self.graph.emit(
                name.clone(),
                Op::Arg,
                "",
                arg_attrs,
                &mut None.into_iter(),
                &[],
            )?
        };
        captures.by_var.insert((index, which), arg);
        captures.args.push(CapturedArg {
            name,
            dtype,
            outer,
            outer_name,
            shape,
        });
        Ok(out(arg))
    }

    /// Adds an op with data inputs in order.
    pub(super) fn op(
        &mut self,
        name: String,
        op: Op,
        device: &str,
        attrs: Attrs,
        inputs: impl IntoIterator<Item = (OpId, Port)>,
    ) -> Result<OpId, TraceError> {
        self.graph
            .emit(name, op, device, attrs, &mut inputs.into_iter(), &[])
    }

    pub(super) fn constant(
        &mut self,
        name: String,
        device: &str,
        value: Tensor,
    ) -> Result<OpId, TraceError> {
        let attrs = attrs([
            ("dtype", AttrValue::Type(value.dtype)),
            ("value", AttrValue::Tensor(Box::new(value))),
        ]);
        self.op(name, Op::Const, device, attrs, [])
    }

    pub(super) fn placeholder(&mut self, name: &str) -> Result<OpId, TraceError> {
        let name = self.names.unique(name);
        let attrs = attrs([
            ("dtype", AttrValue::Type(DType::String)),
            ("shape", AttrValue::Shape(Shape::scalar())),
        ]);
        self.op(name, Op::Placeholder, "", attrs, [])
    }

    fn assign(
        &mut self,
        name: String,
        device: &str,
        dtype: DType,
        handle: (OpId, Port),
        value: (OpId, Port),
    ) -> Result<OpId, TraceError> {
        let attrs = attrs([
            ("dtype", AttrValue::Type(dtype)),
            ("validate_shape", AttrValue::B(false)),
        ]);
        self.op(name, Op::AssignVariableOp, device, attrs, [handle, value])
    }

    pub(super) fn identity(
        &mut self,
        device: &str,
        dtype: DType,
        input: (OpId, Port),
    ) -> Result<OpId, TraceError> {
        let name = self.names.unique("Identity");
        let attrs = attrs([("T", AttrValue::Type(dtype))]);
        self.op(name, Op::Identity, device, attrs, [input])
    }
}
