//! The IR verifier: checks the invariants that passes, export and executors rely on, and
//! reports every violation it finds.
//!
//! # Invariants
//!
//! For every graph (the top-level graph and each function body):
//!
//! 1. The data input slots of an op are dense: `0..n`, each connected exactly once.
//! 2. An op whose signature is known ([`crate::signature`]) has as many data inputs as the
//!    signature gives for its attrs.
//! 3. Every data edge reads an output its producer has: a flat index below the producer's output
//!    count, or an output argument name and an index within that argument.
//! 4. The dtype of a producer's output equals the dtype the consumer expects on that input,
//!    when both follow from signatures and attrs (`_Arg` outputs its `T`). A `_ref` output may
//!    feed an input of its base type.
//! 5. A known op has every attr its signature requires (those without default), and every attr
//!    the signature declares has the declared kind (`placeholder` values are allowed anywhere
//!    in function bodies).
//! 6. Data and control edges form no cycle.
//! 7. No op has a control edge from itself.
//! 8. A tensor attr (a `Const`'s `value`) needs at most [`MAX_TENSOR_ATTR_BYTES`] of host
//!    memory once its stored values fill its shape, and that size is known.
//! 9. A call op (`StatefulPartitionedCall`, `PartitionedCall`) names in `f` a library function,
//!    and its `Tin` / `Tout` equal that function's input / output dtypes (when the signature
//!    fixes them).
//!
//! For the module:
//!
//! 10. Function names are unique.
//! 11. Each `ret` entry of a function names one of its output arguments and a value that
//!     exists: an input argument, or `node:arg:index` with `node` in the body and, for a known
//!     op, `arg:index` one of its outputs. Each `control_ret` entry names a control output and
//!     an op of the body.
//!
//! [`verify_module`] and [`verify_graph`] never stop at the first violation: they return all of
//! them, in a deterministic order (ops by creation order, then cycles, then module checks).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::signature::{self, ArgType, ElemType, attr_len};
use crate::{
    AttrValue, Attrs, DType, Function, Graph, Input, Library, MAX_TENSOR_ATTR_BYTES, Module, Op,
    OpId, OutputRef, Port, TensorName,
};

/// Every violation found by one verifier run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct VerifyErrors(pub Vec<VerifyError>);

