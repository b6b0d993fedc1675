//! `GraphDef` ↔ [`Module`]: the nodes (through `node.rs`), the versions, the library (through
//! `function.rs`) and the debug info, as messages or streamed into bytes.

use prost::Message;
use saveplan_ir::{Graph, Module, Versions};
use saveplan_proto::tensorflow as pb;

use super::function::{encode_function_def, export_library, import_library};
use super::node::{Syntax, encode_node, export_nodes, import_nodes};
use super::{ExportError, ImportError};

/// Converts a `GraphDef` into a [`Module`]: nodes in file order, inputs in order, library
/// functions included.
pub fn import_graph_def(graph_def: &pb::GraphDef) -> Result<Module, ImportError> {
    let mut graph = Graph::new();
    import_nodes(&mut graph, &graph_def.node, Syntax::GraphDef)?;
    module_of(graph, graph_def)
}

/// The module of an imported `graph` and every field of `graph_def` but its nodes (which
/// `graph` holds).
#[expect(
    deprecated,
    reason = "the legacy `version` field is kept for round trips"
)]
pub(crate) fn module_of(graph: Graph, graph_def: &pb::GraphDef) -> Result<Module, ImportError> {
    Ok(Module {
        graph,
        versions: graph_def.versions.as_ref().map(|versions| Versions {
            producer: versions.producer,
            min_consumer: versions.min_consumer,
            bad_consumers: versions.bad_consumers.clone(),
        }),
        legacy_version: graph_def.version,
        library: match &graph_def.library {
            Some(library) => import_library(library)?,
            None => saveplan_ir::Library::default(),
        },
        debug_info: graph_def
            .debug_info
            .as_ref()
            .map(|debug_info| debug_info.encode_to_vec()),
    })
}

/// Converts a [`Module`] into a `GraphDef`: ops in creation order, data inputs by slot, then
/// control inputs in their order. The library is written only when it is not empty.
pub fn graph_def(module: &Module) -> Result<pb::GraphDef, ExportError> {
    Ok(pb::GraphDef {
        node: export_nodes(&module.graph, Syntax::GraphDef)?,
        library: export_library(&module.library)?,
        ..graph_def_without_nodes(module)?
    })
}

/// Nodes per parallel batch of [`encode_graph_def`].
const NODES_PER_BATCH: usize = 4096;

/// The encoded `GraphDef` of a [`Module`]: the same bytes as
/// `graph_def(module)?.encode_to_vec()`, written one node at a time, so that a graph of a
/// million ops never holds a million `NodeDef`s (whose attribute maps dominate the cost).
///
/// Batches of nodes are encoded in parallel and joined in op order, so the bytes do not
/// depend on the thread count.
pub fn encode_graph_def(module: &Module) -> Result<Vec<u8>, ExportError> {
    Ok(encode_graph_def_pieces(module)?.concat())
}

/// The encoded `GraphDef` of a module in consecutive pieces (batches of nodes, then the rest
/// of the message), so that a caller embedding it copies the bytes once.
pub(crate) fn encode_graph_def_pieces(module: &Module) -> Result<Vec<Vec<u8>>, ExportError> {
    use prost::encoding::{WireType, encode_key, encode_varint};
    use rayon::prelude::*;
    let graph = &module.graph;
    let ops = graph.ops();
    let batches = ops
        .par_chunks(NODES_PER_BATCH)
        .map(|batch| {
            let estimate: usize = batch
                .iter()
                .map(|&id| {
                    let op = graph.op(id);
                    48 + 2 * op.name.len() + op.device.len() + 24 * op.attrs.len()
                })
                .sum();
            let mut buf = Vec::with_capacity(estimate);
            let mut node = Vec::with_capacity(1024);
            let mut scratch = Vec::new();
            // prost writes fields in tag order: every `node` (1), then `library` (2),
            // `version` (3), `versions` (4) and `debug_info` (5), so the rest of the message
            // follows the nodes.
            for &id in batch {
                node.clear();
                encode_node(graph, id, Syntax::GraphDef, &mut node, &mut scratch)?;
                encode_key(1, WireType::LengthDelimited, &mut buf);
                encode_varint(node.len() as u64, &mut buf);
                buf.extend_from_slice(&node);
            }
            Ok(buf)
        })
        .collect::<Result<Vec<Vec<u8>>, ExportError>>()?;
    let mut pieces = batches;
    if !module.library.is_empty() {
        let mut library = Vec::new();
        encode_library(&module.library, &mut library)?;
        let mut key = Vec::with_capacity(11);
        encode_key(2, WireType::LengthDelimited, &mut key);
        encode_varint(library.len() as u64, &mut key);
        pieces.push(key);
        pieces.push(library);
    }
    pieces.push(graph_def_without_nodes(module)?.encode_to_vec());
    Ok(pieces)
}

/// Writes the fields of a non-empty library's `FunctionDefLibrary`: each function streamed
/// node by node (`function`, 1), then `gradient` (2) and `registered_gradients` (3).
fn encode_library(library: &saveplan_ir::Library, buf: &mut Vec<u8>) -> Result<(), ExportError> {
    use prost::encoding::{WireType, encode_key, encode_varint};
    let mut function = Vec::new();
    for f in &library.functions {
        function.clear();
        encode_function_def(f, &mut function)?;
        encode_key(1, WireType::LengthDelimited, buf);
        encode_varint(function.len() as u64, buf);
        buf.extend_from_slice(&function);
    }
    let mut rest = export_library(&saveplan_ir::Library {
        functions: Vec::new(),
        gradients: library.gradients.clone(),
        registered_gradients: library.registered_gradients.clone(),
    })?
    .unwrap_or_default();
    rest.function.clear();
    buf.extend(rest.encode_to_vec());
    Ok(())
}
/// Every field of a module's `GraphDef` but `node`.
#[expect(
    deprecated,
    reason = "the legacy `version` field is kept for round trips"
)]
fn graph_def_without_nodes(module: &Module) -> Result<pb::GraphDef, ExportError> {
    Ok(pb::GraphDef {
        node: Vec::new(),
        versions: module.versions.as_ref().map(|versions| pb::VersionDef {
            producer: versions.producer,
            min_consumer: versions.min_consumer,
            bad_consumers: versions.bad_consumers.clone(),
        }),
        version: module.legacy_version,
        library: None,
        debug_info: match &module.debug_info {
            Some(bytes) => Some(pb::GraphDebugInfo::decode(bytes.as_slice()).map_err(
                |source| ExportError::CorruptBytes {
                    owner: "the graph".to_owned(),
                    field: "debug_info",
                    source,
                },
            )?),
            None => None,
        },
    })
}
