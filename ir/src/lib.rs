//! The saveplan IR: TensorFlow save and restore plans as graphs of ops.
//!
//! # What a graph is
//!
//! A [`Graph`] is a set of ops ([`OpNode`]) connected by edges ([`Edge`]). An op has a
//! unique TensorFlow node name, a kind ([`Op`], TensorFlow's op vocabulary as a closed enum plus
//! [`Op::Other`] for anything else), the device it asks for (kept verbatim, interpreted by
//! [`device::DeviceSpec`]) and an attribute map ([`Attrs`]) that holds all of its parameters.
//! The IR *is* TensorFlow's graph language: import from and export to `GraphDef` map one to one,
//! names included, so a graph TensorFlow wrote comes back out unchanged.
//!
//! # What an edge means
//!
//! A data edge ([`Edge::Data`]) feeds output `output` of its source into input slot `input`
//! of its destination; an op's data inputs are dense slots `0..n`, in signature order.
//! A control edge ([`Edge::Control`]) only orders: its destination may not start before its
//! source has finished. Control inputs keep the order they were written in.
//!
//! # When ops execute
//!
//! An op may run once every data and control input has run. Nothing else orders ops: two ops
//! with no path between them may run in either order or at once, on their devices. Stateful
//! ops (`SaveV2`, `MergeV2Checkpoints`, `AssignVariableOp`, …) are ordered only by edges, which
//! is why the plans TensorFlow traces carry explicit control dependencies, and why
//! [`verify`] checks that those dependencies exist where a plan needs them.
//!
//! # Functions
//!
//! A [`Module`] holds a top-level graph and a [`Library`] of [`Function`]s, each with a body
//! graph whose input arguments are [`Op::Arg`] ops. Call ops (`StatefulPartitionedCall`)
//! name the function in their `f` attribute.
//!
//! # Identity and order
//!
//! [`OpId`]s are stable across removals of other ops but are never printed. Every output this
//! crate produces orders ops by creation sequence or by a topological order that breaks ties by
//! creation sequence, so the same graph always prints the same text.
//!
//! # Vocabulary beyond graphs
//!
//! What every layer shares without being a graph: tensor and saver names ([`names`]), slice
//! specs ([`mod@slice`]), the roles of the saver ops' inputs ([`saver_ops`]) and the object graph
//! of object-based checkpoints with its key rules ([`object_graph`]).
#![warn(missing_docs)]

pub mod attr;
pub mod device;
pub mod dot;
pub mod dtype;
pub mod edits;
pub mod graph;
pub mod module;
pub mod names;
pub mod object_graph;
pub mod op;
pub mod parse;
pub mod saver_ops;
pub mod signature;
pub mod slice;
pub mod verify;
pub mod write;

pub use attr::{
    AttrList, AttrValue, Attrs, Dim, MAX_TENSOR_ATTR_BYTES, NameAttrList, Shape, Tensor,
    TensorValues,
};
pub use dot::to_dot;
pub use dtype::DType;
pub use edits::{Edit, Edits};
pub use graph::{Edge, Graph, GraphError, Input, NodeDebugInfo, OpId, OpMut, OpNode, Port, Stride};
pub use module::{ArgDef, AttrDef, Function, Library, Module, Signature, Versions};
pub use names::{OutputRef, SaverDef, SaverNames, TensorName, TensorNameError};
pub use op::Op;
pub use parse::{ParseError, ParseErrorKind, parse_graph, parse_module};
pub use verify::{Verified, VerifyError, VerifyErrors, verify_graph, verify_module};