impl fmt::Display for VerifyErrors {
    /// Lists the errors one per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (pos, error) in self.0.iter().enumerate() {
            if pos > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

/// One violated invariant. Variants about an op carry its [`OpId`] (for code) and its name
/// (for people).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// A data input slot is unconnected while a later one is connected (invariant 1).
    #[error("op `{name}`: data input {slot} is not connected, but a later one is")]
    InputGap {
        /// The consumer.
        op: OpId,
        /// Its name.
        name: String,
        /// The unconnected slot.
        slot: u32,
    },
    /// A data input slot is connected more than once (invariant 1).
    #[error("op `{name}`: data input {slot} is connected more than once")]
    DuplicateInput {
        /// The consumer.
        op: OpId,
        /// Its name.
        name: String,
        /// The slot.
        slot: u32,
    },
    /// A known op has the wrong number of data inputs (invariant 2).
    #[error(
        "op `{name}`: {op_type} takes {}, found {found}",
        plural(*.expected, "data input")
    )]
    InputCount {
        /// The op.
        op: OpId,
        /// Its name.
        name: String,
        /// Its type.
        op_type: String,
        /// What the signature says for its attrs.
        expected: usize,
        /// How many it has.
        found: usize,
    },
    /// A data input reads an output its producer does not have (invariant 3).
    #[error("op `{name}`: input {slot} reads `{producer}:{output}`, but {reason}")]
    BadOutput {
        /// The consumer.
        op: OpId,
        /// Its name.
        name: String,
        /// The consumer's input slot.
        slot: u32,
        /// The producer's name.
        producer: String,
        /// The output as written (`3` or `arg:1`).
        output: String,
        /// Why it does not exist.
        reason: String,
    },
    /// A producer's output dtype differs from what the consumer expects (invariant 4).
    #[error("op `{name}`: input {slot} expects {expected}, but `{producer}:{output}` is {found}")]
    DTypeMismatch {
        /// The consumer.
        op: OpId,
        /// Its name.
        name: String,
        /// The consumer's input slot.
        slot: u32,
        /// The producer's name.
        producer: String,
        /// The producer's output as written.
        output: String,
        /// The dtype the consumer expects.
        expected: DType,
        /// The dtype the producer makes.
        found: DType,
    },
    /// A known op lacks an attr its signature requires (invariant 5).
    #[error("op `{name}`: {op_type} requires attr `{attr}`")]
    MissingAttr {
        /// The op.
        op: OpId,
        /// Its name.
        name: String,
        /// Its type.
        op_type: String,
        /// The missing attr.
        attr: String,
    },
    /// An attr has another kind than the signature declares (invariant 5).
    #[error("op `{name}`: attr `{attr}` must be {expected}, found {found}")]
    WrongAttrKind {
        /// The op.
        op: OpId,
        /// Its name.
        name: String,
        /// The attr.
        attr: String,
        /// The declared kind (`type`, `list(type)`, …).
        expected: String,
        /// The kind it has.
        found: &'static str,
    },
    /// An `int` attr or a list attr is below the signature's minimum (invariant 5).
    #[error("op `{name}`: attr `{attr}` has {what} {found}, below the minimum {minimum}")]
    BelowMinimum {
        /// The op.
        op: OpId,
        /// Its name.
        name: String,
        /// The attr.
        attr: String,
        /// `value` for an int, `length` for a list.
        what: &'static str,
        /// The value or length it has.
        found: i64,
        /// The minimum.
        minimum: i64,
    },
    /// A tensor attr that would need more than [`MAX_TENSOR_ATTR_BYTES`] of host memory once
    /// filled, or whose size is unknown (invariant 8).
    #[error(
        "op `{name}`: attr `{attr}` declares a {dtype} tensor of shape {shape} that would need {}, above the {MAX_TENSOR_ATTR_BYTES}-byte limit for constants",
        match bytes { Some(bytes) => format!("{bytes} bytes"), None => "more than 2^64 bytes".to_owned() }
    )]
    TensorTooLarge {
        /// The op.
        op: OpId,
        /// Its name.
        name: String,
        /// The attr.
        attr: String,
        /// The tensor's dtype.
        dtype: DType,
        /// The declared shape, as the canonical text prints it.
        shape: String,
        /// The host bytes it would need; `None` when that overflows `u64`.
        bytes: Option<u64>,
    },
    /// Ops that depend on each other (invariant 6).
    #[error("ops form a cycle: `{}`", .names.join("`, `"))]
    Cycle {
        /// The first op of the cycle in creation order.
        op: OpId,
        /// The names of all ops of the cycle, in creation order.
        names: Vec<String>,
    },
    /// An op has a control edge from itself (invariant 7).
    #[error("op `{name}` has a control edge from itself")]
    SelfControl {
        /// The op.
        op: OpId,
        /// Its name.
        name: String,
    },
    /// A call op names a function the library does not define (invariant 9).
    #[error("op `{name}`: calls undefined function `{function}`")]
    UnknownFunction {
        /// The call op.
        op: OpId,
        /// Its name.
        name: String,
        /// The function it names.
        function: String,
    },
    /// A call op's `Tin` or `Tout` disagrees with the function's signature (invariant 9).
    #[error(
        "op `{name}`: {attr} is [{}] but function `{function}` has [{}]",
        join(.found), join(.expected)
    )]
    CallSignature {
        /// The call op.
        op: OpId,
        /// Its name.
        name: String,
        /// The function.
        function: String,
        /// `Tin` or `Tout`.
        attr: &'static str,
        /// The call op's dtypes.
        found: Vec<DType>,
        /// The function's dtypes.
        expected: Vec<DType>,
    },
    /// Two or more library functions share a name (invariant 10).
    #[error("function `{function}` is defined {count} times")]
    DuplicateFunction {
        /// The name.
        function: String,
        /// How many functions have it.
        count: usize,
    },
    /// A `ret` entry names no output argument or a value that does not exist (invariant 11).
    #[error("ret `{output}` = `{target}`: {reason}")]
    BadRet {
        /// The op the value names, if it exists.
        op: Option<OpId>,
        /// The ret key.
        output: String,
        /// The ret value.
        target: String,
        /// What is wrong.
        reason: String,
    },
    /// A `control_ret` entry names no control output or no op (invariant 11).
    #[error("control_ret `{output}` = `{target}`: {reason}")]
    BadControlRet {
        /// The op the value names, if it exists.
        op: Option<OpId>,
        /// The control_ret key.
        output: String,
        /// The control_ret value.
        target: String,
        /// What is wrong.
        reason: String,
    },
    /// An error inside a library function.
    #[error("function `{function}`: {error}")]
    InFunction {
        /// The function.
        function: String,
        /// The error.
        error: Box<VerifyError>,
    },
}

