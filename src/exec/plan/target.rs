//! How a plan's compiler finds what it is asked for: feeds and targets (`op:N`, `op`) and a
//! function's returns looked up in a graph ([`Target`]), the flat output a port names, and an
//! op's number of inputs and outputs from its signature.

use saveplan_ir::signature::{self, PortError};
use saveplan_ir::{Graph, Input, Op, OpId, OpNode, OutputRef, Port, Stride, TensorName};

use crate::exec::error::ExecError;

/// A target or feed, looked up in a graph.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(super) enum Target {
    /// Output `1` of op `0`.
    Tensor(OpId, u32),
    /// Run op `0` only.
    Op(OpId),
}

impl Target {
    /// The op of the target.
    pub(super) fn op(&self) -> OpId {
        match *self {
            Target::Tensor(op, _) | Target::Op(op) => op,
        }
    }
}

/// Looks up `text` (`op:N`, or `op`: an op target when `op_allowed`, else `op:0`), its op
/// looked for where `stride` guesses first (see [`Graph::find_near`]).
pub(super) fn parse_target(
    graph: &Graph,
    text: &str,
    op_allowed: bool,
    stride: Stride,
) -> Result<Target, ExecError> {
    let bad = || ExecError::BadTensorName {
        name: text.to_owned(),
    };
    let parsed = TensorName::parse(text).map_err(|_| bad())?;
    let name = parsed.op;
    let output = match parsed.output {
        None => None,
        Some(OutputRef::Index(index)) => Some(index),
        Some(OutputRef::Named { .. }) => return Err(bad()),
    };
    let id = graph
        .find_near(name, stride.guesses())
        .ok_or_else(|| ExecError::UnknownOp {
            name: name.to_owned(),
        })?;
    let output = match output {
        Some(output) => output,
        None if op_allowed => return Ok(Target::Op(id)),
        None => 0,
    };
    let n_outputs = n_outputs(graph.op(id))?;
    if output as usize >= n_outputs {
        return Err(ExecError::NoSuchOutput {
            name: name.to_owned(),
            output,
            n_outputs,
        });
    }
    Ok(Target::Tensor(id, output))
}

/// Parses a function `ret` value (`node:arg:index`, `node:index` or an argument name).
pub(super) fn parse_ret(body: &Graph, ret: &str) -> Option<Target> {
    let name = TensorName::parse(ret).ok()?;
    let id = body.find(name.op)?;
    let node = body.op(id);
    let output = resolve_port(node, &name.port()).ok()?;
    (output < n_outputs(node).ok()? as u32).then_some(Target::Tensor(id, output))
}

/// The flat output of its producer that `input` reads. The producer is read only for a named
/// port: an index (every port of a known op) needs nothing of it, and on a large plan the
/// producers of a step's inputs lie far apart, a cache miss each.
pub(super) fn input_output(graph: &Graph, input: &Input) -> Result<u32, ExecError> {
    match input.output {
        Port::Index(index) => Ok(index),
        Port::Named { .. } => resolve_port(graph.op(input.src), &input.output),
    }
}

/// The flat output index a port of `node` names.
fn resolve_port(node: &OpNode, port: &Port) -> Result<u32, ExecError> {
    signature::flat_output(node, port).map_err(|err| match (err, port) {
        (PortError::UnknownSignature { op_type }, _) => ExecError::UnsupportedOp {
            name: node.name.clone(),
            op_type,
        },
        (err, Port::Named { arg, index }) => ExecError::BadTensorName {
            name: format!("{}:{arg}:{index}: {err}", node.name),
        },
        (err, Port::Index(index)) => ExecError::BadTensorName {
            name: format!("{}:{index}: {err}", node.name),
        },
    })
}

/// The number of outputs of `node`.
pub(super) fn n_outputs(node: &OpNode) -> Result<usize, ExecError> {
    arity(node, false)
}

/// The number of data inputs of `node`.
pub(super) fn n_inputs(node: &OpNode) -> Result<usize, ExecError> {
    arity(node, true)
}

/// The number of inputs or outputs of `node`, from its signature and attrs.
fn arity(node: &OpNode, inputs: bool) -> Result<usize, ExecError> {
    if node.op == Op::Arg {
        return Ok(usize::from(!inputs));
    }
    let sig = signature::of_op(&node.op).ok_or_else(|| ExecError::UnsupportedOp {
        name: node.name.clone(),
        op_type: node.op.type_name().to_owned(),
    })?;
    let lens = |name: &str| signature::attr_len(&node.attrs, name);
    let result = if inputs {
        sig.num_inputs(&lens)
    } else {
        sig.num_outputs(&lens)
    };
    result.map_err(|err| ExecError::BadAttr {
        name: node.name.clone(),
        attr: match &err {
            saveplan_ir::signature::SignatureError::MissingAttr { attr, .. } => (*attr).to_owned(),
            _ => String::new(),
        },
        reason: err.to_string(),
    })
}
