//! `MetaGraphDef` ↔ [`MetaGraph`]: the graph becomes a [`Module`], the saver a plain
//! [`SaverDef`]; everything else is kept as the protobuf messages it is.

use std::collections::BTreeMap;

use saveplan_ir::{Module, SaverDef};
use saveplan_proto::tensorflow as pb;

use super::graph_def::{graph_def, import_graph_def};
use super::saver_def::{import_saver_def, saver_def};
use super::{ExportError, ImportError};

/// A `MetaGraphDef` with its graph in IR form.
#[derive(Clone, Debug, Default)]
pub struct MetaGraph {
    /// `graph_def`, imported.
    pub module: Module,
    /// `saver_def`, every field kept.
    pub saver_def: Option<SaverDef>,
    /// `meta_info_def` (stripped op list, tags, versions), verbatim.
    pub meta_info_def: Option<pb::meta_graph_def::MetaInfoDef>,
    /// `collection_def`, verbatim.
    pub collection_def: BTreeMap<String, pb::CollectionDef>,
    /// `signature_def`, verbatim.
    pub signature_def: BTreeMap<String, pb::SignatureDef>,
    /// `asset_file_def`, verbatim.
    pub asset_file_def: Vec<pb::AssetFileDef>,
}

/// Converts a `MetaGraphDef`; it must have a `graph_def`.
pub fn import_meta_graph_def(meta_graph_def: &pb::MetaGraphDef) -> Result<MetaGraph, ImportError> {
    let graph_def = meta_graph_def
        .graph_def
        .as_ref()
        .ok_or(ImportError::MissingGraphDef)?;
    let rest = pb::MetaGraphDef {
        meta_info_def: meta_graph_def.meta_info_def.clone(),
        saver_def: meta_graph_def.saver_def.clone(),
        collection_def: meta_graph_def.collection_def.clone(),
        signature_def: meta_graph_def.signature_def.clone(),
        asset_file_def: meta_graph_def.asset_file_def.clone(),
        ..pb::MetaGraphDef::default()
    };
    Ok(meta_graph_of(import_graph_def(graph_def)?, rest))
}

/// The [`MetaGraph`] of an imported graph `module` and every field of `meta_graph_def` but
/// its `graph_def`.
pub(crate) fn meta_graph_of(module: Module, meta_graph_def: pb::MetaGraphDef) -> MetaGraph {
    MetaGraph {
        module,
        saver_def: meta_graph_def.saver_def.as_ref().map(import_saver_def),
        meta_info_def: meta_graph_def.meta_info_def,
        collection_def: meta_graph_def.collection_def,
        signature_def: meta_graph_def.signature_def,
        asset_file_def: meta_graph_def.asset_file_def,
    }
}

/// The encoded `MetaGraphDef` of a [`MetaGraph`]: the bytes of
/// `meta_graph_def(meta_graph)?.encode_to_vec()`, with the graph written by
/// [`super::encode_graph_def`], so that no `NodeDef` is built.
pub fn encode_meta_graph_def(meta_graph: &MetaGraph) -> Result<Vec<u8>, ExportError> {
    Ok(encode_meta_graph_def_pieces(meta_graph)?.concat())
}

/// [`encode_meta_graph_def`] in consecutive pieces (the fields before the graph, batches of
/// nodes, the fields after them), so that a writer copies the bytes once, into the file
/// ([`super::write_encoded_pieces`]), instead of first into one buffer of the whole message.
pub fn encode_meta_graph_def_pieces(meta_graph: &MetaGraph) -> Result<Vec<Vec<u8>>, ExportError> {
    use prost::encoding::{WireType, btree_map, encode_key, encode_varint, message, string};
    // prost writes fields in tag order: `meta_info_def` (1), `graph_def` (2), then
    // `saver_def` (3), `collection_def` (4), `signature_def` (5), `asset_file_def` (6); each
    // written here as the derived encoder writes it, from the fields in place. The fields
    // after the graph are encoded beside it, on another core: the collections of a large
    // plan hold a `VariableDef` per variable.
    let (graph, last) = rayon::join(
        || super::graph_def::encode_graph_def_pieces(&meta_graph.module),
        || {
            let (key, key_len) = (string::encode, string::encoded_len);
            let saver = meta_graph.saver_def.as_ref().map(saver_def);
            let collections = &meta_graph.collection_def;
            let signatures = &meta_graph.signature_def;
            let mut last = Vec::new();
            if let Some(saver) = &saver {
                message::encode(3, saver, &mut last);
            }
            btree_map::encode(
                key,
                key_len,
                message::encode,
                message::encoded_len,
                4,
                collections,
                &mut last,
            );
            btree_map::encode(
                key,
                key_len,
                message::encode,
                message::encoded_len,
                5,
                signatures,
                &mut last,
            );
            message::encode_repeated(6, &meta_graph.asset_file_def, &mut last);
            last
        },
    );
    let graph = graph?;
    let graph_len: usize = graph.iter().map(Vec::len).sum();
    let mut first = Vec::new();
    if let Some(meta_info_def) = &meta_graph.meta_info_def {
        message::encode(1, meta_info_def, &mut first);
    }
    encode_key(2, WireType::LengthDelimited, &mut first);
    encode_varint(graph_len as u64, &mut first);
    let mut pieces = Vec::with_capacity(graph.len() + 2);
    pieces.push(first);
    pieces.extend(graph);
    pieces.push(last);
    Ok(pieces)
}

/// Converts a [`MetaGraph`] back into a `MetaGraphDef`.
pub fn meta_graph_def(meta_graph: &MetaGraph) -> Result<pb::MetaGraphDef, ExportError> {
    Ok(pb::MetaGraphDef {
        meta_info_def: meta_graph.meta_info_def.clone(),
        graph_def: Some(graph_def(&meta_graph.module)?),
        saver_def: meta_graph.saver_def.as_ref().map(saver_def),
        collection_def: meta_graph.collection_def.clone(),
        signature_def: meta_graph.signature_def.clone(),
        asset_file_def: meta_graph.asset_file_def.clone(),
    })
}