/// A module the verifier accepted: the proof that every invariant above holds. Consumers that
/// rely on the invariants (the plan compiler) take a `Verified` instead of checking again, so a
/// module is verified once, where it enters.
#[derive(Clone, Copy, Debug)]
pub struct Verified<'m> {
    module: &'m Module,
}

impl<'m> Verified<'m> {
    /// The verified module.
    pub fn module(self) -> &'m Module {
        self.module
    }
}

impl std::ops::Deref for Verified<'_> {
    type Target = Module;

    fn deref(&self) -> &Module {
        self.module
    }
}

/// Verifies the top-level graph, every function body and the library.
pub fn verify_module(module: &Module) -> Result<Verified<'_>, VerifyErrors> {
    let mut errors = Vec::new();
    check_graph(&module.graph, &module.library, &mut errors);
    for function in &module.library.functions {
        let mut function_errors = Vec::new();
        check_graph(&function.body, &module.library, &mut function_errors);
        check_rets(function, &mut function_errors);
        errors.extend(
            function_errors
                .into_iter()
                .map(|error| VerifyError::InFunction {
                    function: function.signature.name.clone(),
                    error: Box::new(error),
                }),
        );
    }
    check_function_names(&module.library, &mut errors);
    finish(errors).map(|()| Verified { module })
}

/// Verifies one graph; call ops are checked against `library`.
pub fn verify_graph(graph: &Graph, library: &Library) -> Result<(), VerifyErrors> {
    let mut errors = Vec::new();
    check_graph(graph, library, &mut errors);
    finish(errors)
}

fn finish(errors: Vec<VerifyError>) -> Result<(), VerifyErrors> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(VerifyErrors(errors))
    }
}

