//! TensorFlow protobufs in and out: `GraphDef` ↔ [`Module`](saveplan_ir::Module),
//! `FunctionDef` ↔ [`Function`](saveplan_ir::Function),
//! `MetaGraphDef` ↔ [`MetaGraph`], `SaverDef` ↔ [`SaverDef`](saveplan_ir::SaverDef), the
//! `MetaGraphDef` of a compiled plan ([`assemble_meta_graph`]), and reading and writing them as
//! `.pb` or `.pbtxt` files; also the object graph of object-based checkpoints
//! ([`object_graph`]) and the `checkpoint` state file ([`CheckpointState`]).
//!
//! Import keeps everything TensorFlow wrote (node order, input order, devices verbatim,
//! private `_` attributes, tensors in their original representation, library functions), so
//! exporting an imported graph gives back a message equal to the original. The normalizations,
//! none of which TensorFlow itself ever writes the other way, are: a GraphDef input `node:0`
//! comes back as `node`; an empty `library {}` is left out; a `handle_data` entry without a
//! shape gets an empty one. Fields our `.proto` files do not define (such as
//! `MetaGraphDef.object_graph_def`) are not kept.
//!
//! Function bodies name outputs as `node:arg:index`; import turns that into a flat
//! [`Port::Index`](saveplan_ir::Port::Index) for ops in the signature table and keeps a
//! [`Port::Named`](saveplan_ir::Port::Named) for other ops, and export turns it back.
//!
//! This module and `saveplan-proto` are the only code that touches prost types.

mod assemble;
mod attr;
mod checkpoint_state;
mod file;
mod function;
mod graph_def;
mod meta_graph;
mod node;
pub mod object_graph;
mod saver_def;
mod wire;

pub use assemble::{SaveSlice, TENSORFLOW_VERSION, VariableEntry, assemble_meta_graph, op_types};
pub use attr::TensorError;
pub use checkpoint_state::{
    CheckpointState, CheckpointStateError, checkpoint_state_text, parse_checkpoint_state,
};
pub use file::{
    Encoding, FileError, Loaded, MessageKind, ProtoMessage, import_binary_direct, read_graph_file,
    read_proto_file, write_encoded_file, write_encoded_pieces, write_graph_file, write_proto_file,
};
pub use function::{function_def, import_function_def};
pub use graph_def::{encode_graph_def, graph_def, import_graph_def};
pub use meta_graph::{
    MetaGraph, encode_meta_graph_def, encode_meta_graph_def_pieces, import_meta_graph_def,
    meta_graph_def,
};
pub use saver_def::{import_saver_def, saver_def};

use saveplan_ir::device::DeviceError;
use saveplan_ir::signature::SignatureError;

/// Errors from turning a TensorFlow protobuf into IR.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Two nodes share a name.
    #[error("duplicate node name `{node}`")]
    DuplicateNode {
        /// The name.
        node: String,
    },
    /// An input names a node that does not exist.
    #[error("node `{node}`: input `{input}` names a node that does not exist")]
    MissingInput {
        /// The consumer.
        node: String,
        /// The input string as written.
        input: String,
    },
    /// An input string does not have the form `node`, `node:N` (GraphDef),
    /// `node:arg:N` / `arg` (FunctionDef body) or `^node`.
    #[error("node `{node}`: malformed input `{input}`")]
    MalformedInput {
        /// The consumer.
        node: String,
        /// The input string as written.
        input: String,
    },
    /// A data input follows a control input; TensorFlow requires control inputs last.
    #[error("node `{node}`: data input `{input}` follows a control input")]
    ControlBeforeData {
        /// The consumer.
        node: String,
        /// The data input that came too late.
        input: String,
    },
    /// A `node:arg:N` input does not name an output of the producer's signature.
    #[error("node `{node}`: input `{input}` does not name an output of its producer")]
    BadOutputArg {
        /// The consumer.
        node: String,
        /// The input string as written.
        input: String,
        /// What the signature table said.
        #[source]
        source: Box<SignatureError>,
    },
    /// A tensor in an attribute cannot be represented.
    #[error("node `{node}`: attribute `{attr}`")]
    UnsupportedTensor {
        /// The node (empty for a function-level attribute).
        node: String,
        /// The attribute.
        attr: String,
        /// What is wrong with it.
        #[source]
        source: TensorError,
    },
    /// A tensor in a function-level attribute (or an attr default) cannot be represented.
    #[error("function attribute `{attr}`")]
    UnsupportedFunctionTensor {
        /// The attribute.
        attr: String,
        /// What is wrong with it.
        #[source]
        source: TensorError,
    },
    /// A modelled op asks for a device string that does not parse.
    #[error("node `{node}`: malformed device")]
    MalformedDevice {
        /// The node.
        node: String,
        /// The parse error, which quotes the device string.
        #[source]
        source: Box<DeviceError>,
    },
    /// A node name, op type, input or attribute name with a control character (a newline,
    /// …), which TensorFlow refuses; printed escaped, so the message stays on one line.
    #[error("{what} `{escaped}` contains a control character")]
    ControlCharacter {
        /// What holds it: `node name`, `op type of node `x``, ….
        what: String,
        /// The text, with control characters escaped (`\n`).
        escaped: String,
    },
    /// A function body contains an `_Arg` node, which the IR reserves for the arguments.
    #[error("node `{node}`: `_Arg` nodes are not allowed in a function body")]
    ArgNodeInBody {
        /// The node.
        node: String,
    },
    /// A `MetaGraphDef` without `graph_def`.
    #[error("the meta graph has no graph_def")]
    MissingGraphDef,
    /// Something inside a library function.
    #[error("function `{function}`")]
    InFunction {
        /// The function name.
        function: String,
        /// The error inside it.
        #[source]
        source: Box<ImportError>,
    },
}

/// Errors from turning IR into a TensorFlow protobuf.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A data input slot of an op is not connected although a later one is.
    #[error("node `{node}`: data input {slot} is not connected")]
    MissingInputSlot {
        /// The consumer.
        node: String,
        /// The first unconnected slot.
        slot: u32,
    },
    /// An edge names its output in a way the target format cannot express: a flat index into
    /// an op without a known signature in a function body, or an output argument of an
    /// op without a known signature in a GraphDef.
    #[error(
        "node `{node}`: cannot name output {output} of `{src}` (op `{op}` has no known signature)"
    )]
    UnnamedOutput {
        /// The consumer.
        node: String,
        /// The producer.
        src: String,
        /// The producer's op type.
        op: String,
        /// The output, as `N` or `arg:N`.
        output: String,
    },
    /// A flat output index or output argument is not valid for the producer's signature.
    #[error("node `{node}`: bad output {output} of `{src}`")]
    BadOutput {
        /// The consumer.
        node: String,
        /// The producer.
        src: String,
        /// The output, as `N` or `arg:N`.
        output: String,
        /// What the signature table said.
        #[source]
        source: Box<SignatureError>,
    },
    /// Protobuf bytes kept verbatim by import (debug info, full types) no longer decode.
    #[error("{owner}: `{field}` is not a valid encoded message")]
    CorruptBytes {
        /// What holds the bytes (`node `x``, `the graph`, …).
        owner: String,
        /// The protobuf field.
        field: &'static str,
        /// The decoder's error.
        #[source]
        source: prost::DecodeError,
    },
    /// Something inside a library function.
    #[error("function `{function}`")]
    InFunction {
        /// The function name.
        function: String,
        /// The error inside it.
        #[source]
        source: Box<ExportError>,
    },
}