/// `1 thing` or `n things`.
fn plural(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

fn join(dtypes: &[DType]) -> String {
    dtypes
        .iter()
        .map(DType::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Ops per parallel batch of [`check_graph`]: large enough that a batch outweighs rayon's
/// scheduling, small enough that both cores stay busy on mid-sized graphs.
const OPS_PER_BATCH: usize = 4096;

/// Checks invariants 1 to 8 for every op of `graph`.
///
/// The per-op checks read only the graph, so batches of ops run in parallel (and alongside
/// the cycle search); their errors are concatenated in op order, so the report is the same
/// whatever the thread count.
fn check_graph(graph: &Graph, library: &Library, errors: &mut Vec<VerifyError>) {
    use rayon::prelude::*;
    let ops = graph.ops();
    let (batches, cyclic) = rayon::join(
        || {
            ops.par_chunks(OPS_PER_BATCH)
                .map(|batch| {
                    let mut errors = Vec::new();
                    for &op in batch {
                        check_op(graph, library, op, &mut errors);
                    }
                    errors
                })
                .collect::<Vec<_>>()
        },
        || graph.has_cycle(),
    );
    errors.extend(batches.into_iter().flatten());
    if cyclic {
        check_cycles(graph, errors);
    }
}

/// The checks of one op: every invariant but the cycle search (6).
fn check_op(graph: &Graph, library: &Library, op: OpId, errors: &mut Vec<VerifyError>) {
    let inputs = graph.inputs(op);
    check_slots(graph, op, &inputs, errors);
    check_attrs(graph, op, errors);
    check_tensor_sizes(graph, op, errors);
    check_input_count(graph, op, errors);
    check_inputs(graph, op, &inputs, errors);
    check_self_control(graph, op, errors);
    check_call(graph, library, op, errors);
}

/// Invariant 1.
fn check_slots(graph: &Graph, op: OpId, inputs: &[(u32, Input)], errors: &mut Vec<VerifyError>) {
    let name = &graph.op(op).name;
    let mut next = 0;
    for &(slot, _) in inputs {
        if slot + 1 == next {
            errors.push(VerifyError::DuplicateInput {
                op,
                name: name.clone(),
                slot,
            });
            continue;
        }
        for missing in next..slot {
            errors.push(VerifyError::InputGap {
                op,
                name: name.clone(),
                slot: missing,
            });
        }
        next = slot + 1;
    }
}

/// Invariant 5.
fn check_attrs(graph: &Graph, op: OpId, errors: &mut Vec<VerifyError>) {
    let node = graph.op(op);
    let Some(sig) = signature::of_op(&node.op) else {
        return;
    };
    for attr in sig.attrs {
        match node.attrs.get(attr.name) {
            None if attr.default.is_none() => errors.push(VerifyError::MissingAttr {
                op,
                name: node.name.clone(),
                op_type: sig.name.to_owned(),
                attr: attr.name.to_owned(),
            }),
            None | Some(AttrValue::Placeholder(_)) => {}
            Some(value) => {
                let kind = value.kind();
                let fits = kind == attr.ty || (kind == "list" && attr.ty.starts_with("list("));
                if !fits {
                    errors.push(VerifyError::WrongAttrKind {
                        op,
                        name: node.name.clone(),
                        attr: attr.name.to_owned(),
                        expected: attr.ty.to_owned(),
                        found: kind,
                    });
                    continue;
                }
                let (what, found) = match value {
                    AttrValue::I(value) => ("value", *value),
                    AttrValue::List(list) => ("length", list.len() as i64),
                    _ => continue,
                };
                if let Some(minimum) = attr.minimum.filter(|&minimum| found < minimum) {
                    errors.push(VerifyError::BelowMinimum {
                        op,
                        name: node.name.clone(),
                        attr: attr.name.to_owned(),
                        what,
                        found,
                        minimum,
                    });
                }
            }
        }
    }
}

/// Invariant 8.
fn check_tensor_sizes(graph: &Graph, op: OpId, errors: &mut Vec<VerifyError>) {
    let node = graph.op(op);
    for (attr, value) in node.attrs.iter() {
        let AttrValue::Tensor(tensor) = value else {
            continue;
        };
        let shape_known = tensor
            .shape
            .as_ref()
            .is_none_or(|shape| !shape.unknown_rank && shape.dims.iter().all(|dim| dim.size >= 0));
        let sized = tensor.dtype == DType::String || tensor.dtype.element_size().is_some();
        if !shape_known || !sized {
            // Unknown shapes and dtypes without a host size are refused where the tensor is
            // used; there is nothing to allocate here.
            continue;
        }
        let bytes = tensor.filled_bytes();
        if bytes.is_none_or(|bytes| bytes > MAX_TENSOR_ATTR_BYTES) {
            errors.push(VerifyError::TensorTooLarge {
                op,
                name: node.name.clone(),
                attr: attr.to_string(),
                dtype: tensor.dtype,
                shape: tensor
                    .shape
                    .as_ref()
                    .map_or_else(|| "[]".to_owned(), ToString::to_string),
                bytes,
            });
        }
    }
}

/// Invariant 2.
fn check_input_count(graph: &Graph, op: OpId, errors: &mut Vec<VerifyError>) {
    let node = graph.op(op);
    let found = graph.num_inputs(op) as usize;
    let expected = match &node.op {
        Op::Arg => 0,
        op_kind => {
            let Some(sig) = signature::of_op(op_kind) else {
                return;
            };
            match sig.num_inputs(&|name| attr_len(&node.attrs, name)) {
                Ok(expected) => expected,
                // A missing or ill-kinded sizing attr is reported by `check_attrs`.
                Err(_) => return,
            }
        }
    };
    if found != expected {
        errors.push(VerifyError::InputCount {
            op,
            name: node.name.clone(),
            op_type: node.op.type_name().to_owned(),
            expected,
            found,
        });
    }
}

/// Invariants 3 and 4 for every data input of `op`.
fn check_inputs(graph: &Graph, op: OpId, inputs: &[(u32, Input)], errors: &mut Vec<VerifyError>) {
    let node = graph.op(op);
    for (slot, input) in inputs {
        let slot = *slot;
        let producer = graph.op(input.src);
        // Only errors need the text: build it lazily.
        let output_text = || match &input.output {
            Port::Index(index) => index.to_string(),
            Port::Named { arg, index } => format!("{arg}:{index}"),
        };
        let bad_output = |reason: String| VerifyError::BadOutput {
            op,
            name: node.name.clone(),
            slot,
            producer: producer.name.clone(),
            output: output_text(),
            reason,
        };
        let flat = match resolve_output(graph, input.src, &input.output) {
            Ok(flat) => flat,
            Err(reason) => {
                errors.push(bad_output(reason));
                continue;
            }
        };
        let (Some(flat), Some(expected)) = (flat, input_dtype(graph, op, slot)) else {
            continue;
        };
        let Some(found) = output_dtype(graph, input.src, flat) else {
            continue;
        };
        if found != expected && found.base() != expected {
            errors.push(VerifyError::DTypeMismatch {
                op,
                name: node.name.clone(),
                slot,
                producer: producer.name.clone(),
                output: output_text(),
                expected,
                found,
            });
        }
    }
}

/// The flat output index a port denotes, `Ok(None)` when the producer's outputs are unknown,
/// or why the output does not exist.
fn resolve_output(graph: &Graph, src: OpId, port: &Port) -> Result<Option<usize>, String> {
    let node = graph.op(src);
    let attrs = &node.attrs;
    let sig = match &node.op {
        Op::Arg => None,
        op => match signature::of_op(op) {
            Some(sig) => Some(sig),
            None => return Ok(None),
        },
    };
    let len = |name: &str| attr_len(attrs, name);
    match (port, sig) {
        (Port::Index(index), None) if *index == 0 => Ok(Some(0)),
        (Port::Index(_), None) => Err(format!("`{}` has 1 output", node.name)),
        (Port::Named { arg, index }, None) => match (arg.as_str(), index) {
            ("output", 0) => Ok(Some(0)),
            _ => Err(format!("`{}` has only output `output:0`", node.name)),
        },
        (Port::Index(index), Some(sig)) => {
            let Ok(count) = sig.num_outputs(&len) else {
                return Ok(None);
            };
            let index = *index as usize;
            if index < count {
                Ok(Some(index))
            } else {
                Err(format!("`{}` has {}", node.name, plural(count, "output")))
            }
        }
        (Port::Named { arg, index }, Some(sig)) => {
            if sig.output(arg).is_none() {
                return Err(format!("{} has no output argument `{arg}`", sig.name));
            }
            match sig.output_index(arg, *index as usize, &len) {
                Ok(flat) => Ok(Some(flat)),
                Err(signature::SignatureError::ArgIndexOutOfRange { len, .. }) => Err(format!(
                    "output argument `{arg}` of `{}` has {}",
                    node.name,
                    plural(len, "tensor")
                )),
                Err(_) => Ok(None),
            }
        }
    }
}

/// The dtype of flat output `flat` of `op`, if the signature and attrs fix it.
fn output_dtype(graph: &Graph, op: OpId, flat: usize) -> Option<DType> {
    let node = graph.op(op);
    if node.op == Op::Arg {
        return match node.attrs.get("T")? {
            AttrValue::Type(dtype) => Some(*dtype),
            _ => None,
        };
    }
    let sig = signature::of_op(&node.op)?;
    let (arg, index) = sig
        .output_arg(flat, &|name| attr_len(&node.attrs, name))
        .ok()?;
    arg_dtype(sig.output(arg)?.ty, index, &node.attrs)
}

/// The dtype input slot `slot` of `op` expects, if the signature and attrs fix it.
fn input_dtype(graph: &Graph, op: OpId, slot: u32) -> Option<DType> {
    let node = graph.op(op);
    let sig = signature::of_op(&node.op)?;
    let (arg, index) = sig
        .input_arg(slot as usize, &|name| attr_len(&node.attrs, name))
        .ok()?;
    arg_dtype(sig.input(arg)?.ty, index, &node.attrs)
}

/// The dtype of element `index` of an argument of type `ty`.
fn arg_dtype(ty: ArgType, index: usize, attrs: &Attrs) -> Option<DType> {
    let type_attr = |name: &str| match attrs.get(name)? {
        AttrValue::Type(dtype) => Some(*dtype),
        _ => None,
    };
    match ty {
        ArgType::Fixed(name)
        | ArgType::Repeated {
            elem: ElemType::Fixed(name),
            ..
        } => DType::parse(name),
        ArgType::Attr(name)
        | ArgType::Repeated {
            elem: ElemType::Attr(name),
            ..
        } => type_attr(name),
        ArgType::List(name) => match attrs.get(name)? {
            AttrValue::List(list) => list.types.get(index).copied(),
            _ => None,
        },
        ArgType::RefAttr(name) => type_attr(name).map(DType::to_ref),
    }
}

/// Invariant 7.
fn check_self_control(graph: &Graph, op: OpId, errors: &mut Vec<VerifyError>) {
    if graph.control_inputs(op).contains(&op) {
        errors.push(VerifyError::SelfControl {
            op,
            name: graph.op(op).name.clone(),
        });
    }
}

/// Invariant 8.
fn check_call(graph: &Graph, library: &Library, op: OpId, errors: &mut Vec<VerifyError>) {
    let node = graph.op(op);
    if !matches!(node.op, Op::StatefulPartitionedCall | Op::PartitionedCall) {
        return;
    }
    // A missing or ill-kinded `f` is reported by `check_attrs`.
    let Some(AttrValue::Func(func)) = node.attrs.get("f") else {
        return;
    };
    let Some(function) = library.find(&func.name) else {
        errors.push(VerifyError::UnknownFunction {
            op,
            name: node.name.clone(),
            function: func.name.clone(),
        });
        return;
    };
    let signature = &function.signature;
    for (attr, args) in [
        ("Tin", &signature.input_args),
        ("Tout", &signature.output_args),
    ] {
        let Some(AttrValue::List(list)) = node.attrs.get(attr) else {
            continue;
        };
        let fixed: Option<Vec<DType>> = args
            .iter()
            .map(|arg| {
                let fixed = arg.dtype != DType::Invalid
                    && arg.number_attr.is_empty()
                    && arg.type_list_attr.is_empty();
                fixed.then_some(arg.dtype)
            })
            .collect();
        let Some(expected) = fixed else {
            continue;
        };
        if list.types != expected || list.len() != list.types.len() {
            errors.push(VerifyError::CallSignature {
                op,
                name: node.name.clone(),
                function: func.name.clone(),
                attr,
                found: list.types.clone(),
                expected,
            });
        }
    }
}

/// Invariant 6: reports each strongly connected set of ops that cannot be ordered. A single op
/// is a cycle only through a data edge from itself (control self edges are invariant 7).
fn check_cycles(graph: &Graph, errors: &mut Vec<VerifyError>) {
    let Err(stuck) = graph.topo_order() else {
        return;
    };
    let stuck_set: BTreeSet<OpId> = stuck.iter().copied().collect();
    let preds = |op: OpId| -> Vec<OpId> {
        let mut preds: Vec<OpId> = graph.inputs(op).into_iter().map(|(_, i)| i.src).collect();
        preds.extend(graph.control_inputs(op));
        preds
    };
    let succs = |op: OpId| -> Vec<OpId> { graph.users(op).into_iter().map(|(u, _)| u).collect() };
    let mut assigned = BTreeSet::new();
    for &start in &stuck {
        if assigned.contains(&start) {
            continue;
        }
        let forward = reach(start, &stuck_set, succs);
        let backward = reach(start, &stuck_set, preds);
        let mut component: Vec<OpId> = forward.intersection(&backward).copied().collect();
        component.sort_by_key(|&op| graph.seq(op));
        assigned.extend(component.iter().copied());
        let self_data_edge = graph.inputs(start).iter().any(|(_, i)| i.src == start);
        if component.len() > 1 || self_data_edge {
            errors.push(VerifyError::Cycle {
                op: component[0],
                names: component
                    .iter()
                    .map(|&op| graph.op(op).name.clone())
                    .collect(),
            });
        }
    }
}

/// The ops of `within` reachable from `start` (itself included) along `next`.
fn reach(start: OpId, within: &BTreeSet<OpId>, next: impl Fn(OpId) -> Vec<OpId>) -> BTreeSet<OpId> {
    let mut seen = BTreeSet::from([start]);
    let mut stack = vec![start];
    while let Some(op) = stack.pop() {
        for other in next(op) {
            if within.contains(&other) && seen.insert(other) {
                stack.push(other);
            }
        }
    }
    seen
}

/// Invariant 10 for one function.
fn check_rets(function: &Function, errors: &mut Vec<VerifyError>) {
    let signature = &function.signature;
    let body = &function.body;
    for (output, target) in &function.ret {
        let bad = |op: Option<OpId>, reason: String| VerifyError::BadRet {
            op,
            output: output.clone(),
            target: target.clone(),
            reason,
        };
        if !signature.output_args.iter().any(|arg| &arg.name == output) {
            errors.push(bad(
                None,
                "the function has no such output argument".to_owned(),
            ));
            continue;
        }
        // An input argument bare, any other op's output as `node:arg:index`.
        let name = match TensorName::parse(target) {
            Ok(name) if !matches!(name.output, Some(OutputRef::Index(_))) => name,
            _ => {
                errors.push(bad(None, "the value is not `node:arg:index`".to_owned()));
                continue;
            }
        };
        let node_name = name.op;
        let port = name.output.map(|_| name.port());
        let Some(op) = body.find(node_name) else {
            errors.push(bad(None, format!("the body has no op `{node_name}`")));
            continue;
        };
        match port {
            None if signature.input_args.iter().any(|arg| arg.name == node_name) => {}
            None => errors.push(bad(
                Some(op),
                format!("`{node_name}` is not an input argument"),
            )),
            Some(port) => {
                if let Err(reason) = resolve_output(body, op, &port) {
                    errors.push(bad(Some(op), reason));
                }
            }
        }
    }
    // A function may have hundreds of thousands of control outputs: look them up in a set.
    let control_outputs: rustc_hash::FxHashSet<&str> = signature
        .control_outputs
        .iter()
        .map(String::as_str)
        .collect();
    for (output, target) in &function.control_ret {
        let op = body.find(target);
        let reason = if !control_outputs.contains(output.as_str()) {
            "the function has no such control output".to_owned()
        } else if op.is_none() {
            format!("the body has no op `{target}`")
        } else {
            continue;
        };
        errors.push(VerifyError::BadControlRet {
            op,
            output: output.clone(),
            target: target.clone(),
            reason,
        });
    }
}

/// Invariant 9.
fn check_function_names(library: &Library, errors: &mut Vec<VerifyError>) {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for function in &library.functions {
        *counts.entry(function.signature.name.as_str()).or_default() += 1;
    }
    for (function, count) in counts {
        if count > 1 {
            errors.push(VerifyError::DuplicateFunction {
                function: function.to_owned(),
                count,
            });
        }
    }
}
